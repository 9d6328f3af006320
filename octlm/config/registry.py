"""The named plug-ins a config field chooses among: position schemes (`model.position`) and data sources
(`data.source`).

The layer that defines a kind of plug-in files each class here with `register` as its module is imported;
config validation asks by name without importing that layer. A registry imports the module that registers its
built-ins itself, on its first lookup, as a plug-in system loads its entry points: no lookup ever sees them
missing. A plug-in of your own registers when its module is imported, after the built-ins.

A name is accepted in any case (`ROPE` is `rope`: `canonical`), and a misspelt one is refused with the nearest
registered name (`nearest`, difflib's ratio; the same helper suggests config keys, tasks and run folders).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from octlm.errors import UserError


def nearest(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice closest to a misspelt `name` (difflib's similarity ratio at least `cutoff`, case ignored), or
    None when none is close."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[close[0]] if close else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`; did you mean rope?`, to end a refusal of `name` with, or "" when no choice is close."""
    close = nearest(name, choices)
    return f"; did you mean {close}?" if close is not None else ""


class Registry(Mapping[str, Any]):
    """Classes of one kind by `name` (their class attribute), in registration order; a read-only mapping."""

    def __init__(self, kind: str, builtins: str) -> None:
        self.kind, self.builtins = kind, builtins  # builtins: the module whose import registers them
        self._classes: dict[str, Any] = {}
        self._loading = False

    def register(self, cls: Any) -> Any:
        """Class decorator: file `cls` under `cls.name`."""
        self._classes[cls.name] = cls
        return cls

    def _ensure_builtins(self) -> None:
        if not self._loading:
            self._loading = True  # once: importing the module registers its classes (and may ask us back)
            importlib.import_module(self.builtins)

    def __getitem__(self, name: str) -> Any:
        self._ensure_builtins()
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        self._ensure_builtins()
        return iter(list(self._classes))

    def __len__(self) -> int:
        self._ensure_builtins()
        return len(self._classes)

    def canonical(self, name: str) -> str:
        """The registered name `name` spells in any case (`ROPE` -> `rope`); `name` itself when none does."""
        if name in self:
            return name
        return next((known for known in self if known.lower() == name.lower()), name)

    def unknown(self, name: str, where: str = "") -> str:
        """Why `name` (found `where`, e.g. ` in row 'rop+ssmax'`) is refused: the choices, and the nearest."""
        return (
            f"unknown {self.kind} {name!r}{where}; choose one of {', '.join(self)}{did_you_mean(name, self)}"
        )

    def choose(self, name: str) -> Any:
        """The class called `name`, in any case; a UserError naming the choices otherwise."""
        if self.canonical(name) not in self:
            raise UserError(self.unknown(name))
        return self[self.canonical(name)]


SCHEMES = Registry("position scheme", "octlm.positions")
SOURCES = Registry("data source", "octlm.data.sources")
# The config fields whose value names a registered class, and their registry.
FIELD_REGISTRIES: dict[str, Registry] = {"model.position": SCHEMES, "data.source": SOURCES}
