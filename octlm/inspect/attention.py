"""How attention spreads over distance, per layer and head: the locality ALiBi imposes and RoPE learns.

On windows `[W, T]` of held-out text, every layer's attention probabilities P `[W, H, T, T]` come from the
model's own forward pass (`octlm.model.attention_record.recording_attention`: the softmax that made the
logits). Query i sees keys j = 0..i, at distance d = i - j. Per layer and head:

    mean[d]           = mean over windows and queries i >= d of P[i, i - d]                        [L, H, T]
    lift[d]           = mean over the same of (i + 1) P[i, i - d]: 1 for uniform attention         [L, H, T]
    entropy           = mean over windows and queries of -sum_j P[i, j] ln P[i, j] (nats)          [L, H]
    mean_distance     = mean over windows and queries of sum_j P[i, j] (i - j)                     [L, H]
    mass              = mean over windows and queries of sum_j P[i, j]: 1 for softmax              [L, H]

Stick-breaking's rows sum to less than 1 (the rest of the stick goes to no key, and the first query has no
key at all): `mass` says how much, and the other numbers describe the weights as they are, not renormalised.

`mean` is the plain figure, but uniform attention alone makes it fall with distance (only queries far from the
start see large distances, and they spread over more keys); `lift` divides that out, so a flat lift of 1 means
no preference for near keys and a falling lift means locality. The reference for entropy is uniform attention,
mean over i of ln(i + 1). Sums are in float64.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from octlm.errors import UserError
from octlm.inspect.render import Block, Heading, Image, Paragraph, Table
from octlm.inspect.validation import validation_tokens
from octlm.model.attention_record import recording_attention
from octlm.model.decoder import WHOLE_BIAS_PAIRS
from octlm.storage.jsonable import to_json

if TYPE_CHECKING:
    from octlm.config import Config
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder

DEFAULT_WINDOWS = 16
# Recorded probabilities held at once, L x B x H x T x T float32: 2^25 of them is 128 MB.
MAX_RECORDED = 2**25
SHOWN_DISTANCES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # the report table's columns (those below T)


def attention_windows(tokens: np.ndarray, length: int, count: int) -> np.ndarray:
    """Up to `count` non-overlapping windows `[W, length]` spread evenly over `tokens` `[N]`."""
    available = len(tokens) // length
    if available < 1:
        raise UserError(
            f"attention by distance needs a window of {length} tokens, but the text has {len(tokens):,}; "
            "give a longer text"
        )
    starts = np.unique(np.linspace(0, available - 1, min(count, available)).round().astype(np.int64))
    return np.asarray(tokens)[starts[:, None] * length + np.arange(length)].astype(np.int64)


def attention_probabilities(model: Decoder, ids: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's attention `[B, H, T, T]` (rows: queries, summing to 1 over keys 0..i)
    for ids `[B, T]`."""
    if ids.shape[1] ** 2 > WHOLE_BIAS_PAIRS:
        raise UserError(
            f"attention probabilities of windows of {ids.shape[1]} tokens would not fit; "
            f"use at most {int(WHOLE_BIAS_PAIRS**0.5)} tokens"
        )
    record: list[torch.Tensor] = []
    was_training = model.training
    model.eval()  # no dropout: the recorded softmax is the one that made the logits
    try:
        with torch.no_grad(), recording_attention(record):
            model(ids)
    finally:
        model.train(was_training)
    return record


