"""What a paper claim is checked against: estimates with 95 % intervals, read from an experiment's collected
records, and the comparisons that turn two intervals into a verdict (`octlm.experiments.claims` declares the
claims on them).

Intervals, one kind per experiment:
- the battery: proportions (exact match, or per token) pooled over seeds, hits and trials summed, with the
  Wilson interval (`baselines.interval`; per token `baselines.token_interval`, n the examples, not the
  tokens, which are not independent), widened to hold the t-interval of the seeds' own scores
  (`across_seeds`): pooling alone counts the examples' noise, not the seeds';
- the length experiment and the extension: a number per seed (bits per byte, fine-tuning steps), with the
  t-interval over seeds, mean ± t(0.975, n − 1) · s / √n (one seed: no interval, -inf to inf); the passkey's
  accuracy is a proportion again, windows pooled over seeds.
An average over test sizes or tasks is the mean of the values with the mean of the bounds: wider than the
interval of the mean of independent estimates (it ignores that their errors partly cancel), so it errs towards
"inconclusive".

A comparison is decided by the intervals alone: one clear of the other, or of a threshold, agrees or
disagrees; overlapping intervals are inconclusive. Whatever keeps a number from being read (a row not in the
records, a metric not recorded, a model that did not learn the task) raises `Inconclusive` with the reason.
"""

from __future__ import annotations

import math
import operator
import statistics
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import wraps
from typing import Any

from octlm.experiments.baselines import interval, token_interval
from octlm.experiments.rows import Row
from octlm.experiments.tasks import TASKS

# t(0.975, df), the two-sided 95 % quantile of Student's t, for df = 1 .. 30 (tests check them against the t
# distribution's CDF); past 30 the value at 30, which is larger than the true one, so an interval only widens.
_T975 = (
    "12.7062047 4.3026527 3.1824463 2.7764451 2.5705818 2.4469119 2.3646243 2.3060041 2.2621572 2.2281389 "
    "2.2009852 2.1788128 2.1603687 2.1447867 2.1314495 2.1199053 2.1098155 2.1009220 2.0930241 2.0859634 "
    "2.0796138 2.0738731 2.0686576 2.0638986 2.0595386 2.0555294 2.0518305 2.0484071 2.0452296 2.0422725"
)
T975 = tuple(map(float, _T975.split()))


class Verdict(StrEnum):
    AGREE = "agree"
    DISAGREE = "disagree"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Estimate:
    """A number a claim is read on: `value` with its 95 % interval [lo, hi], from `n` trials (examples, per
    token too; passkey windows) or seeds, pooling `seeds`."""

    label: str
    value: float
    lo: float
    hi: float
    n: int
    seeds: tuple[int, ...]

    @property
    def text(self) -> str:
        """`label value [lo, hi]`, three decimals."""
        return f"{self.label} {self.value:.3f} [{self.lo:.3f}, {self.hi:.3f}]"


@dataclass(frozen=True)
class Check:
    """A verdict, why (which interval cleared which, or why none could be read), and the estimates used."""

    verdict: Verdict
    reason: str
    used: tuple[Estimate, ...] = ()


class Inconclusive(Exception):
    """A number the claim needs cannot be read; the message says why ("not learned: ...", "missing rows:
    ...")."""


def checked(read: Callable[..., Check]) -> Callable[..., Check]:
    """`read`, with `Inconclusive` raised inside it returned as an inconclusive `Check` with its reason."""

    @wraps(read)
    def wrapper(*args: Any, **kwargs: Any) -> Check:
        try:
            return read(*args, **kwargs)
        except Inconclusive as why:
            return Check(Verdict.INCONCLUSIVE, str(why))

    return wrapper


# ------------------------------------------------------------------------------------------------------------
# Intervals


def t_quantile(df: int) -> float:
    """t(0.975, df): the two-sided 95 % quantile of Student's t with `df` degrees of freedom (df ≥ 1)."""
    if df < 1:
        raise ValueError(f"{df} degrees of freedom")
    return T975[min(df, len(T975)) - 1]


