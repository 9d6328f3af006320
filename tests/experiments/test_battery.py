"""The task battery's pieces (octlm/experiments/battery.py): batches and their answer mask, the
answer-masked loss and the exact-match and per-token scores against references written here, MQAR's withheld
answers, randomized positions, rows, what training draws, training until learned (stopped at the target, or at
the cap), and a sanity check that the tasks measure position: hide the order of the prompt and reverse cannot
be learned; show it and it is."""

from __future__ import annotations

import re
import signal
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch
from processes import signal_when
from tiny import PYTHON

from octlm.errors import UserError
from octlm.experiments import battery, battery_train
from octlm.experiments.battery import Cell, Row, Settings
from octlm.experiments.task_batches import (
    answer_loss,
    batch_of,
    exact_matches,
    random_positions,
    token_counts,
)
from octlm.experiments.tasks import BOS, EOS, PAD, SEP, Copy, Example, MultiQueryRecall, Passkey, Reverse

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}


def test_batch_of_pads_after_the_end_and_shifts_targets_by_one() -> None:
    short, long = Example.of([7, SEP], [7]), Example.of([5, 6, SEP], [6, 5])
    ids, targets, mask = batch_of([short, long])
    # short: <bos> 7 <sep> 7 <eos>; long: <bos> 5 6 <sep> 6 5 <eos>
    assert ids.tolist() == [[BOS, 7, SEP, 7, EOS, PAD], [BOS, 5, 6, SEP, 6, 5]]
    assert targets.tolist() == [[7, SEP, 7, EOS, PAD, PAD], [5, 6, SEP, 6, 5, EOS]]
    assert mask.tolist() == [
        [False, False, True, True, False, False],
        [False, False, False, True, True, True],
    ]
    assert targets[mask].tolist() == [7, EOS, 6, 5, EOS]  # exactly the answers and their <eos>


def test_answer_loss_is_the_mean_cross_entropy_over_the_answer_tokens_only() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 9, generator=generator)
    targets = torch.randint(0, 9, (2, 5), generator=generator)
    mask = torch.tensor([[False, True, True, False, False], [False, False, False, False, True]])
    z = logits.double().numpy()
    log_probs = (
        z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
    )
    expected = -np.mean(
        [log_probs[b, t, targets[b, t]] for b, t in zip(*np.nonzero(mask.numpy()), strict=True)]
    )
    assert float(answer_loss(logits, targets, mask)) == pytest.approx(expected, abs=1e-6)
    logits[0, 0] += 100.0  # a prompt position: no effect
    assert float(answer_loss(logits, targets, mask)) == pytest.approx(expected, abs=1e-6)


def test_exact_matches_needs_every_answer_token_and_ignores_the_prompt() -> None:
    targets = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, 3]])
    mask = torch.tensor([[False, True, True]] * 3)
    guesses = torch.tensor([[0, 2, 3], [1, 2, 0], [1, 0, 3]])  # prompt wrong; last wrong; first answer wrong
    logits = torch.nn.functional.one_hot(guesses, 4).float()
    assert exact_matches(logits, targets, mask).tolist() == [True, False, False]


def test_token_counts_leave_the_eos_out_and_count_each_answer_token() -> None:
    targets = torch.tensor([[1, 2, EOS], [1, 2, EOS], [4, 5, EOS]])
    mask = torch.tensor([[False, True, True], [True, True, True], [True, True, True]])
    guesses = torch.tensor([[0, 2, 0], [1, 0, EOS], [4, 5, EOS]])  # eos wrong; second wrong; all right
    logits = torch.nn.functional.one_hot(guesses, 6).float()
    assert token_counts(logits, targets, mask) == (1 + 1 + 2, 1 + 2 + 2)
    assert exact_matches(logits, targets, mask).tolist() == [False, False, True]


