"""The command recorded in every cell, per experiment and flags: pinned to what the hand-written command lines
gave before the settings declared their flags (now settings_from_args and command_line of
octlm.commands.experiment)."""

import argparse

import pytest

from octlm.commands import experiment, experiment_extend, experiment_length, experiment_tasks
from octlm.commands.options import overrides_from_args

COMMANDS = {"length": experiment_length, "tasks": experiment_tasks, "extend": experiment_extend}
TASKS = "copy reverse selective-copy passkey counting"
ROWS = "learned sinusoidal rope alibi t5 fire cope nope rope+random fox path stick-breaking"
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
            "--target 0.99 --check-every 200 --batch-size 32 --examples 100 --factors 1 2 4 8"
        ),
    ),
    (
        "tasks",
        ["--quick"],
        (
            f"octlm experiment tasks --quick --tasks {TASKS} --schemes {ROWS} --seed 0 --seeds 1 "
            "--steps 40 --target 0.99 --check-every 20 --batch-size 32 --examples 16 --factors 1 2 4 8"
        ),
    ),
    (
        "tasks",
        ["--quick", "--factors", "1", "3", "--seed", "7", "--seeds", "2"],
        (
            f"octlm experiment tasks --quick --tasks {TASKS} --schemes {ROWS} --seed 7 --seeds 2 "
            "--steps 40 --target 0.99 --check-every 20 --batch-size 32 --examples 16 --factors 1 3"
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
            "--steps 10 --target 0.99 --check-every 200 --batch-size 4 --examples 5 --factors 1 2 4 8"
        ),
    ),
    ("extend", [], f"{EXTEND} {FULL_EXTEND}"),
    ("extend", ["--quick"], f"{EXTEND} --quick {QUICK_EXTEND}"),
    ("extend", ["--rows", "pi", "yarn"], f"{EXTEND} {FULL_EXTEND} --rows pi yarn"),
    ("extend", ["--base", "runs/length-x", "--quick"], f"{EXTEND} --quick {QUICK_EXTEND}"),
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