def t_interval(values: Sequence[float]) -> tuple[float, float]:
    """The 95 % t-interval of the mean of `values`; (-inf, inf) for one value (no spread to read)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return -math.inf, math.inf
    half = t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def over_seeds(label: str, by_seed: dict[int, float]) -> Estimate:
    """One number per seed -> their mean with its t-interval."""
    values = [by_seed[s] for s in sorted(by_seed)]
    return Estimate(label, statistics.fmean(values), *t_interval(values), len(values), tuple(sorted(by_seed)))


def across_seeds(pooled: tuple[float, float], per_seed: Sequence[float]) -> tuple[float, float]:
    """A battery score's 95 % interval: `pooled`, the interval of every seed's trials pooled, widened to hold
    the t-interval of the seeds' own scores (`per_seed`, two or more), within [0, 1].

    Pooling treats the seeds' examples as one sample: a seed that learned to generalise beside one that did
    not reads as one model at their average, its interval as narrow as the examples allow. The t-interval
    counts the seeds' spread, and with seeds that agree it is narrower than the examples' noise: the wider of
    the two holds both."""
    if len(per_seed) < 2:
        return pooled
    lo, hi = t_interval(per_seed)
    return max(0.0, min(pooled[0], lo)), min(1.0, max(pooled[1], hi))


def proportion(label: str, hits: int, n: int, seeds: Iterable[int]) -> Estimate:
    """`hits` of `n` trials pooled over `seeds`, with the Wilson interval."""
    return Estimate(label, hits / n if n else 0.0, *interval(hits, n), n, tuple(sorted(set(seeds))))


def mean_of(label: str, estimates: Sequence[Estimate]) -> Estimate:
    """The average of `estimates` (over test sizes or tasks), with the mean of their bounds (see the
    module); one estimate is itself."""
    if len(estimates) == 1:
        return estimates[0]  # its own label is the more precise
    return Estimate(
        label,
        statistics.fmean(e.value for e in estimates),
        statistics.fmean(e.lo for e in estimates),
        statistics.fmean(e.hi for e in estimates),
        sum(e.n for e in estimates),
        tuple(sorted({s for e in estimates for s in e.seeds})),
    )


def steps_to(
    curves: dict[int, list[tuple[int, float]]],
    targets: dict[int, float],
    reaches: Callable[[float, float], bool],
) -> tuple[dict[int, int], list[str]]:
    """Per seed in `targets`, the first step of its curve whose value `reaches` (value, target) the seed's
    target; a curve that never does counts one step interval past its end. Also the seeds that never did."""
    steps, short = {}, []
    for seed, points in curves.items():
        if seed in targets:
            reached = [step for step, value in points if reaches(value, targets[seed])]
            late = points[-1][0] + (points[-1][0] - points[-2][0] if len(points) > 1 else 1)
            steps[seed] = reached[0] if reached else late
            short += [] if reached else [str(seed)]
    return steps, short


# ------------------------------------------------------------------------------------------------------------
# Comparisons: one home each


def higher(a: Estimate, b: Estimate) -> Check:
    """Whether `a` is above `b`: agree when a's interval lies wholly above b's, disagree when wholly below,
    inconclusive when they overlap."""
    if a.lo > b.hi:
        return Check(Verdict.AGREE, f"{a.label} above {b.label}: {a.lo:.3f} > {b.hi:.3f}", (a, b))
    if a.hi < b.lo:
        return Check(Verdict.DISAGREE, f"{a.label} below {b.label}: {a.hi:.3f} < {b.lo:.3f}", (a, b))
    return Check(Verdict.INCONCLUSIVE, f"{a.label} and {b.label} overlap", (a, b))


def lower(a: Estimate, b: Estimate) -> Check:
    """Whether `a` is below `b` (bits per byte, steps: lower is better), as `higher` from the other side."""
    if a.hi < b.lo:
        return Check(Verdict.AGREE, f"{a.label} below {b.label}: {a.hi:.3f} < {b.lo:.3f}", (a, b))
    if a.lo > b.hi:
        return Check(Verdict.DISAGREE, f"{a.label} above {b.label}: {a.lo:.3f} > {b.hi:.3f}", (a, b))
    return Check(Verdict.INCONCLUSIVE, f"{a.label} and {b.label} overlap", (a, b))


def exceeds(a: Estimate, threshold: float, what: str) -> Check:
    """Whether `a` is above `threshold` (`what` names it): agree when a's interval lies wholly above it,
    disagree when wholly below, inconclusive when it holds the threshold."""
    if a.lo > threshold:
        return Check(Verdict.AGREE, f"{a.label} above {what}: {a.lo:.3f} > {threshold:g}", (a,))
    if a.hi < threshold:
        return Check(Verdict.DISAGREE, f"{a.label} below {what}: {a.hi:.3f} < {threshold:g}", (a,))
    return Check(Verdict.INCONCLUSIVE, f"{a.label}'s interval holds {what} ({threshold:g})", (a,))


def negated(check: Check) -> Check:
    """The verdict on the opposite statement ("stays below" from "exceeds"), the same reason and numbers."""
    flip = {Verdict.AGREE: Verdict.DISAGREE, Verdict.DISAGREE: Verdict.AGREE}
    return Check(flip.get(check.verdict, check.verdict), check.reason, check.used)


def all_of(checks: Iterable[Check]) -> Check:
    """A claim made of parts: disagree when any part disagrees, agree when every part agrees, else
    inconclusive; the reasons joined, the estimates of every part."""
    parts = list(checks)
    verdicts = {c.verdict for c in parts}
    if Verdict.DISAGREE in verdicts:
        verdict = Verdict.DISAGREE
    elif verdicts == {Verdict.AGREE}:
        verdict = Verdict.AGREE
    else:
        verdict = Verdict.INCONCLUSIVE
    # Parts that failed alike say it once: a part's reason may itself join several.
    reasons = dict.fromkeys(r for c in parts for r in c.reason.split("; "))
    return Check(verdict, "; ".join(reasons), tuple(e for c in parts for e in c.used))


# ------------------------------------------------------------------------------------------------------------
# The battery

EXACT, PER_TOKEN = "exact match", "per token"
# A row learned a task when its score at the largest training size reaches this: the one threshold of the
# claims and of the battery's tables (`battery_results`), which show the rows below it "not learned".
LEARNED = 0.95
PER_QUERY = ("mqar",)  # learned on its per-query accuracy where recorded (an answer token is one query)


def learned_models(records: Iterable[dict[str, Any]], target: float = LEARNED) -> set[tuple[str, str, int]]:
    """The models that learned their task, as (task, row, seed): exact match at the task's largest training
    size (per query for MQAR, where recorded) at least `target`. A seed under it did not learn the task in
    range, so its scores past the training size say nothing about position: every table and claim leaves it
    out. An extension row's model (a record with `extended_at`) learned when it had before fine-tuning (its
    `learned_at`: the step its held-out exact match at that size reached the battery's target); what
    fine-tuning to longer sizes does at the training size is part of its result, not of whether it learned."""
    return {
        (r["task"], r["scheme"], r["seed"])
        for r in records
        if r.get("depth") is None
        and r["task"] in TASKS
        and r["size"] == TASKS[r["task"]].train_sizes[1]
        and r["hits"] is not None
        and (r.get("learned_at") is not None if "extended_at" in r else _score(r) >= target)
    }


def _budget(steps: list[int | None]) -> str:
    """The training the seeds had, for a "not learned" reason: " in 2,000 steps" (a range when the seeds
    stopped at different steps), or nothing where the records do not say."""
    if not steps or None in steps:
        return ""
    lo, hi = min(steps), max(steps)
    return f" in {lo:,} steps" if lo == hi else f" in {lo:,}-{hi:,} steps"


def _score(record: dict[str, Any]) -> float:
    """A record's exact match, or per query for MQAR where recorded."""
    if record["task"] in PER_QUERY and "tokens" in record:
        return record["token_hits"] / record["tokens"] if record["tokens"] else 0.0
    return record["hits"] / record["examples"]


