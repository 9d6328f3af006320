"""`octlm export onnx`: a run as one ONNX graph (logits, every layer's attention and the first layer's
numbers) for onnxruntime."""

from __future__ import annotations

import argparse
import time

from octlm.commands import options
from octlm.commands.options import int_in_range
from octlm.interop.onnx_export import DEFAULT_MAX_LENGTH, LENGTH_RANGE, ONNX_FILE, STATIC_SCALING, export_onnx


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_export_folders(parser, "runs/day1-rope")
    parser.add_argument(
        "--force", action="store_true", help="replace --out if it holds an earlier ONNX export"
    )
    parser.add_argument(
        "--max-length",
        type=int_in_range(*LENGTH_RANGE),
        metavar="N",
        help=f"the longest input (default: a learned table's rows, else {DEFAULT_MAX_LENGTH})",
    )
    parser.add_argument(
        "--rope-scaling",
        choices=STATIC_SCALING + ("dynamic",),
        metavar="METHOD",
        help=f"RoPE runs: scale the frequencies ({', '.join(STATIC_SCALING)})",
    )
    parser.add_argument(
        "--rope-factor",
        type=float,
        metavar="S",
        help="the scaling factor (default: max length / training length)",
    )
    options.add_threads(parser)


def run(args: argparse.Namespace) -> None:
    run_dir, out = options.run_and_out(args, "octlm export onnx")
    start = time.perf_counter()
    with options.threads(args.threads):
        info = export_onnx(run_dir, out, args.force, args.max_length, args.rope_scaling, args.rope_factor)
    seconds, size = time.perf_counter() - start, info["files"][ONNX_FILE]
    print(
        f"wrote {args.out}: {ONNX_FILE} {size:,} bytes ({info['scheme']}, inputs of 1 to "
        f"{info['context_length']} tokens, trained at {info['train_length']}) in {seconds:.1f} s"
    )
