"""`octlm experiment tasks`: every task of `octlm.experiments.tasks` learned by a small decoder for each row
(a position scheme, with or without randomized positions or NoPE layers) and seed, then scored at the lengths
it trained on and past them.

A row is a registered scheme, optionally followed by `+random` (randomized positions, Ruoss et al., 2023:
every batch's position ids are a sorted random subset of 0 .. L - 1, L the longest test sequence, in training
and in scoring alike) and `+nopeK` (layer K uses no position signal, as Llama 4 and SmolLM3 do). Each cell
trains one model on examples drawn fresh every step, sizes uniform over the task's training range, with the
loss on the answer tokens only (`answer_loss`), reading `Example.inputs` (an answer MQAR withholds is read as
`<pad>`; the targets are the true tokens), until it has learned the task or reached the step cap
(`Settings.steps`, which also sets the learning-rate schedule, so a cell stopped early is the capped run up to
that step): every `Settings.check_every` steps it scores a fixed held-out set drawn at its largest training
size from its own stream, split over the depths as scoring splits them, and stops once exact match there
reaches `Settings.target` (`learned_at`: that step; None at the cap).

It then scores `Settings.examples` fresh examples at each test size, under the model's own argmax: exact
match (`hits`: every answer token and the `<eos>` right, `exact_matches`) and per token (`token_hits` of `tokens`: the answer tokens, the
`<eos>` left out as `octlm.experiments.baselines` leaves it out; one per query for MQAR). A model whose
learned table has no row for a size reads "no rows" there: no hits (None), its `examples` and `tokens`
counted, so that `octlm.experiments.evidence` counts them wrong. Passkey is scored at each of its depths too,
its examples split evenly over them. The grid is cells as the length experiment's (`octlm.experiments.cells`);
`octlm.experiments.battery_results` collects them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import astuple, dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch

from octlm.config import ModelConfig
from octlm.config.ranges import SPANS
from octlm.errors import SEED_RANGE, UserError
from octlm.experiments import cells
from octlm.experiments.battery_train import score, train_cell
from octlm.experiments.rows import Row
from octlm.experiments.settings import Presets, flag
from octlm.experiments.task_batches import Counts, answer_tokens
from octlm.experiments.tasks import DEFAULT_TASKS, TASKS, Example, Task
from octlm.model.decoder import Decoder
from octlm.runtime import torch_threads

# The tasks whose cells cost most, run by default only on the rows a claim of `octlm.experiments.claims` reads:
# passkey-rope reads RoPE, ALiBi and NoPE on passkey, ruoss-rope RoPE + random on every task. Passkey's other
# rows were 56 % of the full 144-cell battery's cell time (docs/LOG.md) and change no verdict; --every-row
# runs them.
# The extension rows (rope+ft4, rope+pi4, rope+yarn4: Chen et al.'s and Peng et al.'s claims) are fine-tuned on
# the passkey only, as those papers measure an extended window; --every-row runs them on every task.
EXTENSION_ROWS = ("rope+ft4", "rope+pi4", "rope+yarn4")
CLAIMED_ROWS: dict[str, tuple[str, ...]] = {
    "passkey": ("rope", "alibi", "nope", "rope+random", *EXTENSION_ROWS)
}


def holds(grid: dict[str, Any], key: cells.Key) -> bool:
    """Whether a battery grid holds the cell `key` (task, row, seed): every row of `schemes`, but on a task
    of its `task_rows` only those rows."""
    task, row, _ = key
    return row in grid.get("task_rows", {}).get(task, [row])


def rows_of(grid: dict[str, Any], task: str) -> list[str]:
    """The rows a battery grid runs `task` on, in the grid's order."""
    return [row for row in grid["schemes"] if holds(grid, (task, row, 0))]


# What a cell file holds (octlm.experiments.cells reads it through these before collecting).
class BatteryGrid(cells.Record):
    tasks: list[str]
    schemes: list[str]
    task_rows: dict[str, list[str]] = {}  # tasks run on fewer rows than `schemes` (absent in older cells)
    seeds: cells.Seeds
    steps: cells.Positive
    target: float
    check_every: cells.Positive
    batch_size: cells.Positive
    examples: cells.Positive
    model: dict[str, Any]
    factors: list[cells.Positive]
    extend_steps: cells.Positive = 1000  # absent in cells from before the extension rows


