"""What FoX's forget gates say of distance: the decay each head puts on a key d tokens back, on held-out text.

FoX (octlm/positions/forgetting.py) adds Σ_{t=j+1..i} log f_t = c_i - c_{i-d} to the score of query i and the
key d = i - j tokens back: a bias like ALiBi's -m·d, but set token by token from the content, so it has no
formula to draw. On windows `[W, T]` of held-out text, each layer's normed input is caught on its way into
attention and the scheme's own `forget_gates` recomputes log f from it. Per layer and head:

    decay[d]    = mean over windows and queries i >= d of (c_i - c_{i-d})   [L, H, T]   nats, <= 0
    forget      = mean over windows and tokens of f_t                        [L, H]
    half_life   = ln 2 / -(mean over windows and tokens of log f_t)          [L, H]      tokens

-decay[1] is the slope ALiBi would need to decay as fast over one token; a decay that falls slower than
linearly means the gates open (f near 1) more often far back. Layers in `model.nope_layers` use no gates:
their rows are NaN. Sums are in float64.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from octlm.errors import UserError
from octlm.inspect.attention import DEFAULT_WINDOWS, SHOWN_DISTANCES, attention_windows
from octlm.inspect.probe import forward_with_hooks
from octlm.inspect.render import Block, Heading, Image, Paragraph, Table
from octlm.inspect.validation import validation_tokens
from octlm.storage.jsonable import to_json

if TYPE_CHECKING:
    from octlm.config import Config
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder

WINDOW_BATCH = 8  # windows per forward pass: a [B, T, C] input caught per layer, small beside attention's


def has_gates(model: Decoder) -> bool:
    """Whether the model's scheme sets forget gates from the content (FoX)."""
    return "gates" in type(model.positions).shows


def layer_inputs(model: Decoder, ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """Each gated layer's normed input `[B, T, C]` on its way into attention, from one pass over ids
    `[B, T]`."""
    caught: dict[int, torch.Tensor] = {}
    handles = [
        model.blocks[layer].attn.register_forward_pre_hook(
            lambda _module, args, layer=layer: caught.__setitem__(layer, args[0].detach())
        )
        for layer in range(model.config.n_layers)
        if layer not in model.config.nope_layers
    ]
    forward_with_hooks(model, ids, handles)
    return caught


def gate_decay(model: Decoder, windows: np.ndarray) -> dict[str, Any]:
    """`decay` `[L, H, T]`, `forget` and `half_life` `[L, H]` on windows `[W, T]` (see the module doc)."""
    W, T = windows.shape
    L, H = model.config.n_layers, model.config.n_heads
    decay = torch.zeros(L, H, T, dtype=torch.float64)
    log_f_sum, f_sum = torch.zeros(L, H, dtype=torch.float64), torch.zeros(L, H, dtype=torch.float64)
    device, was_training = model.token_embedding.weight.device, model.training
    model.eval()
    try:
        for first in range(0, W, WINDOW_BATCH):
            ids = torch.from_numpy(windows[first : first + WINDOW_BATCH]).to(device)
            for layer, x in layer_inputs(model, ids).items():
                with torch.no_grad():
                    log_f = model.positions.forget_gates(x, layer).cpu()  # [B, H, T], float64
                c = log_f.cumsum(-1)
                for d in range(1, T):  # d = 0: the empty sum
                    decay[layer, :, d] += (c[..., d:] - c[..., : T - d]).sum((0, 2))
                log_f_sum[layer] += log_f.sum((0, 2))
                f_sum[layer] += log_f.exp().sum((0, 2))
    finally:
        model.train(was_training)
    gated = torch.tensor([layer not in model.config.nope_layers for layer in range(L)])
    nan = torch.where(gated[:, None], 0.0, math.nan).double()  # [L, 1]: NaN rows for NoPE layers
    mean_log_f = log_f_sum / (W * T) + nan
    return {
        "windows": W,
        "length": T,
        "decay": (decay / (W * (T - torch.arange(T)))).add(nan[..., None]).numpy(),
        "forget": (f_sum / (W * T) + nan).numpy(),
        "half_life": (math.log(2) / -mean_log_f).numpy(),
    }


def report_gates(model: Decoder, config: Config, tokenizer: Tokenizer) -> dict[str, Any] | None:
    """For `octlm inspect`: `gate_decay` on the validation stream (None for a scheme without gates, or
    {"skipped": why} when it cannot run)."""
    if not has_gates(model):
        return None
    try:
        tokens = validation_tokens(config, tokenizer)
        length = min(model.config.context_length, 1024)
        numbers = gate_decay(model, attention_windows(tokens, length, DEFAULT_WINDOWS))
    except (UserError, OSError) as error:
        return {"skipped": str(error)}
    return to_json(numbers, 6, significant=True)


def gate_blocks(numbers: dict[str, Any] | None, figure: Path | None, level: int = 2) -> list[Block]:
    """The report's section: what was measured, the figure and a table per layer and head."""
    if not numbers:
        return []
    if "skipped" in numbers:
        return [Heading("Forget gates", level), Paragraph(f"Not measured: {numbers['skipped']}")]
    T = numbers["length"]
    decay, forget, half = (np.asarray(numbers[k], dtype=np.float64) for k in ("decay", "forget", "half_life"))
    shown = [d for d in SHOWN_DISTANCES if 0 < d < T]
    text = (
        f"On {numbers['windows']} held-out windows of {T} tokens: what each head's forget gates add to the "
        "score of the key d tokens back (the sum of log f over the tokens between, in nats; ALiBi's would be "
        "-m·d), the mean gate f, and the half-life ln 2 / -mean(log f) in tokens. The gates are set by the "
        "text, so these are averages over it, not a formula."
    )
    rows = [
        [str(layer), str(head), f"{forget[layer, head]:.3f}", f"{half[layer, head]:.2f}"]
        + [f"{decay[layer, head, d]:.3f}" for d in shown]
        for layer in range(decay.shape[0])
        for head in range(decay.shape[1])
        if not np.isnan(forget[layer, head])
    ]
    blocks: list[Block] = [Heading("Forget gates", level), Paragraph(text)]
    if figure is not None:
        blocks.append(Image(figure, "Mean decay added to the score against distance, a panel per layer."))
    headers = ["layer", "head", "mean f", "half-life"] + [f"decay d = {d}" for d in shown]
    return blocks + [Table(headers, rows, "r" * len(headers))]
