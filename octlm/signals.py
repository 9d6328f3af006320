"""How the process stops on a signal: SIGINT (Ctrl-C), SIGTERM (timeout, docker, Slurm, systemd), SIGHUP.

Two regimes, both on the main thread (where Python runs signal handlers):

- Anywhere in a command (`octlm <command>` enters `raising_signals()` for its whole run), SIGTERM and SIGHUP
  raise `Stopped`, as Ctrl-C raises KeyboardInterrupt: the `finally` and `except BaseException` blocks that
  remove half-written files run, and the CLI ends with one line and 128 + the signal's number, as a shell
  reports a process a signal ended (130, 143, 129). Without this, SIGTERM during data preparation ended the
  process on the spot and left its temporary token file behind.
- While training (`StopRequest`), the first signal is only a request: the run finishes its step and writes a
  checkpoint. A second one aborts at once, through the handler that was there before.

A signal that was ignored when the process started (SIGHUP under nohup, SIGINT in a background job of a
non-interactive shell) stays ignored in both. Nothing here imports torch: `octlm --help` stays fast.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
)  # Ctrl-C; timeout, docker, Slurm, systemd; a lost terminal
RAISED = (signal.SIGTERM, signal.SIGHUP)  # SIGINT raises KeyboardInterrupt already


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived (`signum`). A BaseException, like KeyboardInterrupt: no `except Exception`
    in the work catches it, and every cleanup on the way out runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def __reduce__(self) -> tuple[type, tuple[int]]:  # from a pool's worker to its parent, by number
        return Stopped, (self.signum,)


def stopping(signum: int) -> BaseException:
    """What work that stops between steps with nothing to save raises for `signum`: KeyboardInterrupt for
    SIGINT, `Stopped` otherwise, so the command ends as if the signal had ended it (130, 143, 129)."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)


def _raise_stopped(signum: int, frame: Any) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def raising_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise `Stopped` in the main thread; the handlers before come back on
    leaving. Only a signal with its default action (ending the process) is taken over: an ignored one, or
    one a caller handles, is left alone. Off the main thread it does nothing (Python would refuse)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in RAISED:
            if signal.getsignal(signum) is signal.SIG_DFL:
                previous[signum] = signal.signal(signum, _raise_stopped)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class StopRequest:
    """Turns the first SIGINT, SIGTERM or SIGHUP into a request to stop after the current step (`signum`).

    The handler only records the signal and writes one notice line straight to fd 2 (`os.write`: a handler
    that printed through `sys.stderr` could interrupt a write on the same stream and fail as re-entrant). It
    then puts back the handlers that were there before, so a second signal aborts at once the way it would
    have without the request: Ctrl-C raises KeyboardInterrupt (exit 130); SIGTERM and SIGHUP raise `Stopped`
    under the CLI (exit 143, 129), or end the process where nothing handles them.
    A signal that was ignored (SIGHUP under nohup) stays ignored. Installed only on the main thread (Python
    delivers signals there); elsewhere it never fires.
    """

    def __init__(self, announce: bool = True) -> None:
        self.signum = 0  # the first signal received; 0 while none
        self._previous: dict[int, Any] = {}
        self._announce = announce

    @property
    def requested(self) -> bool:
        return self.signum != 0

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                previous = signal.getsignal(signum)
                if previous is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum
        self._restore()
        if self._announce:
            name = signal.Signals(signum).name
            again = "Ctrl-C again" if signum == signal.SIGINT else f"a second {name}"
            lead = "\n" if os.isatty(2) else ""  # past a progress bar
            text = f"{lead}{name}: finishing this step and writing a checkpoint ({again} aborts at once)\n"
            with contextlib.suppress(OSError):
                os.write(2, text.encode())

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def __exit__(self, *exc: Any) -> None:
        self._restore()