class BatteryRecord(cells.Record):
    task: str
    scheme: str
    seed: int
    size: cells.Positive
    depth: float | None
    examples: cells.Positive
    hits: cells.Count | None
    tokens: cells.Count
    token_hits: cells.Count | None
    status: str
    accuracy: cells.Number
    steps: cells.Positive
    learned_at: cells.Positive | None
    extended_at: cells.Count | None = None  # an extension row's: step 0 is before fine-tuning
    extend_budget: cells.Positive | None = None  # an extension row's --extend-steps


class BatteryInfo(cells.Record):
    train_seconds: float
    score_seconds: float
    first_loss: float
    final_loss: float


class BatteryFacts(cells.Facts):
    info: BatteryInfo


AXES = cells.Axes(
    ("task", "scheme", "seed"),
    "octlm experiment tasks",
    {
        "tasks": "--tasks",
        "schemes": "--schemes",
        "task_rows": "rows per task (--every-row)",
        "seeds": "seeds (--seed, --seeds)",
        "steps": "--steps",
        "target": "--target",
        "check_every": "--check-every",
        "batch_size": "--batch-size",
        "examples": "--examples",
        "model": "the model's shape",
        "factors": "test sizes (--factors)",
        "extend_steps": "--extend-steps",
    },
    grid=BatteryGrid,
    record=BatteryRecord,
    facts=BatteryFacts,
    keep=holds,
)
MAX_NOPE_LAYERS = 64
LONGEST = int(SPANS["model.context_length"].high)  # the most tokens a test size may ask a model to hold
# Past these a battery is a typo, not an experiment.
MAX_SEEDS, MAX_STEPS, MAX_EXAMPLES = 1000, 10**7, 10**6
QUICK = {
    "seeds": 1,
    "steps": 40,
    "check_every": 20,
    "extend_steps": 20,
    "examples": 16,
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64},
}


@dataclass(frozen=True)
class Settings:
    """What the battery trains and scores: rows, tasks, seeds, the model's shape and the training budget.

    `target` is when training stops: held-out exact match at the largest training size (`held_out_set`). The
    tables and claims call a seed learned at `evidence.LEARNED` (95 %) on fresh examples of that size, so the
    default target (99 %) sits above it, up to the fresh examples' noise; a lower one stops cells they call
    not learned."""

    presets: ClassVar[Presets] = {
        "quick": (QUICK, "a tiny model, a few steps, one seed: every task and row in a few minutes")
    }
    tasks: list[str] = flag(
        None,
        "--tasks",
        lambda: (
            f"tasks (default: {' '.join(DEFAULT_TASKS)}; also: "
            f"{' '.join(t for t in TASKS if t not in DEFAULT_TASKS)})"
        ),
        str,
        "TASK",
        factory=lambda: list(DEFAULT_TASKS),
    )
    schemes: list[str] = flag(  # rows: SCHEME[+random][+nopeK][+ssmax]
        None,
        "--schemes",
        lambda: (
            "rows: a position scheme, +random for randomized positions, +nopeK for a NoPE layer K, "
            "+ssmax for queries scaled by s log n, +ftF / +piF / +ntkF / +yarnF for RoPE fine-tuned to F x "
            "the largest training size (plainly, PI, NTK-aware, YaRN), e.g. rope rope+random alibi+nope0 "
            "nope+ssmax rope+pi4 "
            f"(default: {' '.join(default_rows())})"
        ),
        str,
        "ROW",
        factory=lambda: default_rows(),
    )
    seed: int = flag(0, "--seed", "the first seed (default 0)", range=SEED_RANGE)
    seeds: int = flag(3, "--seeds", "seeds per cell (default 3)", range=(1, MAX_SEEDS))  # seed, seed + 1, ...
    steps: int = flag(  # provisional: the cap the default battery is calibrated on
        2000,
        "--steps",
        "the most training steps per cell, which also set its learning-rate schedule (default 2000)",
        range=(1, MAX_STEPS),
    )
    target: float = flag(
        0.99,
        "--target",
        "a cell stops training once its held-out exact match at the largest training size reaches this "
        "(default 0.99)",
        float,
    )
    check_every: int = flag(
        200, "--check-every", "steps between held-out checks (default 200)", range=(1, MAX_STEPS)
    )
    batch_size: int = flag(32, "--batch-size", "examples per step", range=(1, 4096))
    lr: float = 3e-3
    examples: int = flag(  # scored per test size (per depth for passkey's grid)
        100, "--examples", "examples scored per test size (default 100)", range=(1, MAX_EXAMPLES)
    )
    factors: tuple[int, ...] = flag(  # test sizes: the largest training size times each
        (1, 2, 4, 8),
        "--factors",
        "test sizes: the largest training size times each (default 1 2 4 8)",
        metavar="F",
        parse=tuple,
    )
    model: dict[str, Any] = field(
        default_factory=lambda: {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 256}
    )
    every_row: bool = flag(
        False,
        "--every-row",
        lambda: (
            "run every task on every row; by default "
            + "; ".join(
                f"{t} runs only on the rows a claim reads ({' '.join(r)})" for t, r in CLAIMED_ROWS.items()
            )
            + ": its other cells change no verdict and cost most of the time"
        ),
        bool,
        recorded="changed",
    )
    extend_steps: int = flag(
        1000,
        "--extend-steps",
        "fine-tuning steps of an extension row (rope+pi4 ...) after it learned the task (default 1000)",
        range=(1, MAX_STEPS),
    )
    jobs: int = 0  # worker processes (0: one per CPU core)
    threads: int = 1  # torch threads per worker

    def task_rows(self, rows: Sequence[str]) -> dict[str, list[str]]:
        """The tasks run on fewer than all of `rows` (the grid's `task_rows`), each with the rows it runs on:
        a task of CLAIMED_ROWS those of its rows, every other task the rows that are not extension rows."""
        if self.every_row:
            return {}
        plain = [r for r in rows if "+" not in r or not Row.parse(r).extension]
        kept = {t: [r for r in rows if r in CLAIMED_ROWS.get(t, plain)] for t in self.tasks}
        return {t: kept_rows for t, kept_rows in kept.items() if kept_rows != list(rows)}


