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
from dataclasses import astuple, dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from octlm.config import ModelConfig, TrainConfig
from octlm.config.ranges import SPANS
from octlm.errors import SEED_RANGE, UserError
from octlm.experiments import cells
from octlm.experiments.rows import Row
from octlm.experiments.settings import Presets, flag
from octlm.experiments.task_batches import (
    Counts,
    answer_loss,
    answer_tokens,
    batch_of,
    exact_matches,
    random_positions,
    token_counts,
)
from octlm.experiments.tasks import DEFAULT_TASKS, TASKS, Example, Task
from octlm.model.decoder import Decoder
from octlm.runtime import torch_threads
from octlm.signals import StopRequest, stopping
from octlm.training.loop import optimizer_step
from octlm.training.optimizer import make_optimizer

# The tasks whose cells cost most, run by default only on the rows a claim of `octlm.experiments.claims` reads:
# passkey-rope reads RoPE, ALiBi and NoPE on passkey, ruoss-rope RoPE + random on every task. Passkey's other
# rows were 56 % of the full 144-cell battery's cell time (docs/LOG.md) and change no verdict; --every-row
# runs them.
CLAIMED_ROWS: dict[str, tuple[str, ...]] = {"passkey": ("rope", "alibi", "nope", "rope+random")}


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
            "+ssmax for queries scaled by s log n, e.g. rope rope+random alibi+nope0 nope+ssmax "
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
    jobs: int = 0  # worker processes (0: one per CPU core)
    threads: int = 1  # torch threads per worker

    def task_rows(self, rows: Sequence[str]) -> dict[str, list[str]]:
        """The tasks run on fewer than all of `rows` (the grid's `task_rows`), each with the rows it runs on."""
        if self.every_row:
            return {}
        return {t: [r for r in rows if r in CLAIMED_ROWS[t]] for t in self.tasks if t in CLAIMED_ROWS}


DEFAULT_ROWS = (
    *("learned", "sinusoidal", "rope", "alibi", "t5", "fire", "cope", "nope", "rope+random"),
    *("fox", "path", "stick-breaking"),
)


def default_rows() -> list[str]:
    """The rows the paper claims need (`octlm.experiments.claims`) but `learned+random` and `nope+ssmax`,
    which --schemes adds: absolute, rotary, bias, CoPE, NoPE, RoPE + random and the 2025 schemes."""
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


