"""Files that survive faults: written whole or not at all, and flushed to the disk.

`write_atomic` gives readers the old file or the new one, never half of one (a temporary file renamed over the
target). `write_durable` writes a file inside a folder that is swapped in later (a checkpoint) and flushes it;
`fsync_dir` flushes a folder's entries after a rename. Every failure is the OSError the operating system gave,
with its errno and the file's name, so the caller can say what happened and the fix (`errors.explain`).

How files are hashed is `octlm.hashing`'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path

from octlm.errors import writing

# The mode every file octlm writes is created with; the kernel takes the umask off, so a file gets what a
# plain open() would give it (0644 under the usual umask 022, 0600 under 077), whichever way it was written.
FILE_MODE = 0o666


def _create_temp(folder: Path, name: str) -> tuple[int, Path]:
    """A new hidden temporary file beside `name`, opened for writing with FILE_MODE (mkstemp's is 0600)."""
    for _ in range(100):
        tmp = folder / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE), tmp
        except FileExistsError:  # a name another writer drew: draw again
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(folder))


def plain_mode() -> int:
    """The mode a plain open() gives a new file now: FILE_MODE less the process's umask."""
    try:  # Linux names the umask without changing it (os.umask can only set it, racing other threads)
        with open("/proc/self/status", encoding="ascii") as f:
            mask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
    return FILE_MODE & ~mask


def give_plain_modes(folder: Path) -> None:
    """Give every file under `folder` the plain mode: for files a library wrote its own way (safetensors'
    save_file writes 0600 whatever the umask)."""
    mode = plain_mode()
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with writing(path):
                path.chmod(mode)


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = _create_temp(path.parent, path.name)
    except OSError as error:
        error.filename = str(path)  # the target, not the hidden temporary name the user never chose
        raise
    try:
        with writing(path), os.fdopen(fd, "wb") as f:  # a failed write names no file: name the target
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_durable(path: Path, data: bytes) -> None:
    """Create `path` with `data` and flush it to the disk (an ENOSPC or EIO may first show at the flush)."""
    with writing(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
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
