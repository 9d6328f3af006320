"""How a battery cell's model is trained: until it has learned its task or reached the step cap
(`train_cell`), and for an extension row (`rope+pi4`: `octlm.experiments.rows`) then fine-tuned to the
extended sizes (`extend_cell`), as Chen et al. (2023) extend a model's window: the same model, the same
weights, the next sizes, with RoPE's frequencies rescaled or not.

The fine-tuning has a fixed budget (`Settings.extend_steps`, 1,000 by default; its learning rate a tenth of
training's), so that the rows are compared after the same steps, as the papers compare them; it draws sizes
uniformly from the smallest training size to the extended one, checks a held-out set at the extended size every
tenth of the budget and records the first check that reaches the target (`extended_at`: how fast each method
extends). A model that did not learn its task in range is not fine-tuned: extending it
would be more training, not an extension.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from octlm.config import ModelConfig, TrainConfig
from octlm.errors import UserError
from octlm.experiments import cells
from octlm.experiments.rows import Row
from octlm.experiments.task_batches import (
    Counts,
    answer_loss,
    batch_of,
    exact_matches,
    random_positions,
    token_counts,
)
from octlm.experiments.tasks import Example, Task
from octlm.model.decoder import Decoder
from octlm.signals import StopRequest, stopping
from octlm.training.loop import optimizer_step
from octlm.training.optimizer import make_optimizer

EXTEND_CHECKS = 10  # held-out checks over the fine-tuning budget


class Cell(Protocol):
    """What training reads of a battery cell (`octlm.experiments.battery.Cell`): its task, row, seed and
    settings (steps, batch size, learning rate, checks, target, examples, extension budget), the sizes it
    trains and is extended to, and its models' configs."""

    task: type[Task]
    row: Row
    seed: int
    settings: Any

    @property
    def key(self) -> cells.Key: ...

    @property
    def train_tokens(self) -> int: ...

    @property
    def position_range(self) -> int: ...

    @property
    def extend_size(self) -> int: ...

    def model_config(self) -> ModelConfig: ...

    def extended_config(self) -> ModelConfig: ...


@dataclass(frozen=True)
class Phase:
    """One stretch of a cell's training: its schedule, the sizes it draws (both ends included) and the most
    tokens they take, the held-out set it checks every `check_every` steps, whether it stops once that reaches
    the target, and the flag that sets its length (named when training diverges)."""

    train: TrainConfig
    sizes: tuple[int, int]
    longest: int
    held_out: list[Example]
    check_every: int
    stops: bool
    flag: str


