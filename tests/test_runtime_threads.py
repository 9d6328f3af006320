"""octlm's default thread count (`runtime.cpu_share`): the cores other processes leave idle, measured from
/proc/stat beside a real competing process, and the note `octlm train` prints on a busy machine."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiny import PYTHON, ROOT, quiet_env, tiny_flags, write_corpus

from octlm.runtime import PROC_STAT, CpuShare, _cpu_times, cpu_share, torch_threads

CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
linux_only = pytest.mark.skipif(
    not PROC_STAT.is_file() or not CPUS, reason="needs /proc/stat and CPU affinity"
)

STAT = """cpu  900 0 90 9000 10 0 0 0 0 0
cpu0 100 1 10 1000 5 2 3 4 0 0
cpu1 200 0 20 500 5 0 0 0 7 7
cpu2 999 0 0 1 0 0 0 0 0 0
intr 1 2 3
ctxt 42
"""


def test_cpu_times_reads_only_the_chosen_cpus_lines(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    # cpu0: total 1125, idle + iowait 1005 -> busy 120; cpu1: total 725 (the guest columns, already inside user,
    # are not added again), busy 220
    assert _cpu_times(stat, {0}) == (120, 1125)
    assert _cpu_times(stat, {0, 1}) == (340, 1850)
    assert _cpu_times(stat, {5}) is None  # no such CPU: nothing to measure


@pytest.fixture
def spinner() -> Iterator[int]:
    """A busy-loop process pinned to this process's first CPU; yields that CPU."""
    rival = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(rival.pid, {CPUS[0]})
        yield CPUS[0]
    finally:
        rival.kill()
        rival.wait()


@linux_only
def test_a_busy_core_is_not_given_a_thread(spinner: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    share = cpu_share(sample=0.5)
    assert share.busy >= 0.8  # the spinner alone keeps its core busy; anything else only adds
    assert 1 <= share.threads <= max(1, share.cores - 1)
    assert share.crowded == (share.cores > 1)


@linux_only
def test_threads_are_split_among_the_processes_of_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    alone, shared = cpu_share(local_processes=1), cpu_share(local_processes=2)
    assert shared.cores == max(1, alone.cores // 2)
    assert 1 <= shared.threads <= shared.cores


def test_omp_num_threads_is_the_users_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    share = cpu_share(stat=Path("/nonexistent"))
    assert share.busy == 0.0 and share.threads == share.cores and not share.crowded


def test_without_proc_stat_the_load_average_stands_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 0.0, 0.0))
    share = cpu_share(sample=0.0, stat=Path("/nonexistent"))
    assert share.busy == 64.0 and share.threads == 1


def test_the_note_names_the_load_the_threads_and_the_flag() -> None:
    share = CpuShare(cores=2, busy=1.04, threads=1)
    assert share.crowded and not CpuShare(cores=2, busy=0.1, threads=2).crowded
    assert share.note("training") == (
        "note: the machine is busy (other processes keep 1.0 of 2 cores busy), so training uses 1 thread: "
        "more threads than idle cores wait on each other; --threads N to choose"
    )


def test_torch_threads_none_sets_the_share_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    with torch_threads(None):
        assert torch.get_num_threads() == cpu_share().threads
    with torch_threads(3):
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == before


@linux_only
@pytest.mark.skipif(len(CPUS) < 2, reason="a busy machine needs a second core to leave idle")
def test_train_says_why_it_uses_fewer_threads(spinner: int, tmp_path: Path) -> None:
    env = {k: v for k, v in quiet_env().items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    flags = tiny_flags(tmp_path, write_corpus(tmp_path / "corpus"), steps=2)
    done = subprocess.run(
        [PYTHON, "-m", "octlm", "train", *flags, "--name", "busy"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()  # with the progress lines, right under the one that names the threads
    notes = [i for i, line in enumerate(lines) if line.startswith("note: the machine is busy")]
    assert len(notes) == 1 and "--threads N" in lines[notes[0]]
    assert lines[notes[0] - 1].startswith("training busy on cpu") and lines[notes[0] - 1].endswith(
        "1 CPU thread(s)"
    )
    refused = subprocess.run(
        [PYTHON, "-m", "octlm", "train", *flags, "--name", "busy", "--context-length", "600"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert (
        refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    )  # a refusal is its one line alone
    assert "note:" not in refused.stdout + refused.stderr
