"""The task battery's results, collected from its cells: results.jsonl, results.md (the claims the battery
checks, then per task its tables of rows x test sizes, exact match and per token, beside its baselines),
claims.json, tasks.png (accuracy against size, a panel per task, the baselines drawn in), `<task>.png` for
each task scored by depth (passkey.png: depth x size per row) and tasks.json for the site (the claims too).

A table cell is the mean over seeds with the 95 % Wilson interval of all seeds' trials pooled (examples for
exact match, `baselines.interval`; per token the tokens' proportion in as many trials as examples,
`baselines.token_interval`); the best row of a column is bold. Under the rows,
what guessing (chance) and the best constant answer (majority) score (`octlm.experiments.baselines`); a score
whose interval does not clear the majority baseline is marked °. A row that did not learn the task at its
largest training size (`octlm.experiments.evidence`'s rule and threshold, the claims' own) is marked "not
learned" and its columns past the training sizes are bracketed: they say nothing about position. A row whose
learned table has no row for a size reads "no rows" there.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from octlm.experiments import baselines, cells, claims
from octlm.experiments.baselines import Baseline
from octlm.experiments.battery import AXES
from octlm.experiments.cells import CellsRun
from octlm.experiments.evidence import EXACT, LEARNED, PER_QUERY, PER_TOKEN, Battery, Inconclusive
from octlm.experiments.figures import STYLE_KEY, row_style
from octlm.experiments.tasks import TASKS, Passkey
from octlm.files import write_atomic
from octlm.inspect.figures import figure, save
from octlm.inspect.render import (
    Block,
    Code,
    Heading,
    Image,
    Inline,
    Paragraph,
    Strong,
    Table,
    render_markdown,
)
from octlm.storage.jsonable import to_json

RECORDS_FILE, MD_FILE, FIGURE_FILE, WEB_FILE = "results.jsonl", "results.md", "tasks.png", "tasks.json"
BELOW = "°"  # marks a score whose interval does not clear the majority baseline
FLOORS = ("chance", "majority")  # the baselines, as `baselines.Baseline` names them
# their reference lines in tasks.png (labels with "_": out of the per-panel legend, keyed once instead)
FLOOR_STYLE = {
    "chance": {"linestyle": "-.", "label": "_chance"},
    "majority": {"linestyle": "--", "label": "_majority"},
}


def heatmap_file(task: str) -> str:
    """The depth x size heatmaps of a task scored by depth (`Task.depths`): passkey.png."""
    return f"{task}.png"


def _by_depth(tasks: list[str]) -> list[str]:
    return [t for t in tasks if TASKS[t].depths]


def per_token_name(task: str) -> str:
    """ "per query" for MQAR (an answer token is one query), else "per token"."""
    return "per query" if task in PER_QUERY else PER_TOKEN


@dataclass
class Summary:
    """One row's numbers at one size (and depth) of one task, over every seed: per seed and pooled, in both
    metrics."""

    task: str
    scheme: str
    size: int
    depth: float | None
    accuracies: list[float] = field(default_factory=list)  # exact match, one per seed with rows at this size
    token_accuracies: list[float] = field(default_factory=list)  # per token, likewise
    hits: int = 0
    examples: int = 0
    token_hits: int = 0
    tokens: int = 0

    def seeds(self, metric: str = EXACT) -> list[float]:
        return self.accuracies if metric == EXACT else self.token_accuracies

    def mean_in(self, metric: str) -> float | None:
        values = self.seeds(metric)
        return sum(values) / len(values) if values else None

    def interval_in(self, metric: str) -> tuple[float, float] | None:
        """The pooled 95 % interval (per token: `baselines.token_interval`, n the examples); None: no rows."""
        if not self.examples:
            return None
        if metric == EXACT:
            return baselines.interval(self.hits, self.examples)
        return baselines.token_interval(self.token_hits, self.tokens, self.examples)

    @property
    def mean(self) -> float | None:
        return self.mean_in(EXACT)

    @property
    def interval(self) -> tuple[float, float] | None:
        return self.interval_in(EXACT)


def summarize(records: list[dict[str, Any]]) -> dict[tuple[str, str, int, float | None], Summary]:
    """Every (task, row, size, depth) over its seeds; a size with no rows has no accuracies."""
    out: dict[tuple[str, str, int, float | None], Summary] = {}
    for r in records:
        key = (r["task"], r["scheme"], r["size"], r["depth"])
        s = out.setdefault(key, Summary(*key))
        if r["hits"] is not None:
            s.accuracies.append(r["accuracy"])
            s.token_accuracies.append(r["token_hits"] / r["tokens"])
            s.hits += r["hits"]
            s.examples += r["examples"]
            s.token_hits += r["token_hits"]
            s.tokens += r["tokens"]
    return out


@dataclass(frozen=True)
class Reading:
    """What a task's tables are read beside: its baselines by size, the rows that did not learn it (and
    why), and each row's step of learning per seed (None: not within the cap)."""

    floors: dict[int, Baseline]
    not_learned: dict[str, str]
    learned_at: dict[str, list[int | None]]
    cap: int


