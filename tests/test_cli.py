"""The CLI (octlm/cli.py): its one error boundary (real faults turned into one line, bugs keeping their
traceback), a closed stdout in a real shell pipeline, an unbuffered stdout, and the command groups' help.

Faults are real where the OS gives them: a path through a file (ENOTDIR), a folder opened as a file (EISDIR),
/dev/full (ENOSPC), an allocation no machine can satisfy, a `| head` that stops reading. The bad-input
catalogue (tests/test_cli_bad_inputs.py) covers each command's mistakes; these cover the boundary itself.
"""

from __future__ import annotations

import errno
import os
import select
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny import PYTHON, quiet_env, tiny_raw, write_corpus

from octlm.cli import CLOSED_PIPE, main, run_command
from octlm.config import config_from_dict
from octlm.errors import writing
from octlm.training.loop import train


def boundary(capsys: pytest.CaptureFixture[str], call: Any) -> tuple[int, str]:
    code = run_command("test", call)
    return code, capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# The boundary, with real faults


def test_real_enotdir_and_eisdir_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("x")
    code, err = boundary(capsys, lambda: (tmp_path / "afile" / "out.json").write_text("{}"))
    assert code == 2 and err == (
        f"octlm test: error: '{tmp_path}/afile/out.json': a part of the path is a file, not a folder "
        "(ENOTDIR); choose a path through folders only\n"
    )
    code, err = boundary(capsys, lambda: tmp_path.write_text("{}"))
    assert code == 2 and err.count("\n") == 1 and "(EISDIR)" in err and str(tmp_path) in err


def test_writing_names_the_target_of_a_failed_write(capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")

    def write() -> None:
        with writing("runs/x/report"), open("/dev/full", "w") as f:
            f.write("numbers")  # buffered: the ENOSPC comes at the flush, with no file name of its own

    code, err = boundary(capsys, write)
    assert code == 2 and err.startswith(
        "octlm test: error: 'runs/x/report': no space left on the device (ENOSPC)"
    )


def test_out_of_memory_names_the_size(capsys: pytest.CaptureFixture[str]) -> None:
    # 2**62 bytes: no machine has 4 EiB, so the allocator refuses at once (no memory is touched).
    code, err = boundary(capsys, lambda: torch.empty(2**62, dtype=torch.uint8))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        "octlm test: error: out of memory: tried to allocate 4.0 EiB at once; use a smaller model"
    )
    code, err = boundary(capsys, lambda: bytearray(2**62))  # Python's own MemoryError: no size given
    assert code == 2 and "out of memory: an allocation failed;" in err


@pytest.mark.parametrize(
    "error",
    [
        ZeroDivisionError("bug"),
        RuntimeError("an unrelated RuntimeError"),
        OSError(errno.EXDEV, "cross-device"),
    ],
    ids=["ZeroDivisionError", "RuntimeError", "EXDEV"],
)
def test_bugs_keep_their_traceback(error: BaseException, capsys: pytest.CaptureFixture[str]) -> None:
    def fail() -> None:
        raise error

    with pytest.raises(type(error)):
        run_command("test", fail)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------------------------------
# A closed stdout in a real pipeline


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("boundary")
    before = Path.cwd()
    os.chdir(root)
    try:
        write_corpus(Path("text"))
        raw = tiny_raw(Path("."), Path("text"), steps=3, eval_interval=3, run_name="tiny")
        torch.set_num_threads(1)
        train(config_from_dict(raw, name="tiny"), progress=False)
    finally:
        os.chdir(before)
    return root


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=cwd,
        env=quiet_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_generate_into_head_ends_quietly_with_141(tiny_run: Path) -> None:
    # 100,000 tokens are more than a pipe holds (64 KiB), so generate must write after head has gone: EPIPE.
    done = shell(
        f"{PYTHON} -m octlm generate runs/tiny --prompt def --max-new-tokens 100000 "
        "--keep-going --temperature 1 | head -c 10",
        tiny_run,
    )
    assert (done.returncode, done.stderr) == (CLOSED_PIPE, ""), done.stderr
    assert done.stdout.startswith("def") and len(done.stdout.encode()) == 10
    assert CLOSED_PIPE == 141


def greedy_text(run_dir: Path, prompt: str, tokens: int) -> str:
    """What `octlm generate RUN --temperature 0` should print, made in this process."""
    import io

    from octlm.generation.generate import stream_text
    from octlm.generation.sampling import Sampling
    from octlm.storage.checkpoint import load_model

    model, _config, tokenizer = load_model(run_dir)
    out = io.StringIO()
    stream_text(model, tokenizer, prompt, tokens, Sampling(0.0), out, stop_at_eot=False, notice=None)
    return out.getvalue()


