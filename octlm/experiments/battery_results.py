"""The task battery's results, collected from its cells: results.jsonl, results.md (the claims the battery
checks, then per task its tables of rows x test sizes, exact match and per token, beside its baselines),
claims.json, tasks.png (accuracy against size, a panel per task, the baselines drawn in), `<task>.png` for
each task scored by depth (passkey.png: depth x size per row) and tasks.json for the site (the claims too).

A table cell is the mean over seeds with the 95 % Wilson interval of all seeds' trials pooled (examples for
exact match, `baselines.interval`; per token the tokens' proportion in as many trials as examples,
`baselines.token_interval`), widened to hold the seeds' spread (`evidence.across_seeds`, the claims' own
interval); the best row of a column is bold. Under the rows,
what guessing (chance) and the best constant answer (majority) score (`octlm.experiments.baselines`); a score
whose interval does not clear the majority baseline is marked °. A seed that did not learn the task at its
largest training size (`octlm.experiments.evidence`'s rule and threshold, the claims' own) is left out of its
row; a row none of whose seeds learned is marked "not learned", every seed shown, and its columns past the
training sizes are bracketed: they say nothing about position. A row whose
learned table has no row for a size reads "no rows" there.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from octlm.errors import UserError
from octlm.experiments import baselines, cells, claims
from octlm.experiments.baselines import Baseline
from octlm.experiments.battery import AXES, rows_of
from octlm.experiments.battery_figures import FLOORS, plot_accuracy, plot_heatmaps
from octlm.experiments.cells import CellsRun
from octlm.experiments.evidence import (
    EXACT,
    LEARNED,
    PER_QUERY,
    PER_TOKEN,
    Battery,
    Inconclusive,
    across_seeds,
    learned_models,
)
from octlm.experiments.rows import Row
from octlm.experiments.tasks import TASKS, Passkey
from octlm.files import write_atomic
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
        """The 95 % interval, pooled (per token: `baselines.token_interval`, n the examples) and widened to
        the seeds' spread (`evidence.across_seeds`); None: no rows."""
        if not self.examples:
            return None
        if metric == EXACT:
            pooled = baselines.interval(self.hits, self.examples)
        else:
            pooled = baselines.token_interval(self.token_hits, self.tokens, self.examples)
        return across_seeds(pooled, self.seeds(metric))

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


