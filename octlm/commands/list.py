"""`octlm list [KIND]`: the names octlm's flags take, one line each: position schemes (`--position`,
`--schemes`), tasks (`experiment tasks --tasks`, the default ones marked), data sources (`--source`), built-in
configs (`--config`) and experiments.

Every line is asked of where the name is registered: a scheme's, task's or source's class docstring (its first
sentence or so, cut to the width), a built-in config's leading comment, an experiment's line in `cli.COMMANDS`.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from typing import Any

from octlm.commands.options import HELP_WIDTH
from octlm.config.load import CONFIG_DIR, builtin_config_names
from octlm.config.registry import SOURCES, Registry, did_you_mean

NAME_WIDTH = 14  # the names' column at least; the meanings start after it


def _first_paragraph(text: str | None) -> str:
    """A docstring's or comment's first paragraph on one line."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


def _registered(registry: Registry, marked: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(name, first paragraph of its class's docstring) for every class of `registry`; `marked` names get
    ` *`."""
    return [
        (name + (" *" if name in marked else ""), _first_paragraph(cls.__doc__))
        for name, cls in registry.items()
    ]


def schemes() -> list[tuple[str, str]]:
    from octlm.positions import SCHEMES

    return _registered(SCHEMES)


def tasks() -> list[tuple[str, str]]:
    from octlm.experiments.tasks import DEFAULT_TASKS, TASKS

    return _registered(TASKS, DEFAULT_TASKS)


def sources() -> list[tuple[str, str]]:
    return _registered(SOURCES)


def configs() -> list[tuple[str, str]]:
    """Each built-in config with its leading comment (the lines starting with `#` before anything else)."""
    found = []
    for name in builtin_config_names():
        lines = (CONFIG_DIR / f"{name}.toml").read_text(encoding="utf-8").splitlines()
        comment = []
        for line in lines:
            if not line.startswith("#"):
                break
            comment.append(line.lstrip("#").strip())
        found.append((name, " ".join(comment)))
    return found


def experiments() -> list[tuple[str, str]]:
    from octlm.cli import COMMANDS

    return [
        (name.removeprefix("experiment "), what)
        for name, (_, what) in COMMANDS.items()
        if name.startswith("experiment ")
    ]


# Each kind: its heading (what takes these names) and where its names come from.
KINDS: dict[str, tuple[str, Callable[[], list[tuple[str, str]]]]] = {
    "schemes": ("position schemes (--position, experiment --schemes)", schemes),
    "tasks": ("tasks (experiment tasks --tasks; * = run by default)", tasks),
    "sources": ("data sources (--source)", sources),
    "configs": ("built-in configs (--config)", configs),
    "experiments": ("experiments (octlm experiment NAME)", experiments),
}


def listing(kinds: list[str], width: int = HELP_WIDTH) -> str:
    """The lines of `kinds`: a heading each, then one line per name, its meaning cut to `width` columns."""
    blocks = []
    for kind in kinds:
        heading, find = KINDS[kind]
        names = find()
        column = max([NAME_WIDTH, *(len(name) for name, _ in names)])
        lines = [f"{heading}:"]
        for name, meaning in names:
            cut = textwrap.shorten(meaning, width - 3 - column, placeholder=" ...")
            lines.append(f"  {name:<{column}} {cut}".rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _kind(text: str) -> str:
    """One of `KINDS` (in any case); a misspelt one is refused with the nearest."""
    if text.lower() not in KINDS:
        raise argparse.ArgumentTypeError(
            f"unknown kind {text!r}; choose one of {', '.join(KINDS)}{did_you_mean(text, KINDS)}"
        )
    return text.lower()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "kind",
        nargs="?",
        type=_kind,
        metavar="KIND",
        help=f"list only these: {', '.join(KINDS)} (default: all of them)",
    )


def run(args: Any) -> int:
    print(listing([args.kind] if args.kind else list(KINDS)))
    return 0
