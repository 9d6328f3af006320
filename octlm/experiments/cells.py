"""The length experiment's grid as cell files: one file per (scheme, seed), written atomically, read back.

A cell is one training and its scores. `<out>/cells/<scheme>-seed<k>.json` holds the cell's records (as
`octlm.experiments.length.evaluate_run` makes them), how it ran (`facts`: the command, the base config, the scored tokens
and bytes, the timings) and the settings that define the grid (`grid`, GRID_KEYS: training and evaluation
lengths, windows, modes, the RoPE factor, the grid's schemes and seeds, SHA-256 of the base training config and
of the evaluation tokens). A file is written to a temporary file in the same folder and moved into place
(`octlm.files.write_atomic`), so processes writing different cells into one folder never clash and a reader never
sees half a cell. Collecting reads whatever cells are there, refuses to mix cells made with different settings,
and names the cells of the grid that are missing. Nothing here trains or scores (`octlm.experiments.length` does).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.errors import UserError
from octlm.files import write_atomic

try:
    import fcntl
except ImportError:  # no advisory locks (Windows): cell files still never clash
    fcntl = None  # type: ignore[assignment]

CELLS_DIR = "cells"
SCHEMA = 1
# The settings every cell collected together must share, and how an error message names each.
GRID_KEYS: dict[str, str] = {
    "train_length": "--train-length", "eval_lengths": "--eval-lengths", "eval_windows": "--eval-windows",
    "modes": "evaluation modes", "rope_factor": "RoPE factor (--rope-factor)", "schemes": "--schemes",
    "seeds": "seeds (--seed, --seeds)", "config_sha256": "base training config (SHA-256)",
    "eval_sha256": "evaluation tokens (SHA-256)",
}  # fmt: skip


@dataclass
class Cell:
    """One cell file, read back."""

    path: Path
    scheme: str
    seed: int
    grid: dict[str, Any]  # GRID_KEYS -> value
    facts: dict[str, Any]  # command, config, config_name, scored_tokens, scored_bytes, info (timings)
    records: list[dict]

    @property
    def label(self) -> str:
        """`scheme:seed`, as `--only` spells it."""
        return f"{self.scheme}:{self.seed}"


def cell_name(scheme: str, seed: int) -> str:
    """A cell's name, also its run folder's name under `runs/`: `<scheme>-seed<k>`."""
    return f"{scheme}-seed{seed}"


def grid_cells(schemes: Sequence[str], seeds: Sequence[int]) -> list[tuple[str, int]]:
    """Every (scheme, seed) of a grid in the experiment's order: seed by seed, the schemes in order."""
    return [(scheme, seed) for seed in seeds for scheme in schemes]


def parse_only(values: Sequence[str], schemes: Sequence[str], seeds: Sequence[int]) -> list[tuple[str, int]]:
    """The cells `--only SCHEME:SEED ...` names, each checked against the grid, in grid order."""
    grid = grid_cells(schemes, seeds)
    chosen = set()
    for value in values:
        scheme, _, seed = value.partition(":")
        if not seed.isdigit():
            raise UserError(f"--only {value!r} must look like SCHEME:SEED, e.g. {schemes[0]}:{seeds[0]}")
        if (scheme, int(seed)) not in grid:
            raise UserError(
                f"--only {value} is not a cell of this grid (schemes {' '.join(schemes)}; seeds "
                f"{' '.join(map(str, seeds))}: --seed sets the first, --seeds how many)"
            )
        chosen.add((scheme, int(seed)))
    return [cell for cell in grid if cell in chosen]


def write_cell(
    out_dir: Path, scheme: str, seed: int, grid: dict[str, Any], facts: dict[str, Any], records: list[dict]
) -> Path:
    """Write `out_dir/cells/<scheme>-seed<k>.json` atomically; returns its path."""
    path = out_dir / CELLS_DIR / f"{cell_name(scheme, seed)}.json"
    cell = {
        "schema": SCHEMA,
        "scheme": scheme,
        "seed": seed,
        "grid": grid,
        "facts": facts,
        "records": records,
    }
    write_atomic(path, (json.dumps(cell, indent=1) + "\n").encode("utf-8"))
    return path


def read_cells(out_dir: Path, names: Sequence[str] | None = None) -> list[Cell]:
    """The cell files in `out_dir/cells/` (only `names` when given), sorted by name."""
    folder = out_dir / CELLS_DIR
    paths = sorted(folder.glob("*.json"))  # a temporary file (.name.json.xyz.tmp) is not a cell yet
    if names is not None:
        wanted = set(names)
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        raise UserError(
            f"no cells in {folder}; run some first: octlm experiment length --out {out_dir} --only SCHEME:SEED"
        )
    cells = []
    for path in paths:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            cell = Cell(path, raw["scheme"], int(raw["seed"]), raw["grid"], raw["facts"], raw["records"])
            if (
                raw["schema"] != SCHEMA
                or not isinstance(cell.grid, dict)
                or set(GRID_KEYS) - set(cell.grid)
                or path.stem != cell_name(cell.scheme, cell.seed)
            ):
                raise ValueError("not a cell of this version, or renamed")
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserError(
                f"{path} is not a cell file of `octlm experiment length` ({error}); remove it"
            ) from None
        cells.append(cell)
    return cells


def _show(key: str, value: Any) -> str:
    if key.endswith("sha256") and isinstance(value, str):
        return value[:12]
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def agreed_grid(cells: Sequence[Cell]) -> dict[str, Any]:
    """The grid all `cells` share; else a UserError naming a cell and the setting in which it differs from
    most of the others."""
    shared = Counter(json.dumps(c.grid, sort_keys=True) for c in cells).most_common(1)[0][0]
    first = next(c for c in cells if json.dumps(c.grid, sort_keys=True) == shared)
    for cell in cells:
        for key, label in GRID_KEYS.items():
            if cell.grid[key] != first.grid[key]:
                raise UserError(
                    f"cell {cell.path.name} was made with a different {label} ({_show(key, cell.grid[key])}) "
                    f"from {first.path.name} ({_show(key, first.grid[key])}); the cells collected together "
                    "must share their settings: remove one or run it again with the other's options"
                )
    return first.grid


def in_grid_order(grid: dict[str, Any], cells: Sequence[Cell]) -> list[Cell]:
    order = {cell: i for i, cell in enumerate(grid_cells(grid["schemes"], grid["seeds"]))}
    return sorted(cells, key=lambda c: order.get((c.scheme, c.seed), len(order)))


def missing(grid: dict[str, Any], cells: Sequence[Cell]) -> list[str]:
    """The grid's cells that have no file, as `scheme:seed`."""
    have = {(c.scheme, c.seed) for c in cells}
    return [f"{s}:{k}" for s, k in grid_cells(grid["schemes"], grid["seeds"]) if (s, k) not in have]


@contextlib.contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """One process at a time inside the block, among those sharing `out_dir` (an advisory lock on a file).

    Cells started together use it while the first of them builds the token cache, which the others then reuse.
    """
    folder = out_dir / CELLS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a", encoding="utf-8") as handle:
        if fcntl is not None:
            with contextlib.suppress(OSError):  # a file system without locks: go on unlocked
                fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield
