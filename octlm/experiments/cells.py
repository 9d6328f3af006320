"""An experiment's grid as cell files: one file per cell (one training and its scores), written atomically,
read back, collected.

A grid has axes, the last of them `seed`: the length experiment's are scheme and seed, the task battery's
task, scheme and seed (`Axes`). `<out>/cells/<name>.json` (`rope-seed1337.json`, `copy-rope-seed1337.json`)
holds the cell's place on each axis, its records (as the experiment makes them), how it ran (`facts`: the
command, the base config, timings) and the settings that define the grid (`grid`: the experiment's
`Axes.settings`, the values along each axis among them). A file is written to a temporary file in the same
folder and moved into place (`octlm.files.write_atomic`), so processes writing different cells into one folder
never clash and a reader never sees half a cell. Collecting reads whatever cells are there, refuses to mix
cells made with different settings, and names the cells of the grid that are missing. Nothing here trains or
scores.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from octlm.errors import UserError
from octlm.files import write_atomic
from octlm.runtime import in_processes

CELLS_DIR = "cells"
SCHEMA = 1
Key = tuple[Any, ...]  # a cell's value on each axis, in the axes' order (the seed last)


class Record(BaseModel):
    """A typed view of what a cell file holds, checked before anything is collected: strict (no string read as
    a number), and open to entries an experiment adds later. Only checked: the file's own values are used."""

    model_config = ConfigDict(strict=True, extra="allow")


Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
Number = float | None  # a figure; None where there is none (no rows)
Seeds = Annotated[list[int], Field(min_length=1)]


class Facts(Record):
    """How a cell ran: the command that made it and its timings (`info`, per experiment)."""

    command: str
    info: dict[str, Any]


@dataclass(frozen=True)
class Axes:
    """What an experiment's cells are indexed by, and the settings every cell collected together must
    share."""

    names: tuple[str, ...]  # e.g. ("scheme", "seed"): the last is always "seed"
    command: str  # the command that writes the cells, named in messages
    settings: dict[str, str]  # grid entry -> how an error message names it
    grid: type[Record] = Record  # what `settings` hold (every cell's `grid`)
    record: type[Record] = Record  # one of a cell's records
    facts: type[Record] = Facts  # a cell's `facts`

    def values(self, grid: dict[str, Any]) -> list[list[Any]]:
        """The values along each axis, from a grid (its entries "schemes", "seeds", ...)."""
        return [list(grid[f"{name}s"]) for name in self.names]

    @property
    def spelled(self) -> str:
        return ":".join(name.upper() for name in self.names)


@dataclass
class Cell:
    """One cell file, read back."""

    path: Path
    key: Key
    grid: dict[str, Any]  # the axes' settings -> value
    facts: dict[str, Any]  # command, config, timings, ...
    records: list[dict]

    @property
    def label(self) -> str:
        """`scheme:seed` (one value per axis), as `--only` spells it."""
        return ":".join(map(str, self.key))


def cell_name(key: Key) -> str:
    """A cell's name, also its run folder's name: `<scheme>-seed<k>`, `<task>-<scheme>-seed<k>`."""
    return "-".join([*map(str, key[:-1]), f"seed{key[-1]}"])


def grid_cells(values: Sequence[Sequence[Any]]) -> list[Key]:
    """Every cell of a grid in the experiment's order: seed by seed, the other axes in order within each."""
    *outer, seeds = values
    return [(*rest, seed) for seed in seeds for rest in itertools.product(*outer)]


