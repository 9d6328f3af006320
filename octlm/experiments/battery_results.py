"""The task battery's results, collected from its cells: results.jsonl, results.md (per task a table of rows x
test sizes), tasks.png (accuracy against size, a panel per task), `<task>.png` for each task scored by depth
(passkey.png: depth x size per row) and tasks.json for the site.

A table cell is the mean exact-match accuracy over seeds with the 95 % Wilson interval of all seeds' examples
pooled; the best row of a column is bold. Sizes past the training range are marked, and a row whose learned
table has no row for a size reads "no rows" there.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from octlm.experiments import cells
from octlm.experiments.battery import AXES, wilson_interval
from octlm.experiments.cells import CellsRun
from octlm.experiments.figures import STYLE_KEY, row_style
from octlm.experiments.tasks import TASKS, Passkey
from octlm.files import write_atomic
from octlm.inspect.figures import figure, save
from octlm.inspect.render import Block, Code, Heading, Image, Paragraph, Strong, Table, render_markdown
from octlm.storage.jsonable import to_json

RECORDS_FILE, MD_FILE, FIGURE_FILE, WEB_FILE = "results.jsonl", "results.md", "tasks.png", "tasks.json"


def heatmap_file(task: str) -> str:
    """The depth x size heatmaps of a task scored by depth (`Task.depths`): passkey.png."""
    return f"{task}.png"


def _by_depth(tasks: list[str]) -> list[str]:
    return [t for t in tasks if TASKS[t].depths]


@dataclass
class Summary:
    """One row's numbers at one size (and depth) of one task, over every seed."""

    task: str
    scheme: str
    size: int
    depth: float | None
    accuracies: list[float] = field(default_factory=list)  # one per seed with rows at this size
    hits: int = 0
    examples: int = 0

    @property
    def mean(self) -> float | None:
        return sum(self.accuracies) / len(self.accuracies) if self.accuracies else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.hits, self.examples) if self.examples else None


def summarize(records: list[dict[str, Any]]) -> dict[tuple[str, str, int, float | None], Summary]:
    """Every (task, row, size, depth) over its seeds; a size with no rows has no accuracies."""
    out: dict[tuple[str, str, int, float | None], Summary] = {}
    for r in records:
        key = (r["task"], r["scheme"], r["size"], r["depth"])
        s = out.setdefault(key, Summary(*key))
        if r["hits"] is not None:
            s.accuracies.append(r["accuracy"])
            s.hits += r["hits"]
            s.examples += r["examples"]
    return out


def _cell_text(s: Summary | None, best: bool) -> str | Strong:
    if s is None or s.mean is None:
        return "no rows"
    low, high = s.interval or (0.0, 1.0)
    text = f"{100 * s.mean:.0f} [{100 * low:.0f}, {100 * high:.0f}]"
    return Strong(text) if best else text


def task_table(task: str, rows: list[str], summary: dict, factors: list[int]) -> Table:
    """Rows x test sizes: mean exact match over seeds and the pooled 95 % interval, in %; the best bold."""
    sizes = TASKS[task].test_sizes(tuple(factors))
    best = {}
    for size in sizes:
        means = [summary[(task, r, size, None)].mean for r in rows if (task, r, size, None) in summary]
        best[size] = max((m for m in means if m is not None), default=None)
    trained = TASKS[task].train_sizes[1]
    headers = ["row"] + [
        f"{size}" + (" (trained)" if size <= trained else f" ({size / trained:g}x)") for size in sizes
    ]
    body = []
    for row in rows:
        cells_ = [
            _cell_text(
                s := summary.get((task, row, size, None)),
                s is not None and s.mean is not None and best[size] is not None and s.mean == best[size] > 0,
            )
            for size in sizes
        ]
        body.append([Code(row), *cells_])
    return Table(headers, body, align="l" + "r" * len(sizes))


