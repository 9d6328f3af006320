"""`octlm inspect runs/<name>`: what the token table and the position scheme learned.

A trained run is compared with an untrained model of the same config and seed (its starting point), because an
embedding space only means something next to one that has not learned anything. The report holds:

- nearest neighbours by cosine similarity of chosen tokens (default: token 0 and the most frequent training
  tokens), trained and untrained;
- for schemes with position vectors (learned, sinusoidal), the nearest positions of a few positions and the
  position x position similarity map; for RoPE, ALiBi, T5 and NoPE, what they have instead;
- the token table's frequent rows in 2-D (PCA), and each row's norm against its training count: tokens
  never seen in training are never looked up, so only a tied output head moves their rows (an untied table
  leaves them exactly at their initial values).

Layout, top to bottom: pure functions for the numbers, `analyze` (one JSON-able dict with every number),
figures (matplotlib's Agg canvas, no pyplot state), the document (one list of blocks rendered to Markdown
and to self-contained HTML), the web export, then `write_report` and the CLI.

    runs/<name>/report/
        report.md  report.html  report.json  embeddings.json  positions.png  tokens_pca.png  norms.png
        [position_scheme.png for RoPE, ALiBi and T5]
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from octlm.errors import UserError
from octlm.positions import cosine_similarity_matrix, sinusoidal_table, t5_bucket

if TYPE_CHECKING:
    from octlm.config import Config, ModelConfig
    from octlm.model import Decoder
    from octlm.tokenizer import Tokenizer

INIT_STD = 0.02  # Decoder._init_weights: every embedding row starts as N(0, 0.02²) per entry
DEFAULT_TOP = 5  # neighbours shown per token or position
DEFAULT_FREQUENT = 12  # frequent tokens shown by default, besides token 0
PCA_TOKENS = 60  # frequent tokens placed in the PCA figure
WEB_TOKENS = 300  # rows exported to embeddings.json
WEB_SCHEMA = 1
REPORT_SCHEMA = 1
DIGITS = 5

Neighbours = list[tuple[int, float]]  # (row index, cosine similarity), most similar first


# ------------------------------------------------------------------------------------------------------------
# Numbers: pure functions on arrays


def _as_tensor(table: Tensor | np.ndarray) -> Tensor:
    if isinstance(table, np.ndarray):
        table = torch.from_numpy(table)
    return table.detach().to("cpu", torch.float64)


def cosine_neighbours(table: Tensor | np.ndarray, rows: Sequence[int], k: int) -> list[Neighbours]:
    """For each index in `rows`, the `k` other rows of `table` `[N, C]` most similar by cosine, best first.

    A row is never its own neighbour; ties go to the lower index. Returns one list of (index, similarity)
    per row.
    """
    table = _as_tensor(table)
    n = table.shape[0]
    for row in rows:
        if not 0 <= int(row) < n:
            raise UserError(f"row {row} is outside the table's {n} rows")
    k = max(0, min(k, n - 1))
    unit = table / table.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    index = torch.as_tensor([int(r) for r in rows], dtype=torch.long)
    sims = unit[index] @ unit.T  # [R, N]
    sims[torch.arange(len(index)), index] = -math.inf
    # A stable sort on -similarity keeps lower indices first among equal similarities.
    order = torch.sort(-sims, dim=-1, stable=True).indices[:, :k]
    return [[(int(j), float(sims[i, j])) for j in order[i]] for i in range(len(index))]


def nearest_tokens(table: Tensor | np.ndarray, ids: Sequence[int], k: int = DEFAULT_TOP) -> list[Neighbours]:
    """Nearest token ids to each of `ids` in a token table `[V, C]` (see `cosine_neighbours`)."""
    return cosine_neighbours(table, ids, k)


def nearest_positions(
    table: Tensor | np.ndarray, positions: Sequence[int], k: int = DEFAULT_TOP
) -> list[Neighbours]:
    """Nearest positions to each of `positions` in a position table `[T, C]` (see `cosine_neighbours`)."""
    return cosine_neighbours(table, positions, k)


def partner_hits(table: Tensor | np.ndarray, partner: dict[int, int]) -> int:
    """How many ids in `partner` have their partner as nearest neighbour in `table` `[V, C]`."""
    ids = sorted(partner)
    firsts = cosine_neighbours(table, ids, 1)
    return sum(1 for i, nb in zip(ids, firsts, strict=True) if nb and nb[0][0] == partner[i])


def similarity_matrix(table: Tensor | np.ndarray) -> np.ndarray:
    """Cosine similarity between every pair of rows of `table` `[N, C]`, `[N, N]` float64."""
    return cosine_similarity_matrix(_as_tensor(table)).numpy()


def similarity_by_distance(similarity: np.ndarray, distances: Sequence[int]) -> dict[int, float]:
    """Mean of `similarity` `[T, T]` over all pairs (t, t + d), for each distance d below T."""
    n = similarity.shape[0]
    return {int(d): float(np.diagonal(similarity, offset=int(d)).mean()) for d in distances if 0 <= d < n}


def pca_2d(rows: Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Project `rows` `[N, C]` onto their first two principal components.

    Returns (coordinates `[N, 2]`, fraction of the variance each component explains `[2]`). Signs are fixed so
    that each component's largest loading is positive, so the picture does not flip between runs.
    """
    x = _as_tensor(rows).numpy()
    x = x - x.mean(axis=0, keepdims=True)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    components = vt[:2]  # [2, C]
    flip = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    components = components * flip[:, None]
    coords = x @ components.T
    variance = s**2
    explained = variance[:2] / max(variance.sum(), 1e-30)
    if coords.shape[1] < 2:  # fewer than two rows or columns: pad with zeros
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
        explained = np.pad(explained, (0, 2 - len(explained)))
    return coords, explained


