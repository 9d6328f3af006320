"""Signals (octlm/signals.py). In training: SIGINT, SIGTERM and SIGHUP stop `octlm train` after the current
step, with a checkpoint, the resume is bit-identical, a second signal aborts at once. Outside training: SIGTERM
and SIGHUP raise `Stopped`, so the cleanup on the way out runs, and a command ends with one line and 128 + N."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tiny
import torch
from processes import signal_when, stop_when_asked
from safetensors.torch import load_file
from tiny import PYTHON, ForkServer, quiet_env, tiny_data_flags, tiny_flags, write_corpus

from octlm.runtime import in_processes
from octlm.signals import Stopped, raising_signals, stopping
from octlm.storage.checkpoint import load_checkpoint

STEPS = 60  # a few ms a step: a trial (stopped, then resumed) costs about one such run
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TIMING = ("tokens_per_second", "elapsed_seconds")


def default_signals() -> None:
    """In the child before exec: SIGINT, SIGTERM and SIGHUP as a shell gives them (default action)."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


class SignalServer(ForkServer):
    """tiny.ForkServer, started with default signal dispositions; `pid_of_child` finds the trial's process."""

    def __init__(self) -> None:
        self._json = json
        self.proc = subprocess.Popen(
            [PYTHON, tiny.__file__, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=quiet_env(),
            text=True,
            cwd=tiny.ROOT,
            preexec_fn=default_signals,
        )
        assert self.proc.stdout is not None and "ready" in self.proc.stdout.readline()

    def pid_of_child(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        stat = Path(f"/proc/{entry}/stat").read_text()
                    except OSError:
                        continue
                    if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:  # field 4: the parent's PID
                        return int(entry)
            time.sleep(0.005)
        raise AssertionError("the fork server started no child")


@dataclass
class SigLab:
    root: Path
    flags: list[str]
    server: SignalServer
    reference: Path  # the uninterrupted run of STEPS steps


@pytest.fixture(scope="module")
def siglab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigLab]:
    if not Path("/proc/self/stat").is_file():
        pytest.skip("needs /proc to find the fork server's children")
    root = tmp_path_factory.mktemp("siglab")
    corpus = write_corpus(root / "text")
    flags = tiny_flags(root, corpus, steps=STEPS)
    server = SignalServer()
    try:
        assert server.run(["data", *tiny_data_flags(root, corpus)], root, root / "data.log")["rc"] == 0
        reply = server.run(["train", *flags, "--name", "reference", "--no-progress"], root, root / "ref.log")
        assert reply["rc"] == 0, (root / "ref.log").read_text()
        yield SigLab(root, flags, server, root / "runs" / "reference")
    finally:
        server.close()


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl without its timing fields (train_loss included: a resume averages the same steps)."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def assert_same_run(run_dir: Path, reference: Path) -> None:
    a = load_file(str(run_dir / "checkpoint" / "model.safetensors"))
    b = load_file(str(reference / "checkpoint" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs from the uninterrupted run"
    assert load_checkpoint(run_dir).step == load_checkpoint(reference).step
    assert metrics(run_dir) == metrics(reference)
    assert sorted(os.listdir(run_dir)) == ["checkpoint", "metrics.jsonl", "tokenizer.json"]


def checkpoint_step(run_dir: Path) -> int:
    """The step of the run's checkpoint, or 0 while there is none (or it is being swapped)."""
    try:
        return int(json.loads((run_dir / "checkpoint" / "config.json").read_text())["step"])
    except (OSError, ValueError):
        return 0


def signal_during(
    lab: SigLab, argv: list[str], log: Path, run_dir: Path, signum: int, at: int, delay: float
) -> dict:
    """Run `argv` in a fork-server child; `delay` s after its checkpoint reaches step `at`, send it `signum`."""
    reply: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: reply.update(lab.server.run(argv, lab.root, log)))
    worker.start()
    pid = lab.server.pid_of_child()
    deadline = time.monotonic() + 60
    while checkpoint_step(run_dir) < at and worker.is_alive():
        assert time.monotonic() < deadline, f"no checkpoint of step {at} within 60 s"
        time.sleep(0.001)
    time.sleep(delay)
    if worker.is_alive():  # not yet reaped by the server, so the PID is still the child's
        os.kill(pid, signum)
    worker.join(timeout=120)
    return reply


def _trials() -> list[tuple[str, int, int, float]]:
    rng = random.Random(20240601)
    return [
        (f"{signal.Signals(s).name}-{i}", s, rng.randrange(3, STEPS - 12, 3), round(rng.uniform(0, 0.01), 4))
        for s in SIGNALS
        for i in range(3)
    ]


TRIALS = _trials()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "signum", "at", "delay"), TRIALS, ids=[t[0] for t in TRIALS])
def test_signal_stops_checkpoints_and_resumes_bit_identically(
    name: str, signum: int, at: int, delay: float, siglab: SigLab
) -> None:
    run_dir, log = siglab.root / "runs" / name, siglab.root / f"{name}.log"
    argv = ["train", *siglab.flags, "--name", name, "--no-progress"]
    reply = signal_during(siglab, argv, log, run_dir, signum, at, delay)
    text = log.read_text()
    assert reply["rc"] == 128 + signum, text  # 130, 143, 129: what a shell shows for the signal
    assert "Traceback" not in text
    lines = text.splitlines()
    sig = signal.Signals(signum).name
    assert lines[0].startswith(f"{sig}: finishing this step and writing a checkpoint"), lines
    assert (
        lines[1].startswith("stopped at step ") and f" of {STEPS} on {sig}; checkpoint saved in" in lines[1]
    )
    assert lines[2:] == [f"resume with: octlm train --resume {run_dir}"], lines
    step = int(lines[1].split()[3])
    assert load_checkpoint(run_dir).step == step and at < step < STEPS
    assert not (run_dir / ".lock").exists()  # released

    resume = siglab.server.run(["train", "--resume", str(run_dir), "--no-progress"], siglab.root, log)
    assert resume["rc"] == 0, log.read_text()
    assert_same_run(run_dir, siglab.reference)
    print(f"\n[signal] {name}: stopped at step {step} of {STEPS}, resumed bit-identically")