class Battery:
    """The battery's records (`battery.score_cell`: one per task, row, seed, size and depth; `hits` of
    `examples` right in exact match and, where recorded, `token_hits` of `tokens` per token) read as estimates
    pooled over seeds, their intervals `across_seeds`. A size a learned table has no row for ("no rows", hits
    None) counts every answer wrong.

    A seed learned a task when its exact match (per query for MQAR) at the largest training size reaches
    `target` (`learned_models`); a row's estimates for a claim pool the seeds that learned, and a row none of
    whose seeds learned is left out of every claim about generalisation."""

    def __init__(self, records: Iterable[dict[str, Any]], target: float = LEARNED) -> None:
        self.records = [r for r in records if r.get("depth") is None]  # the depth records split these
        self.tasks = list(dict.fromkeys(r["task"] for r in self.records))
        self.target = target
        self.models = learned_models(self.records, target)

    def trained(self, task: str) -> int:
        """The largest training size of `task`."""
        if task not in TASKS:
            raise Inconclusive(f"missing rows: no task {task}")
        return TASKS[task].train_sizes[1]

    def at(
        self, task: str, row: str, size: int, metric: str, seeds: Collection[int] | None = None
    ) -> Estimate:
        """`row` on `task` at `size` in `metric`, the trials of every seed (or of `seeds`) pooled."""
        found = [
            r
            for r in self.records
            if (r["task"], r["scheme"], r["size"]) == (task, row, size)
            and (seeds is None or r["seed"] in seeds)
        ]
        if not found:
            raise Inconclusive(f"missing rows: {row} {task} at {size}")
        if metric != EXACT and any("tokens" not in r for r in found):
            raise Inconclusive(f"not recorded: {metric} accuracy of {row} {task}")
        none = " (no rows)" if any(r["hits"] is None for r in found) else ""
        label, used = f"{row} {task} {metric} at {size}{none}", tuple(sorted({r["seed"] for r in found}))
        examples = sum(r["examples"] for r in found)
        if metric == EXACT:
            counts = [(r["hits"] or 0, r["examples"]) for r in found]
        else:  # per token, n the examples, as the tables count them
            counts = [(r["token_hits"] or 0, r["tokens"]) for r in found]
        hits, trials = sum(h for h, _ in counts), sum(t for _, t in counts)
        pooled = interval(hits, examples) if metric == EXACT else token_interval(hits, trials, examples)
        per_seed = [h / t for h, t in counts if t]
        value = hits / trials if trials else 0.0
        return Estimate(label, value, *across_seeds(pooled, per_seed), examples, used)

    def past(self, task: str, row: str, metric: str, seeds: Collection[int] | None = None) -> Estimate:
        """`row` on `task` past its training sizes (of every seed, or of `seeds`): the mean over the test
        sizes there."""
        trained = self.trained(task)
        sizes = sorted({r["size"] for r in self.records if r["task"] == task and r["size"] > trained})
        if not sizes:
            raise Inconclusive(f"missing rows: {task} past {trained}")
        estimates = [self.at(task, row, size, metric, seeds) for size in sizes]
        return mean_of(f"{row} {task} {metric} past {trained}", estimates)

    def seeds_learned(self, task: str, row: str) -> tuple[int, ...]:
        """The seeds of `row` that learned `task` (`learned_models`)."""
        return tuple(sorted(s for t, r, s in self.models if (t, r) == (task, row)))

    def learned(self, task: str, row: str) -> Estimate:
        """`row`'s score on `task` at its largest training size, pooled over the seeds that learned it;
        raises "not learned" when none did."""
        size = self.trained(task)
        metric = EXACT
        if task in PER_QUERY and all("tokens" in r for r in self.records if r["task"] == task):
            metric = PER_TOKEN
        if seeds := self.seeds_learned(task, row):
            return self.at(task, row, size, metric, seeds)
        found = sorted(
            (r["seed"], _score(r), r.get("steps"))
            for r in self.records
            if (r["task"], r["scheme"], r["size"]) == (task, row, size) and r["hits"] is not None
        )
        if not found:
            raise Inconclusive(f"missing rows: {row} {task} at {size}")
        scores = ", ".join(f"{100 * score:.0f} %" for _, score, _ in found)
        raise Inconclusive(
            f"not learned: {row} {task}, no seed at {100 * self.target:.0f} % {metric} at {size}"
            f"{_budget([steps for *_, steps in found])} (seeds: {scores})"
        )

    @checked
    def above(self, row: str, other: str, tasks: Sequence[str] | None, metric: str) -> Check:
        """`row` above `other` past the training sizes in `metric`, mean over those of `tasks` (None: every
        task recorded) that both rows learned; the tasks left out, and why, are named."""
        kept, left_out = [], []
        for task in self.tasks if tasks is None else tasks:
            try:
                self.learned(task, row), self.learned(task, other)
                kept.append(task)
            except Inconclusive as why:
                left_out.append(str(why))
        if not kept:
            raise Inconclusive("; ".join(left_out) or "missing rows: no task recorded")
        named = f"{metric} past training, mean of {', '.join(kept)}"
        a, b = (
            mean_of(f"{r} {named}", [self.past(t, r, metric, self.seeds_learned(t, r)) for t in kept])
            for r in (row, other)
        )
        check = higher(a, b)
        return Check(
            check.verdict, "; ".join([check.reason, *(f"left out: {w}" for w in left_out)]), check.used
        )

    @checked
    def drops(self, row: str, task: str, metric: str) -> Check:
        """`row`'s score on `task` falls from its largest training size to past it (the mean there)."""
        seeds = self.learned(task, row).seeds
        return higher(
            self.at(task, row, self.trained(task), metric, seeds), self.past(task, row, metric, seeds)
        )

    def extended(self, row: str, task: str, metric: str) -> Estimate:
        """An extension row (`rope+pi4`) on `task` at the size it was fine-tuned to (its factor times the
        largest training size), pooled over the seeds that learned the task before fine-tuning."""
        seeds = self.learned(task, row).seeds
        size = self.trained(task) * Row.parse(row).extend_factor
        return self.at(task, row, size, metric, seeds)

    @checked
    def extended_above(self, row: str, other: str, task: str, metric: str) -> Check:
        """Extension row `row` above extension row `other` at the size both were fine-tuned to."""
        return higher(self.extended(task=task, row=row, metric=metric), self.extended(other, task, metric))

    def extension_curve(self, row: str, task: str) -> dict[int, list[tuple[int, float]]]:
        """Per seed that learned `task`, `row`'s held-out exact match at the extended size during fine-tuning
        (`extend_checks`: (step, exact match), step 0 before any)."""
        seeds = self.learned(task, row).seeds
        found = {r["seed"]: r for r in self.records if (r["task"], r["scheme"]) == (task, row)}
        if any(not found[s].get("extend_checks") for s in seeds):
            raise Inconclusive(f"not recorded: fine-tuning checks of {row} {task}")
        return {s: [(int(step), float(e)) for step, e in found[s]["extend_checks"]] for s in seeds}

    def extension_steps(self, row: str, task: str, targets: dict[int, float], reference: str) -> Estimate:
        """Per seed in `targets`, the first fine-tuning check at which `row` reaches that seed's target,
        counted from its own step 0; a seed that never does counts one check interval past its budget (a
        lower bound, named)."""
        steps, short = steps_to(self.extension_curve(row, task), targets, operator.ge)
        if not steps:
            raise Inconclusive(f"missing rows: no seed of {row} {task} shared with {reference}")
        note = f" (not reached in seeds {', '.join(short)}: counted past the budget)" if short else ""
        return over_seeds(f"{row} {task} fine-tuning steps to {reference}'s end{note}", steps)

    @checked
    def fewer_extension_steps(self, row: str, other: str, task: str, reference: str) -> Check:
        """Extension row `row` reaches, in fewer fine-tuning steps than `other`, the held-out exact match at
        the extended size that `reference` ends its fine-tuning at, seed by seed, each from its own start (as
        `Extend.fewer_steps` reads validation loss)."""
        targets = {seed: points[-1][1] for seed, points in self.extension_curve(reference, task).items()}
        return lower(
            self.extension_steps(row, task, targets, reference),
            self.extension_steps(other, task, targets, reference),
        )


