"""Every layer's attention probabilities, from the model's own forward pass.

The decoder attends through `scaled_dot_product_attention`, which never materialises the probabilities. Inside
`recording_attention`, `octlm.model.decoder.attention` (the one function every layer calls) is swapped for
`explicit_attention`: softmax(q·kᵀ/√D + bias + causal mask)·v, which also records the softmax it computed, so
the recorded probabilities are the very ones that made the logits. A scheme that computes attention itself
(`PositionScheme.attend`: FoX, PaTH, stick-breaking) is asked for the weights it used instead, through
`octlm.model.decoder.scheme_attention`, swapped the same way. The ONNX export
(octlm/interop/onnx_export.py) and the attention-by-distance numbers (octlm/inspect/attention.py) both use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator

import torch
from torch import Tensor

import octlm.model.decoder


def explicit_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    is_causal: bool,
    dropout: float,
    record: list[Tensor],
) -> Tensor:
    """`octlm.model.decoder.attention` written out, so that its probabilities exist; they are appended to
    `record`.

    q `[B, H, Tq, D]`, k and v `[B, Hkv, Tk, D]`, `mask` additive float (ALiBi, T5: causal -inf included) or
    bool (True: may attend) over `[.., Tq, Tk]`. Returns `[B, H, Tq, D]`; records probabilities
    `[B, H, Tq, Tk]`.
    """
    if dropout:
        raise ValueError("explicit_attention records what a model computes: put it in eval mode (no dropout)")
    if isinstance(mask, octlm.model.decoder.ChunkedBias):  # past WHOLE_BIAS_PAIRS: [B, H, T, T] would not fit
        raise ValueError("explicit_attention needs the whole bias: at most WHOLE_BIAS_PAIRS query-key pairs")
    group = q.shape[1] // k.shape[1]
    if group > 1:  # grouped KV heads: query head h reads KV head h // group, as SDPA's enable_gqa does
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [B, H, Tq, Tk]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    if is_causal:  # queries and keys are the same positions: key j is hidden from query i when j > i
        rows, cols = torch.arange(q.shape[2], device=q.device), torch.arange(k.shape[2], device=q.device)
        scores = scores.masked_fill(cols.unsqueeze(0) > rows.unsqueeze(1), float("-inf"))
    probs = scores.softmax(dim=-1)
    record.append(probs)
    return probs @ v


def recorded_scheme_attention(scheme, q: Tensor, k: Tensor, v: Tensor, call, record: list[Tensor]) -> Tensor:
    """`octlm.model.decoder.scheme_attention`, with the scheme asked to append its weights
    `[B, H, Tq, Tk]`."""
    if call.dropout:
        raise ValueError("recorded attention is what a model computes: put it in eval mode (no dropout)")
    return scheme.attend(q, k, v, dataclasses.replace(call, record=record))


@contextlib.contextmanager
def recording_attention(record: list[Tensor]) -> Iterator[None]:
    """Inside: every attention layer of every Decoder runs `explicit_attention` (or asks its scheme for its
    weights), appending to `record`."""
    decoder = octlm.model.decoder
    original = decoder.attention, decoder.scheme_attention
    decoder.attention = functools.partial(explicit_attention, record=record)
    decoder.scheme_attention = functools.partial(recorded_scheme_attention, record=record)
    try:
        yield
    finally:
        decoder.attention, decoder.scheme_attention = original
