"""Reliability: kill training at any moment, interrupt it, fill the disk, plant code: nothing is lost or run.

- Kill trials: a real training process is SIGKILLed at a seeded random moment, when a temporary checkpoint
  folder appears, or at an exact point inside a checkpoint write (hooks in the child, see tests/tiny.py). After
  the kill, whatever checkpoint loads must be the reference run's checkpoint of that step, bit for bit; then
  the run resumes (or starts again when it died before its first checkpoint) and must end bit-identical to an
  uninterrupted run, with its metrics and no leftover folders. Trials run in children of a fork server, so each
  costs a fraction of a second instead of a Python start-up.
- SIGINT: a real `python -m octlm train` process stops after the current step, checkpoints, exits 130 and
  says how to resume (documented in octlm/training/loop.py). SIGTERM, SIGHUP, seeded trials and the second signal:
  tests/test_signals.py; the lock and --overwrite: tests/storage/test_run.py.
- A full disk first reported by fsync leaves the previous checkpoint intact and loadable (the real file-size
  limit and read-only faults: tests/storage/test_checkpoint_full_disk.py).
- A pickle planted where a checkpoint file should be never runs.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import random
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from processes import signal_when
from safetensors.torch import load_file
from tiny import (
    PYTHON,
    ForkServer,
    run_cli,
    sha256_file,
    snapshot,
    tiny_data_flags,
    tiny_flags,
    tiny_raw,
    write_corpus,
)

from octlm.config import config_from_dict
from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.storage.checkpoint import load_checkpoint, save_checkpoint
from octlm.storage.run import Run

RUN_FILES = ["checkpoint", "metrics.jsonl", "tokenizer.json"]
TIMING_KEYS = ("tokens_per_second", "elapsed_seconds")


@dataclass
class Lab:
    root: Path
    flags: list[str]
    server: ForkServer
    reference: Path  # the uninterrupted run
    snapshots: Path  # step-<n>.safetensors: the reference weights at every checkpoint
    seconds: float  # how long the reference run took


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("lab")
    corpus = write_corpus(root / "text")
    flags = tiny_flags(root, corpus)
    server = ForkServer()
    try:
        data = server.run(["data", *tiny_data_flags(root, corpus)], root, root / "data.log")
        assert data["rc"] == 0  # the cache, made once
        snapshots = root / "snapshots"
        snapshots.mkdir()
        reply = server.run(
            ["train", *flags, "--name", "reference", "--no-progress"],
            root,
            root / "reference.log",
            hook={"point": "snapshot", "folder": str(snapshots)},
        )
        assert reply["rc"] == 0, (root / "reference.log").read_text()
        yield Lab(root, flags, server, root / "runs" / "reference", snapshots, reply["seconds"])
    finally:
        server.close()


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl without its timing fields. `train_loss` is left out too: after a resume its first window
    starts at the checkpoint, not at the previous evaluation (see the reliability report)."""
    records = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    return [{k: v for k, v in r.items() if k not in (*TIMING_KEYS, "train_loss")} for r in records]


def unlocked(tree: dict[str, Any]) -> dict[str, Any]:
    """A snapshot without the lock file: a writer killed by SIGKILL leaves it (holding no lock)."""
    return {k: v for k, v in tree.items() if k != ".lock"}


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], what: str) -> None:
    assert a.keys() == b.keys(), what
    for key in a:
        assert torch.equal(a[key], b[key]), f"{what}: {key} differs"


# ---------------------------------------------------------------------------------------------------------------
# Kill trials


@dataclass(frozen=True)
class Trial:
    name: str
    at: float | None = None  # kill after this fraction of the reference run's duration
    tmp_nth: int | None = None  # kill when the nth temporary checkpoint folder appears
    hook: str | None = None  # kill the nth time the child reaches this point of a checkpoint write (tiny.py)
    nth: int = 1
    again: float | None = None  # kill the recovery run too, after this fraction

    @property
    def deterministic(self) -> bool:
        return self.hook is not None


def _trials() -> list[Trial]:
    rng = random.Random(20240531)
    trials = [Trial(f"random-{i}", at=round(rng.uniform(0.02, 0.98), 3)) for i in range(6)]
    trials += [Trial(f"tmp-appears-{n}", tmp_nth=n) for n in (rng.randint(1, 4), rng.randint(5, 9))]
    for point, nth in [
        ("model_half", 1),
        ("after_model", 2),
        ("optimizer_half", 3),
        ("meta_half", 4),
        ("between_renames", 2),
        ("after_swap", 6),
        ("rmtree_old", 3),
    ]:
        trials.append(Trial(f"{point}-{nth}", hook=point, nth=nth))
    trials.append(
        Trial("random-twice", at=round(rng.uniform(0.1, 0.6), 3), again=round(rng.uniform(0.2, 0.8), 3))
    )
    return trials


