"""`octlm experiment tasks`: the task battery (`octlm.experiments.battery` does the work).

As the length experiment: the whole grid in one command (the default); `--only TASK:SCHEME:SEED ...`, which
trains and scores just those cells into `<out>/cells/` (a Slurm job array, GNU parallel); and `--collect`,
which builds the tables, figures and JSON from whatever cells are there and names the missing ones on stderr.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from octlm.commands import experiment
from octlm.experiments import battery, battery_results
from octlm.experiments.battery import Settings

QUICK = experiment.Quick(minutes=2)  # measured: 102 s for 43 cells, see experiment.MEASURED_ON (2026-12-07)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    experiment.add_settings_arguments(parser, Settings, QUICK)
    experiment.add_grid_arguments(
        parser,
        out_default="runs/tasks-<YYYY-MM-DD>",
        web_file=battery_results.WEB_FILE,
        cell="TASK:SCHEME:SEED",
        example="copy:rope:0",
        collect_help="build the tables, figures and JSON from the cells in OUT/cells/",
    )


def run(args: argparse.Namespace) -> int:
    settings = experiment.settings_from_args(Settings, args)
    rows = battery.check_settings(settings)  # before any output, and for --collect too
    out = Path(args.out or f"runs/tasks-{datetime.date.today():%Y-%m-%d}")
    command = experiment.command_line("tasks", settings, args, {})
    experiment.run_grid(
        args,
        "octlm experiment tasks",
        out,
        (battery_results.MD_FILE, battery_results.WEB_FILE),
        battery.AXES,
        QUICK,
        lambda only: battery.run_cells(settings, out, command, not args.no_progress, only, rows),
        battery_results.collect,
    )
    return 0
