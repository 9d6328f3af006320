"""One vocabulary of flags (octlm/commands/options.py and the commands that use it): RUN first, --out for what is
written, --threads everywhere that computes, each command's --help listing only the flags it reads, the old
spellings working for one release with one note each, and `octlm --version`.

The flag sets below are written out by hand, not derived from the config classes, so that a field that starts
appearing in a command it does not reach fails here.
"""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import bad_inputs
import pytest
import torch
from tiny import run_cli

from octlm.commands import experiment_length, options
from octlm.commands import train as train_command
from octlm.commands.options import int_in_range, overrides_from_args
from octlm.config import config_fields
from octlm.config.load import SECTIONS
from octlm.config.schema import description
from octlm.errors import UserError
from octlm.positions import scheme_names

ROOT = Path(__file__).resolve().parents[2]
template = bad_inputs.template  # a module-scoped workspace holding a finished tiny run (runs/tiny)

MODEL_FLAGS = {
    "--vocab-size",
    "--d-model",
    "--context-length",
    "--n-layers",
    "--n-heads",
    "--n-kv-heads",
    "--d-ff",
    "--position",
    "--norm",
    "--mlp",
    "--bias",
    "--tie-embeddings",
    "--dropout",
    "--norm-eps",
    "--rope-base",
    "--rope-layout",
    "--sinusoidal-base",
    "--sinusoidal-scale",
    "--t5-buckets",
    "--t5-max-distance",
    "--rope-fraction",
    "--prope-fraction",
    "--xpos-scale-base",
    "--fire-hidden",
    "--fire-threshold",
    "--cope-positions",
    "--nope-layers",
}
DATA_FLAGS = {
    "--source",
    "--text",
    "--hub-dataset",
    "--hub-split",
    "--hub-text-field",
    "--hub-max-documents",
    "--val-fraction",
    "--data-dir",
}
TRAIN_FLAGS = {
    "--steps",
    "--batch-size",
    "--lr",
    "--min-lr",
    "--warmup-steps",
    "--weight-decay",
    "--beta1",
    "--beta2",
    "--grad-clip",
    "--eval-interval",
    "--eval-batches",
    "--checkpoint-interval",
    "--seed",
    "--device",
    "--compile",
    "--out-dir",
    "--run-name",
    "--sample-tokens",
    "--report",
    "--log",
    "--dtype",
}
CONFIG_FLAGS = MODEL_FLAGS | DATA_FLAGS | TRAIN_FLAGS
# What each cell of the length experiment sets itself, or (--out-dir) what --out replaced.
LENGTH_SETS = {
    "--position",
    "--context-length",
    "--run-name",
    "--eval-interval",
    "--checkpoint-interval",
    "--sample-tokens",
    "--report",
    "--out-dir",
}
COMPUTING = [
    "tokenizer",
    "data",
    "model",
    "train",
    "generate",
    "inspect",
    "probe",
    "export hf",
    "export onnx",
    "experiment length",
    "experiment tasks",
]
OLD_SPELLINGS = {"--run", "--run-name", "--out-dir"}


def help_text(command: str) -> str:
    code, out, err = run_cli([*command.split(), "--help"])
    assert (code, err) == (0, ""), err
    return out


def help_flags(command: str) -> set[str]:
    """Every --flag the command's --help shows (its options, and flags its texts mention)."""
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_text(command)))


@pytest.mark.parametrize(
    ("command", "config_flags"),
    [
        ("model", MODEL_FLAGS),
        ("tokenizer", DATA_FLAGS | {"--vocab-size"}),
        ("data", DATA_FLAGS | {"--vocab-size"}),
        ("corpus", DATA_FLAGS),
        ("experiment length", CONFIG_FLAGS - LENGTH_SETS),
        ("train", CONFIG_FLAGS - {"--out-dir", "--run-name"}),
        ("experiment tasks", {"--seed", "--steps", "--batch-size"}),  # its own flags of those names
    ],
)
def test_help_lists_exactly_the_config_flags_a_command_reads(command: str, config_flags: set[str]) -> None:
    assert help_flags(command) & CONFIG_FLAGS == config_flags


@pytest.mark.parametrize("command", [*COMPUTING, "corpus", "export fixtures"])
def test_help_shows_no_old_spelling_and_threads_where_it_computes(command: str) -> None:
    flags = help_flags(command)
    assert not flags & OLD_SPELLINGS, flags & OLD_SPELLINGS
    assert ("--threads" in flags) == (command in COMPUTING)


