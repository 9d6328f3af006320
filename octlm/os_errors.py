"""What an OSError means for the user: the reason and the fix, chosen by its errno.

`explain(error, folder)` is one clause such as "no space left on the device (ENOSPC) at 'runs/x'; free some
space there or write somewhere else", built on `errors.OS_ERRORS`: a permission problem is never called a full
disk, each errno has its own fix. `stage` runs one write and turns its failure into a `WriteFailed` that
carries the real OSError, also when a library (safetensors, torch.save) hid it behind its own exception type.
"""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from octlm.errors import OS_ERRORS

T = TypeVar("T")  # what a write returns


def _size_limit() -> str:
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY:
        return "no `ulimit -f` is set here, so the file system's own limit was reached"
    return f"`ulimit -f` is {soft} bytes here"


def explain(error: OSError, folder: str | Path | None = None, reading: bool = False) -> str:
    """`what (ERRNO) at 'folder'; fix` for a failed read or write, from `errors.OS_ERRORS` (one table for
    the whole CLI); `folder` is where the fix applies (default: the file's)."""
    code = error.errno or 0
    where = str(folder if folder is not None else Path(error.filename or ".").parent)
    what, fix = OS_ERRORS.get(
        code, (os.strerror(code) if code else str(error) or "unknown error", "fix that")
    )
    if code == errno.EFBIG:
        what = f"{what}: {_size_limit()}"
    if code in (errno.EACCES, errno.EPERM) and reading:
        fix = "make it readable for this user (check `ls -ld` and `lsattr -d`)"
    return f"{what} ({errno.errorcode.get(code, 'no errno')}) at {where!r}; {fix}"


class WriteFailed(Exception):
    """A write failed: on `path`, with the OSError when one is known."""

    def __init__(
        self, path: Path, error: OSError | None, detail: str = "", folder: Path | None = None
    ) -> None:
        super().__init__(str(path))
        self.path, self.error, self.detail = path, error, detail
        self.folder = folder  # where the fix applies (None: the caller's default)


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:200]


def _rewrite(path: Path, serialize: Callable[[], bytes]) -> OSError | None:
    """Write what the library tried to write, ourselves, to learn the errno it hid (None: it worked)."""
    data = serialize()
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        return error
    return None


def stage(path: Path, write: Callable[[], T], serialize: Callable[[], bytes] | None = None,
           folder: Path | None = None) -> T:  # fmt: skip
    """Run one write; any failure becomes a `WriteFailed` naming `path`.

    safetensors (SafetensorError) and torch.save (RuntimeError: "unexpected pos ...") hide the errno of a
    failed write; then the same bytes (`serialize()`) are written with plain Python, whose OSError tells
    what happened. An error that is not about the disk (serialize fails too) propagates: it is a bug.
    """
    try:
        return write()
    except OSError as error:
        raise WriteFailed(path, error, folder=folder) from None
    except Exception as error:
        if serialize is None:
            raise
        found = _rewrite(path, serialize)
        raise WriteFailed(path, found, f"{type(error).__name__}: {first_line(error)}", folder) from None