# ------------------------------------------------------------------------------------------------------------
# The length experiment

NEAR_BPB = 0.02  # bits per byte: a change smaller than this is "near" (extend_results.NEAR's figure)


class Length:
    """The length experiment's records (`length.evaluate_run`: one per scheme, variant, seed, length and mode,
    bits per byte) in one mode, as t-intervals over seeds. A row is a scheme; RoPE's is its plain variant."""

    def __init__(self, records: Iterable[dict[str, Any]], mode: str = "windows") -> None:
        self.mode = mode
        self.records = [
            r
            for r in records
            if r["mode"] == mode and r["status"] == "ok" and r.get("variant", "") in ("", "plain")
        ]
        lengths = [r["length"] for r in self.records]
        self.train_length = min((r.get("train_length", min(lengths)) for r in self.records), default=0)
        self.longest = max(lengths, default=0)

    def by_seed(self, row: str, length: int) -> dict[int, float]:
        if not self.records:
            raise Inconclusive(f"missing rows: no {self.mode} records")
        found = {r["seed"]: r["bpb"] for r in self.records if (r["scheme"], r["length"]) == (row, length)}
        if not found:
            raise Inconclusive(f"missing rows: {row} at {length} tokens")
        return found

    def bpb(self, row: str, length: int) -> Estimate:
        return over_seeds(f"{row} bpb at {length}", self.by_seed(row, length))

    def rise(self, row: str) -> Estimate:
        """How much `row`'s bits per byte rise from the training length to the longest, seed by seed (each
        seed's model against itself, so the seeds' spread in level does not blur the change)."""
        start, end = self.by_seed(row, self.train_length), self.by_seed(row, self.longest)
        paired = {s: end[s] - start[s] for s in start.keys() & end.keys()}
        if not paired:
            raise Inconclusive(
                f"missing rows: {row} has no seed at both {self.train_length} and {self.longest}"
            )
        return over_seeds(f"{row} rise in bpb {self.train_length} -> {self.longest}", paired)

    @checked
    def rises(self, row: str) -> Check:
        return exceeds(self.rise(row), NEAR_BPB, "near")

    @checked
    def holds(self, row: str) -> Check:
        """`row`'s bits per byte at the longest length stay within NEAR_BPB of (or below) the training
        length's."""
        return negated(exceeds(self.rise(row), NEAR_BPB, "near"))

    @checked
    def lower_than(self, row: str, other: str) -> Check:
        """`row`'s bits per byte at the longest length below `other`'s."""
        return lower(self.bpb(row, self.longest), self.bpb(other, self.longest))