@pytest.mark.parametrize("command", ["generate", "inspect", "probe", "export hf", "export onnx"])
def test_a_command_that_reads_a_run_takes_it_first(command: str) -> None:
    text = help_text(command)
    assert re.search(r"positional arguments:\n  RUN +", text), text
    assert (
        "OUT" not in text.split("options:")[0].split("positional arguments:")[1]
    )  # export's old OUT is hidden


def test_position_help_lists_every_registered_scheme() -> None:
    text = " ".join(help_text("model").split())  # argparse wraps the help over lines
    listed = re.search(
        r"--position NAME how the model knows where a token is; one of ([^(]*) \(default: learned\)", text
    )
    assert listed is not None, text
    assert listed.group(1).split(", ") == list(scheme_names())
    assert {"learned", "rope", "alibi", "nope"} <= set(scheme_names())


def test_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    for flag in ("--version", "-V"):
        assert run_cli([flag]) == (0, f"octlm {version}\n", "")


def test_negative_steps_are_refused_in_words() -> None:
    assert run_cli(["train", "--steps", "-5"]) == (
        2,
        "",
        "octlm train: error: config 'day1' has 1 problem(s): train.steps = -5 must be at least 1\n",
    )


def test_length_refuses_the_fields_each_cell_sets() -> None:
    prefix = "octlm experiment length: error: "
    assert run_cli(["experiment", "length", "--position", "rope"]) == (
        2,
        "",
        prefix + "--position rope: octlm experiment length trains every scheme of --schemes; use --schemes "
        "rope\n",
    )
    code, _, err = run_cli(["experiment", "length", "--set", "model.position=alibi"])
    assert (code, err) == (
        2,
        prefix + "--set model.position=alibi: octlm experiment length trains every scheme "
        "of --schemes; use --schemes alibi\n",
    )
    code, _, err = run_cli(["experiment", "length", "--context-length", "32"])
    assert (code, err) == (
        2,
        prefix + "--context-length 32: octlm experiment length trains at --train-length; "
        "use --train-length 32\n",
    )


def test_set_refuses_a_field_the_command_does_not_read() -> None:
    assert run_cli(["model", "--set", "train.steps=5"]) == (
        2,
        "",
        "octlm model: error: --set train.steps=5: this command does not read train.steps; it reads [model]\n",
    )
    code, _, err = run_cli(["tokenizer", "--set", "train.lr=1"])
    assert (code, err) == (
        2,
        "octlm tokenizer: error: --set train.lr=1: this command does not read train.lr; "
        "it reads [data], model.vocab_size\n",
    )


# ---------------------------------------------------------------------------------------------------------------
# The old spellings: one note each, then the same result as the new spelling


