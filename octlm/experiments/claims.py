"""Paper claims as code: each claim that the task battery, the length experiment or the extension touches is
one declaration (`CLAIMS`) whose predicate reads the collected records (`octlm.experiments.evidence`) and
returns agree, disagree or inconclusive from 95 % intervals, naming the numbers it used.

`findings(experiment, records)` checks every claim of one experiment ("tasks", "length", "extend");
`claims_markdown` and `claims_json` write the table, `claims_blocks` results.md's section and `write_claims`
claims.json beside it. A claim is stated in the paper's own metric where the
experiment records it ("not recorded" otherwise), and a battery row that did not learn a task at its training
sizes is left out of the claims about generalising it ("not learned").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.experiments.evidence import (
    EXACT,
    LEARNED,
    PER_TOKEN,
    Battery,
    Check,
    Estimate,
    Extend,
    Length,
    Verdict,
    all_of,
)
from octlm.experiments.extend import Settings as ExtendSettings
from octlm.experiments.passkey import WINDOW_ACCURACY
from octlm.files import write_atomic
from octlm.inspect.render import Block, Heading, Paragraph

EXPERIMENTS = ("tasks", "length", "extend")
CLAIMS_FILE = "claims.json"
ABOUT = (
    "Each paper claim this experiment touches, checked on the records above (octlm/experiments/claims.py): "
    "agree or disagree when the 95 % intervals lie clear of each other (or of the threshold named), "
    "inconclusive when they overlap or a number cannot be read (why says which). claims.json holds the same "
    "with every estimate."
)


@dataclass(frozen=True)
class Claim:
    """A paper's claim as this lab can test it: `check` reads the experiment's evidence (`Battery`, `Length`
    or `Extend`) in `metric`, the paper's metric as this experiment records it."""

    key: str
    paper: str
    year: int
    statement: str
    experiment: str
    metric: str
    check: Callable[[Any], Check]


@dataclass(frozen=True)
class Finding:
    """A claim's verdict on one experiment's results, the estimates it used and why, in one line."""

    claim: Claim
    verdict: Verdict
    estimates: tuple[Estimate, ...]
    reason: str


def not_tested(why: str) -> Check:
    return Check(Verdict.INCONCLUSIVE, f"not tested by this experiment: {why}")


KAZEMNEJAD_TASKS = ("copy", "reverse", "addition")  # theirs that the battery has
PAST = "past the largest training size, mean over the test sizes there"
EXTENDED = "4x the largest training size"  # the battery's extension rows: rope+ft4, rope+pi4, rope+yarn4

CLAIMS = (
    Claim(
        "kazemnejad-nope",
        "Kazemnejad et al.",
        2023,
        "NoPE generalises to longer inputs at least as well as T5's bias, and better than ALiBi, RoPE and "
        "absolute positions (learned, sinusoidal)",
        "tasks",
        f"exact match (their seq_acc) {PAST}, then over copy, reverse and addition",
        lambda b: all_of(
            b.above("nope", other, KAZEMNEJAD_TASKS, EXACT)
            for other in ("t5", "alibi", "rope", "learned", "sinusoidal")
        ),
    ),
    Claim(
        "ruoss-rope",
        "Ruoss et al.",
        2023,
        "Randomized positions raise RoPE's accuracy on inputs longer than trained on",
        "tasks",
        f"per-token accuracy {PAST}, then over the tasks",
        lambda b: b.above("rope+random", "rope", None, PER_TOKEN),
    ),
    Claim(
        "ruoss-learned",
        "Ruoss et al.",
        2023,
        "Randomized positions raise a learned table's accuracy on inputs longer than trained on",
        "tasks",
        f"per-token accuracy {PAST}, then over the tasks (no rows past the table: every answer wrong)",
        lambda b: b.above("learned+random", "learned", None, PER_TOKEN),
    ),
    Claim(
        "cope-counting",
        "Golovneva et al. (CoPE)",
        2024,
        "CoPE solves counting and selective copy past the training length, where RoPE fails",
        "tasks",
        f"exact match {PAST}, each task",
        lambda b: all_of(b.above("cope", "rope", (t,), EXACT) for t in ("counting", "selective-copy")),
    ),
    Claim(
        "passkey-rope",
        "Mohtashami & Jaggi",
        2023,
        "RoPE's passkey retrieval drops past the training length; ALiBi's and NoPE's hold better",
        "tasks",
        f"exact match of the 5-digit key, at the largest training size and {PAST}",
        lambda b: all_of(
            [
                b.drops("rope", "passkey", EXACT),
                b.above("alibi", "rope", ("passkey",), EXACT),
                b.above("nope", "rope", ("passkey",), EXACT),
            ]
        ),
    ),
    Claim(
        "zoology-mqar",
        "Arora et al. (Zoology)",
        2023,
        "On multi-query associative recall attention beats cheaper sequence mixers (gated convolutions, "
        "SSMs)",
        "tasks",
        "per-query accuracy",
        lambda b: not_tested("every battery row is attention; no cheaper sequence mixer is trained"),
    ),
    Claim(
        "pi-passkey-tasks",
        "Chen et al. (PI)",
        2023,
        "Fine-tuned to a longer window with position interpolation, RoPE retrieves the passkey over it; plain "
        "fine-tuning, for the same steps, extends it less",
        "tasks",
        f"exact match of the 5-digit key at the size fine-tuned to ({EXTENDED}), after the same fine-tuning "
        "steps",
        lambda b: b.extended_above("rope+pi4", "rope+ft4", "passkey", EXACT),
    ),
    Claim(
        "yarn-steps-pi-tasks",
        "Peng et al. (YaRN)",
        2023,
        "YaRN extends RoPE's window in fewer fine-tuning steps than position interpolation",
        "tasks",
        f"fine-tuning steps until held-out exact match at {EXTENDED} reaches PI's after the whole budget, per "
        "seed, each row from its own start",
        lambda b: b.fewer_extension_steps("rope+yarn4", "rope+pi4", "passkey", "rope+pi4"),
    ),
    Claim(
        "yarn-steps-plain-tasks",
        "Peng et al. (YaRN)",
        2023,
        "YaRN extends RoPE's window in fewer fine-tuning steps than plain fine-tuning (the control: PI's "
        "slowness alone would make YaRN look fast)",
        "tasks",
        f"fine-tuning steps until held-out exact match at {EXTENDED} reaches PI's after the whole budget, per "
        "seed, each row from its own start",
        lambda b: b.fewer_extension_steps("rope+yarn4", "rope+ft4", "passkey", "rope+pi4"),
    ),
    Claim(
        "path-copy",
        "Yang et al. (PaTH)",
        2025,
        "PaTH beats RoPE on copying (copy, reverse) past the training length",
        "tasks",
        f"exact match {PAST}, each task",
        lambda b: all_of(b.above("path", "rope", (t,), EXACT) for t in ("copy", "reverse")),
    ),
    Claim(
        "ssmax-selective",
        "Nakanishi (SSMax)",
        2025,
        "Scalable softmax keeps attention sharp over more keys than trained on: NoPE + SSMax above NoPE on "
        "selective copy past the training length",
        "tasks",
        f"exact match {PAST}",
        lambda b: b.above("nope+ssmax", "nope", ("selective-copy",), EXACT),
    ),
    Claim(
        "alibi-flat",
        "Press et al. (ALiBi)",
        2022,
        "ALiBi's loss past the training length stays near its value at it, while sinusoidal and RoPE rise (a "
        "learned table has no rows there)",
        "length",
        "bits per byte (windows), each seed's rise from the training length to the longest, against 0.02",
        lambda n: all_of([n.holds("alibi"), n.rises("sinusoidal"), n.rises("rope")]),
    ),
    Claim(
        "xpos-length",
        "Sun et al. (xPos)",
        2023,
        "xPos extrapolates better than RoPE",
        "length",
        "bits per byte (windows) at the longest length",
        lambda n: n.lower_than("xpos", "rope"),
    ),
    Claim(
        "fire-length",
        "Li et al. (FIRE)",
        2024,
        "FIRE generalises to longer inputs better than RoPE and ALiBi",
        "length",
        "bits per byte (windows) at the longest length",
        lambda n: all_of([n.lower_than("fire", "rope"), n.lower_than("fire", "alibi")]),
    ),
    Claim(
        "fox-length",
        "Lin et al. (FoX)",
        2025,
        "The forgetting transformer extrapolates better than RoPE",
        "length",
        "bits per byte (windows) at the longest length",
        lambda n: n.lower_than("fox", "rope"),
    ),
    Claim(
        "path-length",
        "Yang et al. (PaTH)",
        2025,
        "PaTH extrapolates better than RoPE",
        "length",
        "bits per byte (windows) at the longest length",
        lambda n: n.lower_than("path", "rope"),
    ),
    Claim(
        "stick-breaking-length",
        "Tan et al. (stick-breaking)",
        2025,
        "Stick-breaking attention trained short is better at longer lengths than softmax with RoPE",
        "length",
        "bits per byte (windows) at the longest length",
        lambda n: n.lower_than("stick-breaking", "rope"),
    ),
    Claim(
        "pi-passkey",
        "Chen et al. (PI)",
        2023,
        "Fine-tuned with position interpolation, RoPE retrieves the passkey over the extended window; plain "
        "fine-tuning extends its effective window far less",
        "extend",
        "effective context window after fine-tuning, per seed: the longest evaluation length up to which "
        f"passkey retrieval stays at or above {100 * WINDOW_ACCURACY:.0f} %",
        lambda e: e.window_above("pi", "plain"),
    ),
    Claim(
        "yarn-steps-pi",
        "Peng et al. (YaRN)",
        2023,
        "YaRN reaches PI's fine-tuned loss in fewer fine-tuning steps than PI",
        "extend",
        "fine-tuning steps to PI's last validation bits per byte at the extended length, per seed, each row "
        "from its own start",
        lambda e: e.fewer_steps("yarn", "pi"),
    ),
    Claim(
        "yarn-steps-plain",
        "Peng et al. (YaRN)",
        2023,
        "YaRN reaches PI's fine-tuned loss in fewer fine-tuning steps than plain RoPE fine-tuning (the "
        "control: PI's slowness alone would make YaRN look fast)",
        "extend",
        "fine-tuning steps to PI's last validation bits per byte at the extended length, per seed, each row "
        "from its own start",
        lambda e: e.fewer_steps("yarn", "plain"),
    ),
)


