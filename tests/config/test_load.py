"""Loading a config (octlm/config/load.py) and the `octlm model` command: the built-in configs load, every problem
is listed at once, overrides work from Python and from the CLI, and a TOML file's limits are one line."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest
from configs import problems_of

from octlm.cli import main
from octlm.config import config_fields, config_from_dict, load_config
from octlm.errors import UserError

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


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("model.dmodel", "unknown key model.dmodel; did you mean model.d_model?"),
        ("train.learning_rate", "unknown key train.learning_rate; did you mean train.lr?"),  # KEY_ALIASES
        ("model.n_embd", "unknown key model.n_embd; did you mean model.d_model?"),
        ("model.lr", "unknown key model.lr; did you mean train.lr?"),  # the field of another section
        ("model.D_MODEL", "unknown key model.D_MODEL; did you mean model.d_model?"),
        ("model.zzzzzz", "unknown key model.zzzzzz"),  # nothing close: nothing suggested
        (
            "training.lr",
            "override 'training.lr' must look like section.field with section one of model, data, train; "
            "did you mean train.lr?",
        ),
    ],
)
def test_an_unknown_key_ends_with_the_nearest_field(key: str, problem: str) -> None:
    assert problems_of({}, overrides={key: "3"}) == f"config 'custom' has 1 problem(s): {problem}"


def test_an_unknown_section_ends_with_the_nearest_section() -> None:
    assert problems_of({"trian": {"lr": 1.0}}) == (
        "config 'custom' has 1 problem(s): unknown section [trian]; sections are model, data, train; "
        "did you mean train?"
    )


def test_every_other_librarys_key_name_names_one_of_ours() -> None:
    from octlm.config.load import KEY_ALIASES

    assert set(KEY_ALIASES.values()) <= set(config_fields())
    assert not set(KEY_ALIASES) & {key.partition(".")[2] for key in config_fields()}  # none is ours


def test_scheme_and_source_names_are_read_in_any_case() -> None:
    """`--position ROPE` is `--position rope`: the same config, hash included (a TOML file's value too)."""
    rope = load_config("day1", {"model.position": "rope"})
    shouted = load_config("day1", {"model.position": "ROPE", "data.source": "StdLib"})
    assert (shouted.model.position, shouted.data.source) == ("rope", "stdlib")
    assert shouted == rope and shouted.hash() == rope.hash()
    assert config_from_dict({"model": {"position": "ALiBi"}}).model.position == "alibi"
    assert problems_of({"model": {"norm": "RMSNorm"}}) == (  # only the registries' names: not every choice
        "config 'custom' has 1 problem(s): model.norm = 'RMSNorm' is unknown; choose one of layernorm, rmsnorm; "
        "did you mean rmsnorm?"
    )


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


def test_cli_set_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "--set", "model.position=alibi", "--n-heads", "8"]) == 0
    assert "position=alibi" in capsys.readouterr().out
    assert main(["model", "--set", "no-equals-sign"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_cli_modern_dry_run_prints_parameters_and_logits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "--config", "modern", "--dry-run"]) == 0
    out = capsys.readouterr().out
    # 526,976 = the hand count in tests/model/test_decoder.py::test_modern_parameter_count_by_hand
    assert "parameters: 526,976" in out
    assert "logits [2, 128, 1024]" in out


def test_toml_integer_past_the_digit_limit_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text("[train]\nsteps = " + "9" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="'.*huge.toml' is not valid TOML: Exceeds the limit"):
        load_config(path)


def test_config_fields_picks_sections_and_fields() -> None:
    from octlm.config import config_fields

    assert config_fields("data", "model.vocab_size") == (
        "model.vocab_size",
        "data.source",
        "data.text",
        "data.hub_dataset",
        "data.hub_split",
        "data.hub_text_field",
        "data.hub_max_documents",
        "data.val_fraction",
        "data.data_dir",
    )
    assert len(config_fields()) == 64 and config_fields()[0] == "model.vocab_size"
    with pytest.raises(ValueError, match="model.widht"):
        config_fields("model.widht")
