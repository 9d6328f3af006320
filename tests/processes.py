"""A real `octlm` process sent a real signal at a chosen moment (the tests of stopping share this)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tiny import quiet_env


def signal_when(argv: list[str], cwd: Path, ready: Callable[[], bool], signum: int, waiting_for: str,
                timeout: float = 120) -> tuple[int, str, str]:  # fmt: skip
    """Start `argv` with `signum` at its default action (a background job of a shell starts with SIGINT
    ignored, which octlm respects), send it `signum` once `ready()` holds; (exit status, stdout, stderr).

    Fails if the process ends first or `ready()` does not hold within `timeout` s (naming `waiting_for`); the
    process never outlives the call.
    """
    proc = subprocess.Popen(argv, cwd=cwd, env=quiet_env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))  # fmt: skip
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
