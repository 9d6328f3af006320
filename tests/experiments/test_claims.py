"""Paper claims as code (octlm/experiments/claims.py): every registered claim returns each of the three
verdicts on made-up results built for it (Zoology's, which no battery can test, only "not tested"); a row
that did not learn a task is left out, named; the table and the JSON carry the numbers used."""

from __future__ import annotations

import json
import math

import pytest

from octlm.experiments import battery
from octlm.experiments.claims import (
    ABOUT,
    CLAIMS,
    Claim,
    Finding,
    claims_blocks,
    claims_json,
    claims_markdown,
    evidence,
    findings,
    write_claims,
)
from octlm.experiments.evidence import EXACT, Battery, Check, Estimate, Extend, Inconclusive, Verdict
from octlm.experiments.tasks import TASKS
from octlm.inspect.render import Heading, Paragraph

SEEDS = (0, 1, 2)
# battery claims: the tasks they read, the rows the paper puts ahead, the rows it puts behind
BATTERY = {
    "kazemnejad-nope": (
        ("copy", "reverse", "addition"),
        ["nope"],
        ["t5", "alibi", "rope", "learned", "sinusoidal"],
    ),
    "ruoss-rope": (("copy", "counting"), ["rope+random"], ["rope"]),
    "ruoss-learned": (("copy",), ["learned+random"], ["learned"]),
    "cope-counting": (("counting", "selective-copy"), ["cope"], ["rope"]),
    "passkey-rope": (("passkey",), ["alibi", "nope"], ["rope"]),
    "path-copy": (("copy", "reverse"), ["path"], ["rope"]),
    "ssmax-selective": (("selective-copy",), ["nope+ssmax"], ["nope"]),
}
# length claims: the rows the paper puts ahead (lower bits per byte past the training length), and behind
LENGTH = {
    "alibi-flat": (["alibi"], ["sinusoidal", "rope"]),
    "xpos-length": (["xpos"], ["rope"]),
    "fire-length": (["fire"], ["rope", "alibi"]),
    "fox-length": (["fox"], ["rope"]),
    "path-length": (["path"], ["rope"]),
    "stick-breaking-length": (["stick-breaking"], ["rope"]),
}
EXTEND = ("pi-passkey", "yarn-steps-pi", "yarn-steps-plain")
# the battery's extension claims (rows fine-tuned to 4x on the passkey)
EXTENSION = ("pi-passkey-tasks", "yarn-steps-pi-tasks", "yarn-steps-plain-tasks")


def battery_records(tasks: tuple[str, ...], scores: dict[str, tuple[float, float]]) -> list[dict]:
    """Every row at every test size (1x-4x) and seed: exact match and per token both the row's score at the
    largest training size, then past it; 100 examples of 4 answer tokens."""
    out = []
    for task in tasks:
        trained = TASKS[task].train_sizes[1]
        for row, (inside, past) in scores.items():
            for size in TASKS[task].test_sizes((1, 2, 4)):
                score = inside if size == trained else past
                for seed in SEEDS:
                    hits = round(100 * score)
                    record = {"task": task, "scheme": row, "seed": seed, "size": size, "depth": None}
                    out.append(
                        record | {"examples": 100, "hits": hits, "tokens": 400, "token_hits": 4 * hits}
                    )
    return out


def scenario_scores(ahead: list[str], behind: list[str], verdict: Verdict) -> dict[str, tuple[float, float]]:
    """Every row learned (100 % at the training size); past it the rows ahead at 90 % and those behind at 10 %
    (agree), the other way round (disagree), or all at 50 % (inconclusive)."""
    high, low = {Verdict.AGREE: (0.9, 0.1), Verdict.DISAGREE: (0.1, 0.9), Verdict.INCONCLUSIVE: (0.5, 0.5)}[
        verdict
    ]
    return {row: (1.0, high) for row in ahead} | {row: (1.0, low) for row in behind}


