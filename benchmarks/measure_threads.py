"""The threads section: `octlm train`'s tokens/s at octlm's default thread count against one thread and torch's
own choice, on a quiet machine and beside one competing process (a busy loop), each run as a user runs it (a
fresh `python -m octlm train`), so the default is decided exactly as it is for them."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from measure import summary

from octlm.runtime import TORCH_THREADS

# Threads given on the command line; None is octlm's default (`runtime.cpu_share`).
CHOICES: dict[str, int | None] = {
    "octlm default": None,
    "1 thread": 1,
    f"torch's choice ({TORCH_THREADS})": TORCH_THREADS,
}
SPEED = re.compile(r"speed\s+([\d,]+) tokens/s")
CHOSEN = re.compile(r"uses (\d+) threads?")


def train_speed(threads: int | None, steps: int, out: str) -> tuple[float, int]:
    """Training tokens/s of one fresh `octlm train` of the Day 1 model, and the thread count it used."""
    command = [
        sys.executable,
        "-m",
        "octlm",
        "train",
        "--steps",
        str(steps),
        "--eval-interval",
        str(steps),
        "--sample-tokens",
        "0",
        "--report",
        "false",
        "--no-progress",
        "--overwrite",
        "--name",
        "threads",
        "--set",
        f"train.out_dir={out}",
    ]
    if threads is not None:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    speed = SPEED.search(done.stdout)
    if speed is None:
        raise RuntimeError(f"no speed line in octlm train's output: {done.stdout[-500:]}")
    chosen = CHOSEN.search(done.stderr)  # the busy-machine note; without it the default took every core
    used = threads if threads is not None else int(chosen.group(1)) if chosen else TORCH_THREADS
    return float(speed.group(1).replace(",", "")), used


def bench_threads(reps: int, steps: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Per condition (quiet; one busy-loop process beside), per choice: tokens/s over `reps` interleaved rounds
    (one run of every choice per round) and the threads each used."""
    results: dict[str, Any] = {"steps": steps, "torch_threads": TORCH_THREADS}
    with tempfile.TemporaryDirectory() as out:
        train_speed(1, 2, out)  # the token cache and the imports, outside the timing
        for condition in ("quiet", "one competing process"):
            rival = None
            if condition != "quiet":
                rival = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                rows: dict[str, dict[str, Any]] = {name: {"speeds": [], "threads": []} for name in CHOICES}
                for rep in range(reps):
                    for name, threads in CHOICES.items():
                        speed, used = train_speed(threads, steps, out)
                        rows[name]["speeds"].append(speed)
                        rows[name]["threads"].append(used)
                        log(f"threads: {condition}, {name}, round {rep + 1}: {speed:,.0f} tokens/s ({used})")
            finally:
                if rival is not None:
                    rival.kill()
                    rival.wait()
            results[condition] = {
                name: {**summary(row["speeds"]), "threads": row["threads"]} for name, row in rows.items()
            }
    return results