def shown_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records the tables and figures show: of each row, the seeds that learned the task
    (`evidence.learned_models`, the claims' own rule), or every seed where none did (the row "not learned")."""
    models = learned_models(records)
    rows = {(task, row) for task, row, _ in models}
    return [
        r
        for r in records
        if (r["task"], r["scheme"], r["seed"]) in models or (r["task"], r["scheme"]) not in rows
    ]


@dataclass(frozen=True)
class Reading:
    """What a task's tables are read beside: its baselines by size, the rows that did not learn it (and
    why), and each row's step of learning per seed (None: not within the cap); an extension row's fine-tuning
    step at the target per seed (None: not within its budget, or not fine-tuned)."""

    floors: dict[int, Baseline]
    not_learned: dict[str, str]
    learned_at: dict[str, list[int | None]]
    cap: int
    extended_at: dict[str, list[int | None]] = field(default_factory=dict)


def readings(
    records: list[dict[str, Any]], tasks: list[str], rows: dict[str, list[str]], factors: list[int], cap: int
) -> dict[str, Reading]:
    """Each task's `Reading`: baselines from `octlm.experiments.baselines` at its test sizes, "not learned"
    by `evidence.Battery.learned` (the claims' rule, at `LEARNED`)."""
    battery, out = Battery(records, LEARNED), {}
    for task in tasks:
        floors = {b.size: b for b in baselines.baselines([task], factors=tuple(factors))}
        not_learned, learned_at, extended_at = {}, {}, {}
        for row in rows[task]:
            try:
                battery.learned(task, row)
            except Inconclusive as why:
                if str(why).startswith("not learned"):
                    not_learned[row] = str(why)
            found = [r for r in records if (r["task"], r["scheme"]) == (task, row)]
            at = {r["seed"]: r["learned_at"] for r in found}
            learned_at[row] = [at[seed] for seed in sorted(at)]
            if found and "extended_at" in found[0]:
                ext = {r["seed"]: r["extended_at"] for r in found}
                extended_at[row] = [ext[seed] for seed in sorted(ext)]
        out[task] = Reading(floors, not_learned, learned_at, cap, extended_at)
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
        headers.append(
            f"learned at step, per seed (cap {reading.cap})"
            + ("; extension rows: fine-tuning step at the target" if reading.extended_at else "")
        )
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
            extended = reading.extended_at.get(row)
            line.append(
                _learned_at(reading.learned_at.get(row, []))
                + ("" if extended is None else f"; extended at {_learned_at(extended)}")
            )
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
            "example's tokens are not independent, widened to hold the t-interval of the seeds' own scores "
            "where they spread more than the examples do). The first column is "
            "the largest training size; the others lie past it. Best row per column in bold. Each cell "
            f"trained until {100 * facts['target']:g} % exact match on held-out examples at its largest "
            f"training size, checked every {facts['check_every']} steps, or {facts['steps']} steps."
        ),
        Paragraph(
            "Below the rows, the baselines: chance (every answer token guessed uniformly) and majority (the "
            f"best constant answer). {BELOW}: the interval does not clear the majority baseline. A seed that "
            f"scores under {100 * LEARNED:g} % at the largest training size (exact match; per query for "
            "MQAR) did not learn the task: its numbers are left out of its row, which shows the seeds that "
            'did (– in the learned-at column: not learned). A row none of whose seeds learned is "not '
            'learned", every seed shown: its columns past the training size, in parentheses, say nothing '
            "about position, and the claims leave it out."
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
    summary: dict,
    tasks: list[str],
    rows: dict[str, list[str]],
    facts: dict[str, Any],
    read: dict[str, Reading],
    every: list[str] | None = None,
) -> list[Block]:
    """Per task what it asks, its exact-match table and its per-token (per-query) table."""
    blocks: list[Block] = []
    for task in tasks:
        cls = TASKS[task]
        lo, hi = cls.train_sizes
        about = " ".join((cls.__doc__ or "").split())
        blocks += [
            Heading(task),
            Paragraph(f"{about} Trained on {lo}-{hi} {cls.counts}.{_fewer(rows[task], every)}"),
            Paragraph(Strong("Exact match")),
            task_table(task, rows[task], summary, facts["factors"], EXACT, read[task]),
            Paragraph(Strong(per_token_name(task).capitalize())),
            task_table(task, rows[task], summary, facts["factors"], PER_TOKEN, read[task]),
        ]
        split = split_seeds(task, rows[task], summary, facts["factors"])
        if split:
            blocks.append(Paragraph(f"Seeds disagree by 50 points or more: {'; '.join(split)}."))
    return blocks


def _extension_row(row: str) -> bool:
    """Whether `row` is fine-tuned to a longer size (`rope+pi4`); a row this process cannot parse is not."""
    try:
        return Row.parse(row).extension is not None
    except UserError:
        return False


def _fewer(rows: list[str], every: list[str] | None) -> str:
    """A sentence naming the rows a task was not run on, or nothing when it ran on all."""
    left = [row for row in every or [] if row not in rows]
    extensions = [row for row in left if _extension_row(row)]
    others = [row for row in left if row not in extensions]
    said = (
        f" Run only on the rows a claim reads; not on {', '.join(others)} (`--every-row` runs them: they change "
        "no verdict and cost most of a battery's time)."
        if others
        else ""
    )
    if extensions:
        said += (
            f" Not run on the extension rows ({', '.join(extensions)}): they are fine-tuned on the passkey, as "
            "the papers measure an extended window (`--every-row` runs them)."
        )
    return said


