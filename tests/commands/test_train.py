"""`octlm train`'s command line (octlm/commands/train.py): its --help, grouped, and its own flags (--name,
--out, the old --run-name and --out-dir) refused where they disagree with a --set of the field they give."""

from __future__ import annotations

import argparse

import pytest
from tiny import run_cli

from octlm.commands import train as train_command
from octlm.errors import UserError


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="octlm train")
    train_command.add_arguments(parser)
    return parser.parse_args(argv)


def test_help_is_grouped_and_its_usage_short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = run_cli(["train", "--help"])
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:5] == [
        "usage: octlm train [-h] [--config CONFIG] [--set SECTION.FIELD=VALUE] [--<field> VALUE ...]",
        "                   [--resume RUN_DIR] [--name NAME] [--out RUN_DIR] [--overwrite] [--no-progress]",
        "                   [--threads N]",
        "",
        "train a model (the main job)",
    ]
    titles = [line for line in lines if line and not line.startswith(" ")][2:]
    assert titles == ["options:", "config:", "model:", "data:", "training:", "run:"]
    assert "\n".join(lines[lines.index("config:") : lines.index("config:") + 3]) == (
        "config:\n"
        "  Each flag below sets one field of the config (--config) for this run; --set reaches the same\n"
        "  fields by name. The defaults shown: the built-in day1 config, as this command runs it."
    )
    for line in (
        "  --steps N                   optimizer steps (default: 6000)",
        "  --lr X                      peak learning rate, after warm-up (AdamW) (default: 0.003)",
        "  --name NAME                 run name: the run lives in runs/<name>/ (see --out)",
        "  --mlp NAME                  the MLP's activation; one of gelu, swiglu (default: gelu)",
    ):
        assert line in lines, line
    assert len(lines) < 120 and max(map(len, lines)) <= 98


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--name", "m7", "--set", "train.run_name=m7b"], "--name m7 and --set train.run_name=m7b"),
        (["--run-name", "m7", "--name", "m7b"], "--run-name m7 and --name m7b"),
        (["--out", "runs/m7", "--set", "train.run_name=m8"], "--set train.run_name=m8 and --out runs/m7"),
        (["--out-dir", "a", "--set", "train.out_dir=b"], "--out-dir a and --set train.out_dir=b"),
        (["--out", "a/m7", "--set", "train.out_dir=b"], "--set train.out_dir=b and --out a/m7"),
    ],
)
def test_its_own_flags_and_set_that_disagree_are_refused(argv: list[str], line: str) -> None:
    what = "train.out_dir" if "out_dir" in line else "train.run_name"
    with pytest.raises(UserError) as error:
        train_command.config_and_run(_args(argv))
    assert str(error.value) == f"{line} both set {what}; give only one"


def test_old_and_new_name_through_the_cli_note_then_refuse() -> None:
    code, out, err = run_cli(["train", "--run-name", "m7", "--name", "m7b"])
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "octlm train: note: --run-name is deprecated; give the run name with --name NAME",
        "octlm train: error: --run-name m7 and --name m7b both set train.run_name; give only one",
    ]


def test_flags_that_agree_are_one_run() -> None:
    config, run = train_command.config_and_run(_args(["--name", "m7", "--set", "train.run_name=m7"]))
    assert config.train.run_name == "m7" and str(run.path) == "runs/m7"
    config, run = train_command.config_and_run(_args(["--out", "runs/m7", "--set", "train.run_name=m7"]))
    assert (config.train.out_dir, config.train.run_name, str(run.path)) == ("runs", "m7", "runs/m7")


def test_a_scheme_in_any_case_trains_that_scheme() -> None:
    config, run = train_command.config_and_run(_args(["--position", "ROPE", "--steps", "3"]))
    assert config.model.position == "rope" and str(run.path) == "runs/day1-rope"