def train_cell(cell: Cell) -> tuple[Decoder, dict[str, Any]]:
    """The model a cell trains until learned or capped (and an extension row's fine-tuned after), and how
    training went: the loss curve's ends, the held-out checks (step, exact match), `steps` taken,
    `learned_at` (None: the cap came first), seconds; an extension row's `extend_cell` entries too."""
    s = cell.settings
    torch.manual_seed(cell.seed)
    model = Decoder(cell.model_config())
    train = TrainConfig(  # the schedule is the cap's, so stopping early is the capped run cut short
        steps=s.steps,
        batch_size=s.batch_size,
        lr=s.lr,
        min_lr=s.lr / 10,
        warmup_steps=max(1, s.steps // 20),
        seed=cell.seed,
    )
    rng = np.random.default_rng([cell.seed, 0])  # training examples; scoring draws from [seed, 1]
    generator = torch.Generator().manual_seed(cell.seed)
    started = time.perf_counter()
    sizes, longest = cell.task.train_sizes, cell.train_tokens
    phase = Phase(train, sizes, longest, held_out_set(cell), s.check_every, True, "--steps")
    losses, checks = fit(model, cell, phase, rng, generator)
    learned_at = checks[-1][0] if checks[-1][1] >= s.target else None
    tail = losses[-max(1, len(losses) // 10) :]
    info = {
        "train_seconds": time.perf_counter() - started,
        "first_loss": losses[0],
        "final_loss": sum(tail) / len(tail),
        "parameters": model.num_parameters(),
        "checks": checks,
        "steps": len(losses),
        "learned_at": learned_at,
    }
    if cell.row.extension:
        model, extended = extend_cell(model, cell, learned_at is not None, rng, generator)
        info |= extended
    model.eval()
    return model, info


def extend_cell(
    model: Decoder, cell: Cell, learned: bool, rng: np.random.Generator, generator: torch.Generator
) -> tuple[Decoder, dict[str, Any]]:
    """`model` fine-tuned to the extension row's sizes (up to `Cell.extend_size`) for `Settings.extend_steps`
    steps, RoPE's frequencies rescaled as the row says (`Cell.extended_config`); how it went: its held-out
    checks at the extended size (step 0 first: where each method starts), `extended_at` (the first check at
    the target; None: not within the budget), seconds. A model that did not learn is returned as it is."""
    if not learned:
        return model, {"extend_seconds": 0.0, "extend_checks": [], "extend_steps": 0, "extended_at": None}
    s, started = cell.settings, time.perf_counter()
    extended = Decoder(cell.extended_config())
    extended.load_state_dict(model.state_dict())  # RoPE's tables are buffers, not weights: rebuilt rescaled
    train = TrainConfig(
        steps=s.extend_steps,
        batch_size=s.batch_size,
        lr=s.lr / 10,
        min_lr=s.lr / 100,
        warmup_steps=max(1, s.extend_steps // 20),
        seed=cell.seed,
    )
    held_out = held_out_set(cell, cell.extend_size)
    every = max(1, s.extend_steps // EXTEND_CHECKS)
    sizes, longest = (cell.task.train_sizes[0], cell.extend_size), cell.task.max_tokens(cell.extend_size)
    phase = Phase(train, sizes, longest, held_out, every, False, "--extend-steps")
    extended.train()
    first = (0, held_out_exact(extended, cell, held_out))
    losses, checks = fit(extended, cell, phase, rng, generator)
    checks = [first, *checks]
    return extended, {
        "extend_seconds": time.perf_counter() - started,
        "extend_checks": checks,
        "extend_steps": len(losses),
        "extended_at": next((step for step, exact in checks if exact >= s.target), None),
    }


def fit(
    model: Decoder, cell: Cell, phase: Phase, rng: np.random.Generator, generator: torch.Generator
) -> tuple[list[float], list[tuple[int, float]]]:
    """Train `model` through `phase`: each step's loss, and the held-out checks (step, exact match), the last
    at the phase's end or, for a phase that stops, at the target."""
    optimizer = make_optimizer(model, phase.train)
    losses: list[float] = []
    checks: list[tuple[int, float]] = []

    def loss_of() -> Tensor:
        """The answer-masked loss of a fresh batch, its positions randomized for a `+random` row."""
        drawn = training_examples(cell, rng, phase.train.batch_size, phase.sizes, phase.longest)
        ids, targets, mask = batch_of(drawn)
        randomized = cell.row.randomized
        positions = random_positions(ids.shape[1], cell.position_range, generator) if randomized else None
        return answer_loss(model(ids, positions=positions)[0], targets, mask)

    def refuse(loss: float, grad_norm: float) -> UserError:
        return UserError(
            f"cell {cells.cell_name(cell.key)}: the training loss is {loss} (gradient norm {grad_norm}) at "
            f"step {len(losses) + 1}; training stopped. Lower the learning rate or train fewer {phase.flag}"
        )

    model.train()
    steps = phase.train.steps
    with StopRequest(announce=False) as stop:  # a signal: this step finishes, then the cell stops, unwritten
        for step in range(steps):
            losses.append(optimizer_step(model, optimizer, phase.train, step, loss_of, refuse))
            if stop.requested:
                raise stopping(stop.signum)
            if (step + 1) % phase.check_every == 0 or step + 1 == steps:
                checks.append((step + 1, held_out_exact(model, cell, phase.held_out)))
                if phase.stops and checks[-1][1] >= cell.settings.target:
                    break
    return losses, checks


def training_batch(cell: Cell, rng: np.random.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """`Settings.batch_size` fresh examples, sizes uniform over the task's training range, as `batch_of`."""
    return batch_of(training_examples(cell, rng, cell.settings.batch_size))


def training_examples(
    cell: Cell,
    rng: np.random.Generator,
    n: int,
    sizes: tuple[int, int] | None = None,
    bound: int | None = None,
) -> list[Example]:
    """`n` examples drawn from `rng`, sizes uniform over `sizes` (default: the task's training range), none
    longer than `bound` tokens (default: `Cell.train_tokens`, the task's `max_tokens` at the largest)."""
    lo, hi = sizes or cell.task.train_sizes
    bound = bound or cell.train_tokens
    drawn = rng.integers(lo, hi + 1, n)
    examples = [cell.task.example(rng, int(size)) for size in drawn]
    if (longest := max(len(e.tokens) for e in examples)) > bound:
        raise ValueError(
            f"task {cell.task.name} drew an example of {longest} tokens, past its max_tokens ({bound}) at "
            f"size {hi}: its max_tokens must bound every example"
        )
    return examples


def held_out_set(cell: Cell, size: int | None = None) -> list[Example]:
    """The fixed held-out set training is checked on: `Settings.examples` examples at `size` (default: the
    largest training size, where the tables judge "learned"), split over the depths as `score_cell` splits
    them, drawn from their own stream ([seed, 2]: neither training's nor scoring's)."""
    rng, size = np.random.default_rng([cell.seed, 2]), size or cell.task.train_sizes[1]
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