TRIALS = _trials()


def check_after_kill(run_dir: Path, lab: Lab) -> int | None:
    """The step of the checkpoint a resume would use (verified against the reference), or None when none."""
    try:
        ckpt = load_checkpoint(run_dir)
    except UserError as error:
        # The only acceptable refusal: nothing was saved yet. Never a corrupt or half-written checkpoint.
        # killed right after creating it: nothing inside but, perhaps, the lock file (the kernel released it)
        empty = run_dir.is_dir() and not [p for p in run_dir.iterdir() if p.name != ".lock"]
        # (a second kill can land while an --overwrite run has not written its first checkpoint: the same case,
        # with the old run kept in .replaced/)
        nothing = ("no checkpoint yet", "no checkpoint of its own yet", "does not exist")
        assert any(m in str(error) for m in nothing) or empty, str(error)
        return None
    reference = load_file(str(lab.snapshots / f"step-{ckpt.step}.safetensors"))
    stored = {k: v for k, v in ckpt.model_state.items() if k in reference}
    assert_same_weights(stored, reference, f"checkpoint of step {ckpt.step} after the kill")
    assert ckpt.optimizer_state is not None and ckpt.state.get("rng")
    return ckpt.step


@pytest.mark.slow
@pytest.mark.parametrize("trial", TRIALS, ids=[t.name for t in TRIALS])
def test_kill_and_resume(trial: Trial, lab: Lab) -> None:
    name = f"kill-{trial.name}"
    run_dir = lab.root / "runs" / name
    log = lab.root / f"{name}.log"
    fresh = ["train", *lab.flags, "--name", name, "--no-progress"]
    reply = lab.server.run(
        fresh,
        lab.root,
        log,
        hook={"point": trial.hook, "nth": trial.nth} if trial.hook else None,
        kill_after=trial.at * lab.seconds if trial.at is not None else None,
        kill_on_tmp={"folder": str(run_dir), "nth": trial.tmp_nth} if trial.tmp_nth else None,
    )
    assert reply["rc"] in (0, -signal.SIGKILL), log.read_text()
    if trial.deterministic:
        assert reply["rc"] == -signal.SIGKILL, f"the {trial.hook} hook never fired"
    if trial.hook == "model_half":
        assert any(p.name.startswith(".checkpoint-tmp-") for p in run_dir.iterdir())  # died mid-write

    kills = [reply["rc"] == -signal.SIGKILL]
    left = sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) if run_dir.exists() else []
    again, resumed_from, done_at_kill = trial.again, [], False
    while reply["rc"] != 0:
        step = check_after_kill(run_dir, lab)
        if step == load_checkpoint(lab.reference).step:
            done_at_kill = True
            break  # killed after the final checkpoint: training is complete and --resume rightly refuses
        resumed_from.append(step)
        if step is None and (run_dir / "metrics.jsonl").exists():
            # --resume says what to do instead, in one line, and changes nothing
            before = unlocked(snapshot(run_dir))
            refused = lab.server.run(["train", "--resume", str(run_dir)], lab.root, log)
            # A second start that died before its first checkpoint is a replacement in progress: the first
            # run's files wait in .replaced/, and the line says so (both kills came early: random-twice).
            replacing = Run.of(run_dir).replaced_dir.is_dir() or Run.of(run_dir).replacing_dir.is_dir()
            wanted = "has no checkpoint of its own yet" if replacing else "train it again"
            assert refused["rc"] == 2 and wanted in log.read_text().splitlines()[-1], log.read_text()
            assert unlocked(snapshot(run_dir)) == before  # a stale .lock of the killed writer may go
        argv = fresh if step is None else ["train", "--resume", str(run_dir), "--no-progress"]
        reply = lab.server.run(argv, lab.root, log, kill_after=again * lab.seconds if again else None)
        kills.append(reply["rc"] == -signal.SIGKILL)
        again = None
        assert reply["rc"] in (0, -signal.SIGKILL), log.read_text()
        assert len(kills) <= 3

    assert_same_weights(
        load_file(str(run_dir / "checkpoint" / "model.safetensors")),
        load_file(str(lab.reference / "checkpoint" / "model.safetensors")),
        name,
    )
    assert load_checkpoint(run_dir).step == load_checkpoint(lab.reference).step
    assert metrics(run_dir) == metrics(lab.reference)
    entries = sorted(os.listdir(run_dir))
    if done_at_kill:  # killed between swapping in the final checkpoint and removing the previous one
        # no process ran after it to clean up (nor to take and drop the killed writer's lock file)
        entries = [e for e in entries if e not in (".checkpoint-old", ".lock")]
    assert entries == RUN_FILES, "leftovers in the run folder"
    state = (
        ", ".join(entry.rsplit("-", 1)[0] if "tmp" in entry else entry for entry in left)
        or "no temporary folder"
    )
    print(
        f"\n[kill] {trial.name}: killed {sum(kills)} time(s); after the first kill: {state}; "
        f"then {', '.join('started again' if s is None else f'resumed from step {s}' for s in resumed_from)}"
    )


