"""The report's figures, drawn from an `analyze` result (octlm/inspect/analysis.py), and the drawing helpers
and scheme colours every figure shares (each experiment's figure is beside its results, octlm/experiments).

matplotlib's Agg canvas only, never pyplot, so nothing global is touched and no display is needed. Also the
web site's data (`web_export`, embeddings.json): the rows of the report's model that its playground draws.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from octlm.inspect.analysis import INIT_STD, Tables, most_frequent, tables_of, to_json
from octlm.positions import scheme_names

if TYPE_CHECKING:
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder

WEB_TOKENS = 300  # rows exported to embeddings.json
WEB_SCHEMA = 1


def figure(width: float, height: float) -> Any:
    """A figure on the Agg canvas. Margins are set by hand: constrained layout doubles the drawing time."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def save(fig: Any, path: Path) -> Path:
    """`fig` written to `path` as a PNG; returns `path`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # glyphs a font lacks (rare token bytes) are not worth a warning
        fig.savefig(path, format="png")
    return path


def plot_similarity_maps(maps: list[tuple[str, np.ndarray]], path: Path) -> Path:
    """One panel per (title, `[T, T]` cosine similarity); diverging colours fixed to [-1, 1], a colour bar."""
    two_lines = any("\n" in title for title, _ in maps)  # a reference's title says what it stands in for
    fig = figure(3.4 * len(maps) + 1.0, 3.5 + 0.2 * two_lines)
    top = 0.87 if two_lines else 0.91
    fig.subplots_adjust(left=0.6 / fig.get_figwidth(), right=0.97, bottom=0.14, top=top, wspace=0.35)
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    image = None
    for ax, (title, sim) in zip(axes, maps, strict=True):
        image = ax.imshow(sim, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("position")
        ax.set_ylabel("position")
    fig.colorbar(image, ax=list(axes), label="cosine similarity", shrink=0.9)
    return save(fig, path)


def plot_pca(panels: list[tuple[str, np.ndarray, np.ndarray, list[str]]], path: Path) -> Path:
    """One panel per (title, coordinates `[N, 2]`, explained `[2]`, labels `[N]`): labelled 2-D points."""
    fig = figure(5.2 * len(panels), 5.0)
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
    return save(fig, path)


def plot_norms(
    panels: list[tuple[str, np.ndarray]], counts: np.ndarray | None, expected: float, path: Path
) -> Path:
    """Row norm `[V]` against training count `[V]` (log x), one panel per (title, norms).

    Tokens never seen in training (count 0) cannot sit on a log axis; they are drawn in red at x = 0.5. The
    dashed line is the expected norm of a freshly initialised row, INIT_STD·√C. Without counts, norms by id.
    """
    fig = figure(4.6 * len(panels), 3.8)
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
    return save(fig, path)


def plot_scheme(section: dict[str, Any], path: Path) -> Path | None:
    """What a scheme shows besides position vectors: the wavelength of each rotated pair, or the bias each
    head adds against distance (trained solid, untrained dotted). None for a scheme with neither."""
    if "frequencies" in section:
        return _plot_wavelengths(section["scheme"], section["frequencies"], section["context_length"], path)
    if "bias" in section:
        return _plot_bias(section["scheme"], section["bias"], path)
    return None


def _plot_wavelengths(scheme: str, frequencies: dict[str, Any], length: int, path: Path) -> Path:
    fig = figure(5.0, 3.4)
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.15, top=0.9)
    ax = fig.subplots()
    wavelength = frequencies["wavelength"]
    ax.semilogy(np.arange(len(wavelength)), wavelength, marker="o", markersize=3)
    ax.axhline(length, color="black", linestyle="--", linewidth=0.8, label=f"context ({length})")
    ax.set_xlabel("channel pair i")
    ax.set_ylabel("wavelength 2π/θ_i (positions)")
    ax.set_title(f"{scheme}: one rotation frequency per channel pair (none: not rotated)", fontsize=9)
    ax.legend(fontsize=7)
    return save(fig, path)


def _plot_bias(scheme: str, bias: dict[str, Any], path: Path) -> Path:
    """A scheme's bias `[H, T]` against distance per head, trained (solid) and untrained (dotted) if it
    moved."""
    fig = figure(5.4, 3.6)
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.14, top=0.9)
    ax = fig.subplots()
    distance = np.arange(bias["trained"].shape[1])
    for h, row in enumerate(bias["trained"]):
        line = ax.plot(distance, row, linewidth=1, label=f"head {h}")[0]
        if "untrained" in bias:
            ax.plot(distance, bias["untrained"][h], linewidth=0.8, linestyle=":", color=line.get_color())
    moved = " (dotted: untrained)" if "untrained" in bias else " (fixed)"
    ax.set_title(f"{scheme}: bias per head, seen from the last position{moved}", fontsize=9)
    ax.set_xlabel("distance (query - key)")
    ax.set_ylabel("added to the attention score")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, path)


def draw_figures(report: dict[str, Any], folder: Path) -> dict[str, Path]:
    """Every figure of `report` into `folder`; returns name -> path."""
    figures: dict[str, Path] = {}
    pos = report["positions"]
    scheme, width = pos["scheme"], report["model"]["d_model"]
    # The sinusoidal table beside a run's own maps, or alone for a run without position vectors, is a
    # reference, not the run's: its title says so (a RoPE run's positions.png once read as "sinusoidal").
    sinusoidal = (
        f"reference: the sinusoidal table\n(fixed, C = {width})",
        pos["sinusoidal_reference"]["similarity"],
    )
    if "untrained" in pos:  # position vectors that training changed
        maps = [
            (f"{scheme}, trained", pos["trained"]["similarity"]),
            (f"{scheme}, untrained", pos["untrained"]["similarity"]),
            sinusoidal,
        ]
    elif pos["has_vectors"] and not np.allclose(pos["trained"]["similarity"], sinusoidal[1], atol=1e-6):
        maps = [(f"{scheme} (fixed)", pos["trained"]["similarity"]), sinusoidal]
    elif pos["has_vectors"]:  # fixed vectors with the sinusoidal table's map: the sinusoidal scheme itself
        maps = [(f"{scheme} (fixed, C = {width})", sinusoidal[1])]
    else:
        reference = f"reference: the sinusoidal table, C = {width}\n({scheme} has no position vectors)"
        maps = [(reference, sinusoidal[1])]
    figures["positions"] = plot_similarity_maps(maps, folder / "positions.png")
    extra = plot_scheme(pos, folder / "position_scheme.png")
    if extra is not None:
        figures["position_scheme"] = extra
    if "mean" in (report.get("attention") or {}):  # octlm/inspect/attention.py
        figures["attention"] = plot_attention_distance(report["attention"]["mean"], folder / "attention.png")
    if "decay" in (report.get("gates") or {}):  # octlm/inspect/gates.py
        figures["gates"] = plot_gate_decay(report["gates"]["decay"], folder / "gates.png")

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
        report.get("source", {}).get("init_std", INIT_STD) * math.sqrt(width),
        folder / "norms.png",
    )
    return figures


# ------------------------------------------------------------------------------------------------------------
# The web site's data


def web_export(
    report: dict[str, Any], model: Decoder | Tables, tokenizer: Tokenizer | None, n: int = WEB_TOKENS
) -> dict[str, Any]:
    """`embeddings.json` for the web site: the most frequent tokens' rows and the position similarity map.

    Schema 1, as web/DATA.md defines it: {schema, run, position, d_model, tokens: [{id, text, count}],
    token_table: rows `[N, C]` rounded to 5 decimals, position_similarity: `[T, T]` or null (schemes without
    position vectors)}. Without training counts the tokens are the lowest ids and every count is 0 (the web
    page's check wants a number).
    """
    counts, tables = report["counts"], tables_of(model)
    table = tables.token_table  # [V, C]
    ranked = most_frequent(counts, n) if counts is not None else list(range(min(n, len(table))))
    pos = report["positions"]
    return {
        "schema": WEB_SCHEMA,
        "run": report["run"],
        "position": pos["scheme"],
        "d_model": table.shape[1],
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
# One colour per scheme, in every figure

# The built-in schemes' colours, fixed so that a reader learns them once: tab10 for the ten of 2024 (in their
# registration order then), and for the three that compute attention themselves three dark hues (tab20b's)
# that tab10 does not use.
BUILT_IN_COLOURS = {
    "learned": "#1f77b4",
    "sinusoidal": "#ff7f0e",
    "rope": "#2ca02c",
    "p-rope": "#d62728",
    "xpos": "#9467bd",
    "alibi": "#8c564b",
    "t5": "#e377c2",
    "fire": "#7f7f7f",
    "cope": "#bcbd22",
    "nope": "#17becf",
    "fox": "#393b79",
    "path": "#637939",
    "stick-breaking": "#7b4173",
}


def scheme_colour(scheme: str) -> str:
    """The colour of `scheme` in every figure (hex): a built-in's own (`BUILT_IN_COLOURS`); for a plug-in,
    tab20's lighter shades in registration order; black for a name no scheme has."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    if scheme in BUILT_IN_COLOURS:
        return BUILT_IN_COLOURS[scheme]
    plugins = [name for name in scheme_names() if name not in BUILT_IN_COLOURS]
    if scheme not in plugins:
        return "#000000"
    return to_hex(colormaps["tab20"](2 * (plugins.index(scheme) % 10) + 1))  # a built-in's hue, lighter


def plot_probe(
    layers: list[str], panels: list[tuple[str, list[float], list[float], float | None]], path: Path
) -> Path:
    """Probe scores against layer, one panel per (y label, scores, shuffled-label control, chance or None).

    The control is dashed; a dotted line marks chance (`octlm probe`, octlm/inspect/probe.py).
    """
    fig = figure(4.2 * len(panels), 3.6)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.2, top=0.9, wspace=0.28)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    x = np.arange(len(layers))
    for ax, (label, scores, control, chance) in zip(axes, panels, strict=True):
        ax.plot(x, scores, marker="o", markersize=4, label="probe")
        ax.plot(x, control, marker="o", markersize=3, linestyle="--", label="shuffled-label control")
        if chance is not None:
            ax.axhline(chance, color="grey", linestyle=":", linewidth=1, label=f"chance ({chance:.3f})")
        ax.set_xticks(x, layers, rotation=30, fontsize=8)
        ax.set_ylabel(label)
        ax.set_ylim(min(-0.05, min(control) - 0.05), 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("What each layer knows of a token's absolute position (held-out windows)", fontsize=10)
    return save(fig, path)


def plot_attention_distance(mean: np.ndarray, path: Path, title: str = "") -> Path:
    """Mean attention probability `[L, H, T]` against distance 0..T-1: one panel per layer, a line per head.

    Both axes are logarithmic (distance symlog, so distance 0 shows). The dashed grey line is uniform
    attention over each query's visible keys, mean over queries i >= d of 1 / (i + 1): falling with distance
    by itself, so a head is local where it falls faster (octlm/inspect/attention.py).
    """
    mean = np.asarray(mean, dtype=np.float64)  # report.json's nested lists too
    layers, heads, length = mean.shape
    fig = figure(3.6 * layers + 0.6, 3.4)
    fig.subplots_adjust(left=0.9 / fig.get_figwidth(), right=0.98, bottom=0.16, top=0.86, wspace=0.2)
    axes = fig.subplots(1, layers, squeeze=False, sharey=True)[0]
    distance = np.arange(length)
    uniform = np.cumsum((1.0 / np.arange(1, length + 1))[::-1])[::-1] / (length - distance)
    for layer, ax in enumerate(axes):
        for head in range(heads):
            ax.plot(distance, np.maximum(mean[layer, head], 1e-12), linewidth=1.2, label=f"head {head}")
        ax.plot(distance, uniform, color="grey", linestyle="--", linewidth=1, label="uniform")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_yscale("log")
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xlabel("distance i - j")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean attention probability")
    axes[-1].legend(fontsize=7, loc="best", ncol=1 + heads // 8)
    fig.suptitle(title or "Attention against distance (held-out windows)", fontsize=10)
    return save(fig, path)


def plot_gate_decay(decay: np.ndarray, path: Path) -> Path:
    """FoX's mean decay `[L, H, T]` (nats added to the score of the key d tokens back) against distance: one
    panel per gated layer (NaN rows, NoPE layers, are left out), a line per head (octlm/inspect/gates.py)."""
    decay = np.asarray(decay, dtype=np.float64)
    layers = [layer for layer in range(decay.shape[0]) if not np.isnan(decay[layer]).all()]
    fig = figure(3.6 * len(layers) + 0.6, 3.4)
    fig.subplots_adjust(left=0.9 / fig.get_figwidth(), right=0.98, bottom=0.16, top=0.86, wspace=0.2)
    axes = fig.subplots(1, len(layers), squeeze=False, sharey=True)[0]
    distance = np.arange(decay.shape[2])
    for layer, ax in zip(layers, axes, strict=True):
        for head, row in enumerate(decay[layer]):
            ax.plot(distance, row, linewidth=1.2, label=f"head {head}")
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xlabel("distance i - j")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("added to the score (nats)")
    axes[-1].legend(fontsize=7, loc="best", ncol=1 + decay.shape[1] // 8)
    fig.suptitle("FoX: the forget gates' mean decay against distance (held-out windows)", fontsize=10)
    return save(fig, path)


def plot_learning_curves(curves: list[tuple[str, str, list[int], list[float]]], path: Path) -> Path:
    """Validation bits per byte against training step, a line per (label, scheme, steps, bits per byte), one
    axes: the scheme's colour (`scheme_colour`), and runs of one scheme (seeds) told apart by line style."""
    fig = figure(6.4, 4.0)
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.13, top=0.92)
    ax = fig.subplots()
    seen: dict[str, int] = {}
    for label, scheme, steps, bpb in curves:
        nth = seen[scheme] = seen.get(scheme, -1) + 1
        ax.plot(
            steps,
            bpb,
            color=scheme_colour(scheme),
            linestyle=("-", "--", ":", "-.")[nth % 4],
            marker="o",
            markersize=3,
            linewidth=1.3,
            label=label,
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("validation bits per byte")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title("Learning curves", fontsize=10)
    return save(fig, path)
