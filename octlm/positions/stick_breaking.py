"""Stick-breaking attention (Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study"): each query breaks a unit stick among the keys before it, nearest first,
in place of the softmax; no position encoding.

For a query at position i and a key at position j < i, in every head and layer:

    z_ij = q_i · k_j / sqrt(D)
    β_ij = σ(z_ij)                                  the share of what is left that key j takes
    A_ij = β_ij Π_{j < k < i} (1 - β_ik)            what is left once the keys between have taken theirs
    o_i  = Σ_{j < i} A_ij v_j                        no normalisation

The query's own key takes nothing (the paper breaks the stick "for each token before the current"; the
authors' kernels, shawntan/stickbreaking-attention, call this `attend_current=False`, their default, and so
does fla's `naive_stickbreaking_attn`), so the first token's output is 0. The weights telescope:
Σ_j A_ij = 1 - Π_{j < i} (1 - β_ij), at most 1; the stick left over is not used here (the reference
`sb_ref.py` returns it beside the output and fla's layer drops it; the authors' dolomite-engine layer adds it
times a learned per-head vector, then a GroupNorm: a further change to the layer, not part of the weights).

In log space, as the paper computes it: log A_ij = logσ(z_ij) + Σ_{j < k < i} logσ(-z_ik).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from octlm.positions.scheme import AttentionCall, PositionScheme, register

if TYPE_CHECKING:
    from octlm.config import ModelConfig

# The same budget as the decoder's bias path (octlm/model/decoder.py: WHOLE_BIAS_PAIRS, CHUNK_BIAS_ENTRIES),
# kept here because octlm.positions may not import octlm.model. Up to WHOLE_PAIRS query-key pairs the weights
# are built in one piece (4 MB per head in float32); past it a query chunk at a time, CHUNK_ENTRIES weights
# (heads x queries x keys, 8 MB in float32) each, so that memory grows linearly with the length.
WHOLE_PAIRS = 1024 * 1024
CHUNK_ENTRIES = 2**21


def reversed_weights(q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """A_ij of queries `[B, H, Tq, D]` at `q_positions` `[Tq]` over keys `[B, Hkv, Tk, D]` at `k_positions`
    `[Tk]`, with the key axis reversed: `[B, H, Tq, Tk]`, column c for the key at k_positions[Tk - 1 - c];
    float32, or float64 for float64 inputs. Keys at or after the query's position weigh exactly 0.

    The product over the keys between is a cumulative sum of logσ(-z) running from the nearest key back,
    so the keys are reversed before the scores (`[Tk, D]`, not `[Tq, Tk]`) and the sum runs forwards. Hidden
    keys come first in that order and add exact zeros, so a query adds the same numbers in the same order in
    a full pass and alone after a KV cache (`total - cumsum` would not; octlm/positions/cope.py counts the
    same way). Grouped heads: query head h reads key head h // (H / Hkv).
    """
    B, H, Tq, D = q.shape
    Hkv = k.shape[1]
    scaled = q * (1.0 / math.sqrt(D))
    keys = k.flip(2).unsqueeze(2).transpose(-1, -2)  # [B, Hkv, 1, D, Tk]: grouped heads share, not copy
    logits = (scaled.view(B, Hkv, H // Hkv, Tq, D) @ keys).view(B, H, Tq, -1)
    # In float32 at least: the sum over thousands of keys would lose its small terms in bfloat16.
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    hidden = k_positions.flip(0).unsqueeze(0) >= q_positions.unsqueeze(1)  # [Tq, Tk], reversed keys
    left = F.logsigmoid(-logits).masked_fill(hidden, 0.0)  # log(1 - β): what each key leaves
    # Exclusive sum (the keys strictly nearer than this one): shift right by one, then sum; exact, where
    # subtracting the key's own term from an inclusive sum would round.
    nearer = F.pad(left[..., :-1], (1, 0)).cumsum(-1)
    return (F.logsigmoid(logits) + nearer).masked_fill(hidden, float("-inf")).exp()


def stick_breaking_weights(q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """A_ij `[B, H, Tq, Tk]` in key order (`reversed_weights` reversed back), built whole."""
    return reversed_weights(q, k, q_positions, k_positions).flip(-1)


def chunk_output(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_positions: Tensor,
    k_positions: Tensor,
    dropout: float,
    record: list[Tensor] | None = None,
) -> Tensor:
    """Σ_j A_ij v_j `[B, H, Tq, D]` (q's dtype) for queries `[B, H, Tq, D]` over keys and values
    `[B, Hkv, Tk, D]`; appends the weights used `[B, H, Tq, Tk]` (key order, after dropout) to `record`."""
    weights = reversed_weights(q, k, q_positions, k_positions)
    if dropout > 0:
        weights = F.dropout(weights, dropout)
    if record is not None:
        record.append(weights.flip(-1))
    B, H, Tq, Tk = weights.shape
    # Grouped heads: the H / Hkv query heads of a key head are consecutive rows of one matmul.
    out = weights.view(B, v.shape[1], -1, Tk) @ v.flip(2).to(weights.dtype)
    return out.view(B, H, Tq, -1).to(q.dtype)


def stick_breaking_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_positions: Tensor,
    k_positions: Tensor,
    dropout: float = 0.0,
    record: list[Tensor] | None = None,
) -> Tensor:
    """The output `[B, H, Tq, D]` of queries `[B, H, Tq, D]` at `q_positions` `[Tq]` over keys and values
    `[B, Hkv, Tk, D]` at `k_positions` `[Tk]` (the queries are the last Tq keys); `dropout` on the weights;
    with `record` a list, appends the weights `[B, H, Tq, Tk]`.

    Past WHOLE_PAIRS query-key pairs, one query chunk at a time over the keys it can see (those from
    `end` on are in every one of its queries' future). Training would still keep every chunk's weights for
    the backward pass, T² in all, so each chunk is recomputed there instead (activation checkpointing).
    """
    H, Tq, Tk = q.shape[1], q.shape[2], k.shape[2]
    if Tq * Tk <= WHOLE_PAIRS:
        return chunk_output(q, k, v, q_positions, k_positions, dropout, record)
    size = max(1, CHUNK_ENTRIES // (H * Tk))  # queries per chunk
    outputs, rows = [], [] if record is not None else None
    for start in range(0, Tq, size):
        stop = min(start + size, Tq)
        end = Tk - Tq + stop
        args = (q[:, :, start:stop], k[:, :, :end], v[:, :, :end], q_positions[start:stop], k_positions[:end])
        if rows is None and torch.is_grad_enabled():
            # The dropout mask is drawn again in the backward pass: checkpoint restores the RNG state first.
            outputs.append(checkpoint(chunk_output, *args, dropout, use_reentrant=False))
        else:
            outputs.append(chunk_output(*args, dropout, rows))
    if record is not None:
        record.append(torch.cat([F.pad(w, (0, Tk - w.shape[-1])) for w in rows], 2))
    return torch.cat(outputs, 2)


@register
class StickBreakingAttention(PositionScheme):
    """Stick-breaking attention in place of the softmax, in every layer that uses the scheme; no parameters.

    What it changes against softmax attention: the weights of a query need not sum to 1 (they sum to
    1 - Π_j (1 - β_ij); a query whose keys all have low β reads little), and among keys of equally high score
    the nearest wins, since it breaks the stick first and leaves the farther ones what it did not take. That
    is a recency bias that comes from the content; there are no position ids, and positions only say which
    keys come before which. Query head h reads key head h // (H / Hkv).

    The scale is attention's own, q · k / sqrt(D), as in the paper, `sb_ref.py` and fla; the query's own key
    is left out and the stick left over is not used (the module docstring says where the sources differ).
    Its cost grows as T², like softmax attention's.
    """

    name = "stick-breaking"
    shows = ()

    @classmethod
    def from_config(cls, config: ModelConfig) -> StickBreakingAttention:
        return cls()

    def attend(self, q: Tensor, k: Tensor, v: Tensor, call: AttentionCall) -> Tensor:
        """`[B, H, Tq, D]`: Σ_j A_ij v_j over the keys before each query (the cache keeps nothing else)."""
        return stick_breaking_attention(
            q, k, v, call.q_positions, call.k_positions, call.dropout, call.record
        )
