"""SIGTERM and SIGHUP outside training (octlm/signals.py): they raise `Stopped`, so the cleanup on the way out
runs, and a command ends with one line and 128 + N. Real signals throughout: to this process inside
`raising_signals`, to a real `octlm data` while it writes its token file, and to a real pool of workers.
Training's own stop request (the first signal finishes the step) is tests/test_signals.py."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from processes import signal_when
from tiny import PYTHON

from octlm.config import DataConfig
from octlm.data.cache import STALE_TMP_SECONDS, prepare_data
from octlm.runtime import in_processes, process_alive
from octlm.signals import Stopped, StopRequest, raising_signals


def test_sigterm_and_sighup_raise_stopped_inside_and_only_inside() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
        with pytest.raises(Stopped) as stop, raising_signals():
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler runs at the next bytecode: never reached
        assert stop.value.signum == signum and str(stop.value) == signal.Signals(signum).name
        assert signal.getsignal(signum) is signal.SIG_DFL  # put back on leaving
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_an_ignored_or_handled_signal_is_left_alone() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    seen: list[int] = []
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with raising_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert seen == [signal.SIGTERM]
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_process_alive() -> None:
    child = subprocess.Popen([PYTHON, "-c", "pass"])
    child.wait()
    assert process_alive(os.getpid()) and process_alive(1)  # ours, and init's (another user's counts too)
    assert not process_alive(child.pid)  # exited and reaped (its id is not reused this soon)
    assert not process_alive(0) and not process_alive(-1) and not process_alive(2**40)


def test_a_crashed_writers_temporary_token_file_is_removed_by_the_next_build(tmp_path: Path) -> None:
    """Only a file whose process is gone and that has been untouched for STALE_TMP_SECONDS: a live process
    (here: this one) may be building the same cache right now."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.py", "b.py"):
        (corpus / name).write_text(f"def {name[0]}(x):\n    return x + 1\n" * 400)
    cfg = DataConfig(source="text", text=[str(corpus)], data_dir=str(tmp_path / "data"), val_fraction=0.5)
    folder = prepare_data(cfg, 300, progress=False).folder
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # an id no process can have
    old = time.time() - STALE_TMP_SECONDS - 60
    files = {
        "stale": folder / f".train.bin.{dead}.tmp",  # its writer is gone, long ago: removed
        "fresh": folder / f".val.bin.{dead}.tmp",  # gone, but touched just now: kept (another pid namespace?)
        "live": folder / f".train.bin.{os.getppid()}.tmp",  # a live process's: kept
        "other": folder / f".train.bin.{dead}.tmp.keep",  # not a temporary file of ours: kept
    }
    for name, path in files.items():
        path.write_bytes(b"half")
        if name != "fresh":
            os.utime(path, (old, old))
    (folder / "meta.json").unlink()  # the cache is rebuilt (its token files written again)
    prepare_data(cfg, 300, progress=False)
    assert {name: path.exists() for name, path in files.items()} == {
        "stale": False, "fresh": True, "live": True, "other": True,
    }  # fmt: skip


@pytest.mark.slow  # a real `octlm data` on an 8 MB corpus, stopped while it encodes (~10-20 s)
def test_sigterm_while_encoding_leaves_no_temporary_file_and_says_so(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    line = "def function_{0}(value, other):\n    return [value * {0} for _ in range(other)]\n"
    for i in range(8):
        (corpus / f"m{i}.py").write_text("".join(line.format(i * 10_000 + k) for k in range(12_000)))
    data = tmp_path / "data"
    argv = [PYTHON, "-m", "octlm", "data", "--text", str(corpus), "--vocab-size", "300", "--set",
            f"data.data_dir={data}", "--set", "data.val_fraction=0.5"]  # fmt: skip
    ready = lambda: bool(list(data.glob("*/.*.bin.*.tmp")))  # the token file is being written
    code, _out, err = signal_when(argv, tmp_path, ready, signal.SIGTERM, "token file")
    assert code == 143 and err.splitlines()[-1] == "octlm data: stopped by SIGTERM", err
    assert "Traceback" not in err
    (folder,) = data.iterdir()
    assert not list(folder.glob(".*.tmp")) and not (folder / "train.bin").exists()


def stop_when_asked(marker: str) -> str:
    """A worker's job: wait under a StopRequest (as a training step loop does) until a signal asks it to stop."""
    with StopRequest(announce=False) as stop:
        Path(marker + ".started").write_text(str(os.getpid()))  # from here on a signal is a request
        deadline = time.monotonic() + 60
        while not stop.requested and time.monotonic() < deadline:
            time.sleep(0.01)
    Path(marker + ".stopped").write_text(signal.Signals(stop.signum).name if stop.requested else "timeout")
    return marker


@pytest.mark.slow  # two spawned worker processes (~3-6 s to start)
def test_sigterm_to_the_parent_of_a_pool_reaches_every_worker(tmp_path: Path) -> None:
    markers = [str(tmp_path / f"job{i}") for i in range(3)]  # 3 jobs on 2 workers: one never starts

    def signal_once_two_run() -> None:
        deadline = time.monotonic() + 60
        while sum(Path(m + ".started").exists() for m in markers) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sender = threading.Thread(target=signal_once_two_run)
    try:
        with pytest.raises(Stopped), raising_signals():
            sender.start()
            list(in_processes(stop_when_asked, markers, 2))
    finally:
        sender.join()
        signal.signal(signal.SIGTERM, before)
    stopped = sorted(Path(m + ".stopped").read_text() for m in markers if Path(m + ".stopped").exists())
    assert stopped == ["SIGTERM", "SIGTERM"]  # both running jobs were asked, and stopped as asked
    assert sum(Path(m + ".started").exists() for m in markers) == 2  # the third was cancelled
