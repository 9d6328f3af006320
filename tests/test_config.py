"""Config loading and validation (octlm/config/schema.py) and the `octlm model` command: the built-in configs load,
every problem is listed at once, overrides work from Python and from the CLI, and every number is range-checked
where it enters (octlm/config/ranges.py). Fuzzed configs are in tests/test_config_fuzz.py."""

from __future__ import annotations

import dataclasses
import math
import typing
from importlib.resources import files
from pathlib import Path

import pytest
import torch

from octlm.cli import main
from octlm.config import Config, config_from_dict, load_config
from octlm.config.ranges import SPANS, Span, show
from octlm.errors import UserError
from octlm.model.decoder import Decoder

SECTION_CLASSES = {section: type(getattr(Config(), section)) for section in ("model", "data", "train")}


def problems_of(raw: dict, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        config_from_dict(raw, **kwargs)
    return str(info.value)


# ------------------------------------------------------------------------------------------------------------
# The built-in configs


def test_day1_and_modern_load() -> None:
    day1 = load_config("day1")
    assert day1.name == "day1"
    m = day1.model
    assert (m.vocab_size, m.d_model, m.context_length, m.n_layers, m.n_heads, m.d_ff) == (
        1024,
        128,
        128,
        2,
        4,
        512,
    )
    assert (m.position, m.norm, m.mlp, m.bias, m.tie_embeddings) == (
        "learned",
        "layernorm",
        "gelu",
        True,
        True,
    )
    assert load_config().model == m  # the default is day1
    modern = load_config("modern")
    m = modern.model
    assert (m.position, m.rope_layout, m.norm, m.mlp, m.bias, m.d_ff) == (
        "rope",
        "half",
        "rmsnorm",
        "swiglu",
        False,
        344,
    )
    assert modern.problems() == [] and day1.problems() == []


def test_missing_and_malformed_files_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="day1"):  # the message lists the built-in configs
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nd_model = ", encoding="utf-8")
    with pytest.raises(UserError, match="TOML"):
        load_config(bad)
    good = tmp_path / "mine.toml"
    good.write_text('[model]\nposition = "alibi"\nn_heads = 8\n', encoding="utf-8")
    config = load_config(good)
    assert (config.name, config.model.position, config.model.n_heads) == ("mine", "alibi", 8)