def extension_records(key: str, verdict: Verdict) -> list[dict]:
    """Passkey records of rope+pi4, rope+ft4 and rope+yarn4, every seed learned (100 % at 32). For PI's claim
    the score at 128 (4x): PI 90 % and plain 10 % (agree), the other way round, or both 50 %. For YaRN's, the
    fine-tuning checks at 128 every 100 steps to 1,000: PI ends at 90 %, reached at step 1,000; each other row
    is at 50 % until the step given for it, then at 90 % (None: never)."""
    pi_scores = verdict if key == "pi-passkey-tasks" else Verdict.INCONCLUSIVE
    scores = scenario_scores(["rope+pi4"], ["rope+ft4"], pi_scores) | {"rope+yarn4": (1.0, 0.5)}
    reach: dict[str, list[int | None]] = {"rope+pi4": [1000] * 3, "rope+ft4": [1000] * 3}
    if key != "pi-passkey-tasks":
        other = "rope+pi4" if key == "yarn-steps-pi-tasks" else "rope+ft4"
        yarn, others = {
            Verdict.AGREE: ([0, 100, 100], [800, 900, 1000]),
            Verdict.DISAGREE: ([None] * 3, [300, 400, 500]),  # YaRN never: counted at 1,100
            Verdict.INCONCLUSIVE: ([0, 500, 1000], [400, 500, 600]),
        }[verdict]
        reach |= {"rope+yarn4": yarn} | ({} if other == "rope+pi4" else {other: others})
    reach.setdefault("rope+yarn4", [1000] * 3)

    def checks(at: int | None) -> list[list[float]]:
        return [[step, 0.9 if at is not None and step >= at else 0.5] for step in range(0, 1001, 100)]

    return [
        r
        | {"learned_at": 1000, "extended_at": None, "extend_budget": 1000}
        | {"extend_checks": checks(reach[r["scheme"]][r["seed"]])}
        for r in battery_records(("passkey",), scores)
    ]


def length_records(ahead: list[str], behind: list[str], verdict: Verdict) -> list[dict]:
    """Every row at 1.8 bits per byte at 64 tokens (seeds 1.79, 1.80, 1.81); at 1,024 the rows ahead stay at
    1.8 and those behind rise to 2.1 (agree), the other way round (disagree), or all rise by 0.00, 0.02 and
    0.04 over the seeds (inconclusive: equal, and holding 0.02 bits per byte)."""
    out = []
    for row in ahead + behind:
        for i, seed in enumerate(SEEDS):
            start = 1.79 + 0.01 * i
            if verdict is Verdict.INCONCLUSIVE:
                end = start + 0.02 * i
            else:
                end = start + (0.0 if (row in ahead) == (verdict is Verdict.AGREE) else 0.3)
            for length, bpb in ((64, start), (1024, end)):
                base = {"scheme": row, "variant": "plain" if row == "rope" else "", "seed": seed}
                out.append(base | {"length": length, "mode": "windows", "status": "ok", "bpb": bpb})
    return out


def extend_records(key: str, verdict: Verdict) -> list[dict]:
    """Passkey (the base model retrieves every key at 64; after fine-tuning at 256, PI's effective window 256
    and plain's 64 in every seed, the other way round, or both spread over 64-256), or the fine-tuning curves,
    every 10 steps to 100, of PI (reaching its end, 1.8, at step 100), YaRN and plain, given by the step at
    which each reaches 1.8."""
    if key == "pi-passkey":
        pi, plain = {
            Verdict.AGREE: ([256] * 3, [64] * 3),
            Verdict.DISAGREE: ([64] * 3, [256] * 3),
            Verdict.INCONCLUSIVE: ([64, 256, 128], [128, 64, 256]),
        }[verdict]
        cells = [("plain", "before", 64, [64] * 3), ("pi", "after", 256, pi), ("plain", "after", 256, plain)]
        return [
            {"row": row, "seed": seed, "phase": phase, "length": n, "passkey": 1.0, "passkey_windows": 40}
            | {"effective_window": window}
            for row, phase, n, windows in cells
            for seed, window in zip(SEEDS, windows, strict=True)
        ]
    other = "plain" if key == "yarn-steps-plain" else "pi"
    reach = {"yarn": [0, 10, 10], "plain": [100, 90, 100], "pi": [100, 100, 100]}
    if verdict is Verdict.DISAGREE:
        reach |= {"yarn": [None] * 3, "plain": [30, 40, 50]}  # YaRN never reaches it: counted at 110
    if verdict is Verdict.INCONCLUSIVE:
        reach |= {"yarn": [0, 50, 100], other: [40, 50, 60]} if other == "plain" else {"yarn": [0, 90, 100]}
    return [
        {"row": row, "seed": seed, "step": step, "val_bpb": 1.8 if at is not None and step >= at else 1.9}
        for row, steps in reach.items()
        for seed, at in zip(SEEDS, steps, strict=True)
        for step in range(0, 101, 10)
    ]


