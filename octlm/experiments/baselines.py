"""What guessing and the best constant answer score on each task and size, how a prediction is scored, and
95 % intervals: the numbers a battery score is read beside.

Two metrics, as the papers report them: exact match (every answer token right) and per-token accuracy (the
fraction of answer tokens right; per query for MQAR, whose answer is the values of its queries). An answer
is an example's marked tokens without the `<eos>` that ends them.

- chance: every answer token guessed uniformly among the task's `answer_symbols()` (k of them): per token
  1/k, exact match the mean of k^-L over the lengths L of the answers drawn.
- majority: the best constant answer, picked on `n` examples drawn from the generator at the size
  (`default_rng(seed)`, one draw after another) and scored on the `n` drawn next: for exact match, the most
  common whole answer; per token, at each answer position the symbol with the most weight (an answer of L
  tokens weighs 1/L at each, its share of that answer's per-token accuracy). Scored on fresh draws, a
  constant picked among equally likely answers reads as what it is worth: on the draws it was picked on,
  copy's per-token majority would read 7.4 % against a true 6.25 %, and its exact match 1 in n against 0.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from octlm.experiments.tasks import TASKS, Task

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile: a two-sided 95 % interval


@dataclass(frozen=True)
class Score:
    """A prediction's score, or a baseline's, in both metrics (each a fraction of 1)."""

    exact: float
    per_token: float


@dataclass(frozen=True)
class Baseline:
    """What guessing (`chance`) and the best constant answer (`majority`) score on `task` at `size`, the
    majority picked on `examples` draws and scored on as many more."""

    task: str
    size: int
    examples: int
    chance: Score
    majority: Score


def score(prediction: Sequence[int], answer: Sequence[int]) -> Score:
    """`prediction` against `answer`, position by position (one predicted token per answer token): exact
    match 1 or 0, and the fraction of positions right."""
    if len(prediction) != len(answer) or not answer:
        raise ValueError(f"a prediction of {len(prediction)} tokens for an answer of {len(answer)}")
    right = sum(map(operator.eq, prediction, answer))  # the lengths are equal: checked above
    return Score(float(right == len(answer)), right / len(answer))


def answers(task: type[Task], size: int, n: int, seed: int = 0) -> list[tuple[int, ...]]:
    """The answers (token ids, `<eos>` left off) of `n` examples of `task` at `size` drawn from
    `default_rng(seed)`."""
    rng = np.random.default_rng(seed)
    return [task.example(rng, size).answer_tokens[:-1] for _ in range(n)]


def chance(task: type[Task], drawn: Sequence[tuple[int, ...]]) -> Score:
    """Guessing every token uniformly among the task's answer symbols, on answers of the lengths `drawn`."""
    k = len(task.answer_symbols())
    return Score(float(np.mean([k ** -len(a) for a in drawn])), 1 / k)


def majority(picked_on: Sequence[tuple[int, ...]], scored_on: Sequence[tuple[int, ...]]) -> Score:
    """The best constant answer on `picked_on`, in each metric, scored on `scored_on` (see the module's
    docstring); a position no answer of `picked_on` reaches is guessed as the first answer symbol seen."""
    counts = Counter(picked_on)
    whole = min(
        counts, key=lambda a: (-counts[a], a)
    )  # ties: the smallest ids, so the pick is the same anywhere
    weights: list[Counter[int]] = [Counter() for _ in range(max(map(len, [*picked_on, *scored_on])))]
    for a in picked_on:
        for place, token in enumerate(a):
            weights[place][token] += 1 / len(a)
    constant = [min(w, key=lambda t: (-w[t], t)) if w else picked_on[0][0] for w in weights]
    exact = sum(a == whole for a in scored_on) / len(scored_on)
    per_token = sum(score(constant[: len(a)], a).per_token for a in scored_on) / len(scored_on)
    return Score(exact, per_token)


def baselines(
    names: Iterable[str], n: int = 2000, seed: int = 0, factors: tuple[int, ...] = (1, 2, 4, 8)
) -> list[Baseline]:
    """Chance and majority for each task named, at each of its test sizes."""
    rows = []
    for name in names:
        task = TASKS[name]
        for size in task.test_sizes(factors):
            drawn = answers(task, size, 2 * n, seed)
            rows.append(Baseline(name, size, n, chance(task, drawn), majority(drawn[:n], drawn[n:])))
    return rows


def markdown(rows: Sequence[Baseline]) -> str:
    """The baselines as a Markdown table, percentages."""
    lines = [
        "| task | size | chance, exact | chance, per token | majority, exact | majority, per token |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        cells = (r.chance.exact, r.chance.per_token, r.majority.exact, r.majority.per_token)
        lines.append(f"| {r.task} | {r.size} | " + " | ".join(f"{100 * c:.3g} %" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def interval(hits: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95 % by default) of the proportion `hits / n`; (0, 1) when n is 0."""
    if not 0 <= hits <= n:
        raise ValueError(f"{hits} hits in {n} trials")
    return _wilson(hits / n, n, z) if n else (0.0, 1.0)


def token_interval(token_hits: int, tokens: int, examples: int, z: float = Z95) -> tuple[float, float]:
    """The 95 % interval of a per-token (per-query) accuracy `token_hits / tokens` over `examples` examples:
    Wilson's, with n the number of examples, not of tokens; (0, 1) when there are none.

    The tokens of one example are not independent trials: a model that has the example gets most of them
    right, one that has not misses many together. Counted as n = tokens they would make the interval too
    narrow; counting each example once, as if its tokens were all right or all wrong together, errs wide."""
    if not 0 <= token_hits <= tokens:
        raise ValueError(f"{token_hits} tokens right of {tokens}")
    return _wilson(token_hits / tokens, examples, z) if tokens and examples else (0.0, 1.0)


def _wilson(p: float, n: int, z: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion `p` observed in `n` > 0 trials."""
    shrink = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / shrink
    half = z / shrink * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at p 0 and 1 a bound is 0 or 1 exactly, which the subtraction can miss by a rounding
    return (0.0 if p == 0 else centre - half), (1.0 if p == 1 else centre + half)


def clears(bounds: tuple[float, float], baseline: float) -> bool:
    """Whether a score with the 95 % interval `bounds` (`interval`, `token_interval`) is above `baseline`
    with that confidence: its lower bound is."""
    return bounds[0] > baseline