DEFAULT_ROWS = (
    *("learned", "sinusoidal", "rope", "alibi", "t5", "fire", "cope", "nope", "rope+random"),
    *("fox", "path", "stick-breaking", *EXTENSION_ROWS),
)


def default_rows() -> list[str]:
    """The rows the paper claims need (`octlm.experiments.claims`) but `learned+random` and `nope+ssmax`,
    which --schemes adds: absolute, rotary, bias, CoPE, NoPE, RoPE + random, the 2025 schemes, and RoPE fine-tuned
    to 4x plainly, with PI and with YaRN."""
    return list(DEFAULT_ROWS)


# ------------------------------------------------------------------------------------------------------------
# One cell: train a model on a task, score it


@dataclass(frozen=True)
class Cell:
    """What one cell trains: a task, a row, a seed, with the battery's settings."""

    task: type[Task]
    row: Row
    seed: int
    settings: Settings

    @property
    def key(self) -> cells.Key:
        return (self.task.name, self.row.spec, self.seed)

    @functools.cached_property
    def train_tokens(self) -> int:
        return self.task.max_tokens(self.task.train_sizes[1])

    @property
    def test_sizes(self) -> list[int]:
        return self.task.test_sizes(self.settings.factors)

    @functools.cached_property
    def position_range(self) -> int:
        """How far randomized positions reach: the longest test sequence (its whole input)."""
        return max(self.task.max_tokens(size) for size in self.test_sizes)

    @property
    def extend_size(self) -> int:
        """The largest size an extension row is fine-tuned on: its factor times the largest training size."""
        return self.task.train_sizes[1] * self.row.extend_factor

    def extended_config(self) -> ModelConfig:
        """An extension row's model after training: RoPE's frequencies rescaled (as the row says) from the
        training examples' longest to the extended ones' (`rope_factor`: their tokens' ratio)."""
        longest = self.task.max_tokens(self.extend_size)
        return replace(
            self.model_config(),
            context_length=longest,
            rope_scaling=self.row.rope_scaling,
            rope_factor=longest / self.train_tokens,
            rope_original_length=self.train_tokens,
        )

    def model_config(self) -> ModelConfig:
        rows = self.position_range if self.row.randomized else self.train_tokens
        scaling = "ssmax" if self.row.ssmax else "none"
        return ModelConfig(
            vocab_size=len(self.task.vocabulary()),
            context_length=rows,
            position=self.row.scheme,
            nope_layers=list(self.row.nope_layers),
            attention_scaling=scaling,
            **self.settings.model,
        )