def verdict_of(key: str, experiment: str, records: list[dict]) -> Verdict:
    [found] = [f for f in findings(experiment, records) if f.claim.key == key]
    return found.verdict


@pytest.mark.parametrize("verdict", list(Verdict))
@pytest.mark.parametrize("key", [*BATTERY, *LENGTH, *EXTEND, *EXTENSION])
def test_every_claim_returns_each_verdict_on_made_up_results(key: str, verdict: Verdict) -> None:
    if key in BATTERY:
        tasks, ahead, behind = BATTERY[key]
        records = battery_records(tasks, scenario_scores(ahead, behind, verdict))
        assert verdict_of(key, "tasks", records) is verdict
    elif key in LENGTH:
        assert verdict_of(key, "length", length_records(*LENGTH[key], verdict)) is verdict
    elif key in EXTENSION:
        assert verdict_of(key, "tasks", extension_records(key, verdict)) is verdict
    else:
        assert verdict_of(key, "extend", extend_records(key, verdict)) is verdict


def test_every_claim_is_tested_above_and_declared_once() -> None:
    keys = [c.key for c in CLAIMS]
    assert len(set(keys)) == len(keys) and set(keys) == {
        *BATTERY,
        *LENGTH,
        *EXTEND,
        *EXTENSION,
        "zoology-mqar",
    }
    assert {c.experiment for c in CLAIMS} == {"tasks", "length", "extend"}


def test_zoology_is_not_tested_by_a_battery_of_attention_rows() -> None:
    records = battery_records(("mqar",), {"rope": (1.0, 0.9), "alibi": (1.0, 0.1)})
    [zoology] = [f for f in findings("tasks", records) if f.claim.key == "zoology-mqar"]
    assert zoology.verdict is Verdict.INCONCLUSIVE and zoology.reason.startswith(
        "not tested by this experiment"
    )


def test_a_row_that_did_not_learn_is_left_out_and_named() -> None:
    scores = scenario_scores(["path"], ["rope"], Verdict.AGREE)
    records = battery_records(("copy", "reverse"), scores)
    records = [
        r | {"hits": 6} if (r["task"], r["scheme"], r["size"]) == ("copy", "path", 8) else r for r in records
    ]
    [path] = [f for f in findings("tasks", records) if f.claim.key == "path-copy"]
    assert path.verdict is Verdict.INCONCLUSIVE  # copy cannot say, though reverse agrees
    assert "not learned: path copy, no seed at 95 % exact match at 8 (seeds: 6 %" in path.reason
    assert "path reverse exact match past 8 above rope reverse exact match past 8" in path.reason
    assert all("copy" not in e.label for e in path.estimates)
    # averaged over tasks (Ruoss), the task PaTH did not learn is left out and the others decide
    scores = scenario_scores(["rope+random"], ["rope"], Verdict.AGREE)
    records = battery_records(("copy", "counting"), scores)
    records = [
        r | {"hits": 50} if (r["task"], r["scheme"], r["size"]) == ("copy", "rope", 8) else r for r in records
    ]
    [ruoss] = [f for f in findings("tasks", records) if f.claim.key == "ruoss-rope"]
    assert (
        ruoss.verdict is Verdict.AGREE
        and "left out: not learned: rope copy, no seed at 95 % exact match at 8" in ruoss.reason
    )
    assert [e.label for e in ruoss.estimates] == [
        "rope+random counting per token past 16",
        "rope counting per token past 16",
    ]
    # a lower target lets it in
    [lenient] = [f for f in findings("tasks", records, learned=0.5) if f.claim.key == "ruoss-rope"]
    assert "left out" not in lenient.reason and "mean of copy, counting" in lenient.estimates[0].label