def test_mqar_never_reads_an_answer_back_and_is_still_scored_on_it() -> None:
    """After the separator a model reads the queried keys and blanks, never a value; its targets are the
    values, one per query."""
    cell = Cell(MultiQueryRecall, Row.parse("rope", 1), 0, replace(Settings(), batch_size=64, model=TINY))
    ids, targets, mask = battery_train.training_batch(cell, np.random.default_rng(0))
    first_value = MultiQueryRecall.ids(["v0"])[0]  # the specials and the keys come before the values
    for row in range(ids.shape[0]):
        after = ids[row, int((ids[row] == SEP).nonzero()[0]) :].tolist()
        assert all(t < first_value for t in after) and PAD in after
        assert all(t >= first_value for t in targets[row][mask[row]].tolist()[:-1])
    assert int((mask & (targets != EOS)).sum()) == int((mask.sum(-1) - 1).sum())


def test_per_token_counts_recomputed_example_by_example() -> None:
    """A cell's counts against the model run on each example alone, its answer read token by token here."""
    settings = replace(Settings(), steps=30, batch_size=16, examples=6, model=TINY, factors=(1,))
    for task in (Copy, MultiQueryRecall):
        cell = Cell(task, Row.parse("rope", 1), 0, settings)
        model, _ = battery.train_cell(cell)
        examples = [task.example(np.random.default_rng(seed), 5) for seed in range(6)]
        counts = battery.score(model, cell, examples, torch.Generator())
        hits = token_hits = tokens = 0
        for e in examples:
            with torch.no_grad():
                guess = model(torch.tensor([e.inputs[:-1]]))[0][0].argmax(-1).tolist()
            marked = [i for i, m in enumerate(e.answer) if m]  # token i is predicted at position i - 1
            right = [guess[i - 1] == e.tokens[i] for i in marked]
            hits += all(right)
            token_hits, tokens = token_hits + sum(right[:-1]), tokens + len(right) - 1  # <eos> left out
        assert (counts.hits, counts.token_hits, counts.tokens) == (hits, token_hits, tokens), task.name
        assert tokens == 6 * 5  # five items, or five queries, each


class One(Copy):
    """Copy one item of two: a tiny model learns it in a few dozen steps."""

    name = "one"
    symbols = ("a", "b")
    train_sizes = (1, 1)


def test_training_stops_once_the_held_out_set_reaches_the_target() -> None:
    settings = replace(Settings(), steps=400, check_every=10, batch_size=16, examples=20, model=TINY)
    model, info = battery.train_cell(Cell(One, Row.parse("rope", 1), 0, settings))
    assert info["learned_at"] is not None and info["learned_at"] < 400 and info["steps"] == info["learned_at"]
    steps = [step for step, _ in info["checks"]]
    assert steps == list(range(10, info["learned_at"] + 1, 10)) and info["checks"][-1][1] >= 0.99
    assert all(exact < 0.99 for _, exact in info["checks"][:-1])
    records, _ = battery.run_cell(Cell(One, Row.parse("rope", 1), 0, settings))
    assert {(r["steps"], r["learned_at"]) for r in records} == {(info["steps"], info["learned_at"])}


def test_training_stops_at_the_cap_when_the_task_is_not_learned() -> None:
    settings = replace(
        Settings(), steps=7, check_every=3, batch_size=8, examples=10, model=TINY, factors=(1,)
    )
    records, info = battery.run_cell(Cell(ShuffledReverse, Row.parse("rope", 1), 0, settings))
    assert [step for step, _ in info["checks"]] == [3, 6, 7]  # every 3 steps, and at the cap
    assert {(r["steps"], r["learned_at"]) for r in records} == {(7, None)}


