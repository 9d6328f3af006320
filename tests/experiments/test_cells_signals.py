"""A real signal at each point of an experiment's cell (cells.run): in its training (a request: the step
finishes), its scoring, and while its cell file is being written. The command ends as `octlm train` does (130
or 143, the last line on stderr saying so, no traceback), leaves no cell file and no temporary one, and the
same command run again finishes with the cells an uninterrupted run writes (timings aside)."""

from __future__ import annotations

import copy
import json
import signal
from pathlib import Path
from typing import Any

import pytest
import tiny
from processes import signal_when

WORDS = ["def", "class", "return", "import", "self", "value", "data", "print", "if", "else", "for", "while"]

# Patched into a real `octlm` process: at POINT it marks MARKS (once) and waits there for the test's signal.
# Spawned workers import this file too, but every run here is one cell in one process (--jobs 1).
SCRIPT = """
import contextlib, os, sys, time
from pathlib import Path
import octlm.experiments.battery as battery
import octlm.experiments.battery_train as battery_train
import octlm.experiments.extend as extend
import octlm.files as files
import octlm.training.loop as loop
from octlm.cli import main

MARKS, POINT = {marks!r}, {point!r}


def mark_and_wait(seconds):
    if not Path(MARKS).exists():
        Path(MARKS).write_text(POINT)
        time.sleep(seconds)  # the signal lands here


def patch(module, name, before):
    real = getattr(module, name)

    def marked(*args, **kwargs):
        before(*args, **kwargs)
        return real(*args, **kwargs)

    setattr(module, name, marked)


# Training: the signal is a request, this step finishes (1 s is ample for it to arrive within the step).
if POINT in ("base training", "fine-tuning"):
    fine_tuning = POINT == "fine-tuning"
    patch(loop, "train_step", lambda s, config, *a, **k: bool(config.train.init_from) == fine_tuning
          and mark_and_wait(1))
if POINT == "training":
    patch(battery_train, "optimizer_step", lambda *a, **k: mark_and_wait(1))
# Scoring and writing: the signal raises where it lands (in 60 s the test has failed on its own).
if POINT == "scoring":
    patch(battery, "score_cell", lambda *a, **k: mark_and_wait(60))
if POINT in ("scoring before", "scoring after"):
    patch(extend, "scored", lambda m, r, s, phase, *a, **k: POINT.endswith(phase) and mark_and_wait(60))
if POINT == "writing":
    real_writing = files.writing

    @contextlib.contextmanager
    def writing(path):
        with real_writing(path):
            yield
        if Path(path).parent.name == "cells":  # the cell's bytes are in its temporary file, not yet moved
            mark_and_wait(60)

    files.writing = writing
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
"""
SAID = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "stopped by SIGTERM")}
TIMING = ("seconds", "train_wall", "tokens_per_second")  # what may differ between two runs of a cell


def timeless(value: Any) -> Any:
    """A cell's JSON without its timings."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if not k.endswith(TIMING)}
    return [timeless(v) for v in value] if isinstance(value, list) else value


def cells_of(out: Path) -> dict[str, Any]:
    """Every cell file of `out`, its own folder written as OUT, without timings."""
    folder = out / "cells"
    return {
        p.name: timeless(json.loads(p.read_text().replace(str(out), "OUT"))) for p in folder.glob("*.json")
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("signals")
    tiny.write_corpus(root / "text", 12, 120, words=WORDS, per_line=10)
    return root


def argv_of(experiment: str, row: str, root: Path) -> list[str]:
    """One cell of `experiment` (`tasks` or `extend`) on `row`, --quick, in this process or a child."""
    if experiment == "tasks":
        return ["tasks", "--quick", "--tasks", "copy", "--schemes", row, "--jobs", "1"]
    data = ["--text", str(root / "text"), "--data-dir", str(root / "data")]
    return ["extend", "--quick", "--rows", row, "--seeds", "1", "--jobs", "1", *data]


REFERENCE: dict[tuple[str, str], dict[str, Any]] = {}


def uninterrupted(experiment: str, row: str, root: Path) -> dict[str, Any]:
    """The cells of the run never interrupted (made once per experiment and row)."""
    if (experiment, row) not in REFERENCE:
        out = root / f"reference-{experiment}-{row}"
        code, _, err = tiny.run_cli(["experiment", *argv_of(experiment, row, root), "--out", str(out)])
        assert code == 0, err
        REFERENCE[experiment, row] = cells_of(out)
    return REFERENCE[experiment, row]


def interrupted_then_again(
    experiment: str, row: str, point: str, signum: int, root: Path, tmp_path: Path
) -> dict[str, Any]:
    """Send `signum` at `point` of the cell; check how the command ended and that no cell (or temporary file)
    is left; run the command again; the cells it writes."""
    marks, script, out = tmp_path / "marks", tmp_path / "marked.py", tmp_path / "out"
    script.write_text(SCRIPT.format(marks=str(marks), point=point))
    argv = ["experiment", *argv_of(experiment, row, root), "--out", str(out)]
    code, _, err = signal_when([tiny.PYTHON, str(script), *argv], tmp_path, marks.exists, signum, point)
    assert "Traceback" not in err, err
    assert (code, err.splitlines()[-1]) == (
        SAID[signum][0],
        f"octlm experiment {experiment}: {SAID[signum][1]}",
    )
    assert [p.name for p in out.glob("cells/*") if not p.name.endswith(".lock")] == []
    code, stdout, err = tiny.run_cli(argv)
    assert code == 0 and stdout.splitlines()[-1] == f"results: {out / 'results.md'}", err
    return cells_of(out)


@pytest.mark.slow  # real processes (~10 s each)
@pytest.mark.parametrize(
    ("row", "point", "signum"),
    [
        ("rope", "training", signal.SIGINT),
        ("rope", "scoring", signal.SIGINT),
        ("rope", "writing", signal.SIGINT),
        ("rope", "scoring", signal.SIGTERM),
        ("path", "training", signal.SIGINT),
        ("path", "writing", signal.SIGTERM),
    ],
)
def test_a_signal_in_a_tasks_cell(row: str, point: str, signum: int, root: Path, tmp_path: Path) -> None:
    again = interrupted_then_again("tasks", row, point, signum, root, tmp_path)
    assert again == uninterrupted("tasks", row, root) and list(again) == [f"copy-{row}-seed0.json"]


@pytest.mark.slow  # real processes (~10 s each)
@pytest.mark.parametrize(
    ("row", "point", "signum"),
    [
        ("pi", "base training", signal.SIGINT),
        ("pi", "scoring before", signal.SIGTERM),
        ("pi", "fine-tuning", signal.SIGINT),
        ("pi", "scoring after", signal.SIGINT),
        ("pi", "writing", signal.SIGTERM),
        ("path", "base training", signal.SIGTERM),
        ("path", "fine-tuning", signal.SIGTERM),
        ("path", "writing", signal.SIGINT),
    ],
)
def test_a_signal_in_an_extend_cell(row: str, point: str, signum: int, root: Path, tmp_path: Path) -> None:
    again = interrupted_then_again("extend", row, point, signum, root, tmp_path)
    reference = copy.deepcopy(uninterrupted("extend", row, root))
    name = f"{row}-seed1337.json"
    assert list(again) == [name] and reference[name]["facts"]["info"]["base_trained"]
    # The base trained before the signal is reused: the one difference in what the cell records.
    info = again[name]["facts"]["info"]
    assert info.pop("base_trained") == (point == "base training")
    reference[name]["facts"]["info"].pop("base_trained")
    assert again == reference