def row_norms(table: Tensor | np.ndarray) -> np.ndarray:
    """Euclidean norm of each row of `table` `[N, C]`, `[N]`."""
    return _as_tensor(table).norm(dim=-1).numpy()


def token_counts(tokens: np.ndarray, vocab_size: int, chunk: int = 1 << 24) -> np.ndarray:
    """How often each id below `vocab_size` occurs in the token stream `tokens` `[N]`: `[V]` int64."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), chunk):
        part = np.asarray(tokens[start : start + chunk]).astype(np.int64)
        if len(part) and (part.min() < 0 or part.max() >= vocab_size):
            raise UserError(
                f"the token stream holds id {int(part.max())}, outside the vocabulary of {vocab_size}"
            )
        counts += np.bincount(part, minlength=vocab_size)
    return counts


def most_frequent(counts: np.ndarray, n: int) -> list[int]:
    """The `n` ids with the highest counts (only ids seen at least once), most frequent first, ties by id."""
    order = np.argsort(-counts, kind="stable")
    return [int(i) for i in order[:n] if counts[i] > 0]


def probe_positions(length: int) -> list[int]:
    """Positions worth asking about in a context of `length`: 0, 1, the middle and the last."""
    return sorted({p for p in (0, 1, length // 2, length - 1) if 0 <= p < length})


def probe_distances(length: int) -> list[int]:
    """Distances 1, 2, 4, ... below `length`, plus `length - 1`."""
    out = [2**i for i in range(int(math.log2(max(length - 1, 1))) + 1) if 2**i < length]
    return sorted(set(out + ([length - 1] if length > 1 else [])))


def unseen_rows(trained: np.ndarray, initial: np.ndarray, counts: np.ndarray) -> dict[str, Any]:
    """How far the rows of tokens never seen in training moved from their initial values, next to seen rows.

    `trained`, `initial`: token tables `[V, C]` (same seed); `counts` `[V]`. The expected norm of a fresh row
    is INIT_STD·√C. Relative movement is ‖E - E₀‖ / ‖E₀‖ per row, averaged.
    """
    width = trained.shape[1]
    moved = np.linalg.norm(trained - initial, axis=1) / np.maximum(np.linalg.norm(initial, axis=1), 1e-12)
    cos = np.sum(trained * initial, axis=1) / np.maximum(
        np.linalg.norm(trained, axis=1) * np.linalg.norm(initial, axis=1), 1e-12
    )
    out: dict[str, Any] = {"init_std": INIT_STD, "expected_init_norm": INIT_STD * math.sqrt(width)}
    for name, mask in (("unseen", counts == 0), ("seen", counts > 0)):
        n = int(mask.sum())
        out[name] = {
            "tokens": n,
            "mean_norm": float(np.linalg.norm(trained[mask], axis=1).mean()) if n else None,
            "mean_initial_norm": float(np.linalg.norm(initial[mask], axis=1).mean()) if n else None,
            "mean_relative_change": float(moved[mask].mean()) if n else None,
            "mean_cosine_to_initial": float(cos[mask].mean()) if n else None,
        }
    return out


# ------------------------------------------------------------------------------------------------------------
# Position schemes: vectors where a scheme has them, what it has instead where it does not


def position_section(model: Decoder, initial: Decoder, k: int = DEFAULT_TOP) -> dict[str, Any]:
    """Everything the report says about the position scheme of `model`, with `initial` (untrained) beside it.

    Learned and sinusoidal: probe positions' neighbours, the `[T, T]` similarity map, mean similarity by
    distance. RoPE: rotation frequency and wavelength per channel pair. ALiBi: slope per head and the bias
    at a few distances. T5: the learned bias per head and bucket. NoPE: nothing but the causal mask.
    The sinusoidal map of the same width is always included as a reference.
    """
    cfg: ModelConfig = model.config
    length, width = cfg.context_length, cfg.d_model
    probes, distances = probe_positions(length), probe_distances(length)
    sinusoidal = sinusoidal_table(length, width + width % 2, cfg.sinusoidal_base)[:, :width]
    section: dict[str, Any] = {
        "scheme": cfg.position,
        "context_length": length,
        "probe_positions": probes,
        "distances": distances,
        "sinusoidal_reference": _vector_positions(sinusoidal, probes, distances, k),
        "has_vectors": cfg.position in ("learned", "sinusoidal"),
    }
    scheme = model.positions
    if cfg.position == "learned":
        section["trained"] = _vector_positions(scheme.table.weight, probes, distances, k)
        section["untrained"] = _vector_positions(initial.positions.table.weight, probes, distances, k)
        section["summary"] = (
            f"A learned table of {length} rows, one vector per position, added to the token vectors. Its "
            "similarity map is compared with the untrained table (random: no structure) and with the fixed "
            "sinusoidal table of the same width."
        )
    elif cfg.position == "sinusoidal":
        section["trained"] = section["sinusoidal_reference"]
        section["summary"] = (
            f"The fixed sinusoidal table (base {cfg.sinusoidal_base:g}): nothing here is learned, so the "
            "trained and untrained models have the same position vectors. Similarity depends only on the "
            "distance t - s."
        )
    elif cfg.position == "rope":
        theta = scheme.inv_freq.double().cpu().numpy()  # [D/2]
        wavelength = 2 * math.pi / theta
        section["rope"] = {
            "head_dim": cfg.head_dim,
            "base": cfg.rope_base,
            "layout": cfg.rope_layout,
            "theta": theta,
            "wavelength": wavelength,
            "turns_in_context": length / wavelength,
            "pairs_slower_than_context": int((wavelength > length).sum()),
        }
        section["summary"] = (
            "RoPE has no position vectors: every attention layer rotates each of the "
            f"{len(theta)} channel pairs of a head's queries and keys by position x θ_i. The fastest pair "
            f"turns once every {wavelength[0]:.1f} positions, the slowest once every {wavelength[-1]:,.0f}; "
            f"{int((wavelength > length).sum())} of {len(theta)} pairs do not complete one turn within the "
            f"{length}-token context. Nothing here is learned (base {cfg.rope_base:g})."
        )
    elif cfg.position == "alibi":
        slopes = scheme.slopes.double().cpu().numpy()  # [H]
        section["alibi"] = {
            "slopes": slopes,
            "bias_at_distance": {int(d): (-slopes * d) for d in distances},
        }
        section["summary"] = (
            f"ALiBi has no position vectors: each of the {len(slopes)} heads subtracts slope x distance "
            f"from every attention score. Slopes run from {slopes[0]:g} to {slopes[-1]:g}; nothing here is "
            "learned."
        )
    elif cfg.position == "t5":
        buckets = t5_bucket(-torch.arange(length), cfg.t5_buckets, cfg.t5_max_distance).numpy()  # [T]
        trained = scheme.table.weight.detach().double().cpu().numpy()  # [buckets, H]
        untrained = initial.positions.table.weight.detach().double().cpu().numpy()
        reached = sorted(set(int(b) for b in buckets))
        section["t5"] = {
            "buckets": cfg.t5_buckets,
            "max_distance": cfg.t5_max_distance,
            "bucket_of_distance": buckets,
            "bucket_distances": {
                b: [int(np.flatnonzero(buckets == b).min()), int(np.flatnonzero(buckets == b).max())]
                for b in reached
            },
            "bias": trained,
            "untrained_bias": untrained,
            "bias_at_distance": {int(d): trained[buckets[d]] for d in distances},
        }
        section["summary"] = (
            f"T5 has no position vectors: it learns one number per head ({cfg.n_heads}) and distance bucket "
            f"({cfg.t5_buckets}, {len(reached)} reached within {length} tokens), added to the attention "
            "scores. "
            f"Trained biases span {trained.min():.3f} to {trained.max():.3f}; untrained ones "
            f"{untrained.min():.3f} to {untrained.max():.3f}."
        )
    else:  # nope
        section["summary"] = (
            "NoPE has no position parameters at all. The causal mask is its only source of order: a token "
            "sees how many tokens came before it only through what attention over them adds up to."
        )
    return section


def _vector_positions(table: Tensor, probes: list[int], distances: list[int], k: int) -> dict[str, Any]:
    """Neighbours of the probe positions, the similarity map `[T, T]`, and its mean by distance."""
    similarity = similarity_matrix(table)
    return {
        "neighbours": {p: nb for p, nb in zip(probes, nearest_positions(table, probes, k), strict=True)},
        "similarity": similarity,
        "similarity_by_distance": similarity_by_distance(similarity, distances),
    }


# ------------------------------------------------------------------------------------------------------------
# Analysis: every number of the report in one dict


def token_label(tokenizer: Tokenizer | None, token_id: int) -> str:
    """A readable, repr-quoted form of one token, e.g. `' def'` or `'\\n    '`.

    A token that is part of a UTF-8 character (a lone byte of "é") shows its bytes instead: `b'\\xc3'`.
    """
    if tokenizer is None or token_id >= tokenizer.vocab_size:
        return f"<id {token_id}>"
    raw = tokenizer.token_bytes(token_id)
    try:
        return repr(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(raw)


def resolve_tokens(tokenizer: Tokenizer, texts: Sequence[str]) -> list[int]:
    """The id of each text; each must encode to exactly one token (UserError otherwise, saying what it is)."""
    ids = []
    for text in texts:
        encoded = tokenizer.encode(text)
        if len(encoded) != 1:
            parts = ", ".join(f"{token_label(tokenizer, i)} (id {i})" for i in encoded) or "nothing"
            raise UserError(
                f"--tokens {text!r} is not a single token: it encodes to {len(encoded)} tokens: {parts}; "
                "pass one of those, or use --ids"
            )
        ids.append(encoded[0])
    return ids


def analyze(
    model: Decoder,
    initial: Decoder,
    tokenizer: Tokenizer | None,
    counts: np.ndarray | None,
    ids: Sequence[int] | None = None,
    k: int = DEFAULT_TOP,
    frequent: int = DEFAULT_FREQUENT,
    run: str = "",
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """All the numbers of the report for `model` and `initial` (same config, untrained, same seed).

    `counts` `[V]`: training count of each token, or None when the training data could not be found (the
    frequent tokens are then the lowest ids, and the report says so). `ids`: the tokens whose neighbours are
    listed (default: token 0 and the `frequent` most frequent).
    """
    cfg: ModelConfig = model.config
    vocab = cfg.vocab_size
    notes = list(notes)
    trained_table = model.token_embedding.weight.detach().double().cpu().numpy()  # [V, C]
    initial_table = initial.token_embedding.weight.detach().double().cpu().numpy()
    if counts is not None:
        ranked = most_frequent(counts, vocab)
    else:
        ranked = list(range(1, vocab)) + [0]
        notes.append("Tokens are ranked by id, not by training frequency: there are no training counts.")
    if ids is None:
        ids = [0] + [i for i in ranked[:frequent] if i != 0]
    ids = list(dict.fromkeys(int(i) for i in ids))  # each once, in the order given
    for i in ids:
        if not 0 <= i < vocab:
            raise UserError(f"token id {i} is outside the vocabulary [0, {vocab})")

    def view(table: np.ndarray) -> dict[str, Any]:
        pca_ids = ranked[:PCA_TOKENS]
        coords, explained = pca_2d(table[pca_ids])
        neighbours = nearest_tokens(table, ids, k)
        return {
            "neighbours": {i: nb for i, nb in zip(ids, neighbours, strict=True)},
            "mean_top1_similarity": float(np.mean([nb[0][1] for nb in neighbours])) if k else None,
            "pca": {"ids": pca_ids, "coords": coords, "explained": explained},
            "norms": row_norms(table),
        }

    labels_needed = set(ids) | set(ranked[:PCA_TOKENS])
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "run": run,
        "model": {
            "vocab_size": vocab,
            "d_model": cfg.d_model,
            "context_length": cfg.context_length,
            "n_layers": cfg.n_layers,
            "n_heads": cfg.n_heads,
            "position": cfg.position,
            "tie_embeddings": cfg.tie_embeddings,
        },
        "counts_available": counts is not None,
        "counts": counts,
        "tokens": ids,
        "k": k,
        "trained": view(trained_table),
        "untrained": view(initial_table),
        "positions": position_section(model, initial, k),
        "notes": notes,
    }
    for table_view in (report["trained"], report["untrained"]):
        for nb in table_view["neighbours"].values():
            labels_needed |= {j for j, _ in nb}
    report["labels"] = {i: token_label(tokenizer, i) for i in sorted(labels_needed)}
    if counts is not None:
        report["unseen"] = unseen_rows(trained_table, initial_table, counts)
    return report


def to_json(value: Any, digits: int = DIGITS) -> Any:
    """Plain JSON values: arrays and tensors to lists, floats rounded to `digits`, dict keys to strings."""
    if isinstance(value, Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(key): to_json(v, digits) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v, digits) for v in value]
    if isinstance(value, (np.integer, np.bool_, bool)) or value is None or isinstance(value, (int, str)):
        return value.item() if isinstance(value, (np.integer, np.bool_)) else value
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if not math.isfinite(value):
            return None
        rounded = round(value, digits)
        return 0.0 if rounded == 0 else rounded
    raise TypeError(f"cannot write a {type(value).__name__} to report.json")


# ------------------------------------------------------------------------------------------------------------
# Figures (matplotlib's Agg canvas; no pyplot, so nothing global is touched)


def _figure(width: float, height: float) -> Any:
    """A figure on the Agg canvas. Margins are set by hand: constrained layout doubles the drawing time."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def _save(fig: Any, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # glyphs a font lacks (rare token bytes) are not worth a warning
        fig.savefig(path, format="png")
    return path