def test_resumed_metrics_match_an_uninterrupted_run(tmp_path: Path) -> None:
    """A resumed run's metrics.jsonl equals an uninterrupted run's, train_loss included: the first record after a
    resume must average the same steps (the evaluation window), not only those since the checkpoint."""
    from octlm.training.loop import train

    corpus = write_corpus(tmp_path / "text")
    full = train(
        config_from_dict(tiny_raw(tmp_path, corpus, steps=20, run_name="full"), name="t"), progress=False
    )
    config = config_from_dict(tiny_raw(tmp_path, corpus, steps=20, run_name="split"), name="t")
    train(config, progress=False, stop_after=15)
    resumed = train(config, tmp_path / "runs" / "split", resume=True, progress=False)

    def losses(run_dir: Path) -> list[tuple[int, float]]:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        return [(r["step"], r.get("train_loss")) for r in map(json.loads, lines)]  # none at step 0

    assert losses(resumed.run_dir) == losses(full.run_dir)


def test_enough_kill_trials() -> None:
    assert len(TRIALS) >= 10 and len({t.name for t in TRIALS}) == len(TRIALS)
    assert sum(t.deterministic for t in TRIALS) >= 5  # killed inside a checkpoint write for sure


# ---------------------------------------------------------------------------------------------------------------
# SIGINT: a real `python -m octlm train`


@pytest.mark.slow
def test_sigint_checkpoints_and_says_how_to_resume(lab: Lab, tmp_path: Path) -> None:
    run_dir = lab.root / "runs" / "sigint"
    argv = [
        PYTHON,
        "-m",
        "octlm",
        "train",
        *tiny_flags(lab.root, lab.root / "text", steps=100000),
        "--name",
        "sigint",
        "--no-progress",
    ]
    ready = (run_dir / "checkpoint" / "config.json").is_file
    code, out, err = signal_when(argv, tmp_path, ready, signal.SIGINT, "checkpoint")
    assert code == 130, (out, err)  # documented: "exits with status 130"
    assert "Traceback" not in err, err
    lines = out.splitlines()
    stopped = [line for line in lines if line.startswith("stopped at step")]
    assert stopped, out
    step = int(stopped[0].split()[3])
    assert f"resume with: octlm train --resume {run_dir}" in lines
    ckpt = load_checkpoint(run_dir)
    assert ckpt.step == step and step >= 3
    assert sorted(os.listdir(run_dir)) == RUN_FILES

    log = tmp_path / "resume.log"
    reply = lab.server.run(
        ["train", "--resume", str(run_dir), "--steps", str(step + 2), "--no-progress"], lab.root, log
    )
    assert reply["rc"] == 0, log.read_text()
    assert load_checkpoint(run_dir).step == step + 2


# ---------------------------------------------------------------------------------------------------------------
# A full disk while writing a checkpoint