def test_extension_claims_read_the_size_fine_tuned_to_count_a_budget_missed_and_leave_out_the_unlearned():
    records = extension_records("pi-passkey-tasks", Verdict.AGREE)
    unlearned = [
        r | {"learned_at": None, "hits": 0} if (r["scheme"], r["seed"]) == ("rope+pi4", 2) else r
        for r in records
    ]
    assert Battery(unlearned).extended("rope+pi4", "passkey", EXACT).seeds == (0, 1)  # seed 2 left out
    [pi] = [f for f in findings("tasks", records) if f.claim.key == "pi-passkey-tasks"]
    assert [e.label for e in pi.estimates] == [
        "rope+pi4 passkey exact match at 128",
        "rope+ft4 passkey exact match at 128",
    ]
    records = extension_records("yarn-steps-pi-tasks", Verdict.DISAGREE)
    [yarn] = [f for f in findings("tasks", records) if f.claim.key == "yarn-steps-pi-tasks"]
    assert yarn.estimates[0].label == (
        "rope+yarn4 passkey fine-tuning steps to rope+pi4's end (not reached in seeds 0, 1, 2: counted past "
        "the budget)"
    )
    assert yarn.estimates[0].value == 1100 and yarn.estimates[1].value == 1000
    # seed 2 of YaRN did not learn the passkey in range (no learned_at: never fine-tuned): left out, not
    # counted; seed 1 learned it, then fell to 40 % at 32 while fine-tuned longer: learned, and counted
    records = [
        r | {"learned_at": None} if (r["scheme"], r["seed"]) == ("rope+yarn4", 2) else r
        for r in extension_records("yarn-steps-pi-tasks", Verdict.AGREE)
    ]
    records = [
        r | {"hits": 40} if (r["scheme"], r["seed"], r["size"]) == ("rope+yarn4", 1, 32) else r
        for r in records
    ]
    [yarn] = [f for f in findings("tasks", records) if f.claim.key == "yarn-steps-pi-tasks"]
    assert yarn.estimates[0].seeds == (0, 1) and yarn.estimates[0].value == 50
    # PI's end is each seed's own: a seed whose PI ends lower is reached sooner
    records = [
        r | {"extend_checks": [[0, 0.4], [100, 0.5]]} if (r["scheme"], r["seed"]) == ("rope+pi4", 0) else r
        for r in extension_records("yarn-steps-plain-tasks", Verdict.AGREE)
    ]
    read = Battery(records)
    targets = {seed: points[-1][1] for seed, points in read.extension_curve("rope+pi4", "passkey").items()}
    assert targets == {0: 0.5, 1: 0.9, 2: 0.9}
    plain = read.extension_steps("rope+ft4", "passkey", targets, "PI")
    assert plain.value == (0 + 900 + 1000) / 3  # every seed reached: no note
    assert plain.label == "rope+ft4 passkey fine-tuning steps to PI's end"
    with pytest.raises(Inconclusive, match=r"^missing rows: no seed of rope\+ft4 passkey shared with PI$"):
        read.extension_steps("rope+ft4", "passkey", {7: 0.5}, "PI")
    # rows without their checks (cells from before the extension rows) are not recorded
    records = [{k: v for k, v in r.items() if k != "extend_checks"} for r in records]
    [yarn] = [f for f in findings("tasks", records) if f.claim.key == "yarn-steps-pi-tasks"]
    assert yarn.reason == "not recorded: fine-tuning checks of rope+pi4 passkey"
    # rows without extended_at are judged as every other row, on their score at 32 (seed 1's 40 %: out)
    records = [{k: v for k, v in r.items() if k != "extended_at"} for r in records]
    assert Battery(records).seeds_learned("passkey", "rope+yarn4") == (0, 1, 2)


