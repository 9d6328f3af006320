"""Real disk faults while `octlm train` writes: a file-size limit at each stage of a checkpoint, immutable folders.

- RLIMIT_FSIZE (what `ulimit -f` sets) in a child process, with SIGXFSZ ignored so that the write fails with
  EFBIG instead of the signal killing the process. The limit is placed between the sizes of the files a
  resume writes, so it is hit at the run's tokenizer, the weights, the optimizer state or config.json. Each
  case must end in one stderr line naming the file and `ulimit -f`, exit status 2, no traceback; the previous
  checkpoint must be bit-identical and load; no temporary folder may be left; and the run, resumed without the
  limit, must end bit-identical to a run that never failed. (Renames write no data, so the limit cannot fail
  the swap: the immutable checkpoint folder below fails it for real.)
- `chattr +i` on the run folder or its checkpoint folder (as root, permission bits do not stop writes; the
  immutable attribute does): one line saying "not permitted", never "free space"; nothing changed.

Every child is forked from one process that has imported octlm and torch once, so a case costs milliseconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tiny import PYTHON, ROOT, quiet_env, sha256_file, tiny_flags, write_corpus

from octlm.storage.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow  # end-to-end: real training processes (about 10 s of CPU for the whole file)

# The smallest model whose files a resume writes grow in this order: tokenizer.json (~2.8 kB) < weights
# (~5.8 kB) < optimizer state (~20 kB) < config.json (~21 kB, mostly RNG states), so a limit between two sizes
# fails exactly one stage (SIZES).
MODEL = {"d_model": 4, "n_heads": 2, "d_ff": 8, "position": "rope", "norm": "rmsnorm"}
FIRST, THEN = 6, 9  # the previous checkpoint's step, and the step whose checkpoint hits the limit

# Forks one child per case: sets the limit, ignores SIGXFSZ, runs `octlm.cli.main(argv)`; prints exit codes.
CHILDREN = r"""
import json, os, resource, signal, sys
sys.path.insert(0, sys.argv[1])
import torch, safetensors.torch, octlm.training.loop, octlm.storage.checkpoint, octlm.commands.train
from octlm.cli import main
codes = []
for case in json.loads(sys.stdin.read()):
    if case.get("copy"):
        import shutil
        shutil.copytree(*case["copy"])
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fd = os.open(case["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            torch.set_num_threads(1)
            if case["limit"] is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
                resource.setrlimit(resource.RLIMIT_FSIZE, (case["limit"], hard))
            code = main(case["argv"])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(code or 0))
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(codes))
"""


def run_children(cases: list[dict[str, Any]]) -> list[int]:
    """Exit codes of `octlm` runs ({"argv", "log", "limit": bytes or None, "copy": [from, to] first}), each
    in its own forked child, in order."""
    done = subprocess.run(
        [PYTHON, "-c", CHILDREN, str(ROOT)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=quiet_env(),
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def files(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir())}


@dataclass
class Lab:
    root: Path
    base: Path  # trained to step FIRST
    sizes: dict[str, int]  # file -> bytes, as the base run holds them
    reference: dict[str, str]  # checkpoint files of the base run resumed to THEN without any limit
    failed: dict[str, dict[str, Any]]  # stage -> what its resume under the limit left (see `full_disk`)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The base run, the reference resume and every stage's resume under its limit, in one child process."""
    root = tmp_path_factory.mktemp("disk")
    corpus = write_corpus(root / "text")
    flags = tiny_flags(root, corpus, steps=FIRST, model=MODEL, eval_interval=3)
    base, reference = root / "runs" / "base", root / "runs" / "reference"
    cases = [
        {
            "argv": ["train", *flags, "--name", "base", "--no-progress"],
            "log": str(root / "base.log"),
            "limit": None,
        },
        resume_case(reference, root / "reference.log", None, copy=base),
    ]
    failed: dict[str, dict[str, Any]] = {}
    for stage, (limit, _file) in limits(SIZES).items():
        run = root / "runs" / f"full-{stage}"
        failed[stage] = {"run": run, "limit": limit, "log": root / f"full-{stage}.log"}
        cases.append(resume_case(run, failed[stage]["log"], limit, copy=base))
    codes = run_children(cases)
    assert codes[:2] == [0, 0], (root / "base.log").read_text() + (root / "reference.log").read_text()
    sizes = {p.name: p.stat().st_size for p in [base / "tokenizer.json", *(base / "checkpoint").iterdir()]}
    order = ["tokenizer.json", "model.safetensors", "optimizer.pt", "config.json"]
    for before, (limit, name) in zip([None, *order], limits(SIZES).values(), strict=False):
        assert (sizes[before] if before else 0) <= limit < sizes[name], (sizes, limit, name)  # one stage each
    for stage, code in zip(failed, codes[2:], strict=True):
        run = failed[stage]["run"]
        failed[stage].update(
            code=code,
            err=failed[stage]["log"].read_text(),
            left=sorted(os.listdir(run)),
            checkpoint=files(run / "checkpoint"),
            step=load_checkpoint(run).step,
        )
    yield Lab(root, base, sizes, files(reference / "checkpoint"), failed)