def parse_only(only: Sequence[str], axes: Axes, values: Sequence[Sequence[Any]]) -> list[Key]:
    """The cells `--only A:B:SEED ...` names, each checked against the grid, in grid order."""
    grid = grid_cells(values)
    chosen = set()
    for value in only:
        *parts, seed = value.split(":")
        if len(parts) != len(axes.names) - 1 or not seed.isdigit():
            example = ":".join(str(v[0]) for v in values)
            raise UserError(f"--only {value!r} must look like {axes.spelled}, e.g. {example}")
        if (*parts, int(seed)) not in grid:
            listed = "; ".join(
                f"{name}s {' '.join(map(str, v))}" for name, v in zip(axes.names, values, strict=True)
            )
            raise UserError(
                f"--only {value} is not a cell of this grid ({listed}: --seed sets the first, "
                "--seeds how many)"
            )
        chosen.add((*parts, int(seed)))
    return [cell for cell in grid if cell in chosen]


def write_cell(
    out_dir: Path, axes: Axes, key: Key, grid: dict[str, Any], facts: dict[str, Any], records: list[dict]
) -> Path:
    """Write `out_dir/cells/<cell name>.json` atomically; returns its path."""
    path = out_dir / CELLS_DIR / f"{cell_name(key)}.json"
    cell = {
        "schema": SCHEMA,
        **dict(zip(axes.names, key, strict=True)),
        "grid": grid,
        "facts": facts,
        "records": records,
    }
    write_atomic(path, (json.dumps(cell, indent=1) + "\n").encode("utf-8"))
    return path


def read_cells(out_dir: Path, axes: Axes, names: Sequence[str] | None = None) -> list[Cell]:
    """The cell files in `out_dir/cells/` (only `names` when given), sorted by name."""
    folder = out_dir / CELLS_DIR
    paths = sorted(folder.glob("*.json"))  # a temporary file (.name.json.xyz.tmp) is not a cell yet
    if names is not None:
        wanted = set(names)
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        raise UserError(
            f"no cells in {folder}; run some first: {axes.command} --out {out_dir} --only {axes.spelled}"
        )
    return [_read_cell(path, axes) for path in paths]


def _read_cell(path: Path, axes: Axes) -> Cell:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        key = (*(raw[name] for name in axes.names[:-1]), int(raw["seed"]))
        cell = Cell(path, key, raw["grid"], raw["facts"], raw["records"])
        if (
            raw["schema"] != SCHEMA
            or not isinstance(cell.grid, dict)
            or not isinstance(cell.records, list)
            or set(axes.settings) - set(cell.grid)
            or path.stem != cell_name(key)
        ):
            raise ValueError("not a cell of this version, or renamed")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path} is not a cell file of `{axes.command}` ({error}); remove it") from None
    _check(path, axes.grid, cell.grid, "grid")
    _check(path, axes.facts, cell.facts, "facts")
    for i, record in enumerate(cell.records):
        _check(path, axes.record, record, f"records[{i}]")
    return cell


def _check(path: Path, model: type[Record], value: Any, where: str) -> None:
    """A UserError naming the file, the entry and the value when `value` is not a `model`."""
    try:
        model.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        entry = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise UserError(
            f"{path}: {where}{entry} is {json.dumps(first['input'])} ({first['msg'].lower()}); "
            "correct it or remove the cell"
        ) from None


def _show(key: str, value: Any) -> str:
    if key.endswith("sha256") and isinstance(value, str):
        return value[:12]
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def agreed_grid(cells: Sequence[Cell], axes: Axes) -> dict[str, Any]:
    """The grid all `cells` share; else a UserError naming a cell and the setting in which it differs from
    most of the others."""
    shared = Counter(json.dumps(c.grid, sort_keys=True) for c in cells).most_common(1)[0][0]
    first = next(c for c in cells if json.dumps(c.grid, sort_keys=True) == shared)
    for cell in cells:
        for key, label in axes.settings.items():
            if cell.grid[key] != first.grid[key]:
                raise UserError(
                    f"cell {cell.path.name} was made with a different {label} ({_show(key, cell.grid[key])}) "
                    f"from {first.path.name} ({_show(key, first.grid[key])}); the cells collected together "
                    "must share their settings: remove one or run it again with the other's options"
                )
    return first.grid


