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
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tqdm import tqdm

from octlm.errors import UserError
from octlm.files import write_atomic
from octlm.runtime import in_processes

CELLS_DIR = "cells"
SCHEMA = 1
Key = tuple[Any, ...]  # a cell's value on each axis, in the axes' order (the seed last)
Keep = Callable[[dict[str, Any], Key], bool]  # whether a grid holds a cell of its axes' product


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
    keep: Keep | None = None  # a grid that holds less than its axes' product says which cells (None: all)

    def values(self, grid: dict[str, Any]) -> list[list[Any]]:
        """The values along each axis, from a grid (its entries "schemes", "seeds", ...)."""
        return [list(grid[f"{name}s"]) for name in self.names]

    def cells(self, grid: dict[str, Any]) -> list[Key]:
        """Every cell `grid` holds, in the experiment's order."""
        return held(self, grid, grid_cells(self.values(grid)))

    @property
    def spelled(self) -> str:
        return ":".join(name.upper() for name in self.names)


def held(axes: Axes, grid: dict[str, Any], keys: list[Key]) -> list[Key]:
    """Those of `keys` that `grid` holds (`Axes.keep`)."""
    return keys if axes.keep is None else [key for key in keys if axes.keep(grid, key)]


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


def parse_only(
    only: Sequence[str], axes: Axes, values: Sequence[Sequence[Any]], grid: Sequence[Key] | None = None
) -> list[Key]:
    """The cells `--only A:B:SEED ...` names, each checked against the grid's cells (`grid`; default: every
    cell of `values`), in grid order."""
    grid = grid_cells(values) if grid is None else grid
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
                "--seeds how many)" + (" and not every cell of their product is run" if axes.keep else "")
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


def optional(record: type[Record]) -> set[str]:
    """The entries of `record` that may be absent (a setting added later, which older cells lack)."""
    return {name for name, field in record.model_fields.items() if not field.is_required()}


def _read_cell(path: Path, axes: Axes) -> Cell:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        key = (*(raw[name] for name in axes.names[:-1]), int(raw["seed"]))
        cell = Cell(path, key, raw["grid"], raw["facts"], raw["records"])
        if (
            raw["schema"] != SCHEMA
            or not isinstance(cell.grid, dict)
            or not isinstance(cell.records, list)
            or set(axes.settings) - set(cell.grid) - optional(axes.grid)
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
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_show(k, v)}" for k, v in value.items()) or "none"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def agreed_grid(cells: Sequence[Cell], axes: Axes) -> dict[str, Any]:
    """The grid all `cells` share; else a UserError naming a cell and the setting in which it differs from
    most of the others."""
    shared = Counter(json.dumps(c.grid, sort_keys=True) for c in cells).most_common(1)[0][0]
    first = next(c for c in cells if json.dumps(c.grid, sort_keys=True) == shared)
    for cell in cells:
        for key, label in axes.settings.items():
            if cell.grid.get(key) != first.grid.get(
                key
            ):  # .get: a setting added later is absent in old cells
                raise UserError(
                    f"cell {cell.path.name} was made with a different {label} ({_show(key, cell.grid.get(key))}) "
                    f"from {first.path.name} ({_show(key, first.grid.get(key))}); the cells collected together "
                    "must share their settings: remove one or run it again with the other's options"
                )
    return first.grid


def in_grid_order(grid: dict[str, Any], cells: Sequence[Cell], axes: Axes) -> list[Cell]:
    order = {key: i for i, key in enumerate(axes.cells(grid))}
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
    return [":".join(map(str, key)) for key in axes.cells(grid) if key not in have]


# ------------------------------------------------------------------------------------------------------------
# Running cells: the same for every experiment


@dataclass
class CellsRun:
    """What `run` did: the cells it wrote, with how many workers, from when (perf_counter)."""

    names: list[str]
    workers: int
    started: float


Work = Callable[[Key], tuple[list[dict], dict[str, Any]]]  # one cell: (records, info)


@dataclass(frozen=True)
class Saying:
    """Progress lines on stdout, each flushed (redirected to a file or a pipe, stdout is block-buffered and the
    lines would all come at the end); nothing when not `on` (`--no-progress`)."""

    on: bool

    def __call__(self, *parts: Any) -> None:
        if self.on:
            print(*parts, flush=True)


def saying(progress: bool) -> Saying:
    return Saying(progress)


def chosen(
    only: Sequence[str], axes: Axes, values: Sequence[Sequence[Any]], grid: dict[str, Any] | None = None
) -> list[Key]:
    """The cells to run: `--only`'s, or the whole grid (those of `values`' product that `grid` holds, where
    the axes keep fewer)."""
    every = grid_cells(values) if grid is None else held(axes, grid, grid_cells(values))
    return parse_only(only, axes, values, every) if only else every


def workers_for(jobs: int, cells: int) -> int:
    """Worker processes for `cells` cells: `--jobs`, or one per CPU core (0), never more than the cells."""
    return max(1, min(jobs or os.cpu_count() or 1, cells))


def finished(out_dir: Path, axes: Axes) -> int:
    """How many cells `out_dir` holds when they are every cell of the grid they share (a finished run); 0 when
    it holds none or some are missing. Cells that disagree on their settings are a UserError."""
    if not any((out_dir / CELLS_DIR).glob("*.json")):
        return 0
    found, _, absent = gathered(out_dir, axes)
    return 0 if absent else len(found)


def check_folder(out_dir: Path, axes: Axes, grid: dict[str, Any]) -> None:
    """Refuse, before any cell runs, an `out_dir` whose cells were made with other settings than `grid`:
    collected together they would be refused, and rewriting some of them would leave a folder of two grids."""
    folder = out_dir / CELLS_DIR
    here = json.loads(json.dumps(grid))  # as a cell file holds it: tuples as lists
    for path in sorted(folder.glob("*.json")):
        cell = _read_cell(path, axes)
        for key, label in axes.settings.items():
            if cell.grid.get(key) != here.get(key):
                raise UserError(
                    f"{out_dir} holds cells made with a different {label} ({_show(key, cell.grid.get(key))}, "
                    f"here {_show(key, here[key])}; {path.name} among them): choose another --out, or remove "
                    f"{folder} to start again"
                )


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
    say: Saying,
    line: Callable[[Key, list[dict], dict[str, Any]], str],
) -> CellsRun:
    """Run `work` on every cell of `todo` (in `workers` processes when more than one), each written to
    `out_dir/cells/` as it finishes. Progress, as `octlm train` and the token cache show it: a bar on stderr
    when stderr is a terminal, else one line per finished cell, `[i/n] <line(key, records, info)>`.

    `work` must pickle (a module-level function, or a `functools.partial` of one) to reach a worker. A folder
    holding cells of other settings is refused first (`check_folder`).
    """
    check_folder(out_dir, axes, grid)
    keyed = functools.partial(_keyed, work)
    results = map(keyed, todo) if workers == 1 else in_processes(keyed, todo, workers)
    interactive = say.on and sys.stderr.isatty()
    with tqdm(total=len(todo), unit="cell", dynamic_ncols=True, disable=not interactive) as bar:
        for done, (key, (records, info)) in enumerate(results, 1):
            write_cell(out_dir, axes, key, grid, {**facts, "info": info}, records)
            bar.update()
            if not interactive:
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
