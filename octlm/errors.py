"""User mistakes and ordinary faults, each described in one line that names the value and the fix.

Anything a user can fix (a bad flag, a missing file, a token id out of range, a corrupt checkpoint) raises
`UserError` (a ValueError) with a message that names the bad value and the fix. The CLI prints that message on
one line and exits with status 2; library callers get an ordinary exception they can catch.

Faults the operating system reports (a full disk, a read-only folder, a path through a file) stay `OSError`s
in the library. What one means for the user comes from one errno table, `OS_ERRORS` (a permission problem is
never called a full disk; each errno has its own fix), said two ways: `describe_os_error`, the CLI's whole
line ("'path': what (ERRNO); fix"), and `explain`, a clause for a module's own message ("what (ERRNO) at
'folder'; fix"). `writing(path)` attaches the path to a write error that lacks one (a write to an open file
reports none), and `check_output` refuses an output path before any work is done.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import os
import re
import resource
import sys
from collections.abc import Iterator
from pathlib import Path


class UserError(ValueError):
    """A mistake the user can fix. The message is one readable line."""


# errno -> (what happened, the fix). Each fix is the one for that cause: a permission problem is not "free
# space".
OS_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "free some space there or write somewhere else"),
    errno.EDQUOT: ("disk quota exceeded", "free some of your quota (`quota -s`) or write somewhere else"),
    errno.EFBIG: (
        "file too large for the file-size limit or the file system",
        "raise the limit (`ulimit -f unlimited`) or write to another file system",
    ),
    errno.EACCES: ("permission denied", "fix its permissions (`ls -ld`) or choose a path you can write to"),
    errno.EPERM: (
        "operation not permitted (an immutable or append-only attribute, or a protected path)",
        "check it with `lsattr -d` and remove the attribute, or choose another path",
    ),
    errno.EROFS: ("the file system is read-only", "choose a path on a writable file system"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "choose a path through folders only"),
    errno.EISDIR: ("it is a folder, not a file", "give the path of a file"),
    errno.EEXIST: ("it already exists", "remove it or choose another path"),
    errno.ENOTEMPTY: ("the folder is not empty", "empty or remove it, or choose another path"),
    errno.ELOOP: ("too many levels of symbolic links (a loop)", "fix or remove the link"),
    errno.ENAMETOOLONG: ("the name is too long", "use shorter names (at most 255 bytes a part)"),
    errno.ENOENT: ("it does not exist (or a symbolic link on the way is broken)", "check the path"),
    errno.ENXIO: ("no such device or address (a FIFO with no reader?)", "give a regular file"),
    errno.EMFILE: ("too many open files", "raise the limit (`ulimit -n`)"),
    errno.ENFILE: ("too many open files in the system", "close other programs or raise the system limit"),
    errno.EIO: ("input/output error from the device", "check the disk or network mount (`dmesg`)"),
    errno.EBUSY: ("the device or resource is busy", "try again when it is free, or choose another path"),
    errno.ETXTBSY: ("the file is busy (a running program)", "choose another path"),
    errno.EPIPE: ("broken pipe: the reader went away", "keep the reader open until the command ends"),
}


# The file name the CLI gives an error writing to its standard output (a write to an open file names none).
STDOUT = "<stdout>"


def _cause(error: OSError, reading: bool = False) -> tuple[str, str] | None:
    """(what happened, with its errno's name; the fix) for an errno of OS_ERRORS, else None."""
    code = error.errno or 0
    known = OS_ERRORS.get(code)
    if known is None:
        return None
    what, fix = known
    if code == errno.EFBIG:
        what = f"{what}: {_size_limit()}"
    if code in (errno.EACCES, errno.EPERM) and reading:
        fix = "make it readable for this user (check `ls -ld` and `lsattr -d`)"
    return f"{what} ({errno.errorcode[code]})", fix


def _size_limit() -> str:
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY:
        return "no `ulimit -f` is set here, so the file system's own limit was reached"
    return f"`ulimit -f` is {soft} bytes here"


# tempfile's words when its 4-byte test write failed in every candidate folder: it raises ENOENT naming no
# file, and the write's own errno (EFBIG under `ulimit -f 0`, ENOSPC on a full disk) is lost. Importing torch
# calls it (through dill), so every command meets it before doing anything.
NO_TEMPORARY_FOLDER = "No usable temporary directory found in "


def _temporary_folder_error(error: OSError) -> OSError | None:
    """For tempfile's "no usable temporary directory", the error a test write in its first folder really
    gives, naming that folder (None if that write now succeeds); for any other error, None."""
    said = str(error.strerror or "")
    if error.errno != errno.ENOENT or error.filename is not None or not said.startswith(NO_TEMPORARY_FOLDER):
        return None
    try:
        folder = str(ast.literal_eval(said[len(NO_TEMPORARY_FOLDER) :])[0])  # it lists them as a Python list
    except (ValueError, SyntaxError, IndexError, TypeError):
        return None
    probe = os.path.join(folder, f".octlm-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"blat")  # what tempfile writes
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as real:
        real.filename = folder
        return real
    return None


def describe_os_error(error: OSError, where: str | None = None) -> str | None:
    """The CLI's line for an expected OSError: the path, what happened, the fix; None for an unexpected errno.

    `where` names the target when the error carries no file name (a write to stdout reports none).
    """
    real = _temporary_folder_error(error)
    if real is not None:
        cause = _cause(real)
        if cause is not None:
            return f"{real.filename!r}: cannot write a temporary file there: {cause[0]}; {cause[1]}"
    cause = _cause(error)
    if cause is None:
        return None
    if error.filename is None:
        subject = where or "an input/output operation"
    elif error.filename == STDOUT:
        subject = "standard output"
    elif error.filename2 is not None:
        subject = f"{str(error.filename)!r} -> {str(error.filename2)!r}"
    else:
        subject = repr(str(error.filename))
    return f"{subject}: {cause[0]}; {cause[1]}"


def explain(error: OSError, folder: str | Path | None = None, reading: bool = False) -> str:
    """`what (ERRNO) at 'folder'; fix` for a failed read or write, as a clause of a longer message; `folder`
    is where the fix applies (default: the file's). An errno outside the table is said by its own
    description."""
    where = str(folder if folder is not None else Path(error.filename or ".").parent)
    code = error.errno or 0
    what, fix = _cause(error, reading) or (
        f"{os.strerror(code) if code else str(error) or 'unknown error'} "
        f"({errno.errorcode.get(code, 'no errno')})",
        "fix that",
    )
    return f"{what} at {where!r}; {fix}"


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, cut to `limit` characters (a library's may run long)."""
    return (str(error).strip().splitlines() or [""])[0][:limit]


def describe_memory_error(error: BaseException) -> str | None:
    """One line for running out of memory, naming the size; else None.

    `MemoryError` and CUDA's `torch.OutOfMemoryError` say so by their type; torch's CPU allocator raises a
    plain RuntimeError (torch 2.13), recognised by its message, which also gives the size asked for.
    """
    text = str(error)
    cpu = re.search(r"can't allocate memory: you tried to allocate (\d+) bytes", text)
    gpu = re.search(r"out of memory\. Tried to allocate ([\d.]+ [KMGTP]?i?B)", text)
    torch = sys.modules.get("torch")  # only a command that loaded torch can have run out of its memory
    out_of_memory = isinstance(error, MemoryError) or (
        torch is not None and isinstance(error, torch.OutOfMemoryError)
    )
    if not (out_of_memory or cpu):
        return None
    size = f"{_bytes(int(cpu.group(1)))} at once" if cpu else f"{gpu.group(1)} on the GPU" if gpu else None
    asked = f"tried to allocate {size}" if size else "an allocation failed"
    return (
        f"out of memory: {asked}; use a smaller model (--d-model, --n-layers, --vocab-size, --d-ff), a "
        "smaller --batch-size or --max-new-tokens, or a machine with more memory"
    )


def _bytes(count: int) -> str:
    size, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024 or unit == "EiB":
            break
        size /= 1024
    return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Attach `path` to an OSError raised inside that has no file name (a failed write or flush)."""
    try:
        yield
    except OSError as error:
        if error.filename is None:
            error.filename = str(path)
        raise


def check_output(path: str | Path, flag: str, *, folder: bool) -> Path:
    """Refuse, before any work, an output `path` (given as `flag`) that cannot be written; return it.

    Refused: a broken symbolic link, a file where a folder is wanted (or the reverse, or something that is no
    regular file: a FIFO, a device), a path through a file, and a place that is not writable (permissions, an
    immutable attribute, a read-only file system: `os.access` sees all three, even for root).
    """
    path = Path(path)
    shown = f"{flag} {str(path)!r}"
    if path.is_symlink() and not path.exists():
        raise UserError(
            f"{shown} is a broken symbolic link (to {os.readlink(path)!r}); remove it or choose another path"
        )
    if path.exists():
        if folder and not path.is_dir():
            raise UserError(f"{shown} is a file, not a folder; choose another path")
        if not folder and path.is_dir():
            raise UserError(f"{shown} is a folder; give the path of a file")
        if not folder and not path.is_file():
            raise UserError(f"{shown} is not a regular file (a FIFO or a device); give the path of a file")
    parent = path.parent
    while not parent.exists():
        if parent.is_symlink():
            raise UserError(
                f"{shown}: {str(parent)!r} is a broken symbolic link; fix it or choose another path"
            )
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{shown}: {str(parent)!r} is a file, not a folder; choose another path")
    for place in [parent, *([path] if path.is_dir() else [])]:
        if not os.access(place, os.W_OK | os.X_OK):
            why = "is on a read-only file system" if _read_only_fs(place) else "is not writable"
            raise UserError(
                f"{shown}: {str(place)!r} {why} (check `ls -ld` and `lsattr -d`); choose another path"
            )
    return path


def _read_only_fs(place: Path) -> bool:
    try:
        return bool(os.statvfs(place).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_text(text: str, flag: str) -> str:
    """UserError for a text flag that is not UTF-8: argv bytes that are not arrive as lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        # surrogateescape: the undecodable byte b arrived as the character U+DC00 + b
        shown = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"character U+{code:04X}"
        raise UserError(
            f"{flag} is not valid UTF-8 text ({shown} at character {error.start}); pass UTF-8, e.g. "
            "convert it with `iconv -t UTF-8`"
        ) from None
    return text


# The largest numbers torch and numpy hold (int64; uint64 for seeds). A range that ends at one ends there
# because of the machine, not the value, so it is said in words ("at least 1"), not as a 19-digit number.
MACHINE_LIMITS = {
    2**63 - 1: "the largest signed 64-bit integer",
    2**64 - 1: "the largest unsigned 64-bit integer",
}


def whole_range_words(value: int, low: int, high: int) -> str:
    """What `value`, outside [low, high], must be: "between 1 and 4,096", or, where `high` is a machine limit,
    "at least 1" (or "at most N (the largest ...)" for a value past it)."""
    limit = MACHINE_LIMITS.get(high)
    if limit is None:
        return f"between {low:,} and {high:,}"
    return f"at least {low:,}" if value < low else f"at most {high:,} ({limit})"


# Seeds: torch and numpy take unsigned 64-bit seeds; anything wider (or negative) is refused.
SEED_RANGE = (0, 2**64 - 1)
# Threads: one more than a machine has only adds contention, and OpenMP fails in odd ways on absurd counts.
THREADS_RANGE = (1, 4096)