def test_the_held_out_set_is_its_own_stream_fixed_and_at_the_largest_training_size() -> None:
    """The size the tables judge "learned" at (evidence.Battery.learned), not the whole training range."""
    settings = replace(Settings(), examples=50, model=TINY)
    cell = Cell(Spy, Row.parse("rope", 1), 3, settings)
    Spy.asked.clear()
    first = battery_train.held_out_set(cell)
    assert first == battery_train.held_out_set(cell) and Spy.asked == [5] * 100 and len(first) == 50
    passkey = battery_train.held_out_set(
        Cell(Passkey, Row.parse("rope", 1), 3, replace(settings, examples=12))
    )
    at_largest = len(Passkey.example(np.random.default_rng(0), Passkey.train_sizes[1]).tokens)
    assert len(passkey) == 2 * len(Passkey.depths) and {len(e.tokens) for e in passkey} == {at_largest}
    train = battery_train.training_examples(cell, np.random.default_rng([3, 0]), 50)
    assert first != train


def test_random_positions_are_a_sorted_subset_spread_over_the_range() -> None:
    generator = torch.Generator().manual_seed(0)
    draws = [random_positions(12, 100, generator) for _ in range(200)]
    for p in draws:
        assert p.dtype == torch.long and p.shape == (12,) and bool((p.diff() > 0).all())
        assert int(p[0]) >= 0 and int(p[-1]) < 100
    seen = torch.cat(draws)
    assert int(seen.max()) == 99 and int(seen.min()) == 0 and len(set(seen.tolist())) > 95
    assert random_positions(5, 5, generator).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(UserError, match="6 positions do not fit in 0 .. 4"):
        random_positions(6, 5, generator)


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("rope", ("rope", False, (), False)),
        ("rope+random", ("rope", True, (), False)),
        ("alibi+nope1+nope0", ("alibi", False, (0, 1), False)),
        ("learned+random+nope1", ("learned", True, (1,), False)),
        ("nope+ssmax", ("nope", False, (), True)),
        ("rope+nope1+ssmax", ("rope", False, (1,), True)),
        ("rope+pi4", ("rope", False, (), False)),
    ],
)
def test_rows_parse(spec: str, parsed: tuple) -> None:
    row = Row.parse(spec, n_layers=2)
    assert (row.scheme, row.randomized, row.nope_layers, row.ssmax) == parsed and row.spec == spec


@pytest.mark.parametrize(
    ("spec", "extension", "factor", "scaling"),
    [
        ("rope", None, 1, "none"),
        ("rope+ft4", "ft", 4, "none"),
        ("rope+pi4", "pi", 4, "linear"),
        ("rope+ntk2", "ntk", 2, "ntk"),
        ("rope+yarn64", "yarn", 64, "yarn"),
        ("ROPE+random+pi8", "pi", 8, "linear"),
    ],
)
def test_extension_rows_parse(spec: str, extension: str | None, factor: int, scaling: str) -> None:
    row = Row.parse(spec, n_layers=2)
    assert (row.extension, row.extend_factor, row.rope_scaling) == (extension, factor, scaling)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bogus", "unknown position scheme 'bogus' in row 'bogus'"),
        ("rope+rand", "'rand' is not random, ssmax, nopeK (K a layer index) or ftF, piF, ntkF, yarnF"),
        ("rope+pi", "'pi' is not random"),
        ("rope+pi4x", "'pi4x' is not random"),
        (
            "alibi+pi4",
            "row 'alibi+pi4': +pi4 fine-tunes RoPE's frequencies; use rope+... (the scheme here is alibi)",
        ),
        ("rope+pi1", "extension factor 1 must be from 2 to 64"),
        ("rope+ft65", "extension factor 65 must be from 2 to 64"),
        ("rope+pi4+ft4", "one of +ft, +pi, +ntk, +yarn at most"),
        ("rope+nope2", "layer 2 is not one of 0 .. 1"),
        ("nope+random", "nope reads no position ids"),
        ("cope+random", "cope reads no position ids (only their order)"),
        ("stick-breaking+random", "stick-breaking reads no position ids (only their order)"),
    ],
)
def test_bad_rows_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        Row.parse(spec, n_layers=2)