def in_grid_order(grid: dict[str, Any], cells: Sequence[Cell], axes: Axes) -> list[Cell]:
    order = {key: i for i, key in enumerate(grid_cells(axes.values(grid)))}
    return sorted(cells, key=lambda c: order.get(c.key, len(order)))


def gathered(
    out_dir: Path, axes: Axes, names: Sequence[str] | None = None
) -> tuple[list[Cell], dict[str, Any], list[str]]:
    """What a collection starts from: the cells there (only `names` when given) in grid order, the grid they
    share, and the grid's cells with no file (`missing`)."""
    found = read_cells(out_dir, axes, names)
    grid = agreed_grid(found, axes)
    return in_grid_order(grid, found, axes), grid, missing(grid, found, axes)


def missing(grid: dict[str, Any], cells: Sequence[Cell], axes: Axes) -> list[str]:
    """The grid's cells that have no file, as `scheme:seed` (one value per axis)."""
    have = {c.key for c in cells}
    return [":".join(map(str, key)) for key in grid_cells(axes.values(grid)) if key not in have]


# ------------------------------------------------------------------------------------------------------------
# Running cells: the same for every experiment


@dataclass
class CellsRun:
    """What `run` did: the cells it wrote, with how many workers, from when (perf_counter)."""

    names: list[str]
    workers: int
    started: float


Work = Callable[[Key], tuple[list[dict], dict[str, Any]]]  # one cell: (records, info)


def saying(progress: bool) -> Callable[..., None]:
    """`print`, flushed (redirected to a file or a pipe, stdout is block-buffered and the lines would all come
    at the end), or nothing."""
    return functools.partial(print, flush=True) if progress else (lambda *a, **k: None)


def chosen(only: Sequence[str], axes: Axes, values: Sequence[Sequence[Any]]) -> list[Key]:
    """The cells to run: `--only`'s, or the whole grid."""
    return parse_only(only, axes, values) if only else grid_cells(values)


def workers_for(jobs: int, cells: int) -> int:
    """Worker processes for `cells` cells: `--jobs`, or one per CPU core (0), never more than the cells."""
    return max(1, min(jobs or os.cpu_count() or 1, cells))


def run(
    out_dir: Path,
    axes: Axes,
    todo: Sequence[Key],
    work: Work,
    grid: dict[str, Any],
    facts: dict[str, Any],
    *,
    workers: int,
    started: float,
    say: Callable[..., None],
    line: Callable[[Key, list[dict], dict[str, Any]], str],
) -> CellsRun:
    """Run `work` on every cell of `todo` (in `workers` processes when more than one), each written to
    `out_dir/cells/` as it finishes, with a progress line `[i/n] <line(key, records, info)>`.

    `work` must pickle (a module-level function, or a `functools.partial` of one) to reach a worker.
    """
    keyed = functools.partial(_keyed, work)
    results = map(keyed, todo) if workers == 1 else in_processes(keyed, todo, workers)
    for done, (key, (records, info)) in enumerate(results, 1):
        write_cell(out_dir, axes, key, grid, {**facts, "info": info}, records)
        say(f"[{done}/{len(todo)}] {line(key, records, info)}")
    return CellsRun([cell_name(key) for key in todo], workers, started)


def _keyed(work: Work, key: Key) -> tuple[Key, tuple[list[dict], dict[str, Any]]]:
    return key, work(key)


@contextlib.contextmanager
def locked(out_dir: Path, what: str = "") -> Iterator[None]:
    """One process at a time inside the block, among those sharing `out_dir` (an advisory lock on a file).

    Cells started together use it while the first of them builds what they all read (a token cache, or with
    `what` naming it, a training several cells start from).
    """
    folder = out_dir / CELLS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{what}.lock" if what else folder / ".lock", "a", encoding="utf-8") as handle:
        with contextlib.suppress(OSError):  # a file system without locks: go on unlocked
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield
