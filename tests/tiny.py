"""Tiny runs for the reliability tests: a small corpus, a tiny model, CLI flags, file-tree snapshots.

A tiny run (d_model 32, one layer, context 16, vocabulary 260) trains a step in a few milliseconds, so the
reliability tests can afford many whole runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from octlm.cli import main
from octlm.config import Config, config_from_dict

WORDS = [
    "def",
    "class",
    "return",
    "import",
    "self",
    "value",
    "data",
    "print",
    "if",
    "else",
    "for",
    "while",
    "lambda",
    "yield",
    "with",
    "as",
    "try",
]
ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

TINY_MODEL = {"vocab_size": 260, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "context_length": 16}
TINY_TRAIN = {
    "steps": 30,
    "batch_size": 4,
    "eval_interval": 10,
    "eval_batches": 1,
    "checkpoint_interval": 3,
    "warmup_steps": 3,
    "report": False,
    "sample_tokens": 0,
    "seed": 7,
}


def write_corpus(
    folder: Path, files: int = 5, lines: int = 30, words: list[str] = WORDS, per_line: int = 8
) -> Path:
    """A few small text files of pseudo-code (deterministic): `files` files of `lines` lines."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        rng = random.Random(i)
        text = "\n".join(" ".join(rng.choice(words) for _ in range(per_line)) for _ in range(lines))
        (folder / f"doc{i}.txt").write_text(text + "\n", encoding="utf-8")
    return folder


def tiny_raw(root: Path, corpus: Path, **train: Any) -> dict[str, Any]:
    """The tiny config as the nested dict a TOML file would give."""
    model = dict(TINY_MODEL, **train.pop("model", {}))
    settings = dict(TINY_TRAIN, out_dir=str(root / "runs"), **train)
    return {
        "model": model,
        "data": {"source": "text", "text": [str(corpus)], "data_dir": str(root / "data")},
        "train": settings,
    }


def tiny_flags(root: Path, corpus: Path, **train: Any) -> list[str]:
    """The same tiny config as `octlm train` flags (`--text`, `--set data.data_dir=...`, per-field flags)."""
    raw = tiny_raw(root, corpus, **train)
    flags = ["--text", str(corpus), "--set", f"data.data_dir={root / 'data'}"]
    for section in ("model", "train"):
        for key, value in raw[section].items():
            value = str(value).lower() if isinstance(value, bool) else str(value)
            flags += ["--set", f"{section}.{key}={value}"]
    return flags


def tiny_data_flags(root: Path, corpus: Path) -> list[str]:
    """The part of `tiny_flags` that `octlm data` reads ([data] and the vocabulary size): it refuses the rest."""
    vocab = tiny_raw(root, corpus)["model"]["vocab_size"]
    return [
        "--text",
        str(corpus),
        "--set",
        f"data.data_dir={root / 'data'}",
        "--set",
        f"model.vocab_size={vocab}",
    ]


def toml_text(raw: dict[str, Any]) -> str:
    """A TOML file for a nested dict of scalars and lists of strings."""

    lines = []
    for section, table in raw.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def quiet_env() -> dict[str, str]:
    """Environment for child processes: one thread (fast and deterministic on a busy machine), no colour."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    return env


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """`octlm.cli.main(argv)` in this process: (exit code, stdout, stderr). argparse's SystemExit counts too."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def snapshot(folder: Path) -> dict[str, tuple[str, int, int]]:
    """Every entry under `folder`: relative path -> (kind, size or 0, mtime_ns) plus a content hash for files."""
    found: dict[str, Any] = {}
    if not folder.exists():
        return found
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        if path.is_file():
            found[path.relative_to(folder).as_posix()] = (
                "file",
                hashlib.sha256(path.read_bytes()).hexdigest(),
                stat.st_mtime_ns,
            )
        else:
            found[path.relative_to(folder).as_posix()] = ("dir", "", stat.st_mtime_ns)
    return found


# ---------------------------------------------------------------------------------------------------------------
# A fork server for kill tests: `python tests/tiny.py serve` imports octlm and torch once, then for every request
# forks a child that runs `octlm.cli.main(argv)` (a real process, killed with a real SIGKILL), so a trial costs
# milliseconds of start-up instead of seconds. Nothing in the server touches torch before forking (no thread pool
# to inherit); children run on one thread.
#
# Request (one JSON line on stdin): {"argv": [...], "cwd": ..., "log": path, "hook": {...} | null,
#   "kill_after": seconds | null, "kill_on_tmp": {"folder": run_dir, "nth": k} | null}
# Reply (one JSON line on stdout): {"rc": exit code (-9 when killed), "killed": bool, "seconds": float,
#   "tmp_seen": appearances of .checkpoint-tmp-* seen by the poller}
#
# Hooks stop the child by SIGKILL to itself the nth time it reaches an exact point of a checkpoint write:
#   model_half / optimizer_half / meta_half: that file is half written; between_renames: checkpoint/ was moved
#   to .checkpoint-old but the new one not yet moved in; after_swap: the new checkpoint/ is in place, the old
#   one not yet removed; rmtree_old: the old one is half removed. `snapshot` copies every checkpoint's
#   weights to hook["folder"]/step-<n>.safetensors (the reference run).