SLIDING = (
    "passed the learned position table's 16 rows: sliding the window, each new token now re-reads the last "
    "16 tokens without the cache"
)
GENERATE = (
    f"{PYTHON} -m octlm generate runs/tiny --prompt class --max-new-tokens 40 --keep-going --temperature 0"
)


def test_piped_generate_keeps_the_text_whole_on_stdout(tiny_run: Path) -> None:
    """`| cat` with stderr to a file, and `2>&1 | cat`: stdout is the text alone; no progress line (\\r) is
    drawn into a pipe or a file; the notice (40 tokens pass the 16-row table) and the timing come after it."""
    expected = greedy_text(tiny_run / "runs" / "tiny", "class", 40)
    assert expected.startswith("class") and expected.endswith("\n") and len(expected) > 40
    done = shell(f"{GENERATE} 2> err.txt | cat", tiny_run)
    err = (tiny_run / "err.txt").read_text()
    assert done.returncode == 0 and done.stdout == expected, (done.stdout, err)
    lines = err.split("\n")
    assert lines[0] == SLIDING and lines[1].startswith("[40 tokens in ") and lines[2:] == [""], err
    assert "\r" not in err
    both = shell(f"{GENERATE} 2>&1 | cat", tiny_run).stdout  # one pipe: the text is not split by a notice
    assert both.startswith(expected + SLIDING + "\n[40 tokens in ") and "\r" not in both, both


def test_greedy_samples_are_printed_once_and_said_so(tiny_run: Path) -> None:
    """`--num-samples 3 --temperature 0`: three identical texts would be printed; one is, with one note."""
    done = shell(f"{GENERATE} --num-samples 3", tiny_run)
    assert done.returncode == 0 and done.stdout == greedy_text(tiny_run / "runs" / "tiny", "class", 40)
    assert done.stderr.split("\n")[:2] == [
        "note: --temperature 0 is greedy, so the 3 samples would be identical: printed once; pass --temperature "
        "> 0 (e.g. 0.8) for different samples",
        SLIDING,
    ], done.stderr
    sampled = shell(f"{GENERATE} --num-samples 3 --temperature 1", tiny_run)  # sampling: three texts
    assert sampled.returncode == 0 and sampled.stdout.count("--- sample ") == 3
    assert "note:" not in sampled.stderr


@pytest.mark.parametrize("argv", ["model --dry-run", "corpus --text text"])
def test_short_output_into_head_ends_quietly(argv: str, tiny_run: Path) -> None:
    # A few lines: the writer may finish before head exits (0) or after (141); never a message.
    done = shell(f"{PYTHON} -m octlm {argv} | head -1", tiny_run)
    assert done.returncode in (0, CLOSED_PIPE) and done.stderr == "", done.stderr
    assert done.stdout.count("\n") == 1


# The child writes a line through the CLI's stdout, then waits for the parent: only an unbuffered stream has
# sent the line by then.
CHILD = "import sys; from octlm import cli; out = cli._named_stdout(); out.write('first line\\n'); sys.stdin.readline()"


@pytest.mark.parametrize("unbuffered", [True, False], ids=["python -u", "buffered"])
def test_the_cli_stdout_is_unbuffered_under_python_u_as_python_s_own_is(unbuffered: bool) -> None:
    flags = ["-u"] if unbuffered else []
    env = {k: v for k, v in quiet_env().items() if k != "PYTHONUNBUFFERED"}  # the flag alone decides
    child = subprocess.Popen(
        [PYTHON, *flags, "-c", CHILD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        ready, _, _ = select.select([child.stdout], [], [], 30 if unbuffered else 1)
        # Into a pipe, a buffered stream holds the line until exit: nothing arrives while the child waits.
        assert bool(ready) == unbuffered
        if unbuffered:
            assert os.read(child.stdout.fileno(), 100) == b"first line\n"
    finally:
        child.communicate(b"\n", timeout=60)
    assert child.returncode == 0


# ------------------------------------------------------------------------------------------------------------
# Command groups


@pytest.mark.parametrize(
    "group, subs", [("export", ["hf", "onnx", "fixtures"]), ("experiment", ["length", "tasks", "extend"])]
)
def test_command_groups_answer_help(group: str, subs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--help", "-h"):
        assert main([group, flag]) == 0
        out = capsys.readouterr().out.splitlines()
        listed = [line.split()[:2] for line in out if line.startswith(f"  {group} ")]
        assert listed == [[group, sub] for sub in subs], out  # one line each, in the table's order
    assert main([group]) == 2  # without a subcommand it is still a mistake
    assert "needs one of" in capsys.readouterr().err
