"""The named plug-ins a config field chooses among: position schemes (`model.position`) and data sources
(`data.source`).

The layer that defines a kind of plug-in files each class here with `register` as its module is imported;
config validation asks by name without importing that layer. A registry imports the module that registers its
built-ins itself, on its first lookup, as a plug-in system loads its entry points: no lookup ever sees them
missing. A plug-in of your own registers when its module is imported, after the built-ins.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from octlm.errors import UserError


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

    def choose(self, name: str) -> Any:
        """The class called `name`; a UserError naming the choices otherwise."""
        if name not in self:
            raise UserError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self)}")
        return self[name]


SCHEMES = Registry("position scheme", "octlm.positions")
SOURCES = Registry("data source", "octlm.data.sources")