def evidence(
    experiment: str, records: Iterable[dict[str, Any]], grid: Mapping[str, Any] | None, learned: float
) -> Battery | Length | Extend:
    """The experiment's records read as estimates; the extension's training length from its grid (default: its
    default), the others' lengths from their records."""
    if experiment == "tasks":
        return Battery(records, learned)
    if experiment == "length":
        return Length(records)
    if experiment == "extend":
        train_length = (grid or {}).get("train_length", ExtendSettings().train_length)
        return Extend(records, train_length, target=learned)
    raise ValueError(f"no experiment {experiment!r}: one of {', '.join(EXPERIMENTS)}")


def findings(
    experiment: str,
    records: Iterable[dict[str, Any]],
    grid: Mapping[str, Any] | None = None,
    learned: float = LEARNED,
) -> list[Finding]:
    """Every claim of `experiment` checked on its collected `records` (the extension's with its
    `evidence.curve_records`), in `CLAIMS` order."""
    read = evidence(experiment, records, grid, learned)
    return [
        Finding(claim, (check := claim.check(read)).verdict, check.used, check.reason)
        for claim in CLAIMS
        if claim.experiment == experiment
    ]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claims_markdown(found: Sequence[Finding]) -> str:
    """The findings as a Markdown table: paper, claim, metric, verdict, why, and the numbers used."""
    lines = [
        "| paper | claim | metric | verdict | why | numbers used |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for f in found:
        numbers = "; ".join(f"{e.text} (n {e.n})" for e in f.estimates) or "none"
        cells = (
            f"{f.claim.paper} {f.claim.year}",
            f.claim.statement,
            f.claim.metric,
            f"**{f.verdict.value}**",
            f.reason,
            numbers,
        )
        lines.append("| " + " | ".join(map(_cell, cells)) + " |")
    return "\n".join(lines) + "\n"


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no infinity: an unbounded side is null


def claims_json(found: Sequence[Finding]) -> list[dict[str, Any]]:
    """The findings as JSON-ready dicts: the claim's declaration, the verdict, why, and every estimate."""
    return [
        {
            "key": f.claim.key,
            "paper": f.claim.paper,
            "year": f.claim.year,
            "statement": f.claim.statement,
            "experiment": f.claim.experiment,
            "metric": f.claim.metric,
            "verdict": f.verdict.value,
            "reason": f.reason,
            "estimates": [
                {
                    "label": e.label,
                    "value": e.value,
                    "lo": _number(e.lo),
                    "hi": _number(e.hi),
                    "n": e.n,
                    "seeds": list(e.seeds),
                }
                for e in f.estimates
            ],
        }
        for f in found
    ]


def claims_blocks(found: Sequence[Finding]) -> list[Block]:
    """results.md's "Claims" section: what a verdict means, and the table."""
    return [Heading("Claims"), Paragraph(ABOUT), Paragraph(claims_markdown(found).removesuffix("\n"))]


def write_claims(out_dir: Path, experiment: str, found: Sequence[Finding]) -> Path:
    """claims.json in `out_dir`: the experiment and its findings (`claims_json`)."""
    data = {"experiment": experiment, "claims": claims_json(found)}
    write_atomic(out_dir / CLAIMS_FILE, (json.dumps(data, indent=1) + "\n").encode())
    return out_dir / CLAIMS_FILE
