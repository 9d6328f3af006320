"""`octlm probe`: linear probes of what each layer of a trained run knows of a token's absolute position."""

from __future__ import annotations

import argparse

from octlm.commands import options
from octlm.commands.options import int_in_range
from octlm.errors import SEED_RANGE, check_output
from octlm.inspect.probe import BUCKETS, DEFAULT_WINDOWS, MIN_WINDOWS, probe_run, write_probe
from octlm.storage.run import PROBE_FILES, Run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run folder made by `octlm train`, e.g. runs/day1-nope")
    parser.add_argument(
        "--text", metavar="FILE", help="probe on this UTF-8 text (default: the run's validation stream)"
    )
    parser.add_argument(
        "--windows",
        type=int_in_range(MIN_WINDOWS, 100_000),
        default=DEFAULT_WINDOWS,
        metavar="N",
        help=f"windows of the context length to probe on (default {DEFAULT_WINDOWS})",
    )
    parser.add_argument(
        "--buckets",
        type=int_in_range(2, 4096),
        default=BUCKETS,
        metavar="K",
        help=f"position buckets of the classifier (default {BUCKETS})",
    )
    parser.add_argument("--seed", type=int_in_range(*SEED_RANGE), default=0, help="window split and control")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: RUN/report/probe)")
    options.add_threads(parser)


def run(args: argparse.Namespace) -> int:
    if args.out is not None:
        out = check_output(args.out, "--out", folder=True)
    else:
        Run.of(args.run).find_checkpoint()  # a clear one-line refusal for a folder that is not a run
        out = check_output(Run.of(args.run).probe_dir, "the probe folder", folder=True)
    with options.threads(args.threads):
        result = probe_run(args.run, args.text, args.windows, args.buckets, args.seed)
    folder = write_probe(result, out)
    print(
        f"position probe of {result['run']} ({result['position']}), {result['tokens']['test']:,} test tokens:"
    )
    print(f"  {'layer':<10} {'R²':>6} {'MAE':>6} {'R² ctl':>7} {'acc':>6} {'acc ctl':>7}  chance")
    for x in result["layers"]:
        print(
            f"  {x['layer']:<10} {x['ridge']['r2']:6.3f} {x['ridge']['mae']:6.1f} "
            f"{x['ridge_control']['r2']:7.3f} "
            f"{x['bucket']['accuracy']:6.3f} {x['bucket_control']['accuracy']:7.3f}  {x['chance']:.3f}"
        )
    print(
        "  R², MAE: the ridge probe's fit of the position; acc: the bucket probe's accuracy; ctl: the same "
        "probe trained on shuffled positions (a layer knows position where it beats its ctl)"
    )
    print(f"probe: {folder / PROBE_FILES['markdown']} (also {PROBE_FILES['json']}, {PROBE_FILES['figure']})")
    return 0