def test_todays_battery_records_make_per_token_claims_not_recorded() -> None:
    scores = scenario_scores(["rope+random"], ["rope"], Verdict.AGREE)
    records = [
        {k: v for k, v in r.items() if k not in ("tokens", "token_hits")}
        for r in battery_records(("copy",), scores)
    ]
    by_key = {f.claim.key: f for f in findings("tasks", records)}
    assert by_key["ruoss-rope"].verdict is Verdict.INCONCLUSIVE
    assert by_key["ruoss-rope"].reason == "not recorded: per token accuracy of rope+random copy"


def test_findings_without_records_are_inconclusive_missing_rows() -> None:
    for experiment in ("tasks", "length", "extend"):
        found = findings(experiment, [])
        assert found and all(f.verdict is Verdict.INCONCLUSIVE for f in found)
        assert all(f.reason.startswith(("missing rows", "not tested")) for f in found)
    with pytest.raises(ValueError, match="^no experiment 'battery': one of tasks, length, extend$"):
        findings("battery", [])


def two_findings() -> list[Finding]:
    """One finding with two estimates (a pipe and a line break in its texts), one with none."""
    first = Claim("k", "A | B", 2024, "x beats\ny", "length", "bits per byte", lambda _: None)  # type: ignore
    second = Claim("j", "C", 2023, "z", "tasks", "exact match", lambda _: None)  # type: ignore
    x = Estimate("x bpb", 1.5, 1.25, math.inf, 3, (1, 2, 3))
    y = Estimate("y bpb", 2.0, -math.inf, 2.5, 2, (4, 5))
    return [
        Finding(first, Verdict.AGREE, (x, y), "x below y"),
        Finding(second, Verdict.INCONCLUSIVE, (), "not learned: z"),
    ]


def test_the_markdown_table_is_exact() -> None:
    assert claims_markdown(two_findings()) == (
        "| paper | claim | metric | verdict | why | numbers used |\n"
        "| --- | --- | --- | --- | --- | --- |\n"
        "| A \\| B 2024 | x beats y | bits per byte | **agree** | x below y "
        "| x bpb 1.500 [1.250, inf] (n 3); y bpb 2.000 [-inf, 2.500] (n 2) |\n"
        "| C 2023 | z | exact match | **inconclusive** | not learned: z | none |\n"
    )
    assert claims_markdown([]) == (
        "| paper | claim | metric | verdict | why | numbers used |\n| --- | --- | --- | --- | --- | --- |\n"
    )


def test_the_json_and_the_results_section_are_exact(tmp_path) -> None:
    found = two_findings()
    expected = [
        {
            "key": "k",
            "paper": "A | B",
            "year": 2024,
            "statement": "x beats\ny",
            "experiment": "length",
            "metric": "bits per byte",
            "verdict": "agree",
            "reason": "x below y",
            "estimates": [
                {"label": "x bpb", "value": 1.5, "lo": 1.25, "hi": None, "n": 3, "seeds": [1, 2, 3]},
                {"label": "y bpb", "value": 2.0, "lo": None, "hi": 2.5, "n": 2, "seeds": [4, 5]},
            ],
        },
        {
            "key": "j",
            "paper": "C",
            "year": 2023,
            "statement": "z",
            "experiment": "tasks",
            "metric": "exact match",
            "verdict": "inconclusive",
            "reason": "not learned: z",
            "estimates": [],
        },
    ]
    assert claims_json(found) == expected
    assert claims_blocks(found) == [
        Heading("Claims"),
        Paragraph(ABOUT),
        Paragraph(claims_markdown(found).removesuffix("\n")),
    ]
    path = write_claims(tmp_path, "length", found)
    assert path == tmp_path / "claims.json"
    text = path.read_text()
    assert text == json.dumps({"experiment": "length", "claims": expected}, indent=1) + "\n"
    assert text.startswith('{\n "experiment": "length",\n "claims": [\n  {\n   "key": "k",')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claims.json"]  # nothing left half-written