def readings(
    records: list[dict[str, Any]], tasks: list[str], rows: list[str], factors: list[int], cap: int
) -> dict[str, Reading]:
    """Each task's `Reading`: baselines from `octlm.experiments.baselines` at its test sizes, "not learned"
    by `evidence.Battery.learned` (the claims' rule, at `LEARNED`)."""
    battery, out = Battery(records, LEARNED), {}
    for task in tasks:
        floors = {b.size: b for b in baselines.baselines([task], factors=tuple(factors))}
        not_learned, learned_at = {}, {}
        for row in rows:
            try:
                battery.learned(task, row)
            except Inconclusive as why:
                if str(why).startswith("not learned"):
                    not_learned[row] = str(why)
            at = {r["seed"]: r["learned_at"] for r in records if (r["task"], r["scheme"]) == (task, row)}
            learned_at[row] = [at[seed] for seed in sorted(at)]
        out[task] = Reading(floors, not_learned, learned_at, cap)
    return out


def _pct(value: float) -> str:
    """A baseline in %: whole numbers, "<1" for a small positive one, so a near-zero floor reads as one."""
    return "0" if value == 0 else "<1" if value < 0.005 else f"{100 * value:.0f}"


def _cell_text(
    s: Summary | None, metric: str, best: bool, floor: float | None = None, bracketed: bool = False
) -> Inline:
    if s is None or s.mean_in(metric) is None:
        return "no rows"
    low, high = s.interval_in(metric) or (0.0, 1.0)
    text = f"{100 * s.mean_in(metric):.0f} [{100 * low:.0f}, {100 * high:.0f}]"
    if floor is not None and not baselines.clears((low, high), floor):
        text += BELOW
    if bracketed:
        text = f"({text})"
    return Strong(text) if best else text


def _learned_at(steps: list[int | None]) -> str:
    return " / ".join("–" if s is None else str(s) for s in steps) or "–"


