"""A setting of an experiment that is also its flag: the flag's name and help, and how the command recorded
in every cell spells it.

An experiment's `Settings` dataclass declares such a field with `flag(...)` and its presets (`--quick`) in
`presets`; `octlm.commands.experiment` turns the declaration into argparse flags, reads the settings back from
the parsed flags, and spells the recorded command line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A preset switch (`--quick`): the settings it sets and its help.
Presets = dict[str, tuple[dict[str, Any], str]]


@dataclass(frozen=True)
class Flag:
    name: str  # e.g. "--train-length"
    help: str | Callable[[], str]  # a function where the text names defaults known only when flags are added
    type: type = int  # of each value: int, float or str; bool: a switch
    metavar: str | None = None  # None: argparse's, from the flag's name
    range: tuple[int, int] | None = None  # integers outside are refused as the flag is parsed
    parse: Callable[[Any], Any] | None = None  # the setting from the value given
    recorded: str = "always"  # in the recorded command: "always", "changed" (from the default) or "never"


def flag(default: Any = None, *args: Any, factory: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
    """A dataclass field of `default` (or `factory()`: one value or more on the command line) given by the
    flag `Flag(*args, **kwargs)`."""
    metadata = {"flag": Flag(*args, **kwargs)}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def sorted_unique(values: list[int]) -> list[int]:
    return sorted(set(values))