def plot_similarity_maps(maps: list[tuple[str, np.ndarray]], path: Path) -> Path:
    """One panel per (title, `[T, T]` cosine similarity); diverging colours fixed to [-1, 1], a colour bar."""
    fig = _figure(3.4 * len(maps) + 1.0, 3.5)
    fig.subplots_adjust(left=0.6 / fig.get_figwidth(), right=0.97, bottom=0.14, top=0.91, wspace=0.35)
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    image = None
    for ax, (title, sim) in zip(axes, maps, strict=True):
        image = ax.imshow(sim, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("position")
        ax.set_ylabel("position")
    fig.colorbar(image, ax=list(axes), label="cosine similarity", shrink=0.9)
    return _save(fig, path)


def plot_pca(panels: list[tuple[str, np.ndarray, np.ndarray, list[str]]], path: Path) -> Path:
    """One panel per (title, coordinates `[N, 2]`, explained `[2]`, labels `[N]`): labelled 2-D points."""
    fig = _figure(5.2 * len(panels), 5.0)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.1, top=0.94, wspace=0.22)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, coords, explained, labels) in zip(axes, panels, strict=True):
        ax.scatter(coords[:, 0], coords[:, 1], s=10, color="tab:blue")
        for (x, y), label in zip(coords, labels, strict=True):
            short = label if len(label) <= 14 else label[:13] + "…"
            ax.text(x, y, short, fontsize=6.5, parse_math=False, ha="left", va="bottom")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(f"PC 1 ({explained[0]:.0%} of variance)")
        ax.set_ylabel(f"PC 2 ({explained[1]:.0%} of variance)")
    return _save(fig, path)