def test_generate_run_flag_notes_once_and_generates_the_same(template: Path) -> None:
    run = str(template / bad_inputs.RUN)
    rest = ["--prompt", "def ", "--max-new-tokens", "5", "--temperature", "0"]
    new_code, new_out, new_err = run_cli(["generate", run, *rest])
    old_code, old_out, old_err = run_cli(["generate", "--run", run, *rest])
    assert (old_code, new_code) == (0, 0) and old_out == new_out and new_out.startswith("def ")
    note, *others = old_err.splitlines()
    assert note == "octlm generate: note: --run is deprecated; give the run first: octlm generate RUN ..."
    assert len(others) == len(new_err.splitlines()) == 1 and "note" not in new_err  # the timing line only
    # The note comes first, whatever follows: here the mistake of giving the run both ways.
    assert run_cli(["generate", run, "--run", run, *rest]) == (
        2,
        "",
        (
            f"{note}\noctlm generate: error: the run is given twice ({run!r} and --run {run!r}); give it once: "
            "octlm generate RUN\n"
        ),
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_hf_old_forms_note_once_and_write_the_same(template: Path, tmp_path: Path) -> None:
    run = str(template / bad_inputs.RUN)
    assert run_cli(["export", "hf", run, "--out", str(tmp_path / "new")])[0] == 0
    code, out, err = run_cli(["export", "hf", "--run", run, str(tmp_path / "old")])
    assert code == 0 and out.startswith(f"wrote {tmp_path / 'old'}")
    assert err == "octlm export hf: note: --run is deprecated; write octlm export hf RUN --out OUT\n"
    code, _, err = run_cli(["export", "hf", run, str(tmp_path / "positional")])
    assert (code, err) == (
        0,
        "octlm export hf: note: a second positional OUT is deprecated; write octlm export hf RUN --out OUT\n",
    )
    assert _files(tmp_path / "new") == _files(tmp_path / "old") == _files(tmp_path / "positional")


def test_export_needs_its_output_and_each_thing_once(template: Path, tmp_path: Path) -> None:
    run = str(template / bad_inputs.RUN)
    assert run_cli(["export", "onnx", run]) == (
        2,
        "",
        f"octlm export onnx: error: give the folder to write: octlm export onnx {run} --out DIR\n",
    )
    code, _, err = run_cli(["export", "hf", run, str(tmp_path / "a"), "--out", str(tmp_path / "b")])
    assert code == 2 and err.endswith(
        f"error: the output is given twice ('{tmp_path / 'a'}' and --out "
        f"'{tmp_path / 'b'}'); give --out once\n"
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def _train_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="octlm train")
    train_command.add_arguments(parser)
    return parser.parse_args(argv)


def test_train_old_spellings_note_once_and_name_the_same_run() -> None:
    """`--run-name X` is `--name X`; `--out-dir D --name X` is `--out D/X`: the same config and run folder."""
    base = ["--steps", "7", "--position", "rope"]
    new = _train_args([*base, "--out", "elsewhere/mine"])
    old = _train_args([*base, "--out-dir", "elsewhere", "--run-name", "mine"])
    assert old.deprecation_notes == [
        "octlm train: note: --out-dir is deprecated; give the run folder: octlm train --out DIR/NAME",
        "octlm train: note: --run-name is deprecated; give the run name with --name NAME",
    ]
    assert getattr(new, "deprecation_notes", None) is None
    (new_config, new_run), (old_config, old_run) = map(train_command.config_and_run, (new, old))
    assert new_config == old_config and new_run.path == old_run.path == Path("elsewhere/mine")
    assert new_config.train.run_name == "mine" and new_config.train.steps == 7
    # through the CLI: the note once (however often the flag is given), then the command's own answer
    code, _, err = run_cli(["train", "--run-name", "a", "--run-name", "b", "--steps", "0"])
    assert code == 2 and err.splitlines() == [
        "octlm train: note: --run-name is deprecated; give the run name with --name NAME",
        "octlm train: error: config 'day1' has 1 problem(s): train.steps = 0 must be at least 1",
    ]


def test_train_out_is_refused_beside_what_it_replaces() -> None:
    for extra in (["--name", "x"], ["--out-dir", "d"], ["--resume", "runs/x"]):
        with pytest.raises(
            UserError, match=rf"^--out 'runs/mine' names the run folder; leave out {extra[0]}$"
        ):
            train_command.config_and_run(_train_args(["--out", "runs/mine", *extra]))
    with pytest.raises(UserError, match=r"^--out '\.\.' must end in the run's own folder name"):
        train_command.config_and_run(_train_args(["--out", ".."]))


def test_length_out_dir_notes_once_and_is_the_old_override() -> None:
    parser = argparse.ArgumentParser(prog="octlm experiment length")
    experiment_length.add_arguments(parser)
    args = parser.parse_args(["--out-dir", "elsewhere"])
    assert overrides_from_args(args) == {"train.out_dir": "elsewhere"}  # what --out-dir gave before
    code, _, err = run_cli(["experiment", "length", "--out-dir", "elsewhere", "--seeds", "5000"])
    assert code == 2 and err.splitlines() == [
        "octlm experiment length: note: --out-dir is deprecated; give the output folder itself: "
        "--out DIR/length-YYYY-MM-DD is where --out-dir DIR wrote",
        "octlm experiment length: error: --seeds 5000 is more than 1000 seeds per scheme; pass fewer",
    ]


def test_run_folder_is_given_exactly_once() -> None:
    def args(run: str | None, flag: str | None) -> argparse.Namespace:
        return argparse.Namespace(run=run, run_flag=flag)

    assert options.run_folder(args("runs/a", None), "octlm probe") == "runs/a"
    assert options.run_folder(args(None, "runs/b"), "octlm probe") == "runs/b"
    with pytest.raises(
        UserError, match=r"^give the run folder to read first: octlm probe RUN \.\.\., e\.g\. "
    ):
        options.run_folder(args(None, None), "octlm probe")
    with pytest.raises(
        UserError, match=r"^the run is given twice \('runs/a' and --run 'runs/b'\); give it once"
    ):
        options.run_folder(args("runs/a", "runs/b"), "octlm probe")


def test_threads_reach_torch_and_the_tokenizers_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(options.RAYON_THREADS, raising=False)
    before = torch.get_num_threads()
    with options.threads(1, tokenizers=True):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    assert os.environ[options.RAYON_THREADS] == "1"
    monkeypatch.setenv(options.RAYON_THREADS, "3")  # the user's own choice is kept
    with options.threads(2, tokenizers=True):
        assert torch.get_num_threads() == 2
    assert os.environ[options.RAYON_THREADS] == "3"


def test_int_in_range_words_machine_bounds_and_keeps_real_ones() -> None:
    seed = int_in_range(0, 2**64 - 1)
    assert seed("18446744073709551615") == 2**64 - 1
    for text, message in (
        ("-1", "-1 must be at least 0"),
        (
            str(2**64),
            f"{2**64} must be at most 18,446,744,073,709,551,615 (the largest unsigned 64-bit integer)",
        ),
    ):
        with pytest.raises(argparse.ArgumentTypeError) as error:
            seed(text)
        assert str(error.value) == message
    with pytest.raises(argparse.ArgumentTypeError) as error:
        int_in_range(1, 4096)("0")
    assert str(error.value) == "0 is outside [1, 4096]"


def test_boolean_fields_are_switches_too() -> None:
    import argparse

    from octlm.commands.options import add_config_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    assert config_from_args(parser.parse_args(["--compile", "--report", "false"])).train.compile is True
    assert config_from_args(parser.parse_args(["--report", "false"])).train.report is False
    assert config_from_args(parser.parse_args([])).train.compile is False


def test_a_command_gets_flags_for_its_fields_and_refuses_the_rest() -> None:
    import argparse

    from octlm.commands.options import add_config_arguments, overrides_from_args
    from octlm.config import config_fields

    parser = argparse.ArgumentParser(prog="octlm x")
    add_config_arguments(
        parser,
        config_fields("model"),
        refused={"train.steps": "use --rounds {value}"},
        no_flag=("model.dropout",),
    )
    args = parser.parse_args(["--d-model", "64", "--set", "model.dropout=0.1"])
    assert overrides_from_args(args) == {"model.d_model": "64", "model.dropout": "0.1"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--dropout", "0.1"])  # read through --set only
    with pytest.raises(SystemExit):
        parser.parse_args(["--lr", "1"])  # never read: no flag
    with pytest.raises(UserError, match=r"^--steps 9: use --rounds 9$"):
        overrides_from_args(parser.parse_args(["--steps", "9"]))
    with pytest.raises(
        UserError, match=r"^--set train\.lr=1: this command does not read train\.lr; it reads \[model\]$"
    ):
        overrides_from_args(parser.parse_args(["--set", "train.lr=1"]))


# ---------------------------------------------------------------------------------------------------------------
# Two spellings of one field: refused when they disagree, never one silently ignored


def _parsed(argv: list[str], **kwargs: Any) -> argparse.Namespace:
    from octlm.commands.options import add_config_arguments

    parser = argparse.ArgumentParser(prog="octlm x")
    add_config_arguments(parser, **kwargs)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--position", "alibi", "--set", "model.position=rope"],
            "--position alibi and --set model.position=rope both set model.position; give only one",
        ),
        (
            ["--set", "train.steps=5", "--steps", "7"],
            "--steps 7 and --set train.steps=5 both set train.steps; give only one",
        ),
        (
            ["--nope-layers", "0", "1", "--set", "model.nope_layers=[0]"],
            "--nope-layers 0 1 and --set model.nope_layers=[0] both set model.nope_layers; give only one",
        ),
        (
            ["--compile", "--set", "train.compile=false"],
            "--compile true and --set train.compile=false both set train.compile; give only one",
        ),
    ],
)
def test_a_field_flag_and_set_that_disagree_are_refused(argv: list[str], line: str) -> None:
    with pytest.raises(UserError) as error:
        overrides_from_args(_parsed(argv))
    assert str(error.value) == line


