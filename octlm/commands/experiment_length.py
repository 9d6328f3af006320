"""`octlm experiment length`: the command line of the length experiment (`octlm.experiments.length` does the work).

Three ways to run it: the whole grid in one command (the default); `--only SCHEME:SEED ...`, which trains and
scores just those cells into `<out>/cells/` (many processes may share one folder: a Slurm job array, GNU
parallel); and `--collect`, which builds the tables, figure and web JSON from whatever cells are there and
names the missing ones on stderr. The one-command run is `--only` of every cell, then `--collect`.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
from pathlib import Path
from typing import Any

from octlm.commands import experiment, options
from octlm.commands.options import add_config_arguments, overrides_from_args
from octlm.config import config_fields, load_config
from octlm.errors import UserError, check_output
from octlm.experiments import length, length_results
from octlm.experiments.length import Settings

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
    add_config_arguments(parser, fields, refused=SET_PER_CELL, no_flag=("train.out_dir",))
    options.add_deprecated(
        parser,
        "--out-dir",
        "cfg__train__out_dir",
        "give the output folder itself: --out DIR/length-YYYY-MM-DD is where --out-dir DIR wrote",
        metavar="DIR",
    )
    parser.add_argument("--train-length", type=int, default=None, help="training context length (default 64)")
    parser.add_argument(
        "--eval-lengths",
        type=int,
        nargs="+",
        default=None,
        metavar="L",
        help="evaluation lengths (default 64 128 256 512 1024)",
    )
    parser.add_argument("--seeds", type=int, default=None, help="seeds per scheme (default 3)")
    parser.add_argument(
        "--schemes",
        nargs="+",
        default=None,
        metavar="SCHEME",
        help=f"position schemes, each alone or as SCHEME+ssmax (queries scaled by s log n) "
        f"(default: {' '.join(length.default_rows())})",
    )
    parser.add_argument(
        "--eval-windows",
        type=int,
        default=None,
        help="scored tokens = this × the longest evaluation length (default 16)",
    )
    parser.add_argument(
        "--rope-factor",
        type=float,
        default=None,
        help="static RoPE extension factor for PI, NTK and YaRN (default: longest / train length)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model, a few steps, 2 seeds, lengths 16 32 64: the pipeline in about a minute",
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="evaluation lengths 64 128 ... 16384 and 2 windows (with --quick: the tiny model)",
    )
    parser.add_argument("--retrain", action="store_true", help="train again even where a run is reused")
    experiment.add_grid_arguments(
        parser,
        out_default="runs/length-<YYYY-MM-DD>",
        web_file=length_results.WEB_FILE,
        cell="SCHEME:SEED",
        example="rope:1337",
        collect_help="build the tables, figure and web JSON from the cells in OUT/cells/ "
        "(the experiment's options are read from the cells)",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The --quick or full defaults, overridden by the options given."""
    keys = ("train_length", "eval_lengths", "seeds", "eval_windows")
    given = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    chosen = {**(length.QUICK if args.quick else length.FULL), **(length.LONG if args.long else {}), **given}
    return Settings(
        train_length=chosen["train_length"],
        eval_lengths=sorted(set(chosen["eval_lengths"])),
        seeds=chosen["seeds"],
        schemes=args.schemes or length.default_rows(),
        eval_windows=chosen["eval_windows"],
        rope_factor=args.rope_factor,
        retrain=args.retrain,
        jobs=args.jobs,
        threads=args.threads,
    )


def command_line(args: argparse.Namespace, settings: Settings, overrides: dict[str, Any]) -> str:
    """A command that reproduces this experiment: every experiment option spelled out, config as --set."""
    parts = ["octlm", "experiment", "length"]
    if args.quick:
        parts.append("--quick")
    if args.long:
        parts.append("--long")  # what it sets is spelled out below; this names the mode
    if args.config:
        parts += ["--config", args.config]
    parts += [
        "--train-length",
        str(settings.train_length),
        "--eval-lengths",
        *map(str, settings.eval_lengths),
        "--seeds",
        str(settings.seeds),
        "--eval-windows",
        str(settings.eval_windows),
    ]
    if settings.schemes != length.default_rows():
        parts += ["--schemes", *settings.schemes]
    if settings.rope_factor is not None:
        parts += ["--rope-factor", f"{settings.rope_factor:g}"]
    for key, value in overrides.items():
        value = " ".join(value) if isinstance(value, list) else value
        parts += ["--set", f"{key}={value}"]
    return shlex.join(parts)


def _check_args(args: argparse.Namespace, out: Path) -> None:
    """What can be refused before any training: too many seeds, outputs that cannot be written."""
    if args.seeds is not None and args.seeds > MAX_SEEDS:
        raise UserError(f"--seeds {args.seeds} is more than {MAX_SEEDS} seeds per scheme; pass fewer")
    check_output(out, "--out", folder=True)
    if args.export_web is not None:
        check_output(args.export_web, "--export-web", folder=False)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    overrides = overrides_from_args(args)
    defaults = length.QUICK_DEFAULTS if args.quick else length.FULL_DEFAULTS
    config = load_config(args.config, {**defaults, **overrides})  # the user's flags win over the budget
    out = Path(args.out or Path(config.train.out_dir) / f"length-{datetime.date.today():%Y-%m-%d}")
    _check_args(args, out)
    progress, command = not args.no_progress, command_line(args, settings, overrides)
    result = experiment.run_grid(
        args,
        "octlm experiment length",
        out,
        length_results.WEB_FILE,
        lambda only: length.run_cells(config, settings, out, command, progress, only),
        length_results.collect,
    )
    if result is None:
        return 0
    if args.export_web and progress:
        print(f"copied {length_results.WEB_FILE} to {args.export_web}")
    if progress:
        print()
        print(result.markdown)
    return 0
