"""`octlm experiment extend`: the command line of the extension experiment (`octlm.experiments.extend` does
the work, `octlm.experiments.extend_results` collects it).

As the other experiments: the whole grid in one command, `--only ROW:SEED ...` for some cells into
`<out>/cells/`, or `--collect` to build results.md, extend.png and extend.json from the cells there.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from octlm.commands import experiment
from octlm.commands.experiment_length import MAX_SEEDS, SET_PER_CELL
from octlm.commands.options import add_config_arguments, overrides_from_args
from octlm.config import config_fields, load_config
from octlm.errors import UserError
from octlm.experiments import extend, extend_results, length
from octlm.experiments.extend import Settings

QUICK = experiment.Quick(minutes=3, data_minutes=1.5)  # measured: see experiment.MEASURED_ON
SET_HERE = {
    **{k: v.replace("octlm experiment length", "octlm experiment extend") for k, v in SET_PER_CELL.items()},
    "train.init_from": "each fine-tuning starts from its base run",
}
SET_HERE["model.position"] = "octlm experiment extend trains the scheme of each of --rows; use --rows {value}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    fields = tuple(
        key for key in config_fields() if key not in SET_HERE and not key.startswith("model.rope_")
    )
    add_config_arguments(
        parser, fields, refused=SET_HERE, no_flag=("train.out_dir",), defaults=length.FULL_DEFAULTS
    )
    experiment.add_settings_arguments(parser, Settings, QUICK)
    experiment.add_grid_arguments(
        parser,
        out_default="runs/extend-<YYYY-MM-DD>",
        web_file=extend_results.WEB_FILE,
        cell="ROW:SEED",
        example="yarn:1337",
        collect_help="build the tables, figure and JSON from the cells in OUT/cells/",
    )


def run(args: argparse.Namespace) -> int:
    settings = experiment.settings_from_args(Settings, args)
    if settings.seeds > MAX_SEEDS:
        raise UserError(f"--seeds {settings.seeds} is more than {MAX_SEEDS} seeds per row; pass fewer")
    if not args.collect and (problems := settings.problems()):  # before any output (a run's first line)
        raise UserError("; ".join(problems))
    overrides = overrides_from_args(args)
    defaults = length.QUICK_DEFAULTS if args.quick else length.FULL_DEFAULTS
    config = load_config(args.config, {**defaults, **overrides})
    out = Path(args.out or Path(config.train.out_dir) / f"extend-{datetime.date.today():%Y-%m-%d}")
    progress, command = not args.no_progress, experiment.command_line("extend", settings, args, overrides)
    experiment.run_grid(
        args,
        "octlm experiment extend",
        out,
        (extend_results.MD_FILE, extend_results.WEB_FILE),
        extend.AXES,
        QUICK,
        lambda only: extend.run_cells(config, settings, out, command, progress, only),
        extend_results.collect,
    )
    return 0
