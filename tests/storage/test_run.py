"""The run folder's one writer, and a new run that replaces an old one without destroying it first.

- `Run.lock()`: an fcntl.flock on `.lock` holding the holder's PID; a second writer is refused naming it; a
  writer that fails before writing leaves no trace (not even a changed folder time); a run folder that is a
  file is refused before training. (Two real processes on one folder: tests/test_signals.py.)
- `--overwrite` moves the old run aside and deletes it only after the new run's first checkpoint: a new run
  that diverges before it gives the old run back, bit for bit; one killed (SIGKILL) before it leaves the old
  run in `.replaced/`, which the next writer puts back, so `--resume` continues the old run.
- No write follows a symlink out of the run folder: metrics.jsonl as a link is refused, the target unchanged.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tiny import ForkServer, run_cli, snapshot, tiny_flags, write_corpus

from octlm.errors import UserError
from octlm.storage.checkpoint import load_checkpoint
from octlm.storage.run import Run

RUN_FILES = ["checkpoint", "metrics.jsonl", "tokenizer.json"]


def one_line(code: int, err: str, needle: str) -> str:
    assert "Traceback" not in err and code == 2, (code, err)
    assert len(err.splitlines()) == 1 and needle in err, err
    return err


@pytest.fixture(scope="module")
def old_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run of 6 steps (checkpoints at 3 and 6), to copy."""
    root = tmp_path_factory.mktemp("old")
    corpus = write_corpus(root / "text")
    code, _out, err = run_cli(["train", *tiny_flags(root, corpus, steps=6), "--name", "old", "--no-progress"])
    assert code == 0, err
    return root


@pytest.fixture
def workspace(old_run: Path, tmp_path: Path) -> Path:
    shutil.copytree(old_run, tmp_path / "w", symlinks=True)
    return tmp_path / "w"


def flags(workspace: Path, **train: object) -> list[str]:
    return tiny_flags(workspace, workspace / "text", **{"steps": 6, **train})


# ---------------------------------------------------------------------------------------------------------------
# The lock


def test_lock_is_exclusive_names_its_holder_and_leaves_no_trace(tmp_path: Path) -> None:
    run = Run.of(tmp_path / "runs" / "x")
    before = os.stat(tmp_path).st_mtime_ns
    with run.lock():
        assert run.lock_path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(UserError) as info, run.lock():  # another open file: flock refuses it too
            pass
        assert f"(PID {os.getpid()}) is writing it" in str(info.value) and "\n" not in str(info.value)
        assert run.lock_path.read_text() == f"{os.getpid()}\n"  # the refused one wrote nothing
    assert not (tmp_path / "runs").exists()  # created for the lock, empty: removed again
    assert os.stat(tmp_path).st_mtime_ns == before and list(tmp_path.iterdir()) == []
    with run.lock():  # free again
        (run.path / "kept").write_text("x")
    assert sorted(os.listdir(run.path)) == ["kept"]  # lock file gone, the folder stays


def test_a_stale_lock_file_is_no_lock(tmp_path: Path) -> None:
    """A writer that was SIGKILLed leaves `.lock` behind; the kernel released its lock, so it is taken."""
    run = Run.of(tmp_path / "r")
    run.path.mkdir()
    run.lock_path.write_text("999999999\n")
    with run.lock():
        assert run.lock_path.read_text() == f"{os.getpid()}\n"
    assert not run.lock_path.exists()


def test_run_folder_that_is_a_file_is_refused_before_training(workspace: Path) -> None:
    (workspace / "runs" / "file").write_text("not a folder")
    before = snapshot(workspace)
    code, _out, err = run_cli(["train", *flags(workspace), "--name", "file", "--no-progress"])
    one_line(code, err, f"run folder '{workspace / 'runs' / 'file'}': it is a file, not a folder")
    assert snapshot(workspace) == before


def test_a_refused_resume_changes_nothing(workspace: Path) -> None:
    """The lock is taken (and released) before the resume is refused: not even the folder's time changes."""
    before = snapshot(workspace)
    code, _out, err = run_cli(["train", "--resume", str(workspace / "runs" / "old"), "--lr", "0.1"])
    one_line(code, err, "train.lr 0.1 != 0.003")
    assert snapshot(workspace) == before