def score_cell(model: Decoder, cell: Cell) -> list[dict[str, Any]]:
    """One record per test size: examples scored, exact matches, answer tokens right. A task scored by depth
    too (passkey) splits the examples evenly over its depths, a record per depth, and the size's record pools
    them."""
    rng = np.random.default_rng([cell.seed, 1])
    generator = torch.Generator().manual_seed(cell.seed + 1)
    base = {"task": cell.task.name, "scheme": cell.row.spec, "seed": cell.seed}
    n, depths = cell.settings.examples, cell.task.depths
    records = []
    for size in cell.test_sizes:
        if not depths:
            drawn = [cell.task.example(rng, size) for _ in range(n)]
            records.append(_record(base, size, None, drawn, score(model, cell, drawn, generator)))
            continue
        per = max(1, n // len(depths))
        by_depth = [[cell.task.example_at(rng, size, d) for _ in range(per)] for d in depths]
        found = [score(model, cell, drawn, generator) for drawn in by_depth]
        pooled = None if found[0] is None else Counts(*map(sum, zip(*map(astuple, found), strict=True)))
        records.append(_record(base, size, None, [e for drawn in by_depth for e in drawn], pooled))
        for depth, drawn, counts in zip(depths, by_depth, found, strict=True):
            records.append(_record(base, size, depth, drawn, counts))
    return records


def _record(
    base: dict[str, Any], size: int, depth: float | None, drawn: list[Example], counts: Counts | None
) -> dict:
    return {
        **base,
        "size": size,
        "depth": depth,
        "examples": len(drawn),
        "hits": None if counts is None else counts.hits,
        "tokens": answer_tokens(drawn),
        "token_hits": None if counts is None else counts.token_hits,
        "status": "ok" if counts is not None else "no rows",
        "accuracy": None if counts is None else counts.hits / len(drawn),
    }


def run_cell(cell: Cell) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train and score one cell (in a worker process, on the battery's thread count); every record names the
    steps the cell trained and the step it learned the task at (None: not within the cap); an extension row's
    the step its fine-tuning reached the target at the extended size (None: not within --extend-steps)."""
    with torch_threads(cell.settings.threads):
        model, info = train_cell(cell)
        started = time.perf_counter()
        records = score_cell(model, cell)
    steps, learned_at = info.pop("steps"), info.pop("learned_at")
    extended = (
        {"extended_at": info.pop("extended_at"), "extend_budget": cell.settings.extend_steps}
        if cell.row.extension
        else {}
    )
    records = [{**r, "steps": steps, "learned_at": learned_at, **extended} for r in records]
    return records, {**info, "score_seconds": time.perf_counter() - started}


# ------------------------------------------------------------------------------------------------------------
# The grid


def check_settings(settings: Settings) -> list[Row]:
    """The rows the settings name, or a UserError listing every problem (unknown task, scheme or row)."""
    problems = [TASKS.unknown(t) for t in settings.tasks if t not in TASKS]
    rows = []
    for spec in settings.schemes:
        try:
            rows.append(Row.parse(spec, settings.model["n_layers"]))
        except UserError as error:
            problems.append(str(error))
    if settings.seeds < 1:
        problems.append("at least one seed is needed")
    if not 0 < settings.target <= 1:
        problems.append(f"--target {settings.target:g} must be in (0, 1]: a share of the held-out examples")
    if not settings.factors or min(settings.factors) < 1:
        problems.append(
            f"test sizes below the training range: factors {list(settings.factors)} must be at least 1 "
            "(1 is the largest training size)"
        )
    tasks, factor = [TASKS[t] for t in settings.tasks if t in TASKS], max(settings.factors, default=1)
    # every unit of a size is a token at least: past LONGEST no model here holds the test
    if too_long := [t for t in tasks if t.train_sizes[1] * factor > LONGEST]:
        problems.append(
            f"--factors {factor} asks {', '.join(t.name for t in too_long)} for more than the {LONGEST:,} "
            f"tokens a model holds; use factors up to {min(LONGEST // t.train_sizes[1] for t in too_long):,}"
        )
    for task in (t for t in tasks if t not in too_long):
        largest = task.train_sizes[1] * factor
        if task.max_size is not None and largest > task.max_size:
            problems.append(
                f"{task.name} has sizes up to {task.max_size} {task.counts}; a factor of "
                f"{max(settings.factors)} asks for {largest}"
            )
        elif not problems:  # each row's model for this task, as its cells will build it
            problems += [
                f"row {row.spec!r} cannot learn {task.name}: {'; '.join(found)}"
                for row in rows
                if (found := Cell(task, row, 0, settings).model_config().problems())
            ]
    if not problems:
        problems += [
            (
                f"{task} runs only on the rows a claim reads ({' '.join(CLAIMED_ROWS[task])})"
                if task in CLAIMED_ROWS
                else f"{task} runs on no extension row (those are fine-tuned on the passkey)"
            )
            + f", none of them in --schemes: add --every-row to run it on {' '.join(settings.schemes)}"
            for task, kept in settings.task_rows(settings.schemes).items()
            if not kept
        ]
    if problems:
        raise UserError("; ".join(problems))
    return rows


def run_cells(
    settings: Settings,
    out_dir: Any,
    command: str,
    progress: bool = True,
    only: Sequence[str] = (),
    checked: list[Row] | None = None,
) -> cells.CellsRun:
    """Train and score the battery's cells (every task x row x seed, or the `--only TASK:SCHEME:SEED` ones),
    each written to `out_dir/cells/` as it finishes. `checked`: the rows `check_settings` gave, where the
    caller has checked the settings already."""
    rows = {row.spec: row for row in checked or check_settings(settings)}
    started, say = time.perf_counter(), cells.saying(progress)
    seeds = list(range(settings.seed, settings.seed + settings.seeds))
    values = [settings.tasks, list(rows), seeds]
    grid = {
        "tasks": settings.tasks,
        "schemes": list(rows),
        "task_rows": settings.task_rows(list(rows)),
        "seeds": seeds,
        "steps": settings.steps,
        "target": settings.target,
        "check_every": settings.check_every,
        "batch_size": settings.batch_size,
        "examples": settings.examples,
        "model": settings.model,
        "factors": list(settings.factors),
        "extend_steps": settings.extend_steps,
    }
    # the longest training examples first (passkey's cells take several times copy's), so that a slow cell
    # does not finish alone while the other workers wait
    jobs = sorted(
        cells.chosen(only, AXES, values, grid),
        key=lambda k: -TASKS[k[0]].max_tokens(TASKS[k[0]].train_sizes[1]),
    )
    workers = cells.workers_for(settings.jobs, len(jobs))
    fewer = "".join(f", {t} on {len(r)} of them (--every-row: all)" for t, r in grid["task_rows"].items())
    say(
        f"task battery: {len(jobs)} of {len(AXES.cells(grid))} cells "
        f"({len(settings.tasks)} tasks x {len(rows)} rows{fewer}, x {settings.seeds} seeds), each trained "
        f"until {settings.target:.0%} held out or {settings.steps} steps, {workers} worker process(es) -> "
        f"{out_dir}"
    )
    work = functools.partial(battery_cell, rows=rows, settings=settings)
    facts = {"command": command}
    return cells.run(
        out_dir, AXES, jobs, work, grid, facts, workers=workers, started=started, say=say, line=progress_line
    )


def battery_cell(key: cells.Key, rows: dict[str, Row], settings: Settings) -> tuple[list[dict], dict]:
    """One cell of the grid (a worker process's unit): `run_cell` of the task, row and seed `key`."""
    task, row, seed = key
    return run_cell(Cell(TASKS[task], rows[row], seed, settings))


def progress_line(key: cells.Key, records: list[dict], info: dict[str, Any]) -> str:
    """`task row seed k: learned at step n (or not learned in n steps) in .. s (loss a -> b); exact match`."""
    plain = [r for r in records if r["depth"] is None]
    shown = " ".join(
        f"{r['size']}:" + ("-" if r["accuracy"] is None else f"{r['accuracy']:.0%}") for r in plain
    )
    task, row, seed = key
    first = records[0]
    learned = (
        f"learned at step {first['learned_at']}"
        if first["learned_at"] is not None
        else f"not learned in {first['steps']} steps"
    )
    if "extended_at" in first and first["learned_at"] is not None:
        at = first["extended_at"]
        learned += f", {'not extended in' if at is None else 'extended at step'} {info.get('extend_steps') if at is None else at}"
    return (
        f"{task} {row} seed {seed}: {learned} in "
        f"{info['train_seconds']:.0f} s (loss {info['first_loss']:.2f} -> {info['final_loss']:.3f}); "
        f"exact match {shown}"
    )
