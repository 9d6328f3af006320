"""What the `octlm experiment` commands share: the options of a grid of cells, and how a run of it ends.

Each experiment (`experiment_length`, `experiment_tasks`) adds its own options, then `add_grid_arguments`;
its `run` builds its settings and calls `run_grid` with the functions that run and collect its cells.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from octlm.commands import options
from octlm.commands.options import int_in_range
from octlm.errors import writing
from octlm.files import write_atomic

MAX_JOBS = 4096


def add_grid_arguments(
    parser: argparse.ArgumentParser,
    *,
    out_default: str,
    web_file: str,
    cell: str,
    example: str,
    collect_help: str,
) -> None:
    """--jobs, --threads, --out, --export-web, --no-progress, and --only CELL / --collect (one or the other)."""
    parser.add_argument(
        "--jobs",
        type=int_in_range(0, MAX_JOBS),
        default=0,
        help="cells trained at once, in worker processes (default: one per CPU core)",
    )
    # 1 per worker, not octlm's measured default: the workers start together, one per core, and each would
    # see the others' cores idle and take them too.
    options.add_threads(parser, default=1, what="torch threads per worker")
    parser.add_argument("--out", default=None, metavar="DIR", help=f"output folder (default {out_default})")
    parser.add_argument(
        "--export-web",
        default=None,
        metavar="PATH",
        help=f"also copy {web_file} here, e.g. web/public/data/{web_file}",
    )
    parser.add_argument("--no-progress", action="store_true", help="print nothing but errors")
    cells = parser.add_mutually_exclusive_group()
    cells.add_argument(
        "--only",
        action="append",
        default=[],
        metavar=cell,
        help=f"train and score only this cell into OUT/cells/ (repeatable), e.g. {example}; then --collect",
    )
    cells.add_argument("--collect", action="store_true", help=collect_help)


def run_grid(
    args: argparse.Namespace,
    name: str,
    out: Path,
    web_file: str,
    run_cells: Callable[[Sequence[str]], Any],
    collect: Callable[..., Any],
) -> Any:
    """`--only`: those cells, then how to collect them (returns None). Otherwise the collection of `--collect`'s
    cells on disk, or of the whole grid run first: its missing cells named on stderr, its JSON copied to
    `--export-web`; returns it. `run_cells(only)` runs the grid's cells (all of them for `()`);
    `collect(out, progress[, ran])` builds the results."""
    progress = not args.no_progress
    if args.only:
        ran = run_cells(args.only)
        if progress:
            print(
                f"wrote {len(ran.names)} cell(s) to {out}/cells; once every cell is there: "
                f"{name} --collect --out {shlex.quote(str(out))}"
            )
        return None
    result = collect(out, progress) if args.collect else collect(out, progress, run_cells(()))
    if result.missing:
        sys.stderr.write(
            f"{name}: {len(result.missing)} cell(s) of the grid missing, collected without them: "
            f"{' '.join(result.missing)}\n"
        )
    if args.export_web:
        target = Path(args.export_web)
        with writing(target):  # atomic: a failed copy leaves the old file, and a symlink is replaced
            write_atomic(target, (out / web_file).read_bytes())
    return result