def plot_norms(
    panels: list[tuple[str, np.ndarray]], counts: np.ndarray | None, expected: float, path: Path
) -> Path:
    """Row norm `[V]` against training count `[V]` (log x), one panel per (title, norms).

    Tokens never seen in training (count 0) cannot sit on a log axis; they are drawn in red at x = 0.5. The
    dashed line is the expected norm of a freshly initialised row, INIT_STD·√C. Without counts, norms by id.
    """
    fig = _figure(4.6 * len(panels), 3.8)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.13, top=0.92, wspace=0.12)
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, (title, norms) in zip(axes, panels, strict=True):
        if counts is None:
            ax.scatter(np.arange(len(norms)), norms, s=5)
            ax.set_xlabel("token id (no training counts found)")
        else:
            seen = counts > 0
            ax.scatter(counts[seen], norms[seen], s=5, alpha=0.6, label="seen in training")
            if (~seen).any():
                ax.scatter(
                    np.full((~seen).sum(), 0.5),
                    norms[~seen],
                    s=9,
                    color="tab:red",
                    label=f"never seen ({int((~seen).sum())}), at x = 0.5",
                )
            ax.set_xscale("log")
            ax.set_xlabel("training count")
        ax.axhline(expected, color="black", linestyle="--", linewidth=0.8, label="init std·√C")
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("row norm")
        ax.legend(fontsize=7, loc="best")
    return _save(fig, path)


