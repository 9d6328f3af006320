"""An export's output folder (`octlm export hf`, `octlm export onnx`), from the check to the swap.

OUT is refused before any work when it is a link, is or holds a run folder, lies inside one, or (with
`--force`) holds something that is no earlier export of the same kind. The export is written into a hidden
sibling of OUT and moved in whole at the end, the old export set aside first, so that OUT is at every moment
the old export or the new one, and a failed export leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from octlm.errors import UserError, check_output
from octlm.storage.run import Run

# The end of every refusal of a non-empty OUT under --force.
ONLY_AN_EXPORT = "--force replaces only an export: choose a new folder"


def check_out(
    out: Path, force: bool, run_dir: Path | None, suffix: str, not_an_export: Callable[[Path], str | None]
) -> None:
    """Refuse OUT with one UserError naming it; `run_dir` is the run being exported (None: not from a run).

    `suffix` names the suggested new folder (`run_dir` + suffix); `not_an_export(out)` says why a non-empty
    `out` is no earlier export (the middle of the message), or None when it is one that `force` may replace.
    """
    check_output(out, "--out", folder=True)
    shown = f"--out {str(out)!r}"
    if out.is_symlink():
        raise UserError(f"{shown} is a symbolic link (to {os.readlink(out)!r}); give the folder itself")
    where = out.resolve()
    if run_dir is not None and run_dir.resolve().is_relative_to(where):
        raise UserError(
            f"{shown} is or holds the run folder {str(run_dir)!r}; an export never replaces a run: "
            f"choose a new folder, e.g. {str(run_dir) + suffix!r}"
        )
    for folder in (where, *where.parents):
        if Run.of(folder).is_run():
            raise UserError(
                f"{shown} is inside the run folder {str(folder)!r}; an export never writes into "
                "a run: choose a folder outside it"
            )
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not force:
        raise UserError(f"{shown} already exists and is not empty; pass --force to replace it")
    reason = not_an_export(out)
    if reason is not None:
        raise UserError(f"{shown} {reason}; {ONLY_AN_EXPORT}")


def sibling(out: Path, kind: str) -> Path:
    """A hidden sibling of `out` for this process (`kind`: "tmp" or "old"), cleared of a crashed export's."""
    path = out.parent / f".{out.name}.{kind}-{os.getpid()}"
    if path.exists():
        shutil.rmtree(path)
    return path


def swap_in(tmp: Path, out: Path, force: bool) -> None:
    """Move the finished folder `tmp` to `out`. A non-empty `out` (checked before the work, but it may have
    changed since) is replaced only with `force`, and set aside until the new one is in place."""
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        out.rmdir()
    if not (out.exists() or out.is_symlink()):
        os.replace(tmp, out)
        return
    if out.is_symlink() or not out.is_dir():
        raise UserError(f"{str(out)!r} exists and is not a folder; choose another output path")
    if not force:
        raise UserError(f"{str(out)!r} already exists and is not empty; pass --force to replace it")
    old = sibling(out, "old")
    os.replace(out, old)
    try:
        os.replace(tmp, out)
    except BaseException:
        os.replace(old, out)  # put the old export back rather than leave nothing
        raise
    shutil.rmtree(old, ignore_errors=True)
