"""What the `octlm experiment` commands share: the flags of an experiment's settings, the options of a grid of
cells, and how a run of it ends.

Each experiment (`experiment_length`, `experiment_tasks`, `experiment_extend`) adds the flags its `Settings`
declares (`add_settings_arguments`, see `octlm.experiments.settings`), then `add_grid_arguments`; its `run`
reads its settings back (`settings_from_args`), and calls `run_grid` with the command that reproduces them
(`command_line`) and the functions that run and collect its cells. `--quick` is a smoke test of the pipeline
(`Quick`): its help gives its measured time, and a quick run says what it is for on its first line.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.commands import options
from octlm.commands.options import int_in_range
from octlm.errors import UserError, check_output, writing
from octlm.experiments import cells
from octlm.experiments.settings import Flag
from octlm.files import write_atomic

MAX_JOBS = 4096
# Where the time in every --quick help was measured (`time octlm experiment <name> --quick`, default flags).
MEASURED_ON = "measured on 2 CPU cores busy with another experiment"


@dataclass(frozen=True)
class Quick:
    """What an experiment's `--quick` is: a smoke test of the pipeline (every stage runs, on tiny models), and
    its measured wall time."""

    minutes: float  # `time octlm experiment <name> --quick`, on the machine MEASURED_ON names, data prepared
    data_minutes: float = 0  # what the first run takes more, preparing the corpus (tokenizer, token files)

    def help(self, preset: str) -> str:
        first = (
            f"{self.data_minutes:g} min more the first time, to prepare the data; "
            if self.data_minutes
            else ""
        )
        return (
            f"{preset}. A smoke test of the pipeline: its numbers mean nothing. "
            f"About {self.minutes:g} min ({first}{MEASURED_ON})"
        )

    def first_line(self, name: str) -> str:
        return (
            f"{name} --quick: a smoke test of the pipeline on tiny models, about {self.minutes:g} min; "
            "its numbers mean nothing"
        )


def _flags(cls: type) -> list[tuple[dataclasses.Field, Flag]]:
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(cls) if "flag" in f.metadata]


def add_settings_arguments(parser: argparse.ArgumentParser, cls: type, quick: Quick) -> None:
    """A flag per field of `cls` declared with `settings.flag`, then a switch per preset (`cls.presets`; the
    `quick` one's help from `quick`), then the fields' switches. Every flag defaults to None: the setting then
    comes from the presets or `cls`."""
    for f, flag in _flags(cls):
        kind = int_in_range(*flag.range) if flag.range else None if flag.type is str else flag.type
        if flag.type is not bool:
            parser.add_argument(
                flag.name,
                dest=f.name,
                type=kind,
                nargs="+"
                if f.default_factory is not dataclasses.MISSING or isinstance(f.default, tuple)
                else None,
                default=None,
                metavar=flag.metavar or flag.name[2:].replace("-", "_").upper(),
                help=flag.help() if callable(flag.help) else flag.help,
            )
    for name, (_, text) in cls.presets.items():
        parser.add_argument(
            f"--{name}", action="store_true", help=quick.help(text) if name == "quick" else text
        )
    for f, flag in _flags(cls):
        if flag.type is bool:
            text = flag.help() if callable(flag.help) else flag.help
            parser.add_argument(flag.name, dest=f.name, action="store_true", default=None, help=text)


def settings_from_args(cls: type, args: argparse.Namespace) -> Any:
    """The defaults of `cls`, overridden by the presets given (in their order), then by the flags given."""
    values: dict[str, Any] = {}
    for name, (preset, _) in cls.presets.items():
        if getattr(args, name):
            values.update(preset)
    for f, flag in _flags(cls):
        if (value := getattr(args, f.name)) is not None:
            values[f.name] = flag.parse(value) if flag.parse else value
    return cls(**values, jobs=args.jobs, threads=args.threads)


def command_line(name: str, settings: Any, args: argparse.Namespace, overrides: dict[str, Any]) -> str:
    """A command that reproduces this experiment: its presets, --config, then every setting recorded always,
    then those recorded where they differ from the default, then the config's `overrides` as --set."""
    parts = ["octlm", "experiment", name, *(f"--{p}" for p in settings.presets if getattr(args, p))]
    if getattr(args, "config", None):
        parts += ["--config", args.config]
    flags = _flags(type(settings))
    for f, flag in [x for x in flags if x[1].recorded == "always"] + [
        x for x in flags if x[1].recorded == "changed"
    ]:
        value = getattr(settings, f.name)
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if flag.type is bool:  # a switch: its name when on
            parts += [flag.name] if value else []
        elif flag.recorded == "always" or value != default:
            values = value if isinstance(value, list | tuple) else [value]
            parts += [flag.name, *(f"{v:g}" if isinstance(v, float) else str(v) for v in values)]
    for key, value in overrides.items():
        parts += ["--set", f"{key}={' '.join(value) if isinstance(value, list) else value}"]
    return shlex.join(parts)


def add_grid_arguments(
    parser: argparse.ArgumentParser,
    *,
    out_default: str,
    web_file: str,
    cell: str,
    example: str,
    collect_help: str,
) -> None:
    """--jobs, --threads, --out, --overwrite, --export-web, --no-progress, and --only CELL / --collect (one or
    the other)."""
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
        "--overwrite",
        action="store_true",
        help="run again into an OUT that holds a finished run (all its cells)",
    )
    parser.add_argument(
        "--export-web",
        default=None,
        metavar="PATH",
        help=f"also copy {web_file} here, e.g. web/public/data/{web_file}",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="print nothing but errors (else a bar on a terminal, one line per cell elsewhere, a summary)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--only",
        action="append",
        default=[],
        metavar=cell,
        help=f"train and score only this cell into OUT/cells/ (repeatable), e.g. {example}; then --collect",
    )
    which.add_argument("--collect", action="store_true", help=collect_help)


