"""`octlm inspect`: what a trained run's (or a pretrained model's) embedding and position tables hold, as a
report folder (Markdown, HTML, JSON, figures), with its headline numbers printed."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from octlm.commands import options
from octlm.errors import UserError, check_output, check_text
from octlm.inspect.analysis import DEFAULT_FREQUENT, DEFAULT_TOP
from octlm.inspect.report import Progress, write_pretrained_report, write_report
from octlm.storage.run import Run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run", nargs="?", metavar="RUN", help="a run folder made by `octlm train`, e.g. runs/day1-learned"
    )
    parser.add_argument(
        "--hf",
        metavar="NAME_OR_PATH",
        help="instead of RUN: a pretrained GPT-2, Llama or GPT-NeoX model of Hugging Face "
        "transformers, a local folder or a Hub name (e.g. gpt2); safetensors weights only",
    )
    parser.add_argument(
        "--tokens",
        nargs="+",
        metavar="TEXT",
        help="tokens to inspect, by text (each must be one token), e.g. --tokens ' def' ' self'; "
        "in bash, $'\\n    ' gives a newline",
    )
    parser.add_argument("--ids", nargs="+", type=int, metavar="ID", help="tokens to inspect, by id")
    parser.add_argument(
        "--top",
        type=int,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"neighbours listed per token and position (default {DEFAULT_TOP})",
    )
    parser.add_argument(
        "--frequent",
        type=int,
        default=DEFAULT_FREQUENT,
        metavar="N",
        help=f"without --tokens/--ids: token 0 and the N most frequent (default {DEFAULT_FREQUENT})",
    )
    parser.add_argument("--out", help="report folder (default: RUN/report; with --hf: reports/NAME)")
    parser.add_argument(
        "--export-web",
        metavar="PATH",
        help="also copy embeddings.json here, e.g. web/public/data/embeddings.json",
    )
    parser.add_argument("--no-probe", action="store_true", help="skip the position probe (octlm probe)")
    options.add_threads(parser)


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an --out or --export-web that cannot be written before the (slow) analysis, not after it."""
    if args.out is not None:
        check_output(args.out, "--out", folder=True)
    elif args.run is not None and Path(args.run).is_dir():
        check_output(Run.of(args.run).report_dir, "the report folder", folder=True)
    if args.export_web is not None:
        check_output(args.export_web, "--export-web", folder=False)


def run(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UserError(f"--top {args.top} must be at least 1")
    if args.frequent < 0:
        raise UserError(f"--frequent {args.frequent} must not be negative")
    if (args.run is None) == (args.hf is None):
        raise UserError(
            "give exactly one of RUN (an octlm run folder) and --hf NAME_OR_PATH (a pretrained model)"
        )
    for text in args.tokens or []:
        check_text(text, "--tokens")
    _check_outputs(args)
    write = partial(write_report, probe=not args.no_probe) if args.hf is None else write_pretrained_report
    # The analysis takes a while (the probe most): its steps on stderr, on a terminal only.
    with options.threads(args.threads), Progress(show=sys.stderr.isatty()) as progress:
        folder, numbers = write(
            args.run or args.hf,
            args.tokens,
            args.ids,
            args.top,
            args.frequent,
            args.out,
            args.export_web,
            progress=progress,
        )
    labels = numbers["labels"]
    what = f"trained; run {numbers['run']}" if args.hf is None else f"pretrained; model {numbers['run']}"
    print(f"nearest tokens by cosine similarity ({what}):")
    for i in numbers["tokens"]:
        nb = numbers["trained"]["neighbours"][str(i)]
        listed = ", ".join(f"{labels[str(j)]} {s:.2f}" for j, s in nb)
        print(f"  {labels[str(i)]:>16}  {listed}")
    print(numbers["positions"]["summary"])
    for note in numbers["notes"]:
        print(note)
    print(f"report: {folder / 'report.md'} (also report.html, report.json, embeddings.json)")
    if args.export_web:
        print(f"web data: {args.export_web}")
    return 0