def split_seeds(task: str, rows: list[str], summary: dict, factors: list[int], gap: float = 0.5) -> list[str]:
    """`row at size: a-b %` wherever the seeds' accuracies differ by at least `gap`: where a mean hides that
    one seed learned the task and another did not."""
    found = []
    for row in rows:
        for size in TASKS[task].test_sizes(tuple(factors)):
            s = summary.get((task, row, size, None))
            if s is not None and len(s.accuracies) > 1 and max(s.accuracies) - min(s.accuracies) >= gap:
                found.append(
                    f"{row} at {size}: {100 * min(s.accuracies):.0f}-{100 * max(s.accuracies):.0f} %"
                )
    return found


def results_blocks(
    summary: dict, tasks: list[str], rows: list[str], facts: dict[str, Any], folder: Path
) -> list[Block]:
    """results.md: how it was made, then per task what it asks and its table."""
    blocks: list[Block] = [
        Heading("Task battery", 1),
        Paragraph(
            f"Exact match of every answer token, in % (mean over {len(facts['seeds'])} seed(s); in brackets "
            f"the 95 % Wilson interval of all seeds' {facts['examples']} examples per size pooled). The first "
            "column is the largest training size; the others lie past it. Best row per column in bold."
        ),
        Paragraph(["Command: ", Code(facts["command"])]),
        Paragraph(facts["took"]),
        Image(folder / FIGURE_FILE, "Exact match against size, a panel per task, mean over seeds."),
    ]
    blocks += [
        Image(folder / heatmap_file(t), f"{t}: answer depth x {TASKS[t].counts}, a heatmap per row.")
        for t in _by_depth(tasks)
    ]
    if facts["missing"]:
        blocks.append(Paragraph(f"Missing cells, left out: {' '.join(facts['missing'])}."))
    for task in tasks:
        cls = TASKS[task]
        lo, hi = cls.train_sizes
        about = " ".join((cls.__doc__ or "").split())
        blocks += [
            Heading(task),
            Paragraph(f"{about} Trained on {lo}-{hi} {cls.counts}."),
            task_table(task, rows, summary, facts["factors"]),
        ]
        split = split_seeds(task, rows, summary, facts["factors"])
        if split:
            blocks.append(Paragraph(f"Seeds disagree by 50 points or more: {'; '.join(split)}."))
    return blocks


def write_results(
    out_dir: Path, records: list[dict], tasks: list[str], rows: list[str], facts: dict[str, Any]
) -> str:
    """results.md, tasks.png, the depth heatmaps and tasks.json into `out_dir`; returns the Markdown."""
    summary = summarize(records)
    sizes = {task: TASKS[task].test_sizes(tuple(facts["factors"])) for task in tasks}
    panels = {
        task: (sizes[task], {row: [_mean(summary, task, row, n) for n in sizes[task]] for row in rows})
        for task in tasks
    }
    plot_accuracy(panels, {t: TASKS[t].train_sizes[1] for t in tasks}, out_dir / FIGURE_FILE)
    for task in _by_depth(tasks):
        depths = list(TASKS[task].depths)
        grids = {
            row: [[_mean(summary, task, row, n, d) for n in sizes[task]] for d in depths] for row in rows
        }
        title = f"{task}: answer depth (rows) x {TASKS[task].counts} (columns)"
        plot_heatmaps(grids, depths, sizes[task], title, out_dir / heatmap_file(task))
    markdown = render_markdown(results_blocks(summary, tasks, rows, facts, out_dir), out_dir)
    write_atomic(out_dir / MD_FILE, markdown.encode())
    write_atomic(
        out_dir / WEB_FILE, (json.dumps(web_json(summary, tasks, rows, facts), indent=1) + "\n").encode()
    )
    return markdown


