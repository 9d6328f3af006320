"""`octlm export fixtures`: write (or `--check`) the JSON fixtures the web site's math is tested against."""

from __future__ import annotations

import argparse
from pathlib import Path

from octlm.errors import UserError
from octlm.experiments.task_export import task_fixtures
from octlm.interop.site_fixtures import DEFAULT_OUT, stale_fixtures, write_fixtures

# fixture files from layers above interop: the task battery's examples
EXTRA = (task_fixtures,)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=str(DEFAULT_OUT),
        help=f"folder for the JSON files (default: {DEFAULT_OUT}, from the repo root)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the files in --out differ from a fresh export",
    )


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.out == str(DEFAULT_OUT) and not out.parent.is_dir():
        raise UserError(
            f"there is no {out.parent}/ folder here; run from the octlm repository root or pass --out DIR"
        )
    if args.check:
        stale = stale_fixtures(out, EXTRA)
        if stale:
            names = ", ".join(stale)
            print(f"{len(stale)} fixture file(s) in {out} are stale ({names}); run `octlm export fixtures`")
            return 1
        print(f"fixtures in {out} are up to date")
        return 0
    written = write_fixtures(out, EXTRA)
    print(f"wrote {len(written)} fixture files to {out}")
    return 0
