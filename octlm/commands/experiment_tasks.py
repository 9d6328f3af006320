"""`octlm experiment tasks`: the task battery (`octlm.experiments.battery` does the work).

As the length experiment: the whole grid in one command (the default); `--only TASK:SCHEME:SEED ...`, which
trains and scores just those cells into `<out>/cells/` (a Slurm job array, GNU parallel); and `--collect`, which
builds the tables, figures and JSON from whatever cells are there and names the missing ones on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import shlex
from pathlib import Path

from octlm.commands import experiment
from octlm.commands.options import int_in_range
from octlm.errors import SEED_RANGE, check_output
from octlm.experiments import battery, battery_results
from octlm.experiments.tasks import TASKS

MAX_SEEDS, MAX_STEPS, MAX_EXAMPLES = 1000, 10**7, 10**6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks", nargs="+", metavar="TASK", help=f"tasks (default: every one: {' '.join(TASKS)})"
    )
    parser.add_argument(
        "--schemes",
        nargs="+",
        metavar="ROW",
        help="rows: a position scheme, +random for randomized positions, +nopeK for a NoPE layer K, "
        "+ssmax for queries scaled by s log n, e.g. rope rope+random alibi+nope0 nope+ssmax "
        f"(default: {' '.join(battery.default_rows())})",
    )
    parser.add_argument(
        "--seed", type=int_in_range(*SEED_RANGE), default=0, help="the first seed (default 0)"
    )
    parser.add_argument(
        "--seeds", type=int_in_range(1, MAX_SEEDS), default=None, help="seeds per cell (default 3)"
    )
    parser.add_argument(
        "--steps", type=int_in_range(1, MAX_STEPS), default=None, help="training steps per cell"
    )
    parser.add_argument("--batch-size", type=int_in_range(1, 4096), default=None, help="examples per step")
    parser.add_argument(
        "--examples",
        type=int_in_range(1, MAX_EXAMPLES),
        default=None,
        help="examples scored per test size (default 100)",
    )
    parser.add_argument(
        "--factors",
        type=int,
        nargs="+",
        default=None,
        metavar="F",
        help="test sizes: the largest training size times each (default 1 2 4 8)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model, a few steps, one seed: every task and row in a few minutes",
    )
    experiment.add_grid_arguments(
        parser,
        out_default="runs/tasks-<YYYY-MM-DD>",
        web_file=battery_results.WEB_FILE,
        cell="TASK:SCHEME:SEED",
        example="copy:rope:0",
        collect_help="build the tables, figures and JSON from the cells in OUT/cells/",
    )


def _settings(args: argparse.Namespace) -> battery.Settings:
    """The --quick or full defaults, overridden by the options given."""
    base = battery.QUICK if args.quick else battery.Settings()
    seeds = args.seeds if args.seeds is not None else len(base.seeds)
    given = {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "examples": args.examples,
        "factors": tuple(args.factors) if args.factors else None,
        "tasks": args.tasks,
        "schemes": args.schemes,
    }
    return dataclasses.replace(
        base,
        seeds=[args.seed + i for i in range(seeds)],
        jobs=args.jobs,
        threads=args.threads,
        **{k: v for k, v in given.items() if v is not None},
    )


def _command_line(args: argparse.Namespace, settings: battery.Settings) -> str:
    """A command that reproduces this battery, every option spelled out."""
    parts = [
        "octlm",
        "experiment",
        "tasks",
        *(["--quick"] if args.quick else []),
        "--tasks",
        *settings.tasks,
        "--schemes",
        *settings.schemes,
        "--seed",
        str(settings.seeds[0]),
        "--seeds",
        str(len(settings.seeds)),
        "--steps",
        str(settings.steps),
        "--batch-size",
        str(settings.batch_size),
        "--examples",
        str(settings.examples),
        "--factors",
        *map(str, settings.factors),
    ]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    battery.check_settings(settings)
    out = Path(args.out or f"runs/tasks-{datetime.date.today():%Y-%m-%d}")
    check_output(out, "--out", folder=True)
    if args.export_web is not None:
        check_output(args.export_web, "--export-web", folder=False)
    command = _command_line(args, settings)
    result = experiment.run_grid(
        args,
        "octlm experiment tasks",
        out,
        battery_results.WEB_FILE,
        lambda only: battery.run_cells(settings, out, command, not args.no_progress, only),
        battery_results.collect,
    )
    if result is not None and not args.no_progress:
        print()
        print(result.markdown)
    return 0