def test_the_extension_reads_its_training_length_from_its_grid() -> None:
    """The base model is asked at the grid's training length (default: the extension's default, 64)."""
    records = extend_records("pi-passkey", Verdict.AGREE)  # the base retrieves at 64
    read = evidence("extend", records, None, 0.9)
    assert isinstance(read, Extend) and (read.train_length, read.target) == (64, 0.9)
    assert evidence("extend", records, {"train_length": 32}, 0.5).train_length == 32
    assert verdict_of("pi-passkey", "extend", records) is Verdict.AGREE
    [at_32] = [f for f in findings("extend", records, {"train_length": 32}) if f.claim.key == "pi-passkey"]
    assert at_32.verdict is Verdict.INCONCLUSIVE
    assert at_32.reason == "missing rows: plain passkey before fine-tuning at 32"
    [strict] = [f for f in findings("extend", records, None, learned=1.01) if f.claim.key == "pi-passkey"]
    assert strict.reason == "not learned: the base model finds 100 % of keys at 64 (target 101 %)"


class Reads:
    """A stand-in for `evidence.Battery` that notes the (task, row) pairs a claim reads."""

    def __init__(self, tasks: list[str]) -> None:
        self.tasks, self.read = tasks, set()

    def above(self, row: str, other: str, tasks: list[str] | None, metric: str) -> Check:
        self.read |= {(t, r) for t in (self.tasks if tasks is None else tasks) for r in (row, other)}
        return Check(Verdict.INCONCLUSIVE, "")

    def drops(self, row: str, task: str, metric: str) -> Check:
        self.read.add((task, row))
        return Check(Verdict.INCONCLUSIVE, "")

    def extended_above(self, row: str, other: str, task: str, metric: str) -> Check:
        self.read |= {(task, row), (task, other)}
        return Check(Verdict.INCONCLUSIVE, "")

    def fewer_extension_steps(self, row: str, other: str, task: str, reference: str) -> Check:
        self.read |= {(task, row), (task, other)}
        return Check(Verdict.INCONCLUSIVE, "")


def test_the_default_battery_runs_every_cell_a_claim_reads_and_passkey_only_those() -> None:
    """The rows a task runs on by default (`battery.CLAIMED_ROWS`) are the rows the claims read: dropping one
    would leave a claim unread, keeping another would only cost time. A claim whose rows are not all default
    rows (learned + random, NoPE + SSMax) is not run by default."""
    settings = battery.Settings()
    grid = {"schemes": settings.schemes, "task_rows": settings.task_rows(settings.schemes)}
    read = set()
    for claim in (c for c in CLAIMS if c.experiment == "tasks"):
        reads = Reads(list(settings.tasks))
        claim.check(reads)
        if {r for _, r in reads.read} <= set(settings.schemes):
            read |= {(t, r) for t, r in reads.read if t in settings.tasks}
    ran = {(t, r) for t in settings.tasks for r in battery.rows_of(grid, t)}
    assert read <= ran
    assert {r for t, r in read if t == "passkey"} == set(battery.CLAIMED_ROWS["passkey"])
    assert battery.rows_of(grid, "passkey") == [
        *("rope", "alibi", "nope", "rope+random", "rope+ft4", "rope+pi4", "rope+yarn4")
    ]
    cheap, plain = ("copy", "reverse", "selective-copy"), set(settings.schemes) - set(battery.EXTENSION_ROWS)
    assert ran == {(t, r) for t in cheap for r in plain} | {(t, r) for t, r in read if t == "passkey"}