@pytest.mark.slow
def test_a_stop_before_the_first_evaluation_leaves_records(siglab: SigLab, tmp_path: Path) -> None:
    """SIGTERM after a few steps of a run whose first scheduled evaluation is far off: metrics.jsonl holds the
    untrained model's record (step 0) and the stop's own; the resume drops the stop's and adds no second step 0."""
    run_dir = siglab.root / "runs" / "early-stop"
    flags = tiny_flags(siglab.root, siglab.root / "text", steps=100000, eval_interval=50000)
    argv = [PYTHON, "-m", "octlm", "train", *flags, "--name", "early-stop", "--no-progress"]
    ready = (run_dir / "checkpoint" / "config.json").is_file
    code, out, err = signal_when(argv, tmp_path, ready, signal.SIGTERM, "checkpoint")
    assert code == 143 and "Traceback" not in err, (code, out, err)
    step = load_checkpoint(run_dir).step
    records = metrics(run_dir)
    assert [(r["step"], r.get("stopped")) for r in records] == [(0, None), (step, True)] and step >= 3
    # The same seed: the same untrained model, so the same figures at step 0 as the reference run's.
    assert records[0] == metrics(siglab.reference)[0]
    assert sorted(records[1]) == [
        "lr",
        "step",
        "stopped",
        "tokens",
        "train_loss",
        "val_bpb",
        "val_loss",
        "val_perplexity",
    ]
    assert records[1]["tokens"] == step * 4 * 16 and records[1]["val_loss"] < records[0]["val_loss"]

    log = tmp_path / "resume.log"
    reply = siglab.server.run(
        ["train", "--resume", str(run_dir), "--steps", str(step + 2), "--no-progress"], siglab.root, log
    )
    assert reply["rc"] == 0, log.read_text()
    assert [r["step"] for r in metrics(run_dir)] == [0, step + 2]


def test_enough_signal_trials() -> None:
    assert len(TRIALS) == 9 and {t[1] for t in TRIALS} == set(SIGNALS)
    assert len({t[2] for t in TRIALS}) >= 6  # different steps


# ---------------------------------------------------------------------------------------------------------------
# A writer held at step 4: a second signal, a second writer, a reader

