"""The numbers behind `octlm inspect`: what a token table and a position scheme learned, as plain data.

Pure functions on `[V, C]` token tables and `[T, C]` position tables (cosine neighbours, similarity maps,
PCA, row norms, training counts), `position_section` for each scheme, and `analyze`, which gathers every
number of the report into one JSON-able dict. What it looks at is a `Tables` value: an octlm Decoder's
(`tables_of`) or a pretrained Hugging Face model's (octlm/inspect/pretrained.py). Drawing and writing them is
octlm/inspect/figures.py, octlm/inspect/render.py and octlm/inspect/report.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from octlm.errors import UserError
from octlm.inspect.similarity import (
    DEFAULT_TOP,
    Array,
    nearest_positions,
    nearest_tokens,
    pca_2d,
    probe_distances,
    probe_positions,
    row_norms,
    similarity_by_distance,
    similarity_matrix,
)
from octlm.positions.formulas import sinusoidal_table
from octlm.storage import jsonable

if TYPE_CHECKING:
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder

INIT_STD = 0.02  # Decoder._init_weights: every embedding row starts as N(0, 0.02²) per entry
DEFAULT_FREQUENT = 12  # frequent tokens shown by default, besides token 0
PCA_TOKENS = 60  # frequent tokens placed in the PCA figure
REPORT_SCHEMA = 1
DIGITS = 5
# report["model"]: what the report says of a model's shape
MODEL_FIELDS = (
    "vocab_size",
    "d_model",
    "context_length",
    "n_layers",
    "n_heads",
    "position",
    "tie_embeddings",
)
MAP_POSITIONS = 1024  # position x position maps cover at most this many positions (GPT-2's whole table)


def token_counts(tokens: np.ndarray, vocab_size: int, chunk: int = 1 << 24) -> np.ndarray:
    """How often each id below `vocab_size` occurs in the token stream `tokens` `[N]`: `[V]` int64."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), chunk):
        part = np.asarray(tokens[start : start + chunk]).astype(np.int64)
        if len(part) and (part.min() < 0 or part.max() >= vocab_size):
            bad = int(part.min() if part.min() < 0 else part.max())  # name the offending id, not the largest
            raise UserError(f"the token stream holds id {bad}, outside the vocabulary of {vocab_size}")
        counts += np.bincount(part, minlength=vocab_size)
    return counts


def most_frequent(counts: np.ndarray, n: int) -> list[int]:
    """The `n` ids with the highest counts (only ids seen at least once), most frequent first, ties by id."""
    order = np.argsort(-counts, kind="stable")
    return [int(i) for i in order[:n] if counts[i] > 0]


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
# What to inspect: the tables of a model, wherever it came from


@dataclass
class Tables:
    """What `octlm inspect` looks at in one model: its tables and its description, as plain arrays.

    `model`: the report's description (MODEL_FIELDS). `positions`: what the position scheme shows, in the
    terms of its class's `shows` (see `shown`), for an octlm run and a pretrained model alike. `source`: where
    a pretrained model came from (None for an octlm run). Token labels come from the tokenizer `analyze` is
    given beside it.
    """

    token_table: np.ndarray  # [V, C] float64
    model: dict[str, Any]
    positions: dict[str, Any] = field(default_factory=dict)
    sinusoidal_base: float = 10000.0  # of the sinusoidal reference map
    source: dict[str, Any] | None = None


