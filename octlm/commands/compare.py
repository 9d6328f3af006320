"""`octlm compare RUN RUN [RUN ...]`: trained runs side by side (octlm/analysis/compare.py): a Markdown
report, its JSON and figures, and printed: whether only the scheme differs (else every other difference, one
line each), then the runs' table."""

from __future__ import annotations

import argparse

from octlm.analysis.compare import compare_runs, default_out, write_compare
from octlm.commands import options
from octlm.commands.options import int_in_range
from octlm.errors import check_output
from octlm.inspect.attention import DEFAULT_WINDOWS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="+", metavar="RUN", help="two or more run folders made by `octlm train`")
    parser.add_argument(
        "--out", metavar="DIR", help="report folder (default: reports/compare-<run>-<run>...)"
    )
    parser.add_argument(
        "--windows",
        type=int_in_range(1, 10_000),
        default=DEFAULT_WINDOWS,
        metavar="N",
        help=f"validation windows for the attention numbers (default {DEFAULT_WINDOWS})",
    )
    options.add_threads(parser)


def run(args: argparse.Namespace) -> int:
    out = check_output(args.out if args.out is not None else default_out(args.run), "--out", folder=True)
    with options.threads(args.threads):
        result = compare_runs(args.run, args.windows)
    folder = write_compare(result, out)
    print(result["verdict"] + (":" if result["differences"] else ""))
    for line in result["differences"]:
        print(f"  {line}")
    print(
        f"  {'run':<24} {'scheme':<11} {'seed':>5} {'steps':>7} {'params':>10} {'val loss':>9} "
        f"{'bits/byte':>9}"
    )
    for r in result["runs"]:
        loss = "n/a" if r["val_loss"] is None else f"{r['val_loss']:.4f}"
        bpb = "n/a" if r["val_bpb"] is None else f"{r['val_bpb']:.4f}"
        print(
            f"  {r['label']:<24} {r['scheme']:<11} {r['seed']:>5} {r['steps']:>7,} {r['parameters']:>10,} "
            f"{loss:>9} {bpb:>9}"
        )
    print(f"report: {folder / 'compare.md'} (also compare.json, curves.png and one attention figure per run)")
    return 0
