"""The task battery's figures (`octlm.experiments.battery_results` draws them from the collected records):
accuracy against size, a panel per task, and a task's depth x size heatmaps. The drawing helpers are
`octlm.inspect.figures`'."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from octlm.experiments.figures import STYLE_KEY, row_style
from octlm.inspect.figures import figure, save

FLOORS = ("chance", "majority")  # the baselines, as `baselines.Baseline` names them
# their reference lines in tasks.png (labels with "_": out of the per-panel legend, keyed once instead)
FLOOR_STYLE = {
    "chance": {"linestyle": "-.", "label": "_chance"},
    "majority": {"linestyle": "--", "label": "_majority"},
}


def plot_accuracy(
    panels: dict[str, tuple[list[int], dict[str, list[float | None]]]],
    trained: dict[str, int],
    path: Path,
    floors: dict[str, dict[str, list[float]]] | None = None,
) -> Path:
    """Accuracy against size (log x), a panel per task: `panels` task -> (sizes, row -> accuracy per size,
    None where the row cannot run). A row keeps its colour and line style in every panel, under one legend; a
    dotted line marks the largest training size; a row's colour is its scheme's (`scheme_colour`), its line
    style its options' (`row_style`). `floors` task -> baseline name ("chance", "majority") -> its value per
    size, drawn as thin black reference lines (flat where the baseline is), keyed in the legend."""
    from matplotlib.lines import Line2D

    columns = min(4, len(panels))
    n_rows = math.ceil(len(panels) / columns)
    fig = figure(3.6 * columns + 2.2, 0.6 + 3.0 * n_rows)
    fig.subplots_adjust(
        left=0.06,
        right=1 - 2.2 / (3.6 * columns + 2.2),
        bottom=0.12 / n_rows,
        top=1 - 0.2 / n_rows,
        wspace=0.25,
        hspace=0.45,
    )
    axes = fig.subplots(n_rows, columns, squeeze=False).ravel()
    for ax, (task, (sizes, lines)) in zip(axes, panels.items(), strict=False):
        for row, values in lines.items():
            color, (style, marker) = row_style(row)
            y = [np.nan if v is None else 100 * v for v in values]
            ax.plot(sizes, y, linestyle=style, marker=marker, ms=3, color=color, label=row)
        for name, values in (floors or {}).get(task, {}).items():
            ax.plot(sizes, [100 * v for v in values], color="black", linewidth=0.8, **FLOOR_STYLE[name])
        ax.axvline(trained[task], color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_ylim(-3, 103)
        ax.set_title(task, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    # every panel's rows, once each: a task run on fewer rows (passkey by default) may come first
    keyed = {}
    for ax in axes[: len(panels)]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            keyed.setdefault(label, handle)
    handles, labels = list(keyed.values()), list(keyed)
    if floors:
        handles += [Line2D([], [], color="black", linewidth=0.8, **FLOOR_STYLE[name]) for name in FLOORS]
        labels += [f"{name} baseline" for name in FLOORS]
    fig.legend(
        handles,
        labels,
        fontsize=7,
        loc="upper right",
        bbox_to_anchor=(0.995, 1 - 0.2 / n_rows),
        title=STYLE_KEY,
        title_fontsize=7,
    )
    fig.suptitle(
        "Exact match (%) against size: mean over seeds; dotted grey: the largest training size; black: the "
        "baselines",
        fontsize=10,
    )
    return save(fig, path)


def plot_heatmaps(
    grids: dict[str, list[list[float | None]]], depths: list[float], sizes: list[int], title: str, path: Path
) -> Path:
    """One depth x size heatmap of accuracy per row (passkey retrieval), all on one 0-100 % scale with its
    key; grey where the row cannot run at that size; `title` names the rows and columns."""
    from matplotlib import colormaps

    columns = min(5, len(grids))
    n_rows = math.ceil(len(grids) / columns)
    fig = figure(2.6 * columns + 1.0, 0.7 + 2.4 * n_rows)
    fig.subplots_adjust(
        left=0.07, right=0.9, bottom=0.1 / n_rows, top=1 - 0.22 / n_rows, wspace=0.35, hspace=0.5
    )
    axes = fig.subplots(n_rows, columns, squeeze=False).ravel()
    cmap = colormaps["viridis"].with_extremes(bad="#cccccc")
    image = None
    for ax, (row, grid) in zip(axes, grids.items(), strict=False):
        values = np.array([[np.nan if v is None else 100 * v for v in line] for line in grid])
        image = ax.imshow(values, cmap=cmap, vmin=0, vmax=100, aspect="auto", origin="upper")
        ax.set_xticks(range(len(sizes)), [str(n) for n in sizes], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths], fontsize=7)
        ax.set_title(row, fontsize=8)
    for ax in axes[len(grids) :]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, cax=fig.add_axes((0.92, 0.15, 0.015, 0.7)), label="exact match (%)")
    fig.suptitle(
        f"{title}; grey: the row cannot run there (no rows)",
        fontsize=10,
    )
    return save(fig, path)
