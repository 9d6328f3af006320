"""`octlm experiment extend`: the command line of the extension experiment (`octlm.experiments.extend` does the
work, `octlm.experiments.extend_results` collects it).

As the other experiments: the whole grid in one command, `--only ROW:SEED ...` for some cells into
`<out>/cells/`, or `--collect` to build results.md, extend.png and extend.json from the cells there.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
from pathlib import Path
from typing import Any

from octlm.commands import experiment
from octlm.commands.experiment_length import MAX_SEEDS, SET_PER_CELL
from octlm.commands.options import add_config_arguments, overrides_from_args
from octlm.config import config_fields, load_config
from octlm.errors import UserError, check_output
from octlm.experiments import extend, extend_results, length
from octlm.experiments.extend import Settings

SET_HERE = {
    **{k: v.replace("octlm experiment length", "octlm experiment extend") for k, v in SET_PER_CELL.items()},
    "train.init_from": "each fine-tuning starts from its base run",
}
SET_HERE["model.position"] = "octlm experiment extend trains the scheme of each of --rows; use --rows {value}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    fields = tuple(
        key for key in config_fields() if key not in SET_HERE and not key.startswith("model.rope_")
    )
    add_config_arguments(parser, fields, refused=SET_HERE, no_flag=("train.out_dir",))
    parser.add_argument("--train-length", type=int, default=None, help="base training length L (default 64)")
    parser.add_argument("--extend-length", type=int, default=None, help="fine-tuning length L' (default 256)")
    parser.add_argument(
        "--eval-lengths",
        type=int,
        nargs="+",
        default=None,
        metavar="L",
        help="evaluation lengths (default 64 128 256 512 1024)",
    )
    parser.add_argument("--seeds", type=int, default=None, help="seeds per row (default 3)")
    parser.add_argument(
        "--rows",
        nargs="+",
        default=None,
        metavar="ROW",
        help=f"rows (default: {' '.join(extend.ROWS)}): RoPE fine-tuned plain or with PI, NTK or "
        "YaRN, and schemes that need no rescaling",
    )
    parser.add_argument(
        "--steps-to-extend",
        dest="ft_steps",
        type=int,
        default=None,
        metavar="N",
        help="fine-tuning steps at the extended length (default 100)",
    )
    parser.add_argument(
        "--curve-interval",
        type=int,
        default=None,
        help="fine-tuning steps between evaluations at the extended length (default 10)",
    )
    parser.add_argument(
        "--eval-windows",
        type=int,
        default=None,
        help="scored tokens = this × the longest evaluation length (default 8)",
    )
    parser.add_argument(
        "--passkey-windows", type=int, default=None, help="passkey windows per depth and length (default 8)"
    )
    parser.add_argument(
        "--base",
        default=None,
        metavar="DIR",
        help="a length experiment's output folder: its runs of the same config are the base models",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model, a few steps, 2 seeds, lengths 16 -> 32: the pipeline in about a minute",
    )
    parser.add_argument("--retrain", action="store_true", help="train again even where a run is reused")
    experiment.add_grid_arguments(
        parser,
        out_default="runs/extend-<YYYY-MM-DD>",
        web_file=extend_results.WEB_FILE,
        cell="ROW:SEED",
        example="yarn:1337",
        collect_help="build the tables, figure and JSON from the cells in OUT/cells/",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The --quick or full defaults, overridden by the options given."""
    names = {
        "train_length": "train_length",
        "extend_length": "extend_length",
        "eval_lengths": "eval_lengths",
        "seeds": "seeds",
        "eval_windows": "eval_windows",
        "steps": "ft_steps",
        "curve_interval": "curve_interval",
        "passkey_per_depth": "passkey_windows",
    }
    given = {k: getattr(args, a) for k, a in names.items() if getattr(args, a) is not None}
    chosen = {**(extend.QUICK if args.quick else extend.FULL), **given}
    chosen["eval_lengths"] = sorted(set(chosen["eval_lengths"]))
    return Settings(
        **chosen,
        rows=args.rows or list(extend.ROWS),
        base=Path(args.base) if args.base else None,
        retrain=args.retrain,
        jobs=args.jobs,
        threads=args.threads,
    )


def command_line(args: argparse.Namespace, settings: Settings, overrides: dict[str, Any]) -> str:
    """A command that reproduces this experiment: every experiment option spelled out, config as --set."""
    parts = ["octlm", "experiment", "extend", *(["--quick"] if args.quick else [])]
    if args.config:
        parts += ["--config", args.config]
    parts += [
        "--train-length",
        str(settings.train_length),
        "--extend-length",
        str(settings.extend_length),
        "--eval-lengths",
        *map(str, settings.eval_lengths),
        "--seeds",
        str(settings.seeds),
        "--steps-to-extend",
        str(settings.steps),
        "--curve-interval",
        str(settings.curve_interval),
        "--eval-windows",
        str(settings.eval_windows),
        "--passkey-windows",
        str(settings.passkey_per_depth),
    ]
    if settings.rows != list(extend.ROWS):
        parts += ["--rows", *settings.rows]
    for key, value in overrides.items():
        parts += ["--set", f"{key}={' '.join(value) if isinstance(value, list) else value}"]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if args.seeds is not None and args.seeds > MAX_SEEDS:
        raise UserError(f"--seeds {args.seeds} is more than {MAX_SEEDS} seeds per row; pass fewer")
    overrides = overrides_from_args(args)
    defaults = length.QUICK_DEFAULTS if args.quick else length.FULL_DEFAULTS
    config = load_config(args.config, {**defaults, **overrides})
    out = Path(args.out or Path(config.train.out_dir) / f"extend-{datetime.date.today():%Y-%m-%d}")
    check_output(out, "--out", folder=True)
    if args.export_web is not None:
        check_output(args.export_web, "--export-web", folder=False)
    progress, command = not args.no_progress, command_line(args, settings, overrides)
    result = experiment.run_grid(
        args,
        "octlm experiment extend",
        out,
        extend_results.WEB_FILE,
        lambda only: extend.run_cells(config, settings, out, command, progress, only),
        extend_results.collect,
    )
    if result is not None and progress:
        print()
        print(result.markdown)
    return 0