def plot_scheme(section: dict[str, Any], path: Path) -> Path | None:
    """RoPE: wavelength per pair. ALiBi: bias against distance per head. T5: the same, trained and untrained.

    Returns None for schemes with nothing to draw here.
    """
    length = section["context_length"]
    if "rope" in section:
        rope = section["rope"]
        fig = _figure(5.0, 3.4)
        fig.subplots_adjust(left=0.15, right=0.97, bottom=0.15, top=0.9)
        ax = fig.subplots()
        ax.semilogy(np.arange(len(rope["wavelength"])), rope["wavelength"], marker="o", markersize=3)
        ax.axhline(length, color="black", linestyle="--", linewidth=0.8, label=f"context ({length})")
        ax.set_xlabel("channel pair i")
        ax.set_ylabel("wavelength 2π/θ_i (positions)")
        ax.set_title("RoPE: one rotation frequency per channel pair", fontsize=9)
        ax.legend(fontsize=7)
        return _save(fig, path)
    if "alibi" in section or "t5" in section:
        fig = _figure(5.4, 3.6)
        fig.subplots_adjust(left=0.15, right=0.97, bottom=0.14, top=0.9)
        ax = fig.subplots()
        distance = np.arange(length)
        if "alibi" in section:
            for h, slope in enumerate(section["alibi"]["slopes"]):
                ax.plot(distance, -slope * distance, linewidth=1, label=f"head {h}")
            ax.set_title("ALiBi: fixed bias = -slope x distance", fontsize=9)
        else:
            t5 = section["t5"]
            buckets = t5["bucket_of_distance"]
            for h in range(t5["bias"].shape[1]):
                line = ax.plot(distance, t5["bias"][buckets, h], linewidth=1, label=f"head {h}")[0]
                ax.plot(
                    distance,
                    t5["untrained_bias"][buckets, h],
                    linewidth=0.8,
                    linestyle=":",
                    color=line.get_color(),
                )
            ax.set_title("T5: learned bias per head (dotted: untrained)", fontsize=9)
        ax.set_xlabel("distance (query - key)")
        ax.set_ylabel("added to the attention score")
        ax.legend(fontsize=7, ncol=2)
        return _save(fig, path)
    return None


def draw_figures(report: dict[str, Any], folder: Path) -> dict[str, Path]:
    """Every figure of `report` into `folder`; returns name -> path."""
    figures: dict[str, Path] = {}
    pos = report["positions"]
    scheme, width = pos["scheme"], report["model"]["d_model"]
    sinusoidal = (f"sinusoidal (fixed, C = {width})", pos["sinusoidal_reference"]["similarity"])
    if scheme == "learned":
        maps = [
            ("learned, trained", pos["trained"]["similarity"]),
            ("learned, untrained", pos["untrained"]["similarity"]),
            sinusoidal,
        ]
    else:
        maps = [sinusoidal]
    figures["positions"] = plot_similarity_maps(maps, folder / "positions.png")
    extra = plot_scheme(pos, folder / "position_scheme.png")
    if extra is not None:
        figures["position_scheme"] = extra

    labels = report["labels"]
    figures["tokens_pca"] = plot_pca(
        [
            (
                f"{name} token table",
                report[name]["pca"]["coords"],
                report[name]["pca"]["explained"],
                [labels[i] for i in report[name]["pca"]["ids"]],
            )
            for name in ("trained", "untrained")
        ],
        folder / "tokens_pca.png",
    )
    figures["norms"] = plot_norms(
        [(f"{name} token table", report[name]["norms"]) for name in ("trained", "untrained")],
        report["counts"],
        INIT_STD * math.sqrt(width),
        folder / "norms.png",
    )
    return figures


# ------------------------------------------------------------------------------------------------------------
# The document: a list of blocks, rendered to Markdown and to self-contained HTML


@dataclass
class Code:
    """Inline code (a token's repr)."""

    text: str


Inline = str | Code | list[str | Code]


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: Inline


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Inline]]


@dataclass
class Image:
    path: Path
    caption: str


Block = Heading | Paragraph | Table | Image


def _neighbour_cells(nb: Neighbours, labels: dict[int, str]) -> list[str | Code]:
    cells: list[str | Code] = []
    for n, (j, sim) in enumerate(nb):
        cells += [", " if n else "", Code(labels[j]), f" {sim:.2f}"]
    return cells