def test_spellings_that_agree_and_a_flag_given_twice_are_accepted() -> None:
    agree = _parsed(["--position", "rope", "--set", "model.position=rope"])
    assert overrides_from_args(agree) == {"model.position": "rope"}
    twice = _parsed(
        ["--position", "alibi", "--position", "rope", "--set", "train.lr=1", "--set", "train.lr=2"]
    )
    assert overrides_from_args(twice) == {"model.position": "rope", "train.lr": "2"}  # the last of each
    assert options.spelt(twice, "model.position") == options.Spelt("--position", "rope", "--position rope")
    assert options.spelt(twice, "model.norm") is None


def test_length_old_out_dir_and_set_that_disagree_are_refused() -> None:
    parser = argparse.ArgumentParser(prog="octlm experiment length")
    experiment_length.add_arguments(parser)
    with pytest.raises(UserError) as error:
        overrides_from_args(parser.parse_args(["--out-dir", "a", "--set", "train.out_dir=b"]))
    assert str(error.value) == "--out-dir a and --set train.out_dir=b both set train.out_dir; give only one"


def test_a_refused_field_names_the_spelling_given() -> None:
    """The refusal quotes the flag as typed (the old `--out-dir` too), and its value, not another's."""
    parser = argparse.ArgumentParser(prog="octlm experiment length")
    experiment_length.add_arguments(parser)
    with pytest.raises(UserError) as error:
        overrides_from_args(parser.parse_args(["--set", "model.position=ROPE"]))
    assert str(error.value) == (
        "--set model.position=ROPE: octlm experiment length trains every scheme of --schemes; "
        "use --schemes ROPE"
    )


