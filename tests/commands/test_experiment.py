"""The command recorded in every cell, per experiment and flags: pinned to what the hand-written command lines
gave before the settings declared their flags (now settings_from_args and command_line of
octlm.commands.experiment); what a run prints (a quick run's first line, a bar on a terminal, the summary), and
a second run into a folder that holds a finished one."""

import argparse
import fcntl
import os
import struct
import subprocess
import termios
from pathlib import Path

import pytest
import tiny

from octlm.commands import experiment, experiment_extend, experiment_length, experiment_tasks
from octlm.commands.options import overrides_from_args

COMMANDS = {"length": experiment_length, "tasks": experiment_tasks, "extend": experiment_extend}
TASKS = "copy reverse selective-copy passkey"
ROWS = "learned sinusoidal rope alibi t5 fire cope nope rope+random fox path stick-breaking rope+ft4 rope+pi4 rope+yarn4"
LENGTH = "octlm experiment length"
EXTEND = "octlm experiment extend"
FULL_EXTEND = (
    "--train-length 64 --extend-length 256 --eval-lengths 64 128 256 512 1024 --seeds 3 "
    "--steps-to-extend 100 "
    "--curve-interval 10 --eval-windows 8 --passkey-windows 8"
)
QUICK_EXTEND = (
    "--train-length 16 --extend-length 32 --eval-lengths 16 32 64 --seeds 2 --steps-to-extend 4 "
    "--curve-interval 2 --eval-windows 4 --passkey-windows 2"
)
FULL_LENGTH = "--train-length 64 --eval-lengths 64 128 256 512 1024 --seeds 3 --eval-windows 16"
CASES = [
    ("length", [], f"{LENGTH} {FULL_LENGTH}"),
    (
        "length",
        ["--quick"],
        f"{LENGTH} --quick --train-length 16 --eval-lengths 16 32 64 --seeds 2 --eval-windows 4",
    ),
    (
        "length",
        ["--long"],
        (
            f"{LENGTH} --long --train-length 64 --eval-lengths 64 128 256 512 1024 2048 4096 8192 16384 "
            "--seeds 3 --eval-windows 2"
        ),
    ),
    (
        "length",
        ["--quick", "--long", "--eval-windows", "1"],
        (
            f"{LENGTH} --quick --long --train-length 16 --eval-lengths 64 128 256 512 1024 2048 4096 "
            "8192 16384 --seeds 2 --eval-windows 1"
        ),
    ),
    (
        "length",
        ["--schemes", "rope", "alibi", "nope+ssmax"],
        f"{LENGTH} {FULL_LENGTH} --schemes rope alibi nope+ssmax",
    ),
    ("length", ["--rope-factor", "4"], f"{LENGTH} {FULL_LENGTH} --rope-factor 4"),
    (
        "length",
        ["--rope-factor", "2.5", "--seeds", "5"],
        (
            f"{LENGTH} --train-length 64 --eval-lengths 64 128 256 512 1024 --seeds 5 --eval-windows 16 "
            "--rope-factor 2.5"
        ),
    ),
    (
        "length",
        ["--set", "train.lr=0.001", "--steps", "20", "--d-model", "48"],
        f"{LENGTH} {FULL_LENGTH} --set model.d_model=48 --set train.steps=20 --set train.lr=0.001",
    ),
    (
        "length",
        ["--config", "configs/day1.toml", "--quick"],
        (
            f"{LENGTH} --quick --config configs/day1.toml --train-length 16 --eval-lengths 16 32 64 "
            "--seeds 2 --eval-windows 4"
        ),
    ),
    (
        "length",
        ["--eval-lengths", "128", "64", "64", "--train-length", "32"],
        f"{LENGTH} --train-length 32 --eval-lengths 64 128 --seeds 3 --eval-windows 16",
    ),
    (
        "length",
        ["--set", "data.text=a b.txt"],
        f"{LENGTH} {FULL_LENGTH} --set 'data.text=a b.txt' --set data.source=text",
    ),
    (
        "tasks",
        [],
        (
            f"octlm experiment tasks --tasks {TASKS} --schemes {ROWS} --seed 0 --seeds 3 --steps 2000 "
            "--target 0.99 --check-every 200 --batch-size 32 --examples 100 --factors 1 2 4 8 --extend-steps 1000"
        ),
    ),
    (
        "tasks",
        ["--quick"],
        (
            f"octlm experiment tasks --quick --tasks {TASKS} --schemes {ROWS} --seed 0 --seeds 1 "
            "--steps 40 --target 0.99 --check-every 20 --batch-size 32 --examples 16 --factors 1 2 4 8 --extend-steps 20"
        ),
    ),
    (
        "tasks",
        ["--quick", "--factors", "1", "3", "--seed", "7", "--seeds", "2"],
        (
            f"octlm experiment tasks --quick --tasks {TASKS} --schemes {ROWS} --seed 7 --seeds 2 "
            "--steps 40 --target 0.99 --check-every 20 --batch-size 32 --examples 16 --factors 1 3 --extend-steps 20"
        ),
    ),
    (
        "tasks",
        [
            "--tasks",
            "copy",
            "passkey",
            "--schemes",
            "rope",
            "alibi+nope0",
            "--steps",
            "10",
            "--batch-size",
            "4",
            "--examples",
            "5",
        ],
        (
            "octlm experiment tasks --tasks copy passkey --schemes rope alibi+nope0 --seed 0 --seeds 3 "
            "--steps 10 --target 0.99 --check-every 200 --batch-size 4 --examples 5 --factors 1 2 4 8 --extend-steps 1000"
        ),
    ),
    ("extend", [], f"{EXTEND} {FULL_EXTEND}"),
    ("extend", ["--quick"], f"{EXTEND} --quick {QUICK_EXTEND}"),
    ("extend", ["--rows", "pi", "yarn"], f"{EXTEND} {FULL_EXTEND} --rows pi yarn"),
    (
        "extend",
        ["--base", "runs/length-x", "--quick"],
        f"{EXTEND} --quick {QUICK_EXTEND} --base runs/length-x",
    ),
    (
        "extend",
        [
            "--quick",
            "--steps-to-extend",
            "6",
            "--curve-interval",
            "3",
            "--passkey-windows",
            "1",
            "--extend-length",
            "64",
        ],
        (
            f"{EXTEND} --quick --train-length 16 --extend-length 64 --eval-lengths 16 32 64 --seeds 2 "
            "--steps-to-extend 6 --curve-interval 3 --eval-windows 4 --passkey-windows 1"
        ),
    ),
    (
        "extend",
        ["--set", "train.lr=0.001", "--steps", "20"],
        f"{EXTEND} {FULL_EXTEND} --set train.steps=20 --set train.lr=0.001",
    ),
    ("extend", ["--config", "configs/day1.toml"], f"{EXTEND} --config configs/day1.toml {FULL_EXTEND}"),
    (
        "extend",
        ["--eval-lengths", "256", "64"],
        (
            f"{EXTEND} --train-length 64 --extend-length 256 --eval-lengths 64 256 --seeds 3 "
            "--steps-to-extend 100 --curve-interval 10 --eval-windows 8 --passkey-windows 8"
        ),
    ),
]


