"""Files that survive faults: written whole or not at all, flushed to the disk, and named by their SHA-256.

`write_atomic` gives readers the old file or the new one, never half of one (a temporary file renamed over the
target). `write_durable` writes a file inside a folder that is swapped in later (a checkpoint) and flushes it;
`fsync_dir` flushes a folder's entries after a rename. Every failure is the OSError the operating system gave,
with its errno and the file's name, so the caller can say what happened and the fix (`errors.explain`).

The one hashing path: `sha256_bytes` and `sha256_array` (a token stream's raw bytes) are how checkpoints,
token files and tokenizers are named and checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from octlm.errors import writing


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; token files and manifests are not secrets
        with writing(path), os.fdopen(fd, "wb") as f:  # a failed write names no file: name the target
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_durable(path: Path, data: bytes) -> None:
    """Create `path` with `data` and flush it to the disk (an ENOSPC or EIO may first show at the flush)."""
    with writing(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:  # a write may take less than asked, e.g. when a signal interrupts it
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (the renames); best effort, as not every file system allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_array(array: Any) -> str:
    """SHA-256 of an array's raw bytes (a token stream `[N]`, memmapped or not)."""
    return sha256_bytes(memoryview(np.ascontiguousarray(array)).cast("B"))