def _tiny_model() -> tuple[Any, Decoder, torch.optim.Optimizer]:
    config = config_from_dict(
        {
            "model": {
                "vocab_size": 260,
                "d_model": 16,
                "n_layers": 1,
                "n_heads": 2,
                "d_ff": 32,
                "context_length": 8,
            }
        },
        name="disk",
    )
    torch.manual_seed(0)
    model = Decoder(config.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    ids = torch.randint(0, 260, (2, 8))
    model(ids, ids)[1].backward()
    optimizer.step()
    return config, model, optimizer


def _no_space(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fsync_no_space(fd: int) -> None:
    if not os.path.isdir(f"/proc/self/fd/{fd}"):
        _no_space()  # a file's data did not reach the disk (ENOSPC/EIO can first show up at fsync)


# Faults the OS gives for real (a file-size limit at each write, an immutable folder at the swap) are tested in
# tests/storage/test_checkpoint_full_disk.py. ENOSPC first reported by fsync has no such trigger on a machine without a tiny file
# system to fill, so it is the one fault still simulated here.
DISK_FULL = {"fsync": ("octlm.storage.checkpoint.os.fsync", _fsync_no_space)}


@pytest.mark.parametrize("where", list(DISK_FULL))
def test_full_disk_keeps_the_previous_checkpoint(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, model, optimizer = _tiny_model()
    run_dir = tmp_path / "run"
    save_checkpoint(run_dir, model, optimizer, config, 1, {"sha256": {"note": "0" * 64}})
    files = {p.name: sha256_file(p) for p in (run_dir / "checkpoint").iterdir()}
    weights = load_checkpoint(run_dir).model_state

    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the failed save would have stored different numbers
    target, fake = DISK_FULL[where]
    monkeypatch.setattr(target, fake)
    with pytest.raises(
        (OSError, UserError)
    ) as info:  # octlm.storage.checkpoint names the errno in a UserError
        save_checkpoint(run_dir, model, optimizer, config, 2, {})
    assert getattr(info.value, "errno", None) == errno.ENOSPC or "(ENOSPC)" in str(info.value)
    monkeypatch.undo()

    ckpt = load_checkpoint(run_dir)
    assert ckpt.step == 1 and ckpt.path is not None
    assert {p.name: sha256_file(p) for p in ckpt.path.iterdir()} == files
    assert_same_weights(ckpt.model_state, weights, "the previous checkpoint")
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".checkpoint-tmp-")]
    save_checkpoint(run_dir, model, optimizer, config, 3, {})  # nothing blocks the next save
    assert load_checkpoint(run_dir).step == 3 and sorted(os.listdir(run_dir)) == ["checkpoint"]


# ---------------------------------------------------------------------------------------------------------------
# Untrusted files: loading never executes code


class Planted:
    """A pickle that creates `marker` when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.write_text, (self.marker, "code ran"))


def _set_hash(run_dir: Path, name: str) -> None:
    """What an attacker who can write the files would do: make config.json vouch for the planted file."""
    meta_path = run_dir / "checkpoint" / "config.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["sha256"][name] = sha256_file(run_dir / "checkpoint" / name)
    meta_path.write_text(json.dumps(meta), encoding="utf-8")


@pytest.fixture
def planted_run(lab: Lab, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(lab.reference, run_dir)
    return run_dir


def test_the_payload_is_live(tmp_path: Path) -> None:
    """The planted pickles really run code when loaded unsafely, so the refusals below mean something."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(Planted(marker)))
    assert marker.read_text() == "code ran"
    marker.unlink()
    torch.save({"state": Planted(marker)}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "evil.pt", weights_only=True)
    assert not marker.exists()
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("vouched", [False, True], ids=["hash-mismatch", "hash-updated"])
@pytest.mark.parametrize("kind", ["pickle", "torch.save"])
def test_pickle_planted_as_weights_never_runs(
    planted_run: Path, tmp_path: Path, kind: str, vouched: bool
) -> None:
    marker = tmp_path / "pwned"
    path = planted_run / "checkpoint" / "model.safetensors"
    if kind == "pickle":
        path.write_bytes(pickle.dumps({"token_embedding.weight": Planted(marker)}))
    else:
        torch.save({"token_embedding.weight": Planted(marker)}, path)
    if vouched:
        _set_hash(planted_run, "model.safetensors")
    for argv in (
        ["generate", str(planted_run), "--prompt", "def ", "--max-new-tokens", "2"],
        ["train", "--resume", str(planted_run), "--steps", "40", "--no-progress"],
    ):
        code, _out, err = run_cli(argv)
        assert code == 2 and len(err.splitlines()) == 1 and "model.safetensors" in err, err
        assert "Traceback" not in err
    assert not marker.exists()


@pytest.mark.parametrize("vouched", [False, True], ids=["hash-mismatch", "hash-updated"])
def test_pickle_planted_as_optimizer_never_runs(planted_run: Path, tmp_path: Path, vouched: bool) -> None:
    marker = tmp_path / "pwned"
    path = planted_run / "checkpoint" / "optimizer.pt"
    torch.save({"state": {0: Planted(marker)}, "param_groups": []}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)  # what octlm relies on
    if vouched:
        _set_hash(planted_run, "optimizer.pt")
    code, _out, err = run_cli(["train", "--resume", str(planted_run), "--steps", "40", "--no-progress"])
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "optimizer.pt" in err and (
        "weights_only=True" in err if vouched else "modified or corrupted" in err
    )
    assert not marker.exists()


def test_pickle_planted_as_tokenizer_or_config_never_runs(planted_run: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    argv = ["generate", str(planted_run), "--prompt", "def ", "--max-new-tokens", "2"]
    for name in ("tokenizer.json", "checkpoint/config.json"):
        original = (planted_run / name).read_bytes()
        (planted_run / name).write_bytes(pickle.dumps(Planted(marker)))
        code, _out, err = run_cli(argv)
        assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert name.split("/")[-1] in err
        (planted_run / name).write_bytes(original)
    assert not marker.exists()
    assert run_cli(argv)[0] == 0  # restored, the run generates again