def run_grid(
    args: argparse.Namespace,
    name: str,
    out: Path,
    files: tuple[str, str],
    axes: cells.Axes,
    quick: Quick,
    run_cells: Callable[[Sequence[str]], cells.CellsRun],
    collect: Callable[..., Any],
) -> None:
    """`--only`: those cells, then how to collect them. Otherwise the collection of `--collect`'s cells on
    disk, or of the whole grid run first: its missing cells named on stderr, its JSON (`files`: results.md,
    the JSON) copied to `--export-web`, then a summary whose last line is the results' path. `run_cells(only)` runs the grid's cells (all of them for `()`); `collect(out, progress[, ran])`
    builds the results. The outputs are checked first, and an `out` that holds a finished run (every cell of
    its grid) is refused unless --overwrite, as `octlm train` refuses a run folder that holds a run."""
    check_output(out, "--out", folder=True)
    if args.export_web is not None:
        check_output(args.export_web, "--export-web", folder=False)
    progress = not args.no_progress
    if not args.collect:
        if not args.overwrite and (count := cells.finished(out, axes)):
            raise UserError(
                f"{str(out)!r} already holds a finished run ({count} cell(s)); collect it again with "
                f"`{name} --collect --out {shlex.quote(str(out))}`, choose another --out, or pass --overwrite "
                "to run it again"
            )
        if progress and args.quick:
            print(quick.first_line(name), flush=True)
    if args.only:
        ran = run_cells(args.only)
        if progress:
            print(
                f"wrote {len(ran.names)} cell(s) to {out}/cells; once every cell is there: "
                f"{name} --collect --out {shlex.quote(str(out))}"
            )
        return
    ran = None if args.collect else run_cells(())
    result = collect(out, progress, ran)
    if result.missing:
        sys.stderr.write(
            f"{name}: {len(result.missing)} cell(s) of the grid missing, collected without them: "
            f"{' '.join(result.missing)}\n"
        )
    if args.export_web:
        target = Path(args.export_web)
        with writing(target):  # atomic: a failed copy leaves the old file, and a symlink is replaced
            write_atomic(target, (out / files[1]).read_bytes())
    if progress:
        summary(ran, args, files, out)


def summary(ran: cells.CellsRun | None, args: argparse.Namespace, files: tuple[str, str], out: Path) -> None:
    """The end of a run: its cells and time (what --quick means), the copy for the site, the results' path."""
    if ran is not None:
        minutes = (time.perf_counter() - ran.started) / 60
        smoke = "; --quick: a smoke test of the pipeline, its numbers mean nothing" if args.quick else ""
        print(f"{len(ran.names)} cells in {minutes:.1f} min with {ran.workers} worker process(es){smoke}")
    if args.export_web:
        print(f"copied {files[1]} to {args.export_web}")
    print(f"results: {out / files[0]}")
