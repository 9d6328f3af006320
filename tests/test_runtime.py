"""The runtime (octlm/runtime.py): whether a process is alive. Its bf16 support and autocast are
tests/test_runtime_bf16.py."""

from __future__ import annotations

import os
import subprocess

from tiny import PYTHON

from octlm.runtime import process_alive


def test_process_alive() -> None:
    child = subprocess.Popen([PYTHON, "-c", "pass"])
    child.wait()
    assert process_alive(os.getpid()) and process_alive(1)  # ours, and init's (another user's counts too)
    assert not process_alive(child.pid)  # exited and reaped (its id is not reused this soon)
    assert not process_alive(0) and not process_alive(-1) and not process_alive(2**40)
