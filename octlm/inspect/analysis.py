"""The numbers behind `octlm inspect`: what a token table and a position scheme learned, as plain data.

Pure functions on `[V, C]` token tables and `[T, C]` position tables (cosine neighbours, similarity maps,
PCA, row norms, training counts), `position_section` for each scheme, and `analyze`, which gathers every
number of the report into one JSON-able dict. What it looks at is a `Tables` value: an octlm Decoder's
(`tables_of`) or a pretrained Hugging Face model's (octlm/inspect/pretrained.py). Drawing and writing them is
octlm/inspect/figures.py, octlm/inspect/render.py and octlm/inspect/report.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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
from octlm.positions.formulas import sinusoidal_table, t5_bucket
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
MODEL_FIELDS = ("vocab_size", "d_model", "context_length", "n_layers", "n_heads", "position",
                "tie_embeddings")  # fmt: skip
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

    `model`: the report's description (MODEL_FIELDS). `scheme`: what ALiBi (slopes `[H]`) and T5 (bias
    `[buckets, H]`, buckets, max_distance) have instead of position vectors. `source`: where a pretrained model
    came from (None for an octlm run). Token labels come from the tokenizer `analyze` is given beside it.
    """

    token_table: np.ndarray  # [V, C] float64
    model: dict[str, Any]
    position_table: np.ndarray | None = None  # [T, C] learned position rows
    rope: dict[str, Any] | None = None  # inv_freq [P], head_dim, base, layout (+ more, and a note, from HF)
    scheme: dict[str, Any] = field(default_factory=dict)
    sinusoidal_base: float = 10000.0  # of the sinusoidal reference map
    source: dict[str, Any] | None = None


