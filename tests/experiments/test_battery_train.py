"""The battery's extension rows (octlm/experiments/battery_train.py): a RoPE model trained until it learned its
task, then fine-tuned to a longer size for a fixed budget, plainly or with RoPE's frequencies rescaled; which
tasks run them by default; what their records and progress lines say."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import ClassVar

import numpy as np
import pytest
import torch

from octlm.errors import UserError
from octlm.experiments import battery, battery_train
from octlm.experiments.battery import Cell, Settings
from octlm.experiments.rows import Row
from octlm.experiments.tasks import SEP, TASKS, Copy, Example, Passkey
from octlm.model.decoder import Decoder

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}


class Short(Copy):
    """Copy one or two items of two symbols, recording every size asked: a tiny model learns it in a few
    dozen steps."""

    name = "short-copy"
    symbols = ("a", "b")
    train_sizes = (1, 2)
    asked: ClassVar[list[int]] = []

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        cls.asked.append(size)
        return super().example(rng, size)


class First(Short):
    """Answer the first of one or two items: learned in a few dozen steps, and right past the training sizes
    often enough that checks at the extended size differ."""

    name = "first"

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        cls.asked.append(size)
        items = [cls.symbols[i] for i in rng.integers(0, 2, size)]
        return Example.of([*cls.ids(items), SEP], cls.ids(items[:1]))


class Never(Short):
    """Copy whose answer is unrelated to the prompt (a fresh draw): nothing to learn."""

    name = "never"

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        prompt, answer = super().example(rng, size), super().example(rng, size)
        return Example(prompt.tokens[: size + 2] + answer.tokens[size + 2 :], prompt.answer)


SETTINGS = replace(
    Settings(), steps=400, check_every=10, batch_size=16, examples=20, extend_steps=20, model=TINY
)


def cell(spec: str, task: type = Short, settings: Settings = SETTINGS) -> Cell:
    return Cell(task, Row.parse(spec, 1), 0, settings)


def test_the_extended_model_rescales_rope_from_the_training_tokens_to_the_extended_ones() -> None:
    pi = Cell(Passkey, Row.parse("rope+pi4", 2), 0, Settings())
    config, trained, longest = pi.extended_config(), Passkey.max_tokens(32), Passkey.max_tokens(128)
    assert pi.extend_size == 128 and pi.train_tokens == trained
    assert (config.rope_scaling, config.rope_factor, config.rope_original_length) == (
        "linear",
        longest / trained,
        trained,
    )
    assert config.context_length == longest and pi.model_config().rope_scaling == "none"
    assert Cell(Passkey, Row.parse("rope+ft2", 2), 0, Settings()).extended_config().rope_scaling == "none"
    assert Cell(Passkey, Row.parse("rope+yarn4", 2), 0, Settings()).extended_config().rope_scaling == "yarn"


@pytest.mark.parametrize(("spec", "scaling"), [("rope+ft2", "none"), ("rope+pi2", "linear")])
def test_an_extension_row_is_fine_tuned_from_the_learned_model_over_the_extended_sizes(
    spec: str, scaling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = replace(SETTINGS, target=0.9, extend_steps=40)
    base, base_info = battery.train_cell(cell("rope", First, settings))
    assert base_info["learned_at"] is not None and "extend_checks" not in base_info
    started: list[Decoder] = []  # the model each phase starts from, as it starts
    real = battery_train.fit
    monkeypatch.setattr(
        battery_train, "fit", lambda model, *a: started.append(copy.deepcopy(model)) or real(model, *a)
    )
    extended = cell(spec, First, settings)
    First.asked.clear()
    model, info = battery.train_cell(extended)
    assert info["learned_at"] == base_info["learned_at"] and info["checks"] == base_info["checks"]
    # fine-tuning starts from the trained weights, RoPE rescaled as the row says, and changes them
    assert started[1].config.rope_scaling == scaling and started[0].config.rope_scaling == "none"
    assert started[1].state_dict().keys() == base.state_dict().keys()
    assert all(torch.equal(started[1].state_dict()[k], v) for k, v in base.state_dict().items())
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), base.parameters(), strict=True))
    # checked at step 0 and every tenth of the budget, drawing every size up to 2 x 2
    steps = [step for step, _ in info["extend_checks"]]
    assert steps == list(range(0, 41, 4)) and info["extend_steps"] == 40
    fine_tuning = First.asked[-40 * 16 - 10 * 20 :]  # the last draws: 40 batches of 16, 10 checks of 20
    assert set(fine_tuning) == {1, 2, 3, 4}
    held_out = battery_train.held_out_set(extended, 4)
    assert {len(e.tokens) for e in held_out} == {First.max_tokens(4)}
    assert info["extend_checks"][0][1] == battery_train.held_out_exact(started[1], extended, held_out)
    exact = [e for _, e in info["extend_checks"]]
    assert len(set(exact)) > 1 or exact[0] >= 0.9  # checks that read the model, not a constant
    reached = [step for step, e in info["extend_checks"] if e >= settings.target]
    assert info["extended_at"] == (reached[0] if reached else None)
    records, rest = battery.run_cell(extended)
    assert {(r["extended_at"], r["extend_budget"]) for r in records} == {(info["extended_at"], 40)}
    assert "extended_at" not in rest and "extend_checks" in rest


def test_a_model_that_did_not_learn_is_not_fine_tuned() -> None:
    settings = replace(SETTINGS, steps=7, check_every=3, factors=(1,))
    plain, info = battery.run_cell(cell("rope", Never, settings))
    extended, extended_info = battery.run_cell(cell("rope+pi4", Never, settings))
    assert extended_info["extend_checks"] == [] and extended_info["extend_steps"] == 0
    assert {(r["learned_at"], r["extended_at"], r["extend_budget"]) for r in extended} == {(None, None, 20)}
    same = ("size", "hits", "token_hits", "tokens", "steps")  # the model as trained, scored as the plain row
    assert [[r[k] for k in same] for r in extended] == [[r[k] for k in same] for r in plain]


def test_extension_rows_run_on_the_passkey_only_unless_every_row() -> None:
    settings = Settings()
    kept = settings.task_rows(settings.schemes)
    assert kept["passkey"] == ["rope", "alibi", "nope", "rope+random", *battery.EXTENSION_ROWS]
    for task in ("copy", "reverse", "selective-copy"):
        assert kept[task] == [r for r in settings.schemes if r not in battery.EXTENSION_ROWS]
    assert replace(settings, every_row=True).task_rows(settings.schemes) == {}
    assert replace(settings, tasks=["copy"]).task_rows(["rope", "alibi"]) == {}  # nothing left out
    with pytest.raises(UserError, match="copy runs on no extension row .* add --every-row to run it on rope"):
        battery.check_settings(replace(settings, tasks=["copy"], schemes=["rope+pi4"]))


@pytest.mark.parametrize(
    ("extended_at", "learned_at", "says"),
    [
        (40, 200, "learned at step 200, extended at step 40 in"),
        (0, 200, "learned at step 200, extended at step 0 in"),
        (None, 200, "learned at step 200, not extended in 20 in"),
        (None, None, "not learned in 400 steps in"),
    ],
)
def test_the_progress_line_says_when_an_extension_row_extended(
    extended_at: int | None, learned_at: int | None, says: str
) -> None:
    record = {"depth": None, "size": 2, "accuracy": 1.0, "steps": 400, "learned_at": learned_at}
    info = {"train_seconds": 3.0, "first_loss": 2.0, "final_loss": 0.1, "extend_steps": 20}
    line = battery.progress_line(("short-copy", "rope+pi2", 0), [record | {"extended_at": extended_at}], info)
    assert says in line and line.startswith("short-copy rope+pi2 seed 0: ")


def test_the_passkey_task_bounds_its_extended_examples() -> None:
    """The extension draws sizes past training: every draw stays within the extended size's max_tokens."""
    passkey = Cell(TASKS["passkey"], Row.parse("rope+pi4", 2), 0, Settings())
    drawn = battery_train.training_examples(
        passkey, np.random.default_rng(0), 64, (8, 128), Passkey.max_tokens(128)
    )
    assert max(len(e.tokens) for e in drawn) <= Passkey.max_tokens(128) < 2 * Passkey.max_tokens(64)
    with pytest.raises(ValueError, match="past its max_tokens"):
        battery_train.training_examples(passkey, np.random.default_rng(0), 64, (8, 128))