class Spy(Reverse):
    """Reverse, recording every size it is asked for."""

    name = "spy"
    train_sizes = (2, 5)
    asked: ClassVar[list[int]] = []

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        cls.asked.append(size)
        return super().example(rng, size)


def test_training_draws_only_training_sizes_and_scoring_only_test_sizes() -> None:
    settings = replace(Settings(), steps=6, batch_size=16, examples=3, model=TINY, factors=(1, 2, 4))
    cell = Cell(Spy, Row.parse("rope", 1), 0, settings)
    Spy.asked.clear()
    model, info = battery.train_cell(cell)
    # max_tokens' one draw sizes the model's context first, then the held-out set, then training
    sizing, held_out, trained = Spy.asked[:1], Spy.asked[1:4], Spy.asked[4:]
    assert sizing == [5] and held_out == [5, 5, 5]
    assert len(trained) == 6 * 16 and set(trained) == {2, 3, 4, 5}  # every training size
    Spy.asked.clear()
    records = battery.score_cell(model, cell)
    assert sorted(set(Spy.asked)) == [5, 10, 20] and [r["size"] for r in records] == [5, 10, 20]
    assert info["parameters"] == model.num_parameters() and info["first_loss"] > info["final_loss"] > 0


def test_a_learned_table_past_its_rows_reads_no_rows_and_randomized_positions_reach_every_size() -> None:
    settings = replace(Settings(), steps=2, batch_size=4, examples=3, model=TINY, factors=(1, 2))
    plain = battery.run_cell(Cell(Reverse, Row.parse("learned", 1), 0, settings))[0]
    assert [(r["size"], r["status"], r["hits"], r["token_hits"]) for r in plain][1] == (
        16,
        "no rows",
        None,
        None,
    )
    assert plain[1]["tokens"] == 3 * 16  # counted, so that the claims count them wrong
    assert plain[0]["status"] == "ok" and plain[0]["examples"] == 3 and 0 <= plain[0]["hits"] <= 3
    randomized = battery.run_cell(Cell(Reverse, Row.parse("learned+random", 1), 0, settings))[0]
    assert [r["status"] for r in randomized] == ["ok", "ok"]


def test_cells_are_deterministic_by_seed() -> None:
    settings = replace(Settings(), steps=3, batch_size=4, examples=4, model=TINY, factors=(1,))
    runs = [battery.run_cell(Cell(Reverse, Row.parse("alibi", 1), seed, settings)) for seed in (0, 0, 1)]
    assert runs[0][0] == runs[1][0] and runs[0][1]["final_loss"] == runs[1][1]["final_loss"]
    assert runs[0][1]["final_loss"] != runs[2][1]["final_loss"]


class ShortReverse(Reverse):
    name = "short-reverse"
    train_sizes = (4, 4)


class ShuffledReverse(ShortReverse):
    """Reverse with the prompt's items shuffled: the model sees which items, never their order."""

    name = "shuffled-reverse"

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        example = super().example(rng, size)
        prompt = list(example.tokens[1 : size + 1])
        rng.shuffle(prompt)
        return Example((BOS, *prompt, *example.tokens[size + 1 :]), example.answer)


@pytest.mark.slow
def test_reverse_needs_the_order_a_model_can_see() -> None:
    """Four items from 16: with the order hidden, the best guess of the answer is one of 4! = 24 orders (4 %).
    Measured (seeds 0, 1; 400 examples): 100 % against 0.3-4 %."""
    settings = replace(Settings(), steps=200, examples=200, factors=(1,))
    seen, hidden = (
        battery.run_cell(Cell(task, Row.parse("learned", 2), 0, settings))[0][0]["accuracy"]
        for task in (ShortReverse, ShuffledReverse)
    )
    assert seen >= 0.95 and hidden <= 0.09, (seen, hidden)