def test_builtin_configs_are_package_data_found_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The built-in configs ship inside the package (octlm/config/builtin/, importlib.resources), so an installed wheel
    finds them whatever the working directory; scripts/wheel-check checks the wheel itself."""
    monkeypatch.chdir(tmp_path)  # nowhere near the repository
    configs = files("octlm.config") / "builtin"
    names = sorted(p.name for p in configs.iterdir() if p.name.endswith(".toml"))
    assert names == ["day1.toml", "modern.toml"]
    assert load_config().name == "day1" and load_config("day1").name == "day1"
    assert load_config("modern").model.position == "rope"
    with pytest.raises(UserError, match=r"'nope' does not exist; built-in configs: day1, modern$"):
        load_config("nope")
    assert main(["model", "--config", "modern", "--dry-run"]) == 0
    assert "parameters: 526,976 " in capsys.readouterr().out
    # a relative path to the user's own file still works
    (tmp_path / "mine.toml").write_text('[model]\nposition = "t5"\n', encoding="utf-8")
    assert load_config("mine.toml").model.position == "t5"


# ------------------------------------------------------------------------------------------------------------
# Every problem at once


def test_every_problem_is_listed_at_once() -> None:
    raw = {
        "model": {"d_model": 130, "n_heads": 4, "position": "rotary", "colour": "red", "n_layers": "two"},
        "train": {"lr": "fast"},
    }
    message = problems_of(raw)
    assert "5 problem(s)" in message
    assert "model.colour" in message  # unknown key
    assert "model.n_layers = 'two'" in message and "train.lr = 'fast'" in message  # wrong types
    assert "130" in message and "n_heads = 4" in message  # width not divisible by heads
    assert "'rotary'" in message  # unknown scheme ...
    for scheme in ("learned", "sinusoidal", "rope", "alibi", "t5", "nope"):  # ... and the known ones
        assert scheme in message


def test_rope_odd_head_size_is_listed_with_the_others() -> None:
    raw = {
        "model": {"position": "rope", "d_model": 36, "n_heads": 4, "bogus": 1, "bias": "maybe"},
        "extra": {},
    }
    message = problems_of(raw)
    assert "4 problem(s)" in message
    assert "model.bogus" in message
    assert "model.bias = 'maybe'" in message
    assert "head size" in message and "9" in message  # 36 / 4 = 9
    assert "[extra]" in message
    # The same width is fine for a scheme that does not rotate pairs.
    assert config_from_dict({"model": {"position": "alibi", "d_model": 36, "n_heads": 4}}).model.head_dim == 9


def test_unknown_key_suggests_a_close_name() -> None:
    assert "position" in problems_of({"model": {"positon": "rope"}})


# ------------------------------------------------------------------------------------------------------------
# Overrides


def test_overrides_from_python() -> None:
    day1 = load_config("day1")
    raw = day1.to_dict()
    config = config_from_dict(raw, overrides={"model.position": "rope"})
    assert config.model.position == "rope" and config.model.d_model == 128
    # CLI-style strings are parsed into the field's type.
    config = config_from_dict(
        raw, overrides={"model.d_model": "256", "model.bias": "false", "train.lr": "1e-3"}
    )
    assert (config.model.d_model, config.model.bias, config.train.lr) == (256, False, 1e-3)
    assert "override 'position'" in problems_of(raw, overrides={"position": "rope"})
    assert "must be a whole number" in problems_of(raw, overrides={"model.d_model": "wide"})
    assert load_config("day1", overrides={"model.position": "t5"}).model.position == "t5"


def test_cli_flag_override_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "--position", "rope", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "position=rope" in out
    assert "logits [2, 128, 1024]" in out


def test_cli_bad_width_is_one_line_naming_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "--d-model", "130"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "130" in lines[0]
    assert captured.out == ""


@pytest.mark.parametrize("group, subs", [("export", ["hf", "onnx", "fixtures"]), ("experiment", ["length"])])
def test_command_groups_answer_help(group: str, subs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--help", "-h"):
        assert main([group, flag]) == 0
        out = capsys.readouterr().out.splitlines()
        listed = [line.split()[:2] for line in out if line.startswith(f"  {group} ")]
        assert listed == [[group, sub] for sub in subs], out  # one line each, in the table's order
    assert main([group]) == 2  # without a subcommand it is still a mistake
    assert "needs one of" in capsys.readouterr().err


def test_boolean_fields_are_switches_too() -> None:
    import argparse

    from octlm.config import add_config_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    assert config_from_args(parser.parse_args(["--compile", "--report", "false"])).train.compile is True
    assert config_from_args(parser.parse_args(["--report", "false"])).train.report is False
    assert config_from_args(parser.parse_args([])).train.compile is False


def test_cli_set_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "--set", "model.position=alibi", "--n-heads", "8"]) == 0
    assert "position=alibi" in capsys.readouterr().out
    assert main(["model", "--set", "no-equals-sign"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_cli_modern_dry_run_prints_parameters_and_logits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "--config", "modern", "--dry-run"]) == 0
    out = capsys.readouterr().out
    # 526,976 = the hand count in tests/test_model.py::test_modern_parameter_count_by_hand
    assert "parameters: 526,976" in out
    assert "logits [2, 128, 1024]" in out


# ------------------------------------------------------------------------------------------------------------
# Values that pass the checks but cannot work


def test_huge_integer_for_a_float_field_is_a_user_error() -> None:
    """TOML (tomllib) accepts integers of any size; `float(10**400)` raises OverflowError."""
    with pytest.raises(UserError, match="rope_base"):
        config_from_dict({"model": {"rope_base": 10**400}})


FLOAT_FIELDS = [
    f"{section}.{f.name}"
    for section, cls in SECTION_CLASSES.items()
    for f in dataclasses.fields(cls)
    if typing.get_type_hints(cls)[f.name] is float
]


@pytest.mark.parametrize("key", FLOAT_FIELDS)
def test_nan_is_rejected_for_every_float_field(key: str) -> None:
    """TOML has `nan`; a NaN base or epsilon makes every logit NaN, and NaN fails no `<` or `<=` check."""
    message = problems_of({}, overrides={key: float("nan")})
    assert "nan" in message


@pytest.mark.parametrize(("buckets", "max_distance"), [(32, 16), (32, 8), (8, 4), (2, 1)])
def test_t5_max_distance_not_above_exact_range(buckets: int, max_distance: int) -> None:
    """T5 spaces buckets log(d / (buckets/2)) / log(max_distance / (buckets/2)): max_distance must exceed
    buckets // 2. A config that passes validation must also run; today these divide by log(1) = 0 (or go
    negative) and the bucket index leaves the table."""
    fields = dict(vocab_size=64, d_model=32, context_length=8, n_layers=1, n_heads=4, d_ff=64, position="t5")
    try:
        config = config_from_dict(
            {"model": {**fields, "t5_buckets": buckets, "t5_max_distance": max_distance}}
        )
    except UserError as error:
        assert "t5_max_distance" in str(error)
        return
    logits, _ = Decoder(config.model)(torch.zeros(1, 40, dtype=torch.long))
    assert torch.isfinite(logits).all()


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
    below = (span.low if span.low_open else span.low - 1) if whole else (
        span.low if span.low_open else math.nextafter(span.low, -math.inf))  # fmt: skip
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
    assert "train.seed = -1 must be between 0 and 18,446,744,073,709,551,615" in problems_of(
        {"train": {"seed": -1}}
    )


@pytest.mark.parametrize("key", sorted(k for k, kind in _numeric_fields().items() if kind is int))
def test_integers_past_64_bits_are_refused_for_every_whole_number_field(key: str) -> None:
    """TOML and Python integers have no size; torch tensors, safetensors and JSON readers do."""
    for value in (2**64 + 1, -(2**64), 10**40):
        assert f"{key} = {value} does not fit in 64 bits" in problems_of({}, overrides={key: value})


def test_every_range_problem_is_listed_at_once() -> None:
    raw = {"model": {"d_model": 0, "rope_base": 0.5, "dropout": 1.0, "n_layers": 2000},
           "data": {"val_fraction": 0.0, "hub_max_documents": 0},
           "train": {"seed": -5, "lr": 0.0, "beta2": 1.0, "sample_tokens": 10**6}}  # fmt: skip
    message = problems_of(raw)
    assert "10 problem(s)" in message, message
    for piece in ("model.d_model = 0", "model.rope_base = 0.5", "model.dropout = 1.0", "model.n_layers = 2000",
                  "data.val_fraction = 0.0", "data.hub_max_documents = 0", "train.seed = -5", "train.lr = 0.0",
                  "train.beta2 = 1.0", "train.sample_tokens = 1000000"):  # fmt: skip
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


def test_toml_integer_past_the_digit_limit_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text("[train]\nsteps = " + "9" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="'.*huge.toml' is not valid TOML: Exceeds the limit"):
        load_config(path)
