"""`octlm list [KIND]` (octlm/commands/list.py): every name a flag takes, one line each, asked of where it is
registered, within 100 columns."""

from __future__ import annotations

import pytest
from tiny import run_cli

from octlm.cli import COMMANDS
from octlm.commands.list import KINDS
from octlm.config import builtin_config_names
from octlm.config.registry import SOURCES
from octlm.experiments.tasks import DEFAULT_TASKS, TASKS
from octlm.positions import SCHEMES


def listed(*kind: str) -> list[str]:
    code, out, err = run_cli(["list", *kind])
    assert (code, err) == (0, "")
    return out.splitlines()


def test_configs_and_experiments() -> None:
    assert listed("configs") == [
        "built-in configs (--config):",
        "  day1           The seed's Day 1 decoder: V = 1,024, C = 128, a 128-token context, learned ...",
        "  modern         The same size as day1 with the parts of a current decoder (Llama-style): rotary ...",
    ]
    assert listed("experiments") == [
        "experiments (octlm experiment NAME):",
        "  length         train short, test long: every position scheme past its length",
        "  tasks          tasks that test position (copy, recall, counting, arithmetic, passkey) past the ...",
        "  extend         train short, fine-tune longer: RoPE's extensions (PI, NTK, YaRN) against ...",
    ]
    assert [line.split()[0] for line in listed("configs")[1:]] == builtin_config_names()
    assert [line.split()[0] for line in listed("experiments")[1:]] == [
        name.split()[1] for name in COMMANDS if name.startswith("experiment ")
    ]


def test_schemes_tasks_and_sources_are_every_registered_one() -> None:
    schemes = listed("schemes")
    assert schemes[0] == "position schemes (--position, experiment --schemes):"
    assert [line.split()[0] for line in schemes[1:]] == list(SCHEMES)
    assert schemes[list(SCHEMES).index("alibi") + 1] == (
        "  alibi          ALiBi: a fixed penalty proportional to distance, with a different slope per head."
    )
    tasks = listed("tasks")
    assert tasks[:3] == [
        "tasks (experiment tasks --tasks; * = run by default):",
        "  copy *            Copy a string: `x1 .. xn <sep> x1 .. xn`.",
        "  reverse *         Reverse a string: `x1 .. xn <sep> xn .. x1`.",
    ]
    assert [line.split()[0] for line in tasks[1:]] == list(TASKS)
    assert [line.split()[0] for line in tasks[1:] if line.split()[1] == "*"] == [
        t for t in TASKS if t in DEFAULT_TASKS
    ]
    assert [line.split()[0] for line in listed("sources")[1:]] == list(SOURCES)


def test_everything_at_once_within_100_columns() -> None:
    lines = listed()
    headings = [line for line in lines if line and not line.startswith(" ")]
    assert headings == [
        f"{KINDS[kind][0]}:" for kind in ("schemes", "tasks", "sources", "configs", "experiments")
    ]
    assert lines.count("") == len(headings) - 1  # one blank line between kinds
    assert max(map(len, lines)) <= 100
    assert all(len(line.split()) > 1 for line in lines if line.startswith("  "))  # every name has a meaning


def test_an_unknown_kind_is_one_line() -> None:
    code, out, err = run_cli(["list", "scheme"])
    assert (code, out) == (2, "")
    assert err == (
        "octlm list: error: argument KIND: unknown kind 'scheme'; choose one of schemes, tasks, sources, configs, "
        "experiments; did you mean schemes? (see --help)\n"
    )
    assert listed("TASKS") == listed("tasks")


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_is_its_own_part_of_the_whole(kind: str) -> None:
    whole = "\n".join(listed())
    assert "\n".join(listed(kind)) in whole