def _layer_sums(probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Float64 sums over windows and queries of one layer's probabilities `[B, H, T, T]`
    (see the module doc)."""
    p = probs.double()
    T = p.shape[-1]
    i = torch.arange(T)
    distance = i[:, None] - i[None, :]  # [T, T]: query i, key j
    seen = distance >= 0
    values = p[..., seen].sum(0)  # [H, pairs]: each visible (i, j), summed over windows
    by_distance = torch.zeros(p.shape[1], T, dtype=torch.float64)
    by_distance.index_add_(1, distance[seen], values)
    lifted = torch.zeros_like(by_distance).index_add_(
        1, distance[seen], values * (i[:, None] + 1).expand(T, T)[seen]
    )
    entropy = -torch.special.xlogy(p, p).sum(-1)  # [B, H, T]; 0 ln 0 = 0 for the hidden keys
    spread = (p * distance.clamp(min=0)).sum(-1)  # [B, H, T]
    return {
        "mass": p.sum((0, 2, 3)),
        "mean": by_distance,
        "lift": lifted,
        "entropy": entropy.sum((0, 2)),
        "mean_distance": spread.sum((0, 2)),
    }


def attention_by_distance(model: Decoder, windows: np.ndarray) -> dict[str, Any]:
    """Attention against distance on windows `[W, T]`: `mean`, `lift` `[L, H, T]`, `entropy`, `mean_distance`
    `[L, H]` (NumPy float64; see the module doc), with `windows`, `length` and `uniform_entropy`."""
    W, T = windows.shape
    L, H = model.config.n_layers, model.config.n_heads
    batch = max(1, MAX_RECORDED // (L * H * T * T))
    device = model.token_embedding.weight.device
    totals: list[dict[str, torch.Tensor]] = []
    for first in range(0, W, batch):
        ids = torch.from_numpy(windows[first : first + batch]).to(device)
        sums = [_layer_sums(p.cpu()) for p in attention_probabilities(model, ids)]
        totals = (
            sums if not totals else [{k: a[k] + b[k] for k in a} for a, b in zip(totals, sums, strict=True)]
        )
    per_distance = W * (T - np.arange(T))  # how many (window, query) pairs see each distance
    stacked = {key: torch.stack([t[key] for t in totals]).numpy() for key in totals[0]}
    return {
        "windows": W,
        "length": T,
        "mean": stacked["mean"] / per_distance,
        "lift": stacked["lift"] / per_distance,
        "entropy": stacked["entropy"] / (W * T),
        "mean_distance": stacked["mean_distance"] / (W * T),
        "mass": stacked["mass"] / (W * T),
        "uniform_entropy": float(np.log(np.arange(1, T + 1)).mean()),
    }


def inspect_attention(model: Decoder, tokens: np.ndarray, windows: int = DEFAULT_WINDOWS) -> dict[str, Any]:
    """`attention_by_distance` on `windows` windows of the model's context length (at most 1,024)
    of `tokens`."""
    length = min(model.config.context_length, int(WHOLE_BIAS_PAIRS**0.5))
    return attention_by_distance(model, attention_windows(tokens, length, windows))


def summary_rows(numbers: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per layer and head: mean distance, entropy and the lift at distance 1
    (what compare tabulates)."""
    entropy, spread, lift = (np.asarray(numbers[k]) for k in ("entropy", "mean_distance", "lift"))
    L, H = entropy.shape
    return [
        {
            "layer": layer,
            "head": head,
            "mean_distance": float(spread[layer, head]),
            "entropy": float(entropy[layer, head]),
            "lift_1": float(lift[layer, head, 1]) if numbers["length"] > 1 else None,
        }
        for layer in range(L)
        for head in range(H)
    ]


def attention_blocks(numbers: dict[str, Any] | None, figure: Path | None, level: int = 2) -> list[Block]:
    """The report's section: what was measured, the figure and a table per layer and head."""
    if not numbers:
        return []
    if "skipped" in numbers:
        return [Heading("Attention by distance", level), Paragraph(f"Not measured: {numbers['skipped']}")]
    T, lift = numbers["length"], np.asarray(numbers["lift"])
    shown = [d for d in SHOWN_DISTANCES if d < T]
    text = (
        f"On {numbers['windows']} held-out windows of {T} tokens: the mean attention probability of the "
        "key d "
        "positions back, divided by what uniform attention over the query's visible keys would give (lift: "
        "1 = no preference for near keys), per layer and head. Entropy is the mean over queries of each "
        f"attention row's entropy in nats; uniform attention would have {numbers['uniform_entropy']:.3f}."
    )
    rows = [
        [str(r["layer"]), str(r["head"]), f"{r['mean_distance']:.2f}", f"{r['entropy']:.3f}"]
        + [f"{lift[r['layer'], r['head'], d]:.3f}" for d in shown]
        for r in summary_rows(numbers)
    ]
    mass = np.asarray(numbers.get("mass", 1.0))  # absent from reports written before it was measured
    if mass.min() < 1 - 1e-3:
        text += (
            f" This model's attention rows sum to {mass.min():.3f}–{mass.max():.3f} on average per head, not "
            "1: the weight left over goes to no key (stick-breaking), and the figures show the weights as "
            "they are."
        )
    blocks: list[Block] = [Heading("Attention by distance", level), Paragraph(text)]
    if figure is not None:
        blocks.append(
            Image(figure, "Mean attention probability by distance, one panel per layer, a line per head.")
        )
    headers = ["layer", "head", "mean distance", "entropy"] + [f"lift d = {d}" for d in shown]
    return blocks + [Table(headers, rows, "r" * len(headers))]


def report_attention(model: Decoder, config: Config, tokenizer: Tokenizer) -> dict[str, Any]:
    """For `octlm inspect`: `inspect_attention` on the validation stream, or {"skipped": why}
    when it cannot run."""
    try:
        numbers = inspect_attention(model, validation_tokens(config, tokenizer))
    except (UserError, OSError) as error:
        return {"skipped": str(error)}
    return to_json(numbers, 6, significant=True)  # probabilities far below report.json's 5 decimals