@pytest.mark.parametrize(("name", "argv", "expected"), CASES)
def test_the_recorded_command_line(name: str, argv: list[str], expected: str) -> None:
    parser = argparse.ArgumentParser()
    command = COMMANDS[name]
    command.add_arguments(parser)
    args = parser.parse_args(argv)
    settings = experiment.settings_from_args(command.Settings, args)
    overrides = overrides_from_args(args) if name != "tasks" else {}
    assert experiment.command_line(name, settings, args, overrides) == expected


# What a run prints, and a second run into the same folder (a tiny battery: one cell, 3 steps)

TINY = [
    "experiment",
    "tasks",
    "--quick",
    "--tasks",
    "copy",
    "--steps",
    "3",
    "--examples",
    "4",
    "--factors",
    "1",
]
SMOKE = "A smoke test of the pipeline: its numbers mean nothing"


BUSY = "measured on 2 CPU cores busy with another experiment"
FIRST = "1.5 min more the first time, to prepare the data"


@pytest.mark.parametrize(
    ("name", "time"),
    [
        ("tasks", f"About 2 min ({BUSY})"),
        ("length", f"About 3 min ({FIRST}; {BUSY})"),
        ("extend", f"About 3 min ({FIRST}; {BUSY})"),
    ],
)
def test_help_gives_quicks_purpose_and_its_measured_time(name: str, time: str) -> None:
    code, stdout, _ = tiny.run_cli(["experiment", name, "--help"])
    said = f"{SMOKE}. {time}"
    assert code == 0 and said in " ".join(stdout.split())