def document(report: dict[str, Any], figures: dict[str, Path]) -> list[Block]:
    """The report as blocks, in reading order."""
    labels, counts = report["labels"], report["counts"]
    m, pos = report["model"], report["positions"]
    blocks: list[Block] = [
        Heading(f"What the embeddings learned: {report['run'] or 'model'}", 1),
        Paragraph(
            (f"After {report['step']:,} training steps. " if report.get("step") is not None else "")
            + f"Position scheme {m['position']}, vocabulary V = {m['vocab_size']:,}, "
            f"width C = {m['d_model']}, context T = {m['context_length']}, layers {m['n_layers']}, "
            f"heads {m['n_heads']}"
            f"{', output head tied to the token table' if m['tie_embeddings'] else ''}. Every table compares "
            "the trained model with an untrained one of the same config and seed: its starting point."
        ),
    ]
    blocks += [Paragraph(note) for note in report["notes"]]

    blocks.append(Heading("Nearest tokens"))
    blocks.append(
        Paragraph(
            f"The {report['k']} rows of the token table closest to each chosen token by cosine similarity. "
            "Mean similarity of the nearest neighbour: trained "
            f"{report['trained']['mean_top1_similarity']:.3f}, "
            f"untrained {report['untrained']['mean_top1_similarity']:.3f} (chance: the closest of V - 1 "
            "random directions)."
        )
    )
    for name in ("trained", "untrained"):
        rows: list[list[Inline]] = []
        for i in report["tokens"]:
            count = f"{int(counts[i]):,}" if counts is not None else "?"
            rows.append(
                [Code(labels[i]), str(i), count, _neighbour_cells(report[name]["neighbours"][i], labels)]
            )
        blocks += [Paragraph(f"{name.capitalize()} model:"), Table(["token", "id", "count", "nearest"], rows)]

    blocks.append(Heading("Positions"))
    blocks.append(Paragraph(pos["summary"]))
    if pos["has_vectors"]:
        versions = [("trained", pos["trained"])]
        if "untrained" in pos:
            versions.append(("untrained", pos["untrained"]))
        for name, data in versions:
            rows = [
                [str(p), ", ".join(f"{q} ({s:.2f})" for q, s in nb)] for p, nb in data["neighbours"].items()
            ]
            blocks += [Paragraph(f"Nearest positions, {name}:"), Table(["position", "nearest"], rows)]
        headers = (
            ["distance"]
            + [name for name, _ in versions]
            + (["sinusoidal"] if m["position"] == "learned" else [])
        )
        sources = [data for _, data in versions] + (
            [pos["sinusoidal_reference"]] if m["position"] == "learned" else []
        )
        rows = [
            [str(d)] + [f"{s['similarity_by_distance'][d]:.3f}" for s in sources] for d in pos["distances"]
        ]
        blocks += [Paragraph("Mean cosine similarity of positions t and t + d:"), Table(headers, rows)]
        caption = (
            "Position x position cosine similarity: the learned table after and before training, beside the "
            "sinusoidal table of the same width."
            if m["position"] == "learned"
            else "Position x position cosine similarity of the sinusoidal table (fixed; trained = untrained)."
        )
    else:
        blocks += _instead_blocks(pos)
        caption = (
            f"For reference only: the sinusoidal table of width {m['d_model']}. A {m['position']} model adds "
            "no position vectors to its input, so it has no similarity map of its own."
        )
    blocks.append(Image(figures["positions"], caption))
    if "position_scheme" in figures:
        blocks.append(
            Image(figures["position_scheme"], f"What {m['position']} has instead of position vectors.")
        )

    blocks.append(Heading("The token table"))
    blocks.append(
        Image(
            figures["tokens_pca"],
            f"The {len(report['trained']['pca']['ids'])} most frequent tokens' rows projected on their first "
            "two principal components, trained and untrained.",
        )
    )
    blocks.append(Image(figures["norms"], "Row norm against training count, trained and untrained."))
    if "unseen" in report:
        blocks += _unseen_blocks(report["unseen"], m)
    return blocks


def _instead_blocks(pos: dict[str, Any]) -> list[Block]:
    """The table a scheme without position vectors shows instead."""
    distances = pos["distances"]
    if "rope" in pos:
        r = pos["rope"]
        rows = [
            [str(i), f"{t:.6g}", f"{w:,.1f}", f"{n:.3g}"]
            for i, (t, w, n) in enumerate(
                zip(r["theta"], r["wavelength"], r["turns_in_context"], strict=True)
            )
        ]
        return [Table(["pair i", "θ_i (radians per position)", "wavelength 2π/θ_i", "turns within T"], rows)]
    if "alibi" in pos:
        a = pos["alibi"]
        rows = [
            [str(h), f"{s:.6g}"] + [f"{-s * d:.3f}" for d in distances] for h, s in enumerate(a["slopes"])
        ]
        return [Table(["head", "slope"] + [f"d = {d}" for d in distances], rows)]
    if "t5" in pos:
        t5 = pos["t5"]
        heads = t5["bias"].shape[1]
        rows = [
            [str(b), f"{lo}–{hi}" if hi > lo else str(lo)]
            + [f"{t5['bias'][b, h]:+.3f}" for h in range(heads)]
            for b, (lo, hi) in t5["bucket_distances"].items()
        ]
        return [
            Paragraph(
                "Learned bias per bucket (the distances each bucket covers within the context) and head:"
            ),
            Table(["bucket", "distances"] + [f"head {h}" for h in range(heads)], rows),
        ]
    return []