def _array(t: Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def tables_of(model: Decoder | Tables) -> Tables:
    """The tables of an octlm Decoder (a `Tables` is returned as it is)."""
    if isinstance(model, Tables):
        return model
    cfg, pos = model.config, model.positions
    description = {name: getattr(cfg, name) for name in MODEL_FIELDS}
    tables = Tables(_array(model.token_embedding.weight), description, sinusoidal_base=cfg.sinusoidal_base)
    if cfg.position == "learned":
        tables.position_table = _array(pos.table.weight)
    elif cfg.position == "rope":
        tables.rope = {"inv_freq": _array(pos.inv_freq), "head_dim": cfg.head_dim, "base": cfg.rope_base,
                       "layout": cfg.rope_layout, "rotary_dims": pos.rotary_dims}  # fmt: skip
        if pos.rotary_dims < cfg.head_dim:  # model.rope_fraction < 1, said as hf_inspect says it of GPT-NeoX
            tables.rope["note"] = (f" Only dimensions 0 to {pos.rotary_dims - 1} of each head's {cfg.head_dim} "
                                   f"rotate; the other {cfg.head_dim - pos.rotary_dims} carry no position.")  # fmt: skip
    elif cfg.position == "alibi":
        tables.scheme = {"slopes": _array(pos.slopes)}
    elif cfg.position == "t5":
        tables.scheme = {"bias": _array(pos.table.weight), "buckets": cfg.t5_buckets,
                         "max_distance": cfg.t5_max_distance}  # fmt: skip
    elif cfg.position not in SCHEME_SECTIONS:
        tables.scheme = registered_tables(model)
    return tables


def registered_tables(model: Decoder) -> dict[str, Any]:
    """What a scheme without a section of its own shows (its class's `shows`), read through the scheme's
    `vectors` `[T, C]`, `frequencies` `[P]` and `bias_by_distance` `[H, T]`, T = min(context, MAP_POSITIONS)."""
    scheme, length = model.positions, min(model.config.context_length, MAP_POSITIONS)
    shows = type(scheme).shows
    about = " ".join((type(scheme).__doc__ or "").split("\n\n")[0].split())
    out: dict[str, Any] = {"shows": list(shows), "about": about}
    with torch.no_grad():
        if "vectors" in shows:
            out["vectors"] = _array(scheme.vectors(length))
        if "frequencies" in shows:
            out["frequencies"] = _array(scheme.frequencies())
        if "bias" in shows:
            out["bias"] = _array(scheme.bias_by_distance(length))
    return out


# ------------------------------------------------------------------------------------------------------------
# Position schemes: vectors where a scheme has them, what it has instead where it does not


def position_section(model: Tables, initial: Tables, k: int = DEFAULT_TOP) -> dict[str, Any]:
    """Everything the report says about the position scheme of `model`, with `initial` (untrained) beside it.

    Learned and sinusoidal: probe positions' neighbours, the `[T, T]` similarity map, mean similarity by
    distance. RoPE: rotation frequency and wavelength per channel pair. ALiBi: slope per head and the bias
    at a few distances. T5: the learned bias per head and bucket. NoPE: nothing but the causal mask.
    The sinusoidal map of the same width is always included as a reference. Maps cover at most the first
    MAP_POSITIONS positions.
    """
    length, width, scheme = (model.model[key] for key in ("context_length", "d_model", "position"))
    mapped = min(length, MAP_POSITIONS)
    probes, distances = probe_positions(mapped), probe_distances(mapped)
    sinusoidal = sinusoidal_table(mapped, width + width % 2, model.sinusoidal_base)[:, :width]
    section: dict[str, Any] = {"scheme": scheme, "context_length": length, "probe_positions": probes,
                               "distances": distances,
                               "sinusoidal_reference": _vector_positions(sinusoidal, probes, distances, k),
                               "has_vectors": scheme in ("learned", "sinusoidal") or "vectors" in model.scheme}  # fmt: skip
    if mapped < length:
        section["map_positions"] = mapped
    SCHEME_SECTIONS.get(scheme, _registered_section)(model, initial, section, k)
    if mapped < length:
        section["summary"] += f" Position x position maps cover the first {mapped:,} positions."
    return section


def _learned_section(model: Tables, initial: Tables, section: dict[str, Any], k: int) -> None:
    probes, distances, rows = section["probe_positions"], section["distances"], MAP_POSITIONS
    for name, tables in (("trained", model), ("untrained", initial)):
        section[name] = _vector_positions(tables.position_table[:rows], probes, distances, k)
    section["summary"] = (
        f"A learned table of {section['context_length']} rows, one vector per position, added to the token "
        "vectors. Its similarity map is compared with the untrained table (random: no structure) and with the "
        "fixed sinusoidal table of the same width."
    )


def _sinusoidal_section(model: Tables, initial: Tables, section: dict[str, Any], k: int) -> None:
    section["trained"] = section["sinusoidal_reference"]
    section["summary"] = (
        f"The fixed sinusoidal table (base {model.sinusoidal_base:g}): nothing here is learned, so the "
        "trained and untrained models have the same position vectors. Similarity depends only on the "
        "distance t - s."
    )


def _rope_section(model: Tables, initial: Tables, section: dict[str, Any], k: int) -> None:
    rope, length = dict(model.rope or {}), section["context_length"]
    theta, note = rope.pop("inv_freq"), rope.pop("note", "")  # [P]; what a pretrained model adds
    wavelength = 2 * math.pi / theta
    slow = int((wavelength > length).sum())
    section["rope"] = {key: rope.pop(key) for key in ("head_dim", "base", "layout")}
    section["rope"] |= {"theta": theta, "wavelength": wavelength, "turns_in_context": length / wavelength,
                        "pairs_slower_than_context": slow} | rope  # fmt: skip
    section["summary"] = (
        "RoPE has no position vectors: every attention layer rotates each of the "
        f"{len(theta)} channel pairs of a head's queries and keys by position x θ_i. The fastest pair "
        f"turns once every {wavelength[0]:.1f} positions, the slowest once every {wavelength[-1]:,.0f}; "
        f"{slow} of {len(theta)} pairs do not complete one turn within the "
        f"{length}-token context. Nothing here is learned (base {section['rope']['base']:g}).{note}"
    )


def _alibi_section(model: Tables, initial: Tables, section: dict[str, Any], k: int) -> None:
    slopes = model.scheme["slopes"]  # [H]
    bias = {int(d): (-slopes * d) for d in section["distances"]}
    section["alibi"] = {"slopes": slopes, "bias_at_distance": bias}
    section["summary"] = (
        f"ALiBi has no position vectors: each of the {len(slopes)} heads subtracts slope x distance "
        f"from every attention score. Slopes run from {slopes[0]:g} to {slopes[-1]:g}; nothing here is "
        "learned."
    )


def _t5_section(model: Tables, initial: Tables, section: dict[str, Any], k: int) -> None:
    length, n_buckets = section["context_length"], model.scheme["buckets"]
    buckets = t5_bucket(-torch.arange(length), n_buckets, model.scheme["max_distance"]).numpy()  # [T]
    trained, untrained = model.scheme["bias"], initial.scheme["bias"]  # [buckets, H]
    reached = sorted(set(int(b) for b in buckets))
    spans = {b: [int(np.flatnonzero(buckets == b).min()), int(np.flatnonzero(buckets == b).max())]
             for b in reached}  # fmt: skip
    section["t5"] = {"buckets": n_buckets, "max_distance": model.scheme["max_distance"],
                     "bucket_of_distance": buckets, "bucket_distances": spans, "bias": trained,
                     "untrained_bias": untrained,
                     "bias_at_distance": {int(d): trained[buckets[d]] for d in section["distances"]}}  # fmt: skip
    section["summary"] = (
        f"T5 has no position vectors: it learns one number per head ({model.model['n_heads']}) and distance "
        f"bucket ({n_buckets}, {len(reached)} reached within {length} tokens), added to the attention "
        "scores. "
        f"Trained biases span {trained.min():.3f} to {trained.max():.3f}; untrained ones "
        f"{untrained.min():.3f} to {untrained.max():.3f}."
    )


def _nope_section(model: Tables, initial: Tables, section: dict[str, Any], k: int) -> None:
    section["summary"] = (
        "NoPE has no position parameters at all. The causal mask is its only source of order: a token "
        "sees how many tokens came before it only through what attention over them adds up to."
    )


# What `octlm inspect` shows of each scheme: fills in the section `position_section` started.
SCHEME_SECTIONS: dict[str, Callable[[Tables, Tables, dict[str, Any], int], None]] = {
    "learned": _learned_section,
    "sinusoidal": _sinusoidal_section,
    "rope": _rope_section,
    "alibi": _alibi_section,
    "t5": _t5_section,
    "nope": _nope_section,
}


def _registered_section(model: Tables, initial: Tables, section: dict[str, Any], k: int) -> None:
    """Any other registered scheme: what its class `shows` (registered_tables), trained beside untrained."""
    data, before, length = model.scheme, initial.scheme, section["context_length"]
    parts = [f"{section['scheme']}: {data['about']}"]
    if "vectors" in data:
        for name, tables in (("trained", data), ("untrained", before)):
            section[name] = _vector_positions(
                tables["vectors"], section["probe_positions"], section["distances"], k
            )
        parts.append(f"Its {len(data['vectors'])} position vectors are compared with the untrained ones.")
    if "frequencies" in data:
        theta = data["frequencies"]  # [P]; 0 where a pair is not rotated
        wavelength = np.divide(2 * math.pi, theta, out=np.full_like(theta, np.inf), where=theta > 0)
        section["frequencies"] = {
            "theta": theta,
            "wavelength": wavelength,
            "turns_in_context": length * theta / (2 * math.pi),
        }
        rotating = int((theta > 0).sum())
        fastest = f"; the fastest turns once every {wavelength.min():.1f} positions" if rotating else ""
        parts.append(f"{rotating} of {len(theta)} channel pairs rotate{fastest}.")
    if "bias" in data:
        trained, untrained = data["bias"], before["bias"]  # [H, T]: column d is distance d
        section["bias"] = {"trained": trained, "untrained": untrained,
                           "bias_at_distance": {int(d): trained[:, d] for d in section["distances"]}}  # fmt: skip
        spans = [
            f"{float(b.min()) + 0.0:.3f} to {float(b.max()) + 0.0:.3f}" for b in (trained, untrained)
        ]  # no -0.000
        parts.append(
            f"Bias against distance, seen from the last position: {spans[0]} trained, {spans[1]} untrained."
        )
    section["summary"] = " ".join(parts)


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
        return {"neighbours": {i: nb for i, nb in zip(ids, neighbours, strict=True)},
                "mean_top1_similarity": float(np.mean([nb[0][1] for nb in neighbours])) if k else None,
                "pca": {"ids": pca_ids, "coords": coords, "explained": explained},
                "norms": row_norms(table)}  # fmt: skip

    labels_needed = set(ids) | set(ranked[:PCA_TOKENS])
    report: dict[str, Any] = {"schema": REPORT_SCHEMA, "run": run, "model": dict(model.model)}
    if model.source is not None:
        report["source"] = model.source  # a pretrained model: where it came from
    report |= {"counts_available": counts is not None, "counts": counts, "tokens": ids, "k": k,
               "trained": view(trained_table), "untrained": view(initial_table),
               "positions": position_section(model, initial, k), "notes": notes}  # fmt: skip
    for table_view in (report["trained"], report["untrained"]):
        for nb in table_view["neighbours"].values():
            labels_needed |= {j for j, _ in nb}
    report["labels"] = {i: token_label(tokenizer, i) for i in sorted(labels_needed)}
    if counts is not None:
        report["unseen"] = unseen_rows(trained_table, initial_table, counts)
    return report


def to_json(value: Any, digits: int = DIGITS) -> Any:
    """report.json's values: `octlm.storage.jsonable.to_json` at the report's precision (`digits` decimals)."""
    return jsonable.to_json(value, digits)
