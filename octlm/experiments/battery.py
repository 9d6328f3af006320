"""`octlm experiment tasks`: every task of `octlm.experiments.tasks` learned by a small decoder for each row (a
position scheme, with or without randomized positions or NoPE layers) and seed, then scored at the lengths it
trained on and past them.

A row is a registered scheme, optionally followed by `+random` (randomized positions, Ruoss et al., 2023: every
batch's position ids are a sorted random subset of 0 .. L - 1, L the longest test sequence, in training and in
scoring alike) and `+nopeK` (layer K uses no position signal, as Llama 4 and SmolLM3 do). Each cell trains one
model on examples drawn fresh every step, sizes uniform over the task's training range, with the loss on the
answer tokens only (`answer_loss`), then scores `Settings.examples` fresh examples at each test size: exact match
of every answer token under the model's own argmax (`exact_matches`; greedy decoding would give the same verdict,
as a wrong token is wrong in both). A model whose learned table has no row for a size reads "no rows" there.
Passkey is scored at each of its depths too, its examples split evenly over them. The grid is cells as the length experiment's
(`octlm.experiments.cells`); `octlm.experiments.battery_results` collects them.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from octlm.config import ModelConfig, TrainConfig
from octlm.errors import SEED_RANGE, UserError
from octlm.experiments import cells
from octlm.experiments.rows import Row
from octlm.experiments.settings import Presets, flag
from octlm.experiments.tasks import PAD, TASKS, Example, Task
from octlm.model.decoder import Decoder
from octlm.positions import SCHEMES, table_order
from octlm.runtime import torch_threads
from octlm.signals import StopRequest, stopping
from octlm.training.loop import optimizer_step
from octlm.training.optimizer import make_optimizer


# What a cell file holds (octlm.experiments.cells reads it through these before collecting).
class BatteryGrid(cells.Record):
    tasks: list[str]
    schemes: list[str]
    seeds: cells.Seeds
    steps: cells.Positive
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
    status: str
    accuracy: cells.Number


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
        "seeds": "seeds (--seed, --seeds)",
        "steps": "--steps",
        "batch_size": "--batch-size",
        "examples": "--examples",
        "model": "the model's shape",
        "factors": "test sizes (--factors)",
    },
    grid=BatteryGrid,
    record=BatteryRecord,
    facts=BatteryFacts,
)
MAX_NOPE_LAYERS = 64
# Past these a battery is a typo, not an experiment.
MAX_SEEDS, MAX_STEPS, MAX_EXAMPLES = 1000, 10**7, 10**6
QUICK = {
    "seeds": 1,
    "steps": 40,
    "examples": 16,
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64},
}


@dataclass(frozen=True)
class Settings:
    """What the battery trains and scores: rows, tasks, seeds, the model's shape and the training budget."""

    presets: ClassVar[Presets] = {
        "quick": (QUICK, "a tiny model, a few steps, one seed: every task and row in a few minutes")
    }
    tasks: list[str] = flag(
        None,
        "--tasks",
        lambda: f"tasks (default: every one: {' '.join(TASKS)})",
        str,
        "TASK",
        factory=lambda: list(TASKS),
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
    steps: int = flag(600, "--steps", "training steps per cell", range=(1, MAX_STEPS))
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
    jobs: int = 0  # worker processes (0: one per CPU core)
    threads: int = 1  # torch threads per worker


def default_rows() -> list[str]:
    """Every registered scheme, then RoPE with its first layer NoPE, then randomized positions for a learned
    table and RoPE (two of the schemes Ruoss et al. test), then scalable softmax on RoPE and NoPE (add more
    rows with --schemes)."""
    return [
        *table_order(list(SCHEMES)),
        "rope+nope0",
        "learned+random",
        "rope+random",
        "rope+ssmax",
        "nope+ssmax",
    ]


# ------------------------------------------------------------------------------------------------------------
# Batches, the answer-masked loss and the score


def batch_of(examples: Sequence[Example]) -> tuple[Tensor, Tensor, Tensor]:
    """Inputs `[B, T]`, next-token targets `[B, T]` and the answer mask `[B, T]` of padded examples: input t
    is token t, target t is token t + 1, scored where that token answers. Padding (`<pad>`) comes after each
    example's `<eos>`, so a causal model never reads it before an answer."""
    length = max(len(e.tokens) for e in examples) - 1
    ids = torch.full((len(examples), length + 1), PAD, dtype=torch.long)
    mask = torch.zeros(len(examples), length + 1, dtype=torch.bool)
    for row, example in enumerate(examples):
        ids[row, : len(example.tokens)] = torch.tensor(example.tokens)
        mask[row, : len(example.answer)] = torch.tensor(example.answer)
    return ids[:, :-1], ids[:, 1:], mask[:, 1:]


def answer_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Mean cross-entropy of `logits` `[B, T, V]` against `targets` `[B, T]` over the answer tokens (`mask`)."""
    return F.cross_entropy(logits[mask].float(), targets[mask])


def exact_matches(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """`[B]` bool: every answer token of the example is the model's argmax."""
    wrong = (logits.argmax(-1) != targets) & mask
    return ~wrong.any(dim=-1)


def random_positions(length: int, limit: int, generator: torch.Generator) -> Tensor:
    """A sorted random subset of 0 .. limit - 1 of `length` positions (Ruoss et al.'s randomized positions)."""
    if length > limit:
        raise UserError(f"randomized positions: {length} positions do not fit in 0 .. {limit - 1}")
    return torch.randperm(limit, generator=generator)[:length].sort().values


def wilson_interval(hits: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95 % Wilson score interval of a binomial proportion `hits / n` (`z` the normal quantile)."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


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
    """The model a cell trains, and how training went (the loss curve's ends, seconds)."""
    config, s = cell.model_config(), cell.settings
    torch.manual_seed(cell.seed)
    model = Decoder(config)
    train = TrainConfig(
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
    losses, started = [], time.perf_counter()

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
    model.eval()
    tail = losses[-max(1, len(losses) // 10) :]
    return model, {
        "train_seconds": time.perf_counter() - started,
        "first_loss": losses[0],
        "final_loss": sum(tail) / len(tail),
        "parameters": model.num_parameters(),
    }


def training_batch(cell: Cell, rng: np.random.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """`Settings.batch_size` fresh examples, sizes uniform over the task's training range, as `batch_of`."""
    lo, hi = cell.task.train_sizes
    sizes = rng.integers(lo, hi + 1, cell.settings.batch_size)
    examples = [cell.task.example(rng, int(n)) for n in sizes]
    if (longest := max(len(e.tokens) for e in examples)) > cell.train_tokens:
        raise ValueError(
            f"task {cell.task.name} drew an example of {longest} tokens, past its max_tokens "
            f"({cell.train_tokens}) at size {hi}: its max_tokens must bound every example"
        )
    return batch_of(examples)


@torch.no_grad()
def score(model: Decoder, cell: Cell, examples: list[Example], generator: torch.Generator) -> int | None:
    """How many of `examples` the model gets exactly right; None when its learned table has no row for them."""
    longest = max(len(e.tokens) for e in examples) - 1
    if (
        not cell.row.randomized
        and model.positions.max_length is not None
        and longest > model.positions.max_length
    ):
        return None
    hits = 0
    for start in range(0, len(examples), 64):
        ids, targets, mask = batch_of(examples[start : start + 64])
        positions = (
            random_positions(ids.shape[1], cell.position_range, generator) if cell.row.randomized else None
        )
        logits, _ = model(ids, positions=positions)
        hits += int(exact_matches(logits, targets, mask).sum())
    return hits


def score_cell(model: Decoder, cell: Cell) -> list[dict[str, Any]]:
    """One record per test size: examples scored, exact matches, accuracy. A task scored by depth too
    (passkey) splits the examples evenly over its depths, a record per depth, and the size's record pools them."""
    rng = np.random.default_rng([cell.seed, 1])
    generator = torch.Generator().manual_seed(cell.seed + 1)
    base = {"task": cell.task.name, "scheme": cell.row.spec, "seed": cell.seed}
    n, depths = cell.settings.examples, cell.task.depths
    records = []
    for size in cell.test_sizes:
        if not depths:
            hits = score(model, cell, [cell.task.example(rng, size) for _ in range(n)], generator)
            records.append(_record(base, size, None, n, hits))
            continue
        per = max(1, n // len(depths))
        found = [
            score(model, cell, [cell.task.example_at(rng, size, d) for _ in range(per)], generator)
            for d in depths
        ]
        pooled = None if found[0] is None else sum(found)
        records.append(_record(base, size, None, per * len(depths), pooled))
        records += [_record(base, size, d, per, hits) for d, hits in zip(depths, found, strict=True)]
    return records


def _record(base: dict[str, Any], size: int, depth: float | None, examples: int, hits: int | None) -> dict:
    return {
        **base,
        "size": size,
        "depth": depth,
        "examples": examples,
        "hits": hits,
        "status": "ok" if hits is not None else "no rows",
        "accuracy": hits / examples if hits is not None else None,
    }


def run_cell(cell: Cell) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train and score one cell (in a worker process, on the battery's thread count)."""
    with torch_threads(cell.settings.threads):
        model, info = train_cell(cell)
        started = time.perf_counter()
        records = score_cell(model, cell)
    return records, {**info, "score_seconds": time.perf_counter() - started}


# ------------------------------------------------------------------------------------------------------------
# The grid


def check_settings(settings: Settings) -> list[Row]:
    """The rows the settings name, or a UserError listing every problem (unknown task, scheme or row)."""
    problems = [
        f"unknown task {t!r}; choose one of {', '.join(TASKS)}" for t in settings.tasks if t not in TASKS
    ]
    rows = []
    for spec in settings.schemes:
        try:
            rows.append(Row.parse(spec, settings.model["n_layers"]))
        except UserError as error:
            problems.append(str(error))
    if settings.seeds < 1:
        problems.append("at least one seed is needed")
    if not settings.factors or min(settings.factors) < 1:
        problems.append(
            f"test sizes below the training range: factors {list(settings.factors)} must be at least 1 "
            "(1 is the largest training size)"
        )
    for task in (TASKS[t] for t in settings.tasks if t in TASKS):
        largest = task.train_sizes[1] * max(settings.factors, default=1)
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
    jobs = cells.chosen(only, AXES, values)
    grid = {
        "tasks": settings.tasks,
        "schemes": list(rows),
        "seeds": seeds,
        "steps": settings.steps,
        "batch_size": settings.batch_size,
        "examples": settings.examples,
        "model": settings.model,
        "factors": list(settings.factors),
    }
    workers = cells.workers_for(settings.jobs, len(jobs))
    say(
        f"task battery: {len(jobs)} of {len(settings.tasks) * len(rows) * settings.seeds} cells "
        f"({len(settings.tasks)} tasks x {len(rows)} rows x {settings.seeds} seeds), {settings.steps} steps "
        f"each, {workers} worker process(es) -> {out_dir}"
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
    """`task row seed k: trained in .. s (loss a -> b); accuracy per test size`."""
    plain = [r for r in records if r["depth"] is None]
    shown = " ".join(
        f"{r['size']}:" + ("-" if r["accuracy"] is None else f"{r['accuracy']:.0%}") for r in plain
    )
    task, row, seed = key
    return (
        f"{task} {row} seed {seed}: trained in "
        f"{info['train_seconds']:.0f} s (loss {info['first_loss']:.2f} -> {info['final_loss']:.3f}); "
        f"exact match {shown}"
    )