TMP_PREFIX = ".checkpoint-tmp-"


def _die() -> None:
    import signal

    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class _Countdown:
    """`due()` is true the nth time it is called (the nth time the child reaches the hook's point), only then."""

    def __init__(self, nth: int) -> None:
        self.nth, self.calls = nth, 0

    def due(self) -> bool:
        self.calls += 1
        return self.calls == self.nth


def _halve(path: Any) -> None:
    path = Path(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _hook_snapshot(hook: dict[str, Any], point: str, due: Callable[[], bool]) -> None:
    import octlm.training.loop

    real_save = octlm.training.loop.save_checkpoint

    def snapshotting(run_dir, model, optimizer, config, step: int, state=None) -> Any:  # as save_checkpoint
        path = real_save(run_dir, model, optimizer, config, step, state)
        shutil.copyfile(path / "model.safetensors", Path(hook["folder"]) / f"step-{step}.safetensors")
        return path

    octlm.training.loop.save_checkpoint = snapshotting


def _hook_write(hook: dict[str, Any], point: str, due: Callable[[], bool]) -> None:
    """model_half / optimizer_half / meta_half: that file of the new checkpoint is half written, then the child
    dies; after_model: the weights are written whole first."""
    import octlm.storage.checkpoint
    import octlm.storage.run as run

    name = {
        "model_half": run.MODEL_FILE,
        "after_model": run.MODEL_FILE,
        "optimizer_half": run.OPTIMIZER_FILE,
        "meta_half": run.META_FILE,
    }[point]
    real_write = octlm.storage.checkpoint.write_durable

    def write_durable(path: Path, data: bytes) -> None:
        if path.name == name and due():
            real_write(path, data if point == "after_model" else data[: len(data) // 2])
            _die()
        real_write(path, data)

    octlm.storage.checkpoint.write_durable = write_durable


def _hook_rename(hook: dict[str, Any], point: str, due: Callable[[], bool]) -> None:
    import octlm.storage.run

    real_rename = Path.rename
    target_name = (
        octlm.storage.run.OLD_CHECKPOINT if point == "between_renames" else octlm.storage.run.CHECKPOINT
    )

    def rename(self: Path, target: Any) -> Any:
        result = real_rename(self, target)
        if Path(target).name == target_name and due():
            _die()
        return result

    Path.rename = rename  # type: ignore[method-assign]


def _hook_rmtree_old(hook: dict[str, Any], point: str, due: Callable[[], bool]) -> None:
    import octlm.storage.run

    real_rmtree = shutil.rmtree

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        path = Path(path)
        swapped = (path.parent / octlm.storage.run.CHECKPOINT / octlm.storage.run.META_FILE).is_file()
        if path.name == octlm.storage.run.OLD_CHECKPOINT and swapped and path.is_dir() and due():
            (path / octlm.storage.run.MODEL_FILE).unlink()
            _die()
        real_rmtree(path, *args, **kwargs)

    shutil.rmtree = rmtree


# hook["point"] -> the function that patches the child for it (two points share one): f(hook, point, due).
_HOOKS = {
    "snapshot": _hook_snapshot,
    "model_half": _hook_write,
    "after_model": _hook_write,
    "optimizer_half": _hook_write,
    "meta_half": _hook_write,
    "between_renames": _hook_rename,
    "after_swap": _hook_rename,
    "rmtree_old": _hook_rmtree_old,
}


def _install_hook(hook: dict[str, Any] | None) -> None:
    if not hook:
        return
    # Everything the hooks patch or call, loaded before any patch (the fork server has loaded it all already).
    from octlm.storage import checkpoint  # noqa: F401

    point, countdown = hook["point"], _Countdown(int(hook.get("nth", 1)))
    if point not in _HOOKS:
        raise ValueError(f"unknown hook {point!r}")
    _HOOKS[point](hook, point, countdown.due)


def _child(request: dict[str, Any]) -> None:
    code = 1
    try:
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(request.get("cwd") or ".")
        import torch

        torch.set_num_threads(1)
        _install_hook(request.get("hook"))
        code = main(request["argv"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code or 0))


def _watch(pid: int, request: dict[str, Any]) -> dict[str, Any]:
    import signal
    import time

    start = time.monotonic()
    kill_after = request.get("kill_after")
    poll = request.get("kill_on_tmp")
    killed, seen, present = False, 0, False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > request.get("timeout", 180):  # a hung child must not hang the tests
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"rc": None, "killed": True, "seconds": time.monotonic() - start, "tmp_seen": seen}
        if not killed and kill_after is not None and time.monotonic() - start >= kill_after:
            os.kill(pid, signal.SIGKILL)  # our own child, not yet reaped: the pid cannot have been reused
            killed = True
        if not killed and poll is not None:
            try:
                now = any(name.startswith(TMP_PREFIX) for name in os.listdir(poll["folder"]))
            except OSError:
                now = False
            if now and not present:
                seen += 1
                if seen >= poll["nth"]:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
            present = now
        time.sleep(0.0005 if poll is not None else 0.002)
    return {
        "rc": os.waitstatus_to_exitcode(status),
        "killed": killed,
        "seconds": time.monotonic() - start,
        "tmp_seen": seen,
    }


def serve() -> None:

    # Import everything a training run needs, so that children start warm.
    import safetensors.torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (AdamW imports it lazily: seconds, paid once here)

    import octlm.data.cache  # noqa: F401
    import octlm.generation.generate  # noqa: F401
    import octlm.model.decoder  # noqa: F401
    import octlm.storage.checkpoint  # noqa: F401
    import octlm.training.loop  # noqa: F401

    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps(_watch(pid, request)), flush=True)


class ForkServer:
    """The test side of `serve`: start it once, then `run(argv, ...)` per trial."""

    def __init__(self) -> None:
        import subprocess

        self._json = json
        self.proc = subprocess.Popen(
            [PYTHON, __file__, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=quiet_env(),
            text=True,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        ready = self.proc.stdout.readline()
        assert "ready" in ready, f"fork server did not start: {ready!r}"

    def run(
        self,
        argv: list[str],
        cwd: Path,
        log: Path,
        hook: dict[str, Any] | None = None,
        kill_after: float | None = None,
        kill_on_tmp: dict[str, Any] | None = None,
    ) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = {
            "argv": argv,
            "cwd": str(cwd),
            "log": str(log),
            "hook": hook,
            "kill_after": kill_after,
            "kill_on_tmp": kill_on_tmp,
        }
        self.proc.stdin.write(self._json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        assert reply, f"fork server died (exit code {self.proc.poll()})"
        return self._json.loads(reply)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    sys.path.insert(0, str(ROOT))
    serve()


def tiny_rope_decoder(vocab_size: int = 260):
    """A one-layer RoPE decoder of width 32 and 16 positions, its weights from seed 0: small enough to
    memorise a sequence in a test."""
    import torch

    from octlm.config import config_from_dict
    from octlm.model.decoder import Decoder

    model = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "context_length": 16, "position": "rope"}
    config = config_from_dict({"model": {"vocab_size": vocab_size, **model}})
    torch.manual_seed(0)
    return Decoder(config.model)


def memorise(model, ids, steps: int = 40, lr: float = 3e-3) -> list[float]:
    """Train `model` on the fixed batch `ids` `[B, T + 1]` (next-token targets) with AdamW; the loss per step.

    The schemes' tests use it to show that a tiny model with their positions learns and every table trains."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


class LargestTensor(TorchDispatchMode):
    """Records the largest storage any op returns (bytes) while the mode is on: every tensor a forward
    allocates passes here (tests/model/test_decoder_long.py, tests/positions/test_fire.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def check_one_line(code: int, err: str, needle: str, status: int = 2) -> None:
    """The CLI's answer to a user mistake: exit code `status`, and one stderr line ("octlm ... error: ...")
    holding `needle`, with no traceback; with status 141 (a closed stdout, SIGPIPE), nothing on stderr."""
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert code == status, f"exit code {code}, stderr: {err!r}"
    if status == 141:  # a closed stdout ends quietly, like any Unix tool
        assert err == "", f"expected nothing on stderr, got {err!r}"
        return
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith("octlm") and "error:" in lines[0], lines[0]
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


def forget_scheme(name: str) -> None:
    """Take a test's own position scheme out of the registry again: octlm's registries never forget a class
    (nothing in octlm needs to), and a test's must not outlive the test."""
    from octlm.positions import SCHEMES

    SCHEMES._classes.pop(name, None)


# ---------------------------------------------------------------------------------------------------------------
# The training tests' tiny run (tests/training/): vocabulary 300, 40 steps, 8 sample tokens, named "tiny".

TRAIN_WORDS = ["def", "class", "return", "import", "self", "value", "data", "print", "if", "else", "for"]


def write_train_corpus(folder: Path, files: int = 6, lines: int = 60) -> Path:
    """A few small text files of pseudo-code (deterministic)."""
    return write_corpus(folder, files, lines, words=TRAIN_WORDS, per_line=10)


def tiny_config(root: Path, corpus: Path, **train: Any) -> Config:
    """d_model 32, one layer, context 16, vocab 300: a few milliseconds per step."""
    model = {"vocab_size": 300, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "context_length": 16}
    model.update(train.pop("model", {}))
    settings = {
        "steps": 40,
        "batch_size": 4,
        "eval_interval": 10,
        "eval_batches": 2,
        "checkpoint_interval": 10,
        "warmup_steps": 5,
        "out_dir": str(root / "runs"),
        "report": False,
        "sample_tokens": 8,
    }
    settings.update(train)
    raw = {
        "model": model,
        "data": {"source": "text", "text": [str(corpus)], "data_dir": str(root / "data")},
        "train": settings,
    }
    return config_from_dict(raw, name="tiny")


def sha256_file(path: Path) -> str:
    """A file's SHA-256, computed here, independently of octlm (which hashes the bytes it writes and reads)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