def _unseen_blocks(unseen: dict[str, Any], m: dict[str, Any]) -> list[Block]:
    u, s = unseen["unseen"], unseen["seen"]
    expected = unseen["expected_init_norm"]
    text = (
        f"{u['tokens']:,} of {m['vocab_size']:,} tokens never occur in the training tokens. A fresh row has "
        f"norm about init std·√C = {INIT_STD}·√{m['d_model']} = {expected:.3f}."
    )
    if u["tokens"]:
        text += (
            f" The unseen rows' mean norm is {u['mean_norm']:.3f} (it was {u['mean_initial_norm']:.3f} at "
            f"the start); they moved by {u['mean_relative_change']:.0%} of their initial norm on average and "
            f"keep a cosine of {u['mean_cosine_to_initial']:.2f} with their initial rows, against "
            f"{s['mean_relative_change']:.0%} and {s['mean_cosine_to_initial']:.2f} for the seen rows."
        )
        if m["tie_embeddings"]:
            text += (
                " The input lookup never touches an unseen row, but the output head is the same table: every "
                "softmax pushes unseen tokens' logits down, so these rows move too (Adam scales each update "
                "to the gradient's typical size, so a small but consistent push adds up). Only an untied "
                "table keeps unseen rows exactly at their initial values."
            )
        else:
            text += (
                " The table is not tied to the output head, so nothing updates an unseen row: it should "
                "still equal its initial value (relative change 0%)."
            )
    return [Paragraph(text)]


def _md_inline(text: Inline, in_table: bool = False) -> str:
    if isinstance(text, list):
        return "".join(_md_inline(t, in_table) for t in text)
    if isinstance(text, Code):
        body = text.text.replace("|", "\\|") if in_table else text.text
        fence = "``" if "`" in body else "`"
        pad = " " if fence == "``" or body.startswith("`") else ""
        return f"{fence}{pad}{body}{pad}{fence}"
    return text.replace("|", "\\|") if in_table else text


def render_markdown(blocks: list[Block], folder: Path) -> str:
    """Markdown with images linked relative to `folder` (where report.md lives)."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text)
        elif isinstance(block, Paragraph):
            out.append(_md_inline(block.text))
        elif isinstance(block, Table):
            lines = ["| " + " | ".join(block.headers) + " |", "|" + "---|" * len(block.headers)]
            lines += ["| " + " | ".join(_md_inline(c, True) for c in row) + " |" for row in block.rows]
            out.append("\n".join(lines))
        elif isinstance(block, Image):
            out.append(
                f"![{block.caption}]({block.path.relative_to(folder).as_posix()})\n\n*{block.caption}*"
            )
    return "\n\n".join(out) + "\n"


def _html_inline(text: Inline) -> str:
    if isinstance(text, list):
        return "".join(_html_inline(t) for t in text)
    if isinstance(text, Code):
        return f"<code>{html.escape(text.text)}</code>"
    return html.escape(text)


HTML_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1.2rem; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
code { background: #f3f3f3; padding: 0 0.2rem; white-space: pre; }
figure { margin: 1rem 0 2rem; } figure img { max-width: 100%; } figcaption { color: #555; font-size: 13px; }
"""


def render_html(blocks: list[Block]) -> str:
    """One HTML file with every image inlined as a base64 data URI."""
    body: list[str] = []
    title = "octlm report"
    for block in blocks:
        if isinstance(block, Heading):
            if block.level == 1:
                title = block.text
            body.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_html_inline(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
            rows = "".join(
                "<tr>" + "".join(f"<td>{_html_inline(c)}</td>" for c in row) + "</tr>" for row in block.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Image):
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            caption = html.escape(block.caption)
            body.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
                f"<figcaption>{caption}</figcaption></figure>"
            )
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n"
        f"<style>{HTML_STYLE}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )


# ------------------------------------------------------------------------------------------------------------
# The web site's data


def web_export(
    report: dict[str, Any], model: Decoder, tokenizer: Tokenizer | None, n: int = WEB_TOKENS
) -> dict[str, Any]:
    """`embeddings.json` for the web site: the most frequent tokens' rows and the position similarity map.

    Schema 1, as web/DATA.md defines it: {schema, run, position, d_model, tokens: [{id, text, count}],
    token_table: rows `[N, C]` rounded to 5 decimals, position_similarity: `[T, T]` or null (schemes without
    position vectors)}. Without training counts the tokens are the lowest ids and every count is 0 (the web
    page's check wants a number).
    """
    counts = report["counts"]
    ranked = most_frequent(counts, n) if counts is not None else list(range(min(n, model.config.vocab_size)))
    table = model.token_embedding.weight.detach().double().cpu().numpy()
    pos = report["positions"]
    return {
        "schema": WEB_SCHEMA,
        "run": report["run"],
        "position": pos["scheme"],
        "d_model": model.config.d_model,
        "tokens": [
            {
                "id": i,
                "text": _token_text(tokenizer, i),
                "count": int(counts[i]) if counts is not None else 0,
            }
            for i in ranked
        ],
        "token_table": to_json(table[ranked]),
        "position_similarity": to_json(pos["trained"]["similarity"]) if pos["has_vectors"] else None,
    }


def _token_text(tokenizer: Tokenizer | None, token_id: int) -> str:
    if tokenizer is None or token_id >= tokenizer.vocab_size:
        return f"<id {token_id}>"
    return tokenizer.token_str(token_id)


# ------------------------------------------------------------------------------------------------------------
# Putting it together


def untrained_like(config: Config) -> Decoder:
    """The model a run started from: same config, initialised under the run's seed."""
    from octlm.model import Decoder

    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(config.train.seed)
        return Decoder(config.model).eval()


