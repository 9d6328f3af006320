"""Figures read back from their matplotlib artists (each line's colour and style, each panel's title), not
from the PNG: the tests of octlm/inspect/figures.py and of the experiments' figures share this."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from matplotlib.colors import to_hex

# The built-in schemes' colours in registration order, fixed (a reader learns them once): tab10 for the ten of
# 2024, three dark tab20b hues for FoX, PaTH and stick-breaking (registered before NoPE).
TAB10 = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#393b79",
    "#637939",
    "#7b4173",
    "#17becf",
]


def keeping(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> dict[str, Any]:
    """Every figure the `save` of `modules` is given, by its file name, kept after it is written."""
    kept: dict[str, Any] = {}
    for module in modules:
        real = module.save

        def keep(fig: Any, path: Path, real: Any = real) -> Path:
            kept[Path(path).name] = fig
            return real(fig, path)

        monkeypatch.setattr(module, "save", keep)
    return kept


def lines_by_label(fig: Any) -> list[tuple[str, str, tuple[str, str]]]:
    """(label, colour as hex, (line style, marker)) of every labelled line of every panel."""
    return [
        (line.get_label(), to_hex(line.get_color()), (line.get_linestyle(), line.get_marker()))
        for ax in fig.axes
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    ]