def write_results(
    out_dir: Path,
    records: list[dict],
    tasks: list[str],
    rows: dict[str, list[str]],
    facts: dict[str, Any],
    every: list[str] | None = None,
) -> str:
    """results.md, tasks.png, the depth heatmaps, claims.json and tasks.json into `out_dir`; returns the
    Markdown. `rows`: each task's rows; `every`: all the grid's rows (the tasks run on fewer name the rest)."""
    summary = summarize(shown_records(records))
    read = readings(records, tasks, rows, facts["factors"], facts["steps"])
    found = claims.findings("tasks", records)
    sizes = {task: TASKS[task].test_sizes(tuple(facts["factors"])) for task in tasks}
    panels = {
        task: (sizes[task], {row: [_mean(summary, task, row, n) for n in sizes[task]] for row in rows[task]})
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
            row: [[_mean(summary, task, row, n, d) for n in sizes[task]] for d in depths]
            for row in rows[task]
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
        *task_blocks(summary, tasks, rows, facts, read, every),
    ]
    markdown = render_markdown(blocks, out_dir)
    write_atomic(out_dir / MD_FILE, markdown.encode())
    claims.write_claims(out_dir, "tasks", found)
    web = web_json(summary, tasks, rows, facts, read, found, every)
    write_atomic(out_dir / WEB_FILE, (json.dumps(web, indent=1) + "\n").encode())
    return markdown


def web_json(
    summary: dict,
    tasks: list[str],
    rows: dict[str, list[str]],
    facts: dict[str, Any],
    read: dict[str, Reading],
    found: list[claims.Finding],
    every: list[str] | None = None,
) -> dict[str, Any]:
    """What the site reads: each task's sizes, training range and rows, its baselines and the rows that did
    not learn it, all the rows, every summary with its seeds in both metrics, and the claims."""
    return to_json(
        {
            "schema": 1,
            "command": facts["command"],
            "seeds": facts["seeds"],
            "rows": every or list(dict.fromkeys(r for t in tasks for r in rows[t])),
            "learned": LEARNED,
            "tasks": {t: _task_json(t, facts["factors"], read[t], rows[t]) for t in tasks},
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


def _task_json(task: str, factors: list[int], reading: Reading, rows: list[str]) -> dict[str, Any]:
    return {
        "rows": rows,
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
        "extended_at": reading.extended_at,
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


def cell_seconds(info: dict[str, Any]) -> float:
    """A cell's time: training, an extension row's fine-tuning, scoring."""
    return info["train_seconds"] + info.get("extend_seconds", 0.0) + info["score_seconds"]


def cell_records(cell: cells.Cell) -> list[dict[str, Any]]:
    """A cell's records; an extension row's with its fine-tuning checks (`extend_checks`, from how the cell
    ran), which the claims read step by step."""
    checks = cell.facts["info"].get("extend_checks")
    if checks is None:
        return cell.records
    return [r | {"extend_checks": checks} if "extended_at" in r else r for r in cell.records]


def collect(out_dir: Path, progress: bool = True, ran: CellsRun | None = None) -> BatteryResult:
    """results.jsonl, results.md, the figures and tasks.json from the cells in `out_dir/cells/` (whichever are
    there, or those `ran` wrote); they must share their settings, and the grid's missing cells are named."""
    found, grid, missing = cells.gathered(out_dir, AXES, ran.names if ran else None)
    records = [record for cell in found for record in cell_records(cell)]
    write_atomic(out_dir / RECORDS_FILE, "".join(json.dumps(r) + "\n" for r in records).encode())
    seconds = sum(cell_seconds(c.facts["info"]) for c in found)
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
    rows = {task: rows_of(grid, task) for task in tasks}
    markdown = write_results(out_dir, records, tasks, rows, facts, grid["schemes"])
    if progress:
        print(
            f"wrote {out_dir}/{MD_FILE}, {FIGURE_FILE}, {WEB_FILE} from {len(found)} cell(s) in "
            f"{wall / 60:.1f} min"
        )
    return BatteryResult(out_dir, records, markdown, wall, missing)
