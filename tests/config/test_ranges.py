"""Every number range-checked where it enters (octlm/config/ranges.py): every numeric field has a range, each is
enforced at its bounds, cross-field ranges, and a huge value cut short in the one line."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest
import torch
from configs import SECTION_CLASSES, problems_of

from octlm.cli import main
from octlm.config import Config, config_from_dict
from octlm.config.ranges import SPANS, Span, show

# ------------------------------------------------------------------------------------------------------------
# Every number range-checked where it enters (octlm/config/ranges.py)


def _numeric_fields() -> dict[str, type]:
    return {
        f"{section}.{f.name}": typing.get_type_hints(cls)[f.name]
        for section, cls in SECTION_CLASSES.items()
        for f in dataclasses.fields(cls)
        if typing.get_type_hints(cls)[f.name] in (int, float)
    }


def test_every_number_has_a_range() -> None:
    """A new int or float field must get its span in SPANS; a span for a field that is gone is stale."""
    assert set(SPANS) == set(_numeric_fields())
    defaults = Config().flat()
    assert all(SPANS[key].problem(key, defaults[key]) is None for key in SPANS)  # the defaults are inside


def _outside(span: Span, whole: bool) -> list[float]:
    """The nearest values just outside each finite bound of `span`."""
    below = (
        (span.low if span.low_open else span.low - 1)
        if whole
        else (span.low if span.low_open else math.nextafter(span.low, -math.inf))
    )
    values = [int(below) if whole else below]
    if span.high != math.inf:
        above = (
            span.high + 1 if whole else (span.high if span.high_open else math.nextafter(span.high, math.inf))
        )
        values.append(int(above) if whole else above)
    return values


@pytest.mark.parametrize("key", sorted(SPANS))
def test_each_range_is_enforced_at_its_bounds(key: str) -> None:
    """One step past either end is refused naming the field and the value; the ends themselves (or the
    nearest value inside an open end) pass the span."""
    span, whole = SPANS[key], _numeric_fields()[key] is int
    for value in _outside(span, whole):
        message = problems_of({}, overrides={key: value})
        assert f"{key} = {show(value)}" in message, message
    inside_low = math.nextafter(span.low, math.inf) if span.low_open else span.low
    assert span.problem(key, int(inside_low) if whole else inside_low) is None
    if span.high != math.inf:
        inside_high = math.nextafter(span.high, -math.inf) if span.high_open else span.high
        assert span.problem(key, int(inside_high) if whole else inside_high) is None


def test_seed_range_is_exactly_what_torch_takes_as_distinct_seeds() -> None:
    """torch.manual_seed takes -2**63 .. 2**64 - 1, but -1 aliases 2**64 - 1; 0 .. 2**64 - 1 are distinct."""
    for seed in (0, 2**64 - 1):
        assert config_from_dict({}, overrides={"train.seed": seed}).train.seed == seed
        torch.Generator().manual_seed(seed)
    assert torch.Generator().manual_seed(-1).initial_seed() == 2**64 - 1  # why negatives are refused
    with pytest.raises(ValueError, match="Overflow"):  # torch's own limit is the config's
        torch.Generator().manual_seed(2**64)
    assert "train.seed = 18446744073709551616 does not fit in 64 bits" in problems_of(
        {"train": {"seed": 2**64}}
    )
    assert "train.seed = -1 must be at least 0 (torch seeds are unsigned 64-bit numbers)" in problems_of(
        {"train": {"seed": -1}}
    )


@pytest.mark.parametrize("key", sorted(k for k, kind in _numeric_fields().items() if kind is int))
def test_integers_past_64_bits_are_refused_for_every_whole_number_field(key: str) -> None:
    """TOML and Python integers have no size; torch tensors, safetensors and JSON readers do."""
    for value in (2**64 + 1, -(2**64), 10**40):
        assert f"{key} = {value} does not fit in 64 bits" in problems_of({}, overrides={key: value})


def test_every_range_problem_is_listed_at_once() -> None:
    raw = {
        "model": {"d_model": 0, "rope_base": 0.5, "dropout": 1.0, "n_layers": 2000},
        "data": {"val_fraction": 0.0, "hub_max_documents": 0},
        "train": {"seed": -5, "lr": 0.0, "beta2": 1.0, "sample_tokens": 10**6},
    }
    message = problems_of(raw)
    assert "10 problem(s)" in message, message
    for piece in (
        "model.d_model = 0",
        "model.rope_base = 0.5",
        "model.dropout = 1.0",
        "model.n_layers = 2000",
        "data.val_fraction = 0.0",
        "data.hub_max_documents = 0",
        "train.seed = -5",
        "train.lr = 0.0",
        "train.beta2 = 1.0",
        "train.sample_tokens = 1000000",
    ):
        assert piece in message


def test_cross_field_ranges() -> None:
    assert "train.lr * train.weight_decay = 2 * 0.5 must be below 1" in problems_of(
        {"train": {"lr": 2.0, "weight_decay": 0.5}}
    )
    assert config_from_dict({"train": {"lr": 1.0, "weight_decay": 0.99, "min_lr": 0.0}}).train.lr == 1.0
    assert "model.n_kv_heads = 8 must be at most model.n_heads = 4" in problems_of(
        {"model": {"n_kv_heads": 8}}
    )
    assert "train.min_lr = 0.01 must be at most train.lr = 0.003" in problems_of({"train": {"min_lr": 0.01}})


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"data.data_dir": ""}, "data.data_dir is empty"),
        ({"train.out_dir": " "}, "train.out_dir is empty"),
        ({"data.text": ["a", ""], "data.source": "text"}, "data.text[1] is empty"),
        ({"data.data_dir": "a\0b"}, "data.data_dir = 'a\\x00b' holds a NUL character"),
        ({"data.hub_dataset": "x\0"}, "data.hub_dataset = 'x\\x00' holds a NUL character"),
        ({"data.text": ["ok", "b\0"], "data.source": "text"}, "holds a NUL character"),
        ({"train.run_name": "../up"}, "train.run_name = '../up' must be one folder name"),
        ({"train.run_name": "a/b"}, "train.run_name = 'a/b' must be one folder name"),
        ({"train.run_name": ".."}, "train.run_name = '..' must be one folder name"),
    ],
)
def test_path_fields_must_name_something(overrides: dict, needle: str) -> None:
    """An empty path silently means the current folder, a NUL makes Python raise ValueError (not OSError), and
    a run name with '/' puts the run outside train.out_dir."""
    assert needle in problems_of({}, overrides=overrides)


def test_a_huge_value_is_cut_short_in_the_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """int('9' * 5000) raises (Python's 4,300-digit limit), so the text stays a string: the message shows
    60 characters of it, not 5,000."""
    assert main(["model", "--d-model", "9" * 5000]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and len(err) < 300, err
    assert "(5002 characters) must be a whole number" in err
    assert show(10**400) == "a 1329-bit number"  # str() of a 5,000-digit int raises; this never does