def train_cell(cell: Cell) -> tuple[Decoder, dict[str, Any]]:
    """The model a cell trains until learned or capped, and how training went: the loss curve's ends, the
    held-out checks (step, exact match), `steps` taken, `learned_at` (None: the cap came first), seconds."""
    config, s = cell.model_config(), cell.settings
    torch.manual_seed(cell.seed)
    model = Decoder(config)
    train = TrainConfig(  # the schedule is the cap's, so stopping early is the capped run cut short
        steps=s.steps,
        batch_size=s.batch_size,
        lr=s.lr,
        min_lr=s.lr / 10,
        warmup_steps=max(1, s.steps // 20),
        seed=cell.seed,
    )
    optimizer = make_optimizer(model, train)
    rng = np.random.default_rng([cell.seed, 0])  # training examples; scoring draws from [seed, 1]
    generator = torch.Generator().manual_seed(cell.seed)
    held_out = held_out_set(cell)
    losses, checks, learned_at, started = [], [], None, time.perf_counter()

    def loss_of() -> Tensor:
        """The answer-masked loss of a fresh batch, its positions randomized for a `+random` row."""
        ids, targets, mask = training_batch(cell, rng)
        randomized = cell.row.randomized
        positions = random_positions(ids.shape[1], cell.position_range, generator) if randomized else None
        return answer_loss(model(ids, positions=positions)[0], targets, mask)

    def refuse(loss: float, grad_norm: float) -> UserError:
        return UserError(
            f"cell {cells.cell_name(cell.key)}: the training loss is {loss} (gradient norm {grad_norm}) at "
            f"step {len(losses) + 1}; training stopped. Lower the learning rate or train fewer --steps"
        )

    model.train()
    with StopRequest(announce=False) as stop:  # a signal: this step finishes, then the cell stops, unwritten
        for step in range(s.steps):
            losses.append(optimizer_step(model, optimizer, train, step, loss_of, refuse))
            if stop.requested:
                raise stopping(stop.signum)
            if (step + 1) % s.check_every == 0 or step + 1 == s.steps:
                checks.append((step + 1, held_out_exact(model, cell, held_out)))
                if checks[-1][1] >= s.target:
                    learned_at = step + 1
                    break
    model.eval()
    tail = losses[-max(1, len(losses) // 10) :]
    return model, {
        "train_seconds": time.perf_counter() - started,
        "first_loss": losses[0],
        "final_loss": sum(tail) / len(tail),
        "parameters": model.num_parameters(),
        "checks": checks,
        "steps": len(losses),
        "learned_at": learned_at,
    }


def training_batch(cell: Cell, rng: np.random.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """`Settings.batch_size` fresh examples, sizes uniform over the task's training range, as `batch_of`."""
    return batch_of(training_examples(cell, rng, cell.settings.batch_size))


def training_examples(cell: Cell, rng: np.random.Generator, n: int) -> list[Example]:
    """`n` examples drawn from `rng`, sizes uniform over the task's training range."""
    lo, hi = cell.task.train_sizes
    sizes = rng.integers(lo, hi + 1, n)
    examples = [cell.task.example(rng, int(size)) for size in sizes]
    if (longest := max(len(e.tokens) for e in examples)) > cell.train_tokens:
        raise ValueError(
            f"task {cell.task.name} drew an example of {longest} tokens, past its max_tokens "
            f"({cell.train_tokens}) at size {hi}: its max_tokens must bound every example"
        )
    return examples


def held_out_set(cell: Cell) -> list[Example]:
    """The fixed held-out set training is checked on: `Settings.examples` examples at the largest training
    size, where the tables judge "learned" (split over the depths as `score_cell` splits them), drawn from
    their own stream ([seed, 2]: neither training's nor scoring's)."""
    rng, size = np.random.default_rng([cell.seed, 2]), cell.task.train_sizes[1]
    n, depths = cell.settings.examples, cell.task.depths
    if not depths:
        return [cell.task.example(rng, size) for _ in range(n)]
    return [cell.task.example_at(rng, size, d) for d in depths for _ in range(max(1, n // len(depths)))]


def held_out_exact(model: Decoder, cell: Cell, held_out: list[Example]) -> float:
    """The share of `held_out` the model gets exactly right, in eval mode (back to training after); a
    `+random` row's positions from a generator of their own, the same at every check."""
    model.eval()
    counts = score(model, cell, held_out, torch.Generator().manual_seed(cell.seed + 2))
    model.train()
    assert counts is not None  # training sizes always fit the model
    return counts.hits / len(held_out)


@torch.no_grad()
def score(model: Decoder, cell: Cell, examples: list[Example], generator: torch.Generator) -> Counts | None:
    """What the model gets right of `examples`; None when its learned table has no row for them."""
    longest = max(len(e.tokens) for e in examples) - 1
    if (
        not cell.row.randomized
        and model.positions.max_length is not None
        and longest > model.positions.max_length
    ):
        return None
    hits = token_hits = tokens = 0
    for start in range(0, len(examples), 64):
        ids, targets, mask = batch_of(examples[start : start + 64])
        positions = (
            random_positions(ids.shape[1], cell.position_range, generator) if cell.row.randomized else None
        )
        logits, _ = model(ids, positions=positions)
        hits += int(exact_matches(logits, targets, mask).sum())
        right, scored = token_counts(logits, targets, mask)
        token_hits, tokens = token_hits + right, tokens + scored
    return Counts(hits, token_hits, tokens)


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
    steps the cell trained and the step it learned the task at (None: not within the cap)."""
    with torch_threads(cell.settings.threads):
        model, info = train_cell(cell)
        started = time.perf_counter()
        records = score_cell(model, cell)
    steps, learned_at = info.pop("steps"), info.pop("learned_at")
    records = [{**r, "steps": steps, "learned_at": learned_at} for r in records]
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
            f"{task} runs only on the rows a claim reads ({' '.join(CLAIMED_ROWS[task])}), none of them in "
            f"--schemes: add --every-row to run it on {' '.join(settings.schemes)}"
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
    return (
        f"{task} {row} seed {seed}: {learned} in "
        f"{info['train_seconds']:.0f} s (loss {info['first_loss']:.2f} -> {info['final_loss']:.3f}); "
        f"exact match {shown}"
    )
