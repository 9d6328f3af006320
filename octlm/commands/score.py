"""`octlm score RUN --lengths L [L ...]`: bits per byte of a trained run at chosen lengths, scored as the
length experiment scores (octlm/analysis/scores_by_length.py), on the run's validation stream or a UTF-8 text
file."""

from __future__ import annotations

import argparse

from octlm.analysis.scores_by_length import DEFAULT_WINDOWS, MAX_WINDOWS, score_lines, score_run, write_score
from octlm.commands import options
from octlm.commands.options import int_in_range
from octlm.errors import check_output
from octlm.experiments.length import MAX_LENGTH


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run folder made by `octlm train`, e.g. runs/day1-alibi")
    parser.add_argument(
        "--lengths",
        nargs="+",
        required=True,
        type=int_in_range(2, MAX_LENGTH),
        metavar="L",
        help="window lengths in tokens, e.g. --lengths 64 128 256",
    )
    parser.add_argument(
        "--text", metavar="FILE", help="score this UTF-8 text (default: the run's validation stream)"
    )
    parser.add_argument(
        "--windows",
        type=int_in_range(1, MAX_WINDOWS),
        metavar="N",
        help=f"score N x max(lengths) tokens (default {DEFAULT_WINDOWS}, or as many as the text holds)",
    )
    parser.add_argument(
        "--sliding",
        action="store_true",
        help="also score sliding windows (stride L/2, every token sees >= L/2 of context; twice the work)",
    )
    parser.add_argument("--out", metavar="FILE.json", help="also write the numbers as JSON here")
    options.add_threads(parser)


def run(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_output(args.out, "--out", folder=False)
    with options.threads(args.threads, tokenizers=True):  # --text is encoded too
        result = score_run(args.run, args.lengths, args.text, args.windows, args.sliding)
    for line in score_lines(result):
        print(line)
    if args.out is not None:
        print(f"numbers: {write_score(result, args.out)}")
    return 0