def web_json(summary: dict, tasks: list[str], rows: list[str], facts: dict[str, Any]) -> dict[str, Any]:
    """What the site reads: each task's sizes and training range, the rows, and every summary with its seeds."""
    return to_json(
        {
            "schema": 1,
            "command": facts["command"],
            "seeds": facts["seeds"],
            "rows": rows,
            "tasks": {
                t: {
                    "train_sizes": list(TASKS[t].train_sizes),
                    "counts": TASKS[t].counts,
                    "test_sizes": TASKS[t].test_sizes(tuple(facts["factors"])),
                }
                for t in tasks
            },
            "depths": list(Passkey.depths),
            "results": [
                {
                    "task": s.task,
                    "scheme": s.scheme,
                    "size": s.size,
                    "depth": s.depth,
                    "mean": s.mean,
                    "interval": s.interval,
                    "seeds": s.accuracies,
                    "examples": s.examples,
                }
                for s in summary.values()
            ],
        },
        4,
    )


def _mean(summary: dict, task: str, row: str, size: int, depth: float | None = None) -> float | None:
    s = summary.get((task, row, size, depth))
    return s.mean if s is not None else None


@dataclass
class BatteryResult:
    """What `collect` wrote."""

    out_dir: Path
    records: list[dict]
    markdown: str
    wall_seconds: float
    missing: list[str] = field(default_factory=list)


def collect(out_dir: Path, progress: bool = True, ran: CellsRun | None = None) -> BatteryResult:
    """results.jsonl, results.md, the figures and tasks.json from the cells in `out_dir/cells/` (whichever are
    there, or those `ran` wrote); they must share their settings, and the grid's missing cells are named."""
    found, grid, missing = cells.gathered(out_dir, AXES, ran.names if ran else None)
    records = [record for cell in found for record in cell.records]
    write_atomic(out_dir / RECORDS_FILE, "".join(json.dumps(r) + "\n" for r in records).encode())
    seconds = sum(c.facts["info"]["train_seconds"] + c.facts["info"]["score_seconds"] for c in found)
    wall = time.perf_counter() - ran.started if ran else seconds
    present = {cell.key[0] for cell in found}
    tasks = [t for t in grid["tasks"] if t in present]
    took = (
        f"{len(found)} cells in {wall / 60:.1f} min with {ran.workers} worker process(es), "
        f"{seconds / 60:.1f} min of cell time in all."
        if ran
        else f"Collected from {len(found)} cells run separately: {seconds / 60:.1f} min of cell time in all."
    )
    facts = {
        "command": found[0].facts["command"],
        "seeds": grid["seeds"],
        "examples": grid["examples"],
        "factors": grid["factors"],
        "missing": missing,
        "took": took,
    }
    markdown = write_results(out_dir, records, tasks, grid["schemes"], facts)
    if progress:
        print(
            f"wrote {out_dir}/{MD_FILE}, {FIGURE_FILE}, {WEB_FILE} from {len(found)} cell(s) in {wall / 60:.1f} min"
        )
    return BatteryResult(out_dir, records, markdown, wall, missing)


# ------------------------------------------------------------------------------------------------------------
# The figures (the drawing helpers are octlm.inspect.figures')


def plot_accuracy(
    panels: dict[str, tuple[list[int], dict[str, list[float | None]]]], trained: dict[str, int], path: Path
) -> Path:
    """Accuracy against size (log x), a panel per task: `panels` task -> (sizes, row -> accuracy per size, None
    where the row cannot run). A row keeps its colour and line style in every panel, under one legend; a dotted
    line marks the largest training size; a row's colour is its scheme's (`scheme_colour`), its line style its
    options' (`row_style`)."""
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
        ax.axvline(trained[task], color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_ylim(-3, 103)
        ax.set_title(task, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
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
        "Exact match (%) against size: mean over seeds; dotted: the largest training size", fontsize=10
    )
    return save(fig, path)


def plot_heatmaps(
    grids: dict[str, list[list[float | None]]], depths: list[float], sizes: list[int], title: str, path: Path
) -> Path:
    """One depth x size heatmap of accuracy per row (passkey retrieval), all on one 0-100 % scale with its key;
    grey where the row cannot run at that size; `title` names the rows and columns."""
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