# ------------------------------------------------------------------------------------------------------------
# The extension


def curve_records(found: Iterable[Any]) -> list[dict[str, Any]]:
    """The fine-tuning curves of the extension's cells (`cells.Cell`, key (row, seed)) as records beside the
    scores: one per row, seed and step, the validation bits per byte at the extended length."""
    return [
        {"row": cell.key[0], "seed": cell.key[1], "step": p["step"], "val_bpb": p["val_bpb"]}
        for cell in found
        for p in cell.facts["info"]["curve"]
    ]


class Extend:
    """The extension's records (`extend.scored`: per row, seed, phase and length, bits per byte and passkey
    accuracy over `passkey_windows`, with the phase's `effective_window`) and its curves (`curve_records`)."""

    def __init__(
        self,
        records: Iterable[dict[str, Any]],
        train_length: int,
        target: float = LEARNED,
    ) -> None:
        records = list(records)
        self.scores = [r for r in records if "phase" in r]
        self.curves = [r for r in records if "step" in r]
        self.train_length, self.target = train_length, target

    def passkey(self, row: str, phase: str, length: int) -> Estimate:
        """The share of passkey windows whose key `row` gets right, every seed's windows pooled."""
        found = [
            r
            for r in self.scores
            if (r["row"], r["phase"], r["length"]) == (row, phase, length) and r.get("passkey") is not None
        ]
        if not found:
            raise Inconclusive(f"missing rows: {row} passkey {phase} fine-tuning at {length}")
        if any("passkey_windows" not in r for r in found):
            raise Inconclusive(f"not recorded: passkey windows of {row}")
        hits = sum(round(r["passkey"] * r["passkey_windows"]) for r in found)
        n = sum(r["passkey_windows"] for r in found)
        return proportion(f"{row} passkey {phase} at {length}", hits, n, (r["seed"] for r in found))

    def base_retrieves(self) -> None:
        """Raises "not learned" unless the base model (plain RoPE before fine-tuning) retrieves the keys at
        its own training length: a model that never could says nothing about extending."""
        base = self.passkey("plain", "before", self.train_length)
        if base.value < self.target:
            raise Inconclusive(
                f"not learned: the base model finds {100 * base.value:.0f} % of keys at {self.train_length}"
                f" (target {100 * self.target:.0f} %)"
            )

    def window(self, row: str, phase: str) -> Estimate:
        """`row`'s effective context window in `phase` (`passkey.effective_window`, recorded with every
        record of a seed and phase), a number per seed."""
        found = [r for r in self.scores if (r["row"], r["phase"]) == (row, phase)]
        if not found:
            raise Inconclusive(f"missing rows: {row} {phase} fine-tuning")
        by_seed = {r["seed"]: r["effective_window"] for r in found if r.get("effective_window") is not None}
        if not by_seed:
            raise Inconclusive(f"not recorded: effective window of {row}")
        return over_seeds(f"{row} effective window {phase}", by_seed)

    @checked
    def window_above(self, row: str, other: str) -> Check:
        """After fine-tuning, `row`'s effective window is longer than `other`'s, seed by seed, provided the
        base model retrieves the keys at its own training length."""
        self.base_retrieves()
        return higher(self.window(row, "after"), self.window(other, "after"))

    def curve(self, row: str) -> dict[int, list[tuple[int, float]]]:
        by_seed: dict[int, list[tuple[int, float]]] = {}
        for r in self.curves:
            if r["row"] == row:
                by_seed.setdefault(r["seed"], []).append((r["step"], r["val_bpb"]))
        if not by_seed:
            raise Inconclusive(f"missing rows: no fine-tuning curve of {row}")
        return {seed: sorted(points) for seed, points in by_seed.items()}

    def steps(self, row: str, targets: dict[int, float], reference: str) -> Estimate:
        """Per seed, the first step at which `row`'s curve reaches that seed's target, counted from its own
        step 0; a curve that never does counts one curve interval past its end (a lower bound, named)."""
        steps, short = steps_to(self.curve(row), targets, operator.le)
        if not steps:
            raise Inconclusive(f"missing rows: no seed of {row} shared with {reference}'s curve")
        note = f" (not reached in seeds {', '.join(short)}: counted past the end)" if short else ""
        return over_seeds(f"{row} steps to {reference}'s end{note}", steps)

    @checked
    def fewer_steps(self, row: str, other: str, reference: str = "pi") -> Check:
        """`row` needs fewer fine-tuning steps than `other` to reach the validation bits per byte `reference`
        ends its fine-tuning at, seed by seed."""
        targets = {seed: points[-1][1] for seed, points in self.curve(reference).items()}
        return lower(self.steps(row, targets, reference), self.steps(other, targets, reference))