def task_table(
    task: str,
    rows: list[str],
    summary: dict,
    factors: list[int],
    metric: str = EXACT,
    reading: Reading | None = None,
) -> Table:
    """Rows x test sizes: the mean over seeds and the pooled 95 % interval, in %, the best bold; with a
    `reading`, the baselines as rows below, scores that do not clear the majority marked, rows not learned
    marked and their columns past the training sizes bracketed, and (exact match) the steps each seed learned
    the task at."""
    sizes = TASKS[task].test_sizes(tuple(factors))
    best = {}
    for size in sizes:
        means = [
            summary[(task, r, size, None)].mean_in(metric) for r in rows if (task, r, size, None) in summary
        ]
        best[size] = max((m for m in means if m is not None), default=None)
    trained = TASKS[task].train_sizes[1]
    headers = ["row"] + [
        f"{size}" + (" (trained)" if size <= trained else f" ({size / trained:g}x)") for size in sizes
    ]
    steps = reading is not None and metric == EXACT
    if steps:
        headers.append(f"learned at step, per seed (cap {reading.cap})")
    floor = (lambda size: getattr(reading.floors[size].majority, field_of(metric))) if reading else None
    body: list[list[Inline]] = []
    for row in rows:
        unlearned = reading is not None and row in reading.not_learned
        line: list[Inline] = [[Code(row), " not learned"] if unlearned else Code(row)]
        for size in sizes:
            s = summary.get((task, row, size, None))
            top = s is not None and s.mean_in(metric) is not None and best[size] is not None
            line.append(
                _cell_text(
                    s,
                    metric,
                    top and s.mean_in(metric) == best[size] > 0,
                    floor(size) if floor else None,
                    unlearned and size > trained,
                )
            )
        if steps:
            line.append(_learned_at(reading.learned_at.get(row, [])))
        body.append(line)
    if reading is not None:
        for name in FLOORS:
            values = [_pct(getattr(getattr(reading.floors[n], name), field_of(metric))) for n in sizes]
            body.append([f"*{name}*", *values, *([""] if steps else [])])
    return Table(headers, body, align="l" + "r" * (len(sizes) + steps))


def field_of(metric: str) -> str:
    """`baselines.Score`'s field for a metric."""
    return "exact" if metric == EXACT else "per_token"


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