HELD = """
import os, sys, time
import octlm.training.loop as train
real_step = train.train_step
def held_step(state, *args, **kwargs):
    loss = real_step(state, *args, **kwargs)
    while state.step == 4 and os.path.exists(sys.argv[1]):
        time.sleep(0.01)  # held here (inside a step) while the hold file exists
    return loss
train.train_step = held_step
from octlm.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def held(siglab: SigLab, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, Path, list[str]]]:
    """`python -m octlm train` (via HELD) held inside step 4, after its first checkpoint (step 3)."""
    hold, run_dir = tmp_path / "hold", tmp_path / "runs" / "held"
    hold.write_text("")
    out = f"train.out_dir={siglab.root / 'runs'}"
    flags = [f"train.out_dir={tmp_path / 'runs'}" if flag == out else flag for flag in siglab.flags]
    argv = [PYTHON, "-c", HELD, str(hold), "train", *flags, "--name", "held", "--no-progress"]
    proc = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=quiet_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_signals,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoint" / "config.json").is_file():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.01)
        yield proc, hold, run_dir, flags
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_aborts_at_once(
    signum: int, held: tuple[subprocess.Popen, Path, Path, list[str]]
) -> None:
    proc, _hold, run_dir, _flags = held
    assert proc.stderr is not None
    proc.send_signal(signum)
    notice = proc.stderr.readline()  # written by the handler itself: the first signal was seen
    assert notice.startswith(f"{signal.Signals(signum).name}: finishing this step"), notice
    sent = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    seconds = time.monotonic() - sent
    assert seconds < 25, f"took {seconds:.1f} s to abort"  # else held until killed: the hold file stays
    assert "stopped at step" not in out and "Traceback" not in err, (out, err)
    if signum == signal.SIGINT:
        assert proc.returncode == 130 and err == "octlm train: interrupted\n", (proc.returncode, err)
    else:  # raised as octlm.signals.Stopped: the cleanup on the way out ran, then 128 + 15
        assert proc.returncode == 143 and err == "octlm train: stopped by SIGTERM\n", (proc.returncode, err)
    assert load_checkpoint(run_dir).step == 3  # the last periodic checkpoint, intact; no stop checkpoint
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".checkpoint-tmp-")]


@pytest.mark.slow  # real processes; still run in CI, like the SIGINT and kill trials
def test_a_second_writer_is_refused_and_readers_work(
    held: tuple[subprocess.Popen, Path, Path, list[str]], siglab: SigLab, tmp_path: Path
) -> None:
    """Two real processes on one folder: the second is refused in one line naming the first's PID and touches
    nothing; `octlm generate` reads the run meanwhile; the first then finishes as if alone."""
    proc, hold, run_dir, flags = held
    log = tmp_path / "second.log"
    before = tiny.snapshot(run_dir)
    for argv in (
        ["train", "--resume", str(run_dir), "--no-progress"],
        ["train", *flags, "--name", "held", "--overwrite"],
    ):
        log.write_text("")
        assert siglab.server.run(argv, siglab.root, log)["rc"] == 2
        lines = log.read_text().splitlines()
        assert lines == [
            f"octlm train: error: run folder '{run_dir}' is in use: another octlm train (PID {proc.pid}) is "
            "writing it; wait for it to finish or stop it, or train under another --name"
        ], lines
    assert tiny.snapshot(run_dir) == before
    reader = ["generate", str(run_dir), "--prompt", "def", "--max-new-tokens", "4"]
    log.write_text("")
    assert siglab.server.run(reader, siglab.root, log)["rc"] == 0, log.read_text()

    hold.unlink()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert [r["step"] for r in metrics(run_dir)] == list(range(0, STEPS + 1, 10))  # one run's records
    assert_same_run(run_dir, siglab.reference)


# ------------------------------------------------------------------------------------------------------------
# Outside training: SIGTERM and SIGHUP raise Stopped (in this process, in a real `octlm data`, in a real pool)


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


def test_a_stop_crosses_from_a_worker_and_ends_as_its_signal_would() -> None:
    assert pickle.loads(pickle.dumps(Stopped(signal.SIGHUP))).signum == signal.SIGHUP  # a pool's worker's
    assert isinstance(stopping(signal.SIGINT), KeyboardInterrupt)
    assert isinstance(error := stopping(signal.SIGTERM), Stopped) and error.signum == signal.SIGTERM


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


@pytest.mark.slow  # a real `octlm data` on an 8 MB corpus, stopped while it encodes (~10-20 s)
def test_sigterm_while_encoding_leaves_no_temporary_file_and_says_so(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    line = "def function_{0}(value, other):\n    return [value * {0} for _ in range(other)]\n"
    for i in range(8):
        (corpus / f"m{i}.py").write_text("".join(line.format(i * 10_000 + k) for k in range(12_000)))
    data = tmp_path / "data"
    argv = [
        PYTHON,
        "-m",
        "octlm",
        "data",
        "--text",
        str(corpus),
        "--vocab-size",
        "300",
        "--set",
        f"data.data_dir={data}",
        "--set",
        "data.val_fraction=0.5",
    ]
    ready = lambda: bool(list(data.glob("*/.*.bin.*.tmp")))  # the token file is being written
    code, _out, err = signal_when(argv, tmp_path, ready, signal.SIGTERM, "token file")
    assert code == 143 and err.splitlines()[-1] == "octlm data: stopped by SIGTERM", err
    assert "Traceback" not in err
    (folder,) = data.iterdir()
    assert not list(folder.glob(".*.tmp")) and not (folder / "train.bin").exists()


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
