"""A real `octlm` process sent a real signal at a chosen moment (the tests of stopping share this), and a pool
worker's job that waits to be asked to stop (a module of its own, so that spawned workers can import it)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tiny import PYTHON, quiet_env

from octlm.signals import StopRequest


def signal_when(
    argv: list[str], cwd: Path, ready: Callable[[], bool], signum: int, waiting_for: str, timeout: float = 120
) -> tuple[int, str, str]:
    """Start `argv` with `signum` at its default action (a background job of a shell starts with SIGINT
    ignored, which octlm respects), send it `signum` once `ready()` holds; (exit status, stdout, stderr).

    Fails if the process ends first or `ready()` does not hold within `timeout` s (naming `waiting_for`); the
    process never outlives the call.
    """
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=quiet_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"no {waiting_for} within {timeout:.0f} s"
            time.sleep(0.005)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def stop_when_asked(marker: str) -> str:
    """A worker's job: wait under a StopRequest (as a training step loop does) until a signal asks it to stop."""
    with StopRequest(announce=False) as stop:
        Path(marker + ".started").write_text(str(os.getpid()))  # from here on a signal is a request
        deadline = time.monotonic() + 60
        while not stop.requested and time.monotonic() < deadline:
            time.sleep(0.01)
    Path(marker + ".stopped").write_text(signal.Signals(stop.signum).name if stop.requested else "timeout")
    return marker


# A signal in an experiment's training (tests/experiments/test_length.py, test_extend.py)

MARKED = """
import sys
import octlm.training.loop as loop
from octlm.cli import main

real = loop.train_step


def marked(state, config, *args, **kwargs):  # the test sends its signal once a step has begun
    if bool(config.train.init_from) == {fine_tuning}:
        with open({marks!r}, "a") as f:
            f.write("step\\n")
    return real(state, config, *args, **kwargs)


loop.train_step = marked
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
"""


def stopped_in_training(
    signum: int, experiment: list[str], fine_tuning: bool, folder: Path
) -> tuple[int, str, Path]:
    """`octlm experiment ...` (`experiment`: its word, flags and corpus; one process, one cell) sent `signum`
    in a step of its training (of its fine-tuning: `fine_tuning`); after checking that nothing failed and no
    cell was written: (exit status, the last line on stderr, the output folder)."""
    marks, script, out = folder / "marks", folder / "marked.py", folder / "out"
    script.write_text(MARKED.format(marks=str(marks), fine_tuning=fine_tuning))
    flags = ["--quick", "--seeds", "1", "--jobs", "1", "--data-dir", str(folder / "data"), "--out", str(out)]
    argv = [PYTHON, str(script), "experiment", *experiment, *flags]
    rc, _out, err = signal_when(argv, folder, marks.exists, signum, "training steps")
    assert "Traceback" not in err, err
    assert not [p.name for p in out.glob("cells/*") if not p.name.endswith(".lock")]  # no cell, no temporary
    return rc, err.splitlines()[-1], out