def _array(t: Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def tables_of(model: Decoder | Tables) -> Tables:
    """The tables of an octlm Decoder (a `Tables` is returned as it is)."""
    if isinstance(model, Tables):
        return model
    cfg = model.config
    description = {name: getattr(cfg, name) for name in MODEL_FIELDS}
    return Tables(_array(model.token_embedding.weight), description, shown(model), cfg.sinusoidal_base)


def about(scheme_class: type) -> str:
    """A scheme class's docstring summary, its first paragraph on one line: what the report says it is."""
    return " ".join((scheme_class.__doc__ or "").split("\n\n")[0].split())


def shown(model: Decoder) -> dict[str, Any]:
    """What a model's position scheme shows (its class's `shows`), read through the scheme: `vectors` `[T, C]`,
    `frequencies` `[P]` (with the head size they rotate in) and `bias_by_distance` `[H, T]`, T = min(context,
    MAP_POSITIONS); with `shows` and `about`, the class's own description."""
    scheme, length = model.positions, min(model.config.context_length, MAP_POSITIONS)
    shows = type(scheme).shows
    out: dict[str, Any] = {"shows": list(shows), "about": about(type(scheme))}
    with torch.no_grad():
        if "vectors" in shows:
            out["vectors"] = _array(scheme.vectors(length))
        if "frequencies" in shows:
            out |= {"frequencies": _array(scheme.frequencies()), "head_dim": model.config.head_dim}
        if "bias" in shows:
            out["bias"] = _array(scheme.bias_by_distance(length))
    return out


# ------------------------------------------------------------------------------------------------------------
# Position schemes: what each shows, trained beside untrained


def position_section(model: Tables, initial: Tables, k: int = DEFAULT_TOP) -> dict[str, Any]:
    """Everything the report says about the position scheme of `model`, with `initial` (untrained) beside it:
    for each thing the scheme shows (see `shown`) its numbers and a sentence of the summary.

    Vectors: the probe positions' neighbours, the `[T, T]` similarity map and the mean similarity by distance.
    Frequencies: each rotated pair's θ, wavelength and turns within the context. Bias: the bias per head against
    distance. What training did not change is said to be fixed, and shown once. The sinusoidal map of the same
    width is always included as a reference. Maps cover at most the first MAP_POSITIONS positions.
    """
    length, width, scheme = (model.model[key] for key in ("context_length", "d_model", "position"))
    mapped = min(length, MAP_POSITIONS)
    probes, distances = probe_positions(mapped), probe_distances(mapped)
    sinusoidal = sinusoidal_table(mapped, width + width % 2, model.sinusoidal_base)[:, :width]
    now, before = model.positions, initial.positions
    section: dict[str, Any] = {
        "scheme": scheme,
        "context_length": length,
        "probe_positions": probes,
        "distances": distances,
        "shows": now["shows"],
        "sinusoidal_reference": _vector_positions(sinusoidal, probes, distances, k),
        "has_vectors": "vectors" in now,
    }
    parts = [now["about"] or f"{scheme}."]  # a class's docstring names it; one without says no more
    if "vectors" in now:
        parts.append(_vectors_part(section, now["vectors"], before["vectors"], k))
    if "frequencies" in now:
        parts.append(_frequencies_part(section, now["frequencies"], now["head_dim"], now.get("note", "")))
    if "bias" in now:
        parts.append(_bias_part(section, now["bias"], before["bias"]))
    if "gates" in now["shows"]:
        parts.append("Its forget gates are set by the text: the section Forget gates measures them on it.")
    if not now["shows"]:
        parts.append("It has no position parameters to show; attention by distance shows what it does.")
    if mapped < length:
        section["map_positions"] = mapped
        parts.append(f"Position x position maps cover the first {mapped:,} positions.")
    section["summary"] = " ".join(parts)
    return section


def _vectors_part(section: dict[str, Any], trained: Array, untrained: Array, k: int) -> str:
    """Neighbours and similarity maps of the vectors; the untrained ones too unless training left them as
    they were."""
    probes, distances = section["probe_positions"], section["distances"]
    section["trained"] = _vector_positions(trained, probes, distances, k)
    if np.array_equal(trained, untrained):
        return f"Its {len(trained)} position vectors are fixed: training does not change them."
    section["untrained"] = _vector_positions(untrained, probes, distances, k)
    return f"Its {len(trained)} position vectors are compared with the untrained ones."


def _frequencies_part(section: dict[str, Any], theta: np.ndarray, head_dim: int, note: str) -> str:
    """Each rotated pair's θ `[P]` (0: a pair that never turns), wavelength 2π/θ and turns within the
    context."""
    length = section["context_length"]
    wavelength = np.divide(2 * math.pi, theta, out=np.full_like(theta, np.inf), where=theta > 0)
    section["frequencies"] = {
        "theta": theta,
        "wavelength": wavelength,
        "turns_in_context": length * theta / (2 * math.pi),
    }
    turning = wavelength[theta > 0]
    text = f"{len(turning)} of its {len(theta)} channel pairs rotate"
    if len(turning):
        slow = int((turning > length).sum())
        text += (
            f": the fastest turns once every {turning.min():.1f} positions, the slowest once every "
            f"{turning.max():,.0f}; {slow} do not complete one turn within the {length}-token context"
        )
    if 2 * len(theta) < head_dim:
        text += (
            f". Only {2 * len(theta)} of each head's {head_dim} channels rotate; the other "
            f"{head_dim - 2 * len(theta)} carry no position"
        )
    return text + "." + note


def _bias_part(section: dict[str, Any], trained: np.ndarray, untrained: np.ndarray) -> str:
    """The bias `[H, T]` a query adds to the key d positions back (column d), trained and untrained."""
    section["bias"] = {
        "trained": trained,
        "bias_at_distance": {int(d): trained[:, d] for d in section["distances"]},
    }
    span = f"{float(trained.min()) + 0.0:.3f} to {float(trained.max()) + 0.0:.3f}"  # + 0.0: no -0.000
    if np.array_equal(trained, untrained):
        return (
            f"Bias against distance, seen from the last position: {span}, "
            "fixed (training does not change it)."
        )
    section["bias"]["untrained"] = untrained
    before = f"{float(untrained.min()) + 0.0:.3f} to {float(untrained.max()) + 0.0:.3f}"
    return f"Bias against distance, seen from the last position: {span} trained, {before} untrained."


def _vector_positions(table: Array, probes: list[int], distances: list[int], k: int) -> dict[str, Any]:
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


def resolve_tokens(tokenizer: Tokenizer | None, texts: Sequence[str]) -> list[int]:
    """The id of each text; each must encode to exactly one token (UserError otherwise, saying what it is)."""
    if texts and tokenizer is None:
        raise UserError("--tokens needs the model's tokenizer, and there is none; name the tokens with --ids")
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
    model: Decoder | Tables,
    initial: Decoder | Tables,
    tokenizer: Tokenizer | None,
    counts: np.ndarray | None,
    ids: Sequence[int] | None = None,
    k: int = DEFAULT_TOP,
    frequent: int = DEFAULT_FREQUENT,
    run: str = "",
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """All the numbers of the report for `model` and `initial` (same config, untrained, same seed).

    Either may be a Decoder or its `Tables`. `counts` `[V]`: training count of each token, or None when the
    training data could not be found (the frequent tokens are then the lowest ids, and the report says so).
    `ids`: the tokens whose neighbours are listed (default: token 0 and the `frequent` most frequent).
    """
    model, initial = tables_of(model), tables_of(initial)
    vocab = model.model["vocab_size"]
    notes = list(notes)
    trained_table, initial_table = model.token_table, initial.token_table  # [V, C]
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
    report: dict[str, Any] = {"schema": REPORT_SCHEMA, "run": run, "model": dict(model.model)}
    if model.source is not None:
        report["source"] = model.source  # a pretrained model: where it came from
    report |= {
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
    """report.json's values: `octlm.storage.jsonable.to_json` at the report's precision
    (`digits` decimals)."""
    return jsonable.to_json(value, digits)
