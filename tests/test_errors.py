"""The errno table (octlm/errors.py): every expected OSError is one line naming the path and the fix for its
cause; an unexpected one is left to keep its traceback. Ranges of integer flags, said in words where a bound is
the machine's."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
from pathlib import Path

import pytest
from tiny import PYTHON, quiet_env

from octlm.errors import OS_ERRORS, describe_os_error, whole_range_words

# ---------------------------------------------------------------------------------------------------------------
# The errno table


@pytest.mark.parametrize("number", sorted(OS_ERRORS), ids=lambda n: errno.errorcode[n])
def test_every_expected_errno_is_one_line_naming_the_path(number: int) -> None:
    line = describe_os_error(OSError(number, os.strerror(number), "out/model.bin"))
    assert line is not None and "\n" not in line
    assert line.startswith("'out/model.bin': ") and f"({errno.errorcode[number]})" in line, line
    if number in (errno.ENOSPC, errno.EDQUOT):
        assert "free some" in line, line
    else:  # a permission problem, a read-only place, a bad path: none of them is fixed by freeing space
        assert "space" not in line and "free some" not in line, line


def test_errno_messages_give_the_fix_for_their_cause() -> None:
    def line(number: int) -> str:
        return describe_os_error(OSError(number, os.strerror(number), "p")) or ""

    assert line(errno.ENOSPC) == (
        "'p': no space left on the device (ENOSPC); free some space there or write somewhere else"
    )
    assert "ulimit -f" in line(errno.EFBIG)
    assert "lsattr" in line(errno.EPERM) and "permissions" in line(errno.EACCES)
    assert "read-only" in line(errno.EROFS) and "symbolic links" in line(errno.ELOOP)
    rename = OSError(errno.EXDEV, "x", "a", None, "b")
    assert describe_os_error(rename) is None  # not expected: a bug, which keeps its traceback
    moved = OSError(errno.EACCES, os.strerror(errno.EACCES), "a", None, "b")
    assert describe_os_error(moved).startswith("'a' -> 'b': permission denied")


# ---------------------------------------------------------------------------------------------------------------
# Ranges


def test_a_range_up_to_a_machine_limit_is_said_in_words() -> None:
    assert whole_range_words(-5, 1, 2**63 - 1) == "at least 1"
    assert whole_range_words(2**63, 1, 2**63 - 1) == (
        "at most 9,223,372,036,854,775,807 (the largest signed 64-bit integer)"
    )
    assert whole_range_words(-1, 0, 2**64 - 1) == "at least 0"
    assert whole_range_words(0, 1, 4096) == "between 1 and 4,096"  # a real bound stays a number


def test_no_temporary_folder_names_the_folder_and_the_real_cause(tmp_path: Path) -> None:
    """Under `ulimit -f 0`, importing torch (through dill) calls tempfile.gettempdir, whose 4-byte test write
    fails with EFBIG in every folder; tempfile then raises ENOENT naming no file. The line names the first
    folder and the write's real errno, and the probe that found it leaves nothing behind."""
    folder = tmp_path / "tmp"
    folder.mkdir()

    def no_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    done = subprocess.run(
        [PYTHON, "-m", "octlm", "score", "runs/a", "--lengths", "8"],
        env=dict(quiet_env(), TMPDIR=str(folder), PYTHONDONTWRITEBYTECODE="1"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        preexec_fn=no_file_size,
        timeout=300,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"octlm score: error: {str(folder)!r}: cannot write a temporary file there: file too large for the "
        "file-size limit or the file system: `ulimit -f` is 0 bytes here (EFBIG); raise the limit "
        "(`ulimit -f unlimited`) or write to another file system\n"
    )
    assert list(folder.iterdir()) == []


def test_other_missing_files_keep_their_line() -> None:
    """Only tempfile's own words are probed; an ENOENT naming no file and saying something else is not."""
    line = describe_os_error(FileNotFoundError(errno.ENOENT, "No such file or directory"))
    assert line == (
        "an input/output operation: it does not exist (or a symbolic link on the way is broken) (ENOENT); "
        "check the path"
    )