def head_blocks(facts: dict[str, Any], tasks: list[str], folder: Path) -> list[Block]:
    """results.md's top: what a cell holds, how it was made, the figures."""
    blocks: list[Block] = [
        Heading("Task battery", 1),
        Paragraph(
            f"Per task, exact match of every answer token, then per token (per query for MQAR), in % (mean "
            f"over {len(facts['seeds'])} seed(s); in brackets the 95 % Wilson interval of all seeds' "
            f"{facts['examples']} examples per size pooled, per token as many trials as examples, since an "
            "example's tokens are not independent). The first column is "
            "the largest training size; the others lie past it. Best row per column in bold. Each cell "
            f"trained until {100 * facts['target']:g} % exact match on held-out examples at its largest "
            f"training size, checked every {facts['check_every']} steps, or {facts['steps']} steps."
        ),
        Paragraph(
            "Below the rows, the baselines: chance (every answer token guessed uniformly) and majority (the "
            f"best constant answer). {BELOW}: the interval does not clear the majority baseline. A row "
            f'"not learned" scores under {100 * LEARNED:g} % at the largest training size (exact match; per '
            "query for MQAR): its columns past it, in parentheses, say nothing about position, and the "
            "claims leave it out."
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
    return blocks


def task_blocks(
    summary: dict, tasks: list[str], rows: list[str], facts: dict[str, Any], read: dict[str, Reading]
) -> list[Block]:
    """Per task what it asks, its exact-match table and its per-token (per-query) table."""
    blocks: list[Block] = []
    for task in tasks:
        cls = TASKS[task]
        lo, hi = cls.train_sizes
        about = " ".join((cls.__doc__ or "").split())
        blocks += [
            Heading(task),
            Paragraph(f"{about} Trained on {lo}-{hi} {cls.counts}."),
            Paragraph(Strong("Exact match")),
            task_table(task, rows, summary, facts["factors"], EXACT, read[task]),
            Paragraph(Strong(per_token_name(task).capitalize())),
            task_table(task, rows, summary, facts["factors"], PER_TOKEN, read[task]),
        ]
        split = split_seeds(task, rows, summary, facts["factors"])
        if split:
            blocks.append(Paragraph(f"Seeds disagree by 50 points or more: {'; '.join(split)}."))
    return blocks


def write_results(
    out_dir: Path, records: list[dict], tasks: list[str], rows: list[str], facts: dict[str, Any]
) -> str:
    """results.md, tasks.png, the depth heatmaps, claims.json and tasks.json into `out_dir`; returns the
    Markdown."""
    summary = summarize(records)
    read = readings(records, tasks, rows, facts["factors"], facts["steps"])
    found = claims.findings("tasks", records)
    sizes = {task: TASKS[task].test_sizes(tuple(facts["factors"])) for task in tasks}
    panels = {
        task: (sizes[task], {row: [_mean(summary, task, row, n) for n in sizes[task]] for row in rows})
        for task in tasks
    }
    floors = {
        task: {name: [getattr(read[task].floors[n], name).exact for n in sizes[task]] for name in FLOORS}
        for task in tasks
    }
    plot_accuracy(panels, {t: TASKS[t].train_sizes[1] for t in tasks}, out_dir / FIGURE_FILE, floors)
    for task in _by_depth(tasks):
        depths = list(TASKS[task].depths)
        grids = {
            row: [[_mean(summary, task, row, n, d) for n in sizes[task]] for d in depths] for row in rows
        }
        top = max(b.majority.exact for b in read[task].floors.values())
        title = (
            f"{task}: answer depth (rows) x {TASKS[task].counts} (columns); the majority baseline at most "
            f"{100 * top:.2g} %"
        )
        plot_heatmaps(grids, depths, sizes[task], title, out_dir / heatmap_file(task))
    blocks = [
        *head_blocks(facts, tasks, out_dir),
        *claims.claims_blocks(found),
        *task_blocks(summary, tasks, rows, facts, read),
    ]
    markdown = render_markdown(blocks, out_dir)
    write_atomic(out_dir / MD_FILE, markdown.encode())
    claims.write_claims(out_dir, "tasks", found)
    web = web_json(summary, tasks, rows, facts, read, found)
    write_atomic(out_dir / WEB_FILE, (json.dumps(web, indent=1) + "\n").encode())
    return markdown


def web_json(
    summary: dict,
    tasks: list[str],
    rows: list[str],
    facts: dict[str, Any],
    read: dict[str, Reading],
    found: list[claims.Finding],
) -> dict[str, Any]:
    """What the site reads: each task's sizes and training range, its baselines and the rows that did not
    learn it, the rows, every summary with its seeds in both metrics, and the claims."""
    return to_json(
        {
            "schema": 1,
            "command": facts["command"],
            "seeds": facts["seeds"],
            "rows": rows,
            "learned": LEARNED,
            "tasks": {t: _task_json(t, facts["factors"], read[t]) for t in tasks},
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
                    "token_mean": s.mean_in(PER_TOKEN),
                    "token_interval": s.interval_in(PER_TOKEN),
                    "token_seeds": s.token_accuracies,
                    "tokens": s.tokens,
                }
                for s in summary.values()
            ],
            "claims": claims.claims_json(found),
        },
        4,
    )


def _task_json(task: str, factors: list[int], reading: Reading) -> dict[str, Any]:
    return {
        "train_sizes": list(TASKS[task].train_sizes),
        "counts": TASKS[task].counts,
        "test_sizes": TASKS[task].test_sizes(tuple(factors)),
        "per_token": per_token_name(task),
        "baselines": [
            {"size": b.size, **{name: vars(getattr(b, name)) for name in FLOORS}}
            for b in reading.floors.values()
        ],
        "not_learned": reading.not_learned,
        "learned_at": reading.learned_at,
    }


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
        **{k: grid[k] for k in ("seeds", "examples", "factors", "steps", "target", "check_every")},
        "missing": missing,
        "took": took,
    }
    markdown = write_results(out_dir, records, tasks, grid["schemes"], facts)
    if progress:
        print(
            f"wrote {out_dir}/{MD_FILE}, {FIGURE_FILE}, {WEB_FILE} from {len(found)} cell(s) in "
            f"{wall / 60:.1f} min"
        )
    return BatteryResult(out_dir, records, markdown, wall, missing)


# ------------------------------------------------------------------------------------------------------------
# The figures (the drawing helpers are octlm.inspect.figures')


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
    handles, labels = axes[0].get_legend_handles_labels()
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