def test_passkey_splits_its_examples_over_the_depths_and_pools_them_per_size() -> None:
    settings = replace(Settings(), steps=2, batch_size=2, examples=10, model=TINY, factors=(1, 2))
    records = battery.run_cell(Cell(Passkey, Row.parse("rope", 1), 0, settings))[0]
    for size in (32, 64):
        at = [r for r in records if r["size"] == size]
        assert [r["depth"] for r in at] == [None, *Passkey.depths]
        assert [r["examples"] for r in at] == [10] + [2] * 5
        assert at[0]["hits"] == sum(r["hits"] for r in at[1:])
        assert at[0]["token_hits"] == sum(r["token_hits"] for r in at[1:]) and at[0]["tokens"] == 10 * 5
    learned = battery.run_cell(Cell(Passkey, Row.parse("learned", 1), 0, settings))[0]
    assert {r["status"] for r in learned if r["size"] == 64} == {"no rows"}


# Stopping: a cell finishes its step, then the command ends as `octlm train` does on a signal, no cell written

MARKED = """
import sys, os, time
from pathlib import Path
import octlm.experiments.battery_train as battery_train
from octlm.cli import main

real = battery_train.optimizer_step


def marked(*args, **kwargs):  # in every process, spawned workers too (they import this file, not __main__)
    with open({marks!r}, "a") as f:
        f.write(f"{{os.getpid()}} start\\n")
    time.sleep(0.02)  # a signal lands inside the step
    loss = real(*args, **kwargs)
    with open({marks!r}, "a") as f:
        f.write(f"{{os.getpid()}} end\\n")
    return loss


battery_train.optimizer_step = marked
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # real processes (~5-10 s each)
@pytest.mark.parametrize(
    ("signum", "jobs", "code", "line"),
    [
        (signal.SIGINT, 1, 130, "interrupted"),
        (signal.SIGTERM, 1, 143, "stopped by SIGTERM"),
        (signal.SIGTERM, 2, 143, "stopped by SIGTERM"),  # passed on to both workers
        (signal.SIGINT, 2, 130, "interrupted"),  # to the parent alone (not a terminal's whole group)
    ],
)
def test_a_signal_stops_each_cell_after_its_step_and_writes_no_cell(
    signum: int, jobs: int, code: int, line: str, tmp_path: Path
) -> None:
    marks, script = tmp_path / "marks", tmp_path / "marked.py"
    script.write_text(MARKED.format(marks=str(marks)))
    rows, out = ["rope", "alibi"][:jobs], tmp_path / "out"  # a cell per worker
    flags = f"--quick --tasks copy --steps 400 --jobs {jobs} --schemes".split()
    argv = [PYTHON, str(script), "experiment", "tasks", *flags, *rows, "--out", str(out)]

    def started() -> bool:
        pids = {m.split()[0] for m in marks.read_text().splitlines()} if marks.exists() else set()
        return len(pids) == jobs

    rc, _out, err = signal_when(argv, tmp_path, started, signum, "training steps")
    assert rc == code and err.splitlines()[-1] == f"octlm experiment tasks: {line}", err
    assert "Traceback" not in err
    last = dict(mark.split() for mark in marks.read_text().splitlines())  # pid -> its last mark
    assert len(last) == jobs and set(last.values()) == {"end"}  # every cell finished the step it was in
    assert not [p.name for p in out.glob("cells/*") if not p.name.endswith(".lock")]  # no cell, no temporary


def test_factors_past_any_model_are_refused_before_anything_is_built() -> None:
    # the default max_tokens draws an example of the size: at 8e11 items it would allocate terabytes
    settings = battery.Settings(tasks=["copy", "passkey"], factors=(1, 10**11))
    with pytest.raises(UserError) as refused:
        battery.check_settings(settings)
    assert str(refused.value) == (
        "--factors 100000000000 asks copy, passkey for more than the 16,777,216 tokens a model holds; use "
        "factors up to 524,288"
    )
    # the largest factor that fits passkey's 32 characters is accepted by this check
    assert battery.LONGEST // 32 == 524_288 and 524_288 * 32 <= battery.LONGEST < 524_289 * 32