# ---------------------------------------------------------------------------------------------------------------
# --help: the config's flags grouped by section, each with its meaning and default, within 100 columns


def help_entries(command: str) -> dict[str, str]:
    """Each option of the command's --help (`--d-model N`) -> its help text on one line."""
    entries: dict[str, str] = {}
    current = None
    for line in help_text(command).split("\noptions:\n", 1)[1].splitlines():
        if line.startswith("  -"):  # an option, and the start of its help
            current, _, rest = line[2:].partition("  ")
            entries[current] = rest.strip()
        elif current is not None and line.startswith(" " * 10):  # its help, continued
            entries[current] = f"{entries[current]} {line.strip()}".strip()
        else:  # a blank line, a group's title or description
            current = None
    return entries


def test_help_groups_the_config_flags_with_meaning_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    lines = help_text("model").splitlines()
    assert lines[:2] == [
        "usage: octlm model [-h] [--config CONFIG] [--set SECTION.FIELD=VALUE] [--<field> VALUE ...]",
        "                   [--dry-run] [--threads N]",
    ]
    assert [line for line in lines if line and not line.startswith(" ")][2:] == [
        "options:",
        "config:",
        "model:",
    ]
    entries = help_entries("model")
    assert (
        entries["--config CONFIG"] == "a TOML config file, or a built-in config: day1, modern (default: day1)"
    )
    assert entries["--d-model N"] == "width of the residual stream: each token's vector (default: 128)"
    assert entries["--dropout X"] == "dropout probability (default: 0)"
    assert entries["--tie-embeddings [BOOL]"] == "the output head is the token table (default: true)"
    assert (
        entries["--nope-layers K [K ...]"]
        == "layers with no position signal (Llama 4, SmolLM3) (default: none)"
    )
    assert entries["--mlp NAME"] == "the MLP's activation; one of gelu, swiglu (default: gelu)"
    assert max(map(len, lines)) <= 98


@pytest.mark.parametrize("columns", ["60", "100", "250"])
def test_help_is_at_most_100_columns_and_never_cuts_a_name(
    columns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    for command in ("train", "experiment length", "experiment extend"):
        lines = help_text(command).splitlines()
        if columns != "60":  # narrower than its options' column: argparse wraps as it can
            assert max(map(len, lines)) <= min(int(columns), 100) - 2, command
        assert not any(line.rstrip().endswith(("stick-", "bf16-", "p-")) for line in lines), command


def test_every_config_flag_in_help_shows_its_meaning_and_default() -> None:
    entries = {head.split()[0]: text for head, text in help_entries("train").items()}
    for key in config_fields():
        section, _, name = key.partition(".")
        if key in ("train.run_name", "train.out_dir"):  # train's --name and --out give them
            continue
        text = entries["--" + name.replace("_", "-")]
        assert text.startswith(description(SECTIONS[section], name)), key
        assert re.search(r"\(default: [^)]+\)$", text), key