# ---------------------------------------------------------------------------------------------------------------
# Replace, don't destroy


def test_overwrite_that_diverges_gives_the_old_run_back(workspace: Path) -> None:
    run_dir = workspace / "runs" / "old"
    before = snapshot(run_dir)
    old = load_checkpoint(run_dir)
    argv = [
        "train",
        *flags(workspace, lr=1e30, weight_decay=0),
        "--name",
        "old",
        "--overwrite",
        "--no-progress",
    ]
    code, _out, err = run_cli(argv)  # lr 1e30: the loss is NaN at step 2, before the first checkpoint (3)
    one_line(code, err, "the run it was replacing is put back")
    assert snapshot(run_dir) == before  # every file bit-identical, nothing new, no .replaced/ left
    again = load_checkpoint(run_dir)
    assert again.step == old.step and all(
        (again.model_state[k] == v).all() for k, v in old.model_state.items()
    )


def test_overwrite_keeps_nothing_of_the_old_run_once_it_checkpoints(workspace: Path) -> None:
    run_dir = workspace / "runs" / "old"
    (run_dir / "report").mkdir()
    argv = [
        "train",
        *flags(workspace, steps=4, eval_interval=2),
        "--name",
        "old",
        "--overwrite",
        "--no-progress",
    ]
    code, _out, err = run_cli(argv)
    assert code == 0, err
    assert sorted(os.listdir(run_dir)) == RUN_FILES  # old report gone with the old run
    assert [r["step"] for r in Run.of(run_dir).read_metrics()] == [0, 2, 4]  # the new run's records only
    assert load_checkpoint(run_dir).step == 4


def test_overwrite_killed_before_its_first_checkpoint_keeps_the_old_run(workspace: Path) -> None:
    """SIGKILL while the new run writes its first checkpoint: the old run waits in .replaced/, readers say so,
    and the next writer puts it back, bit for bit, before doing anything else."""
    run_dir = workspace / "runs" / "old"
    before = snapshot(run_dir)
    server = ForkServer()
    try:
        argv = ["train", *flags(workspace), "--name", "old", "--overwrite", "--no-progress"]
        log = workspace / "kill.log"
        reply = server.run(argv, workspace, log, kill_on_tmp={"folder": str(run_dir), "nth": 1})
        assert reply["rc"] == -9, log.read_text()
    finally:
        server.close()
    aside = {
        k.removeprefix(".replaced/"): v for k, v in snapshot(run_dir).items() if k.startswith(".replaced/")
    }
    assert aside == before  # the old run, untouched, beside the new run's files
    with pytest.raises(UserError, match=r"has no checkpoint of its own yet: an --overwrite is replacing it"):
        load_checkpoint(run_dir)
    code, _out, err = run_cli(["train", "--resume", str(run_dir)])  # the old run finished its 6 steps
    one_line(code, err, "already finished its 6 steps")
    after = {k: v for k, v in snapshot(run_dir).items() if k != ".lock"}  # the killed writer's, stale
    assert {k: v[:2] for k, v in after.items()} == {k: v[:2] for k, v in before.items()}  # same bytes
    assert load_checkpoint(run_dir).step == 6


# ---------------------------------------------------------------------------------------------------------------
# Symlinks


def test_metrics_symlink_out_of_the_run_is_refused(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("not octlm's\n")
    run_dir = workspace / "runs" / "old"
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "metrics.jsonl").symlink_to(outside)
    before = snapshot(workspace)
    code, _out, err = run_cli(["train", "--resume", str(run_dir), "--steps", "9", "--no-progress"])
    one_line(code, err, "metrics.jsonl' is a symbolic link")
    assert snapshot(workspace) == before and outside.read_text() == "not octlm's\n"
    run = Run.of(run_dir)
    for write in (run.reset_metrics, lambda: run.append_metrics({"step": 1})):  # O_NOFOLLOW underneath
        with pytest.raises(UserError, match="is a symbolic link"):
            write()
    assert outside.read_text() == "not octlm's\n"