def training_counts(
    config: Config, tokenizer: Tokenizer, recorded: dict[str, str] | None = None
) -> tuple[np.ndarray | None, str | None]:
    """Training token counts `[V]` from the run's data cache (rebuilt if missing), or (None, why not).

    `recorded`: the checkpoint's SHA-256 table; when it names the training tokens, the files must match it.
    """
    from octlm.checkpoint import sha256_array

    try:
        from octlm.data import prepare_data

        data = prepare_data(config.data, config.model.vocab_size, progress=False)
    except (UserError, OSError) as error:
        return None, f"the training data could not be loaded ({error})"
    if data.tokenizer_sha256 != tokenizer.sha256:
        return None, "the data cache was made with another tokenizer than this run's"
    expected = (recorded or {}).get("train_tokens")
    if expected and sha256_array(data.train) != expected:
        return None, f"the training tokens in {data.folder} are not the ones this run was trained on"
    return token_counts(data.train, config.model.vocab_size), None


def checkpoint_meta(run_dir: Path) -> dict[str, Any]:
    """The run's checkpoint description (config.json: step, SHA-256 table), or {} when unreadable."""
    from octlm.checkpoint import META_FILE, find_checkpoint

    try:
        meta = json.loads((find_checkpoint(run_dir) / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def write_report(
    run_dir: str | Path,
    tokens: list[str] | None = None,
    ids: list[int] | None = None,
    top: int = DEFAULT_TOP,
    frequent: int = DEFAULT_FREQUENT,
    out: str | Path | None = None,
    export_web: str | Path | None = None,
    counts: np.ndarray | None = None,
) -> Path:
    """Write the report of a trained run into `out` (default `run_dir/report/`) and return that folder.

    `tokens` (texts, each one token) and `ids` choose the tokens whose neighbours are listed (default: token 0
    and the `frequent` most frequent). `counts` `[V]` skips finding the training data. `export_web` also
    copies embeddings.json there (e.g. web/public/data/embeddings.json).
    """
    from octlm.checkpoint import load_model

    run_dir = Path(run_dir)
    model, config, tokenizer = load_model(run_dir)  # a clear UserError for a folder that is not a run
    meta = checkpoint_meta(run_dir)
    chosen = None
    if tokens or ids:
        chosen = resolve_tokens(tokenizer, tokens or []) + list(ids or [])
    notes: list[str] = []
    if counts is None:
        counts, why = training_counts(config, tokenizer, meta.get("sha256"))
        if why:
            notes.append(f"No training token counts: {why}.")
    with torch.no_grad():
        report = analyze(
            model, untrained_like(config), tokenizer, counts, chosen, top, frequent, run_dir.name, notes
        )
    report["step"] = meta.get("step")
    folder = Path(out) if out is not None else run_dir / "report"
    return write_files(report, model, tokenizer, folder, export_web)


def write_files(
    report: dict[str, Any],
    model: Decoder,
    tokenizer: Tokenizer | None,
    folder: Path,
    export_web: str | Path | None = None,
) -> Path:
    """Figures, report.md, report.html, report.json and embeddings.json of an `analyze` result."""
    folder.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(report, folder)
    blocks = document(report, figures)
    (folder / "report.md").write_text(render_markdown(blocks, folder), encoding="utf-8")
    (folder / "report.html").write_text(render_html(blocks), encoding="utf-8")
    numbers = to_json(report)
    numbers["figures"] = {name: path.name for name, path in figures.items()}
    (folder / "report.json").write_text(json.dumps(numbers) + "\n", encoding="utf-8")
    web = folder / "embeddings.json"
    web.write_text(
        json.dumps(web_export(report, model, tokenizer), separators=(",", ":")) + "\n", encoding="utf-8"
    )
    if export_web is not None:
        target = Path(export_web)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(web, target)
    return folder


# ------------------------------------------------------------------------------------------------------------
# `octlm inspect`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="a run folder made by `octlm train`, e.g. runs/day1-learned")
    parser.add_argument(
        "--tokens",
        nargs="+",
        metavar="TEXT",
        default=None,
        help="tokens to inspect, by text (each must be one token), e.g. --tokens ' def' ' self'; "
        "in bash, $'\\n    ' gives a newline",
    )
    parser.add_argument(
        "--ids", nargs="+", type=int, metavar="ID", default=None, help="tokens to inspect, by id"
    )
    parser.add_argument(
        "--top",
        type=int,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"neighbours listed per token and position (default {DEFAULT_TOP})",
    )
    parser.add_argument(
        "--frequent",
        type=int,
        default=DEFAULT_FREQUENT,
        metavar="N",
        help=f"without --tokens/--ids: token 0 and the N most frequent (default {DEFAULT_FREQUENT})",
    )
    parser.add_argument("--out", default=None, help="report folder (default: RUN/report)")
    parser.add_argument(
        "--export-web",
        default=None,
        metavar="PATH",
        help="also copy embeddings.json here, e.g. web/public/data/embeddings.json",
    )


def run(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UserError(f"--top {args.top} must be at least 1")
    if args.frequent < 0:
        raise UserError(f"--frequent {args.frequent} must not be negative")
    folder = write_report(args.run, args.tokens, args.ids, args.top, args.frequent, args.out, args.export_web)
    numbers = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    labels = numbers["labels"]
    print(f"nearest tokens by cosine similarity (trained; run {numbers['run']}):")
    for i in numbers["tokens"]:
        nb = numbers["trained"]["neighbours"][str(i)]
        listed = ", ".join(f"{labels[str(j)]} {s:.2f}" for j, s in nb)
        print(f"  {labels[str(i)]:>16}  {listed}")
    print(numbers["positions"]["summary"])
    for note in numbers["notes"]:
        print(note)
    print(f"report: {folder / 'report.md'} (also report.html, report.json, embeddings.json)")
    if args.export_web:
        print(f"web data: {args.export_web}")
    return 0
