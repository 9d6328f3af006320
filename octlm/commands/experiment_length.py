"""`octlm experiment length`: the command line of the length experiment (`octlm.experiments.length` does the
work).

Three ways to run it: the whole grid in one command (the default); `--only SCHEME:SEED ...`, which trains and
scores just those cells into `<out>/cells/` (many processes may share one folder: a Slurm job array, GNU
parallel); and `--collect`, which builds the tables, figure and web JSON from whatever cells are there and
names the missing ones on stderr. The one-command run is `--only` of every cell, then `--collect`.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from octlm.commands import experiment, options
from octlm.commands.options import add_config_arguments, overrides_from_args
from octlm.config import config_fields, load_config
from octlm.errors import UserError
from octlm.experiments import length, length_results
from octlm.experiments.length import Settings

QUICK = experiment.Quick(minutes=3, data_minutes=1.5)  # measured: see experiment.MEASURED_ON
# Worker processes and seeds per scheme: past these a grid is a typo, not an experiment (each is a training).
MAX_SEEDS = 1000


ROPE_SCALING_FIELDS = ("model.rope_scaling", "model.rope_factor", "model.rope_original_length")
# The config fields each cell sets itself, and what to give instead: a flag of theirs is refused, not ignored.
SET_PER_CELL = {
    "model.position": "octlm experiment length trains every scheme of --schemes; use --schemes {value}",
    "model.context_length": "octlm experiment length trains at --train-length; use --train-length {value}",
    "train.run_name": "each cell's run is named after its scheme and seed, in OUT/runs/",
    "train.eval_interval": "each cell is evaluated once, after its last step",
    "train.checkpoint_interval": "each cell keeps one checkpoint, after its last step",
    "train.sample_tokens": "the experiment prints no samples; octlm generate RUN samples a cell's run",
    "train.report": "the experiment writes no embedding reports; octlm inspect RUN reports on a cell's run",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # --steps, --d-model, --text, --data-dir, --seed (the first seed), ...: the base config every cell shares
    # RoPE's rescaling is this experiment's variants (--rope-factor), not one config for every cell.
    fields = tuple(
        key for key in config_fields() if key not in SET_PER_CELL and key not in ROPE_SCALING_FIELDS
    )
    add_config_arguments(
        parser, fields, refused=SET_PER_CELL, no_flag=("train.out_dir",), defaults=length.FULL_DEFAULTS
    )
    options.add_deprecated(
        parser,
        "--out-dir",
        "cfg__train__out_dir",
        "give the output folder itself: --out DIR/length-YYYY-MM-DD is where --out-dir DIR wrote",
        metavar="DIR",
    )
    experiment.add_settings_arguments(parser, Settings, QUICK)
    experiment.add_grid_arguments(
        parser,
        out_default="runs/length-<YYYY-MM-DD>",
        web_file=length_results.WEB_FILE,
        cell="SCHEME:SEED",
        example="rope:1337",
        collect_help="build the tables, figure and web JSON from the cells in OUT/cells/ "
        "(the experiment's options are read from the cells)",
    )


def run(args: argparse.Namespace) -> int:
    settings = experiment.settings_from_args(Settings, args)
    overrides = overrides_from_args(args)
    defaults = length.QUICK_DEFAULTS if args.quick else length.FULL_DEFAULTS
    config = load_config(args.config, {**defaults, **overrides})  # the user's flags win over the budget
    out = Path(args.out or Path(config.train.out_dir) / f"length-{datetime.date.today():%Y-%m-%d}")
    if settings.seeds > MAX_SEEDS:  # what can be refused before any training
        raise UserError(f"--seeds {settings.seeds} is more than {MAX_SEEDS} seeds per scheme; pass fewer")
    if not args.collect and (problems := settings.problems()):  # before any output (a run's first line)
        raise UserError("; ".join(problems))
    progress = not args.no_progress
    command = experiment.command_line("length", settings, args, overrides)
    experiment.run_grid(
        args,
        "octlm experiment length",
        out,
        (length_results.MD_FILE, length_results.WEB_FILE),
        length.AXES,
        QUICK,
        lambda only: length.run_cells(config, settings, out, command, progress, only),
        length_results.collect,
    )
    return 0