def test_a_quick_run_says_what_it_is_for_first_and_where_its_results_are_last(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, err = tiny.run_cli([*TINY, "--schemes", "rope", "--out", str(out)])
    lines = stdout.splitlines()
    assert code == 0 and err == "" and len(lines) == 6, stdout
    assert lines[0] == (
        "octlm experiment tasks --quick: a smoke test of the pipeline on tiny models, about 2 min; its numbers "
        "mean nothing"
    )
    assert lines[1].startswith("task battery: 1 of 1 cells") and lines[2].startswith(
        "[1/1] copy rope seed 0: "
    )
    assert lines[3].startswith(f"wrote {out}/results.md, tasks.png, tasks.json from 1 cell(s)")
    summary = lines[4].split(" min with ")
    assert summary[0].startswith("1 cells in ") and float(summary[0].removeprefix("1 cells in ")) >= 0
    assert (
        summary[1] == "1 worker process(es); --quick: a smoke test of the pipeline, its numbers mean nothing"
    )
    assert lines[5] == f"results: {out}/results.md"


def test_a_terminal_sees_a_bar_and_no_line_per_cell(tmp_path: Path) -> None:
    """As `octlm train` and the token cache: a bar on stderr where it is a terminal (here a pseudo-terminal)."""
    out = tmp_path / "out"
    terminal, child_end = os.openpty()
    fcntl.ioctl(child_end, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 x 100 characters
    argv = [tiny.PYTHON, "-m", "octlm", *TINY, "--schemes", "rope", "alibi", "--jobs", "1", "--out", str(out)]
    proc = subprocess.Popen(argv, env=tiny.quiet_env(), stdout=subprocess.PIPE, stderr=child_end, text=True)
    os.close(child_end)
    shown = b""
    while True:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # the child's end closed (Linux: EIO)
            break
        if not chunk:
            break
        shown += chunk
    os.close(terminal)
    stdout = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, shown
    assert "| 2/2 [" in shown.decode() and "cell" in shown.decode(), shown
    assert not [line for line in stdout.splitlines() if line.startswith("[")]
    assert stdout.splitlines()[-1] == f"results: {out}/results.md"


def test_a_finished_folder_is_refused_unless_overwrite_and_an_unfinished_one_runs_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    grid = [*TINY, "--schemes", "rope", "alibi", "--jobs", "1", "--out", str(out), "--no-progress"]
    assert tiny.run_cli([*grid, "--only", "copy:rope:0"])[0] == 0
    assert tiny.run_cli(grid)[0] == 0  # unfinished, same settings: the grid runs (every cell of it)
    cells = {p.name: p.read_bytes() for p in (out / "cells").glob("*.json")}
    assert sorted(cells) == ["copy-alibi-seed0.json", "copy-rope-seed0.json"]
    for again in (grid, [*grid, "--only", "copy:alibi:0"]):
        code, stdout, err = tiny.run_cli(again)
        tiny.check_one_line(
            code,
            err,
            f"{str(out)!r} already holds a finished run (2 cell(s)); collect it again with "
            f"`octlm experiment tasks --collect --out {out}`, choose another --out, or pass --overwrite to run "
            "it again",
        )
        assert stdout == "" and {p.name: p.read_bytes() for p in (out / "cells").glob("*.json")} == cells
    code, _, err = tiny.run_cli([*grid, "--steps", "4", "--overwrite"])
    tiny.check_one_line(
        code,
        err,
        f"{out} holds cells made with a different --steps (3, here 4; copy-alibi-seed0.json among them)",
    )
    assert f"choose another --out, or remove {out / 'cells'} to start again" in err
    before = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    assert tiny.run_cli([*grid, "--overwrite"])[0] == 0
    after = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    assert all(after[name] > before[name] for name in before)  # both run again