def resume_case(run: Path, log: Path, limit: int | None, copy: Path | None = None) -> dict[str, Any]:
    return {
        "argv": ["train", "--resume", str(run), "--steps", str(THEN), "--no-progress"],
        "log": str(log),
        "limit": limit,
        "copy": [str(copy), str(run)] if copy else None,
    }


# What the base run's files weigh (bytes), measured; config.json varies by a few bytes with the temporary paths
# it records, so `lab` checks that each limit still falls between the real sizes.
SIZES = {"tokenizer.json": 2792, "model.safetensors": 5816, "optimizer.pt": 19979, "config.json": 21285}


def limits(sizes: dict[str, int]) -> dict[str, tuple[int, str]]:
    """stage -> (limit in bytes, the file that must fail): halfway between the file before and that file."""
    t, m, o, j = (sizes[n] for n in ("tokenizer.json", "model.safetensors", "optimizer.pt", "config.json"))
    assert t < m < o < j, sizes  # the order MODEL was chosen for
    return {
        "tokenizer": (t // 2, "tokenizer.json"),
        "weights": ((t + m) // 2, "model.safetensors"),
        "optimizer": ((m + o) // 2, "optimizer.pt"),
        "metadata": ((o + j) // 2, "config.json"),
    }


STAGES = ["tokenizer", "weights", "optimizer", "metadata"]


@pytest.fixture(scope="module")
def full_disk(lab: Lab) -> dict[str, dict[str, Any]]:
    """Every stage's failed resume, then its recovery without the limit (one child process for all)."""
    recoveries = [
        resume_case(c["run"], lab.root / f"recover-{stage}.log", None) for stage, c in lab.failed.items()
    ]
    for stage, code in zip(lab.failed, run_children(recoveries), strict=True):
        lab.failed[stage].update(recovered=code, final=files(lab.failed[stage]["run"] / "checkpoint"))
    return lab.failed


@pytest.mark.parametrize("stage", STAGES)
def test_file_size_limit_at_each_stage(stage: str, lab: Lab, full_disk: dict[str, dict[str, Any]]) -> None:
    case = full_disk[stage]
    run, limit, name = case["run"], case["limit"], limits(lab.sizes)[stage][1]
    lines = case["err"].splitlines()
    assert case["code"] == 2 and "Traceback" not in case["err"] and len(lines) == 1, case["err"]
    line = lines[0]
    assert "EFBIG" in line and "ulimit -f unlimited" in line and "space" not in line, line  # not "full disk"
    if stage == "tokenizer":  # written before training by the command, not the checkpoint code
        assert line.startswith("octlm train: error: ") and "tokenizer.json'" in line, line  # names the file
    else:
        assert f"`ulimit -f` is {limit} bytes here" in line, line
        assert line.startswith(
            f"octlm train: error: could not write the checkpoint of step {THEN} in {str(run)!r} ({name}): "
        ), line
        assert line.endswith(
            f"the checkpoint of step {FIRST} in {str(run / 'checkpoint')!r} is kept; resume from it with "
            f"`octlm train --resume {run}`"
        ), line
    assert case["step"] == FIRST and case["checkpoint"] == files(lab.base / "checkpoint")  # bit-identical
    assert not [n for n in case["left"] if n.startswith(".")], case["left"]  # no temporary folder or file
    # Resumed without the limit, it ends exactly where a run that never failed ends.
    assert case["recovered"] == 0 and case["final"] == lab.reference


def test_enough_full_disk_cases(full_disk: dict[str, dict[str, Any]]) -> None:
    assert len(full_disk) == 4 and sorted({c["limit"] for c in full_disk.values()}) == sorted(
        c["limit"] for c in full_disk.values()
    )  # four distinct limits, one per stage


# ---------------------------------------------------------------------------------------------------------------
# Immutable folders (chattr +i)


def _chattr_place() -> Path | None:
    """A folder whose file system supports the immutable attribute here (as root), or None."""
    for base in (Path(os.environ.get("TMPDIR", "/tmp")), Path("/var/tmp"), ROOT):
        probe = base / f".octlm-chattr-probe-{os.getpid()}"
        try:
            probe.mkdir(exist_ok=True)
        except OSError:
            continue
        try:
            if subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False).returncode == 0:
                return base
        except FileNotFoundError:
            return None  # no chattr at all
        finally:
            subprocess.run(["chattr", "-i", str(probe)], capture_output=True, check=False)
            probe.rmdir()
    return None


@pytest.fixture(scope="module")
def immutable_base() -> Path:
    if os.geteuid() != 0:
        pytest.skip("chattr +i needs root (CAP_LINUX_IMMUTABLE); as another user permission bits suffice")
    place = _chattr_place()
    if place is None:
        pytest.skip("no file system here (TMPDIR, /var/tmp, the repository) supports chattr +i")
    return place


@pytest.mark.parametrize("target", ["run folder", "checkpoint folder"])
def test_immutable_folder_is_one_line_not_free_space(
    target: str, lab: Lab, immutable_base: Path, tmp_path: Path
) -> None:
    """The run folder immutable: the resume cannot even start writing. The checkpoint folder immutable: the
    weights are written, then the swap (a rename) fails: EPERM, the previous checkpoint kept."""
    holder = Path(immutable_base) / f"octlm-immutable-{os.getpid()}-{tmp_path.name}"
    run = holder / "run"
    shutil.copytree(lab.base, run)
    locked = run if target == "run folder" else run / "checkpoint"
    before = {p.relative_to(run).as_posix(): sha256_file(p) for p in run.rglob("*") if p.is_file()}
    log = tmp_path / "train.log"
    try:
        subprocess.run(["chattr", "+i", str(locked)], check=True)
        code = run_children([resume_case(run, log, None)])[0]
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=False)
    try:
        err = log.read_text()
        lines = err.splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert "not permitted" in lines[0].lower() and "space" not in lines[0], lines[0]  # not "full disk"
        assert str(locked) in lines[0], lines[0]
        if target == "checkpoint folder":  # the run folder is refused by its lock, before the checkpoint code
            assert "(EPERM)" in lines[0] and "lsattr -d" in lines[0], lines[0]
            assert lines[0].startswith(
                f"octlm train: error: could not write the checkpoint of step {THEN} in {str(run)!r} (checkpoint): "
                f"operation not permitted"
            ), lines[0]
            assert (
                f"at {str(locked)!r}" in lines[0] and f"step {FIRST} in {str(locked)!r} is kept" in lines[0]
            )
        after = {p.relative_to(run).as_posix(): sha256_file(p) for p in run.rglob("*") if p.is_file()}
        kept = {k: v for k, v in after.items() if k.startswith("checkpoint/")}
        assert kept == {k: v for k, v in before.items() if k.startswith("checkpoint/")}
        assert load_checkpoint(run).step == FIRST
        assert not [p.name for p in run.iterdir() if p.name.startswith(".checkpoint")]
    finally:
        shutil.rmtree(holder, ignore_errors=True)
