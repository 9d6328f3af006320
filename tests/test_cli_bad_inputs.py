"""The bad-input catalogue: every user mistake ends with exit code 2, one readable line and no side effects.

One trained tiny run (relative paths: `text/`, `data/`, `runs/tiny/`) is made once per module and copied into
a fresh workspace for each case, so a case may break its copy freely. For every case: the exit code is 2,
stderr is exactly one line that names the bad value, there is no traceback, and the workspace's file tree
(paths, SHA-256, mtimes) is the same before and after.

Where standard output or a resource limit is the fault, a case runs as a real process: a pipe whose reader is
gone (exit status 141 = 128 + SIGPIPE, and nothing on stderr: a closed stdout ends quietly), /dev/full, a
file-size limit (RLIMIT_FSIZE, a full disk as the kernel reports it) or an address-space limit (RLIMIT_AS,
a model too large to allocate). Read-only places are real too: `chattr +i` as root, mode 0555 otherwise.

The real exit code of plain processes, and mistakes only the library can be handed (token ids), are in
tests/test_cli_bad_inputs_direct.py.
"""

from __future__ import annotations

import fnmatch
import json
import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bad_inputs
import pytest
import torch
from bad_inputs import RUN
from tiny import PYTHON, check_one_line, quiet_env, run_cli, snapshot, tiny_flags

from octlm.data.sources import Document
from octlm.data.tokenizer import train_tokenizer

CKPT = Path(RUN) / "checkpoint"
template = bad_inputs.template  # its module-scoped fixture, which pytest finds here by this name


# Folders a case made read-only; made writable again after the case, so that the workspace can be removed.
LOCKED: list[Path] = []


@pytest.fixture
def workspace(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    monkeypatch.chdir(ws)
    yield ws
    while LOCKED:
        folder = LOCKED.pop()
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


# ---------------------------------------------------------------------------------------------------------------
# The catalogue: (argv, a piece of the message that names the bad value, optional setup run in the workspace)


def _write(path: str, data: bytes | str) -> Callable[[], None]:
    def setup() -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)

    return setup


def _edit_meta(change: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    def setup() -> None:
        path = CKPT / "config.json"
        meta = json.loads(path.read_text(encoding="utf-8"))
        change(meta)
        path.write_text(json.dumps(meta), encoding="utf-8")

    return setup


def _truncate_weights() -> None:
    path = CKPT / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_weight_byte() -> None:
    path = CKPT / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # inside the last tensor: still parses, different numbers
    path.write_bytes(bytes(data))


def _other_tokenizer() -> None:
    train_tokenizer([Document("a", "completely different words " * 30), Document("b", "more")], 270).save(
        Path(RUN) / "tokenizer.json"
    )


def _edit_corpus() -> None:
    with open("text/doc0.txt", "a", encoding="utf-8") as f:
        f.write("one more line\n")


def _tamper_optimizer() -> None:
    path = CKPT / "optimizer.pt"
    path.write_bytes(path.read_bytes() + b"\0")


def _steps(*setups: Callable[[], None]) -> Callable[[], None]:
    def setup() -> None:
        for step in setups:
            step()

    return setup


def _symlink(path: str, target: str) -> Callable[[], None]:
    return lambda: os.symlink(target, path)


def _mkdir(path: str) -> Callable[[], None]:
    return lambda: Path(path).mkdir(parents=True, exist_ok=True)


def _fifo(path: str) -> Callable[[], None]:
    return lambda: os.mkfifo(path)


def _remove(path: str) -> Callable[[], None]:
    return lambda: Path(path).unlink()


def _read_only(path: str) -> Callable[[], None]:
    """Make the folder `path` (created if needed) really read-only: `chattr +i` as root, where root ignores
    permission bits; mode 0555 otherwise. Skips the case where the file system has no immutable attribute."""

    def setup() -> None:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            done = (
                subprocess.run(["chattr", "+i", path], capture_output=True, text=True)
                if shutil.which("chattr")
                else None
            )
            if done is None or done.returncode != 0:
                pytest.skip(
                    f"cannot make {path!r} read-only as root: chattr +i failed or is missing "
                    f"({done.stderr.strip() if done else 'no chattr'})"
                )
        else:
            folder.chmod(0o555)
        LOCKED.append(folder.resolve())

    return setup


@dataclass
class Case:
    argv: list[str]
    needle: str  # a piece of the one stderr line; "" with status 141 (nothing on stderr)
    setup: Callable[[], None] | None = None
    status: int = 2
    stdout: str | None = None  # a real process with stdout "closed" (its reader gone) or "full" (/dev/full)
    limits: dict[int, int] | None = None  # a real process under these resource limits (RLIMIT_* -> bytes)
    changes: tuple[str, ...] = ()  # fnmatch patterns of workspace paths the command may write: its job
    slow: bool = False  # a real process importing transformers too (seconds): marked slow, still run in CI

    @property
    def real(self) -> bool:
        return self.stdout is not None or self.limits is not None


GEN = ["generate", RUN, "--prompt", "def ", "--max-new-tokens", "2"]
RESUME = ["train", "--resume", RUN, "--no-progress", "--steps", "12"]

CASES: dict[str, Case] = {
    "unknown command": Case(["frobnicate"], "'frobnicate'"),
    "group without subcommand": Case(["export"], "'export' needs one of"),
    "unknown config key": Case(["model", "--set", "model.widht=64"], "model.widht"),
    "override without =": Case(["model", "--set", "model.d_model"], "'model.d_model'"),
    "wrong type": Case(["model", "--d-model", "wide"], "'wide'"),
    "unknown position scheme": Case(["model", "--position", "sideways"], "'sideways'"),
    "misspelt run folder": Case(  # issue 47: the nearest folder beside it
        ["generate", "runs/tinny", "--prompt", "x"],
        "error: run folder 'runs/tinny' does not exist; did you mean 'runs/tiny'?",
    ),
    "width not divisible by heads": Case(["model", "--d-model", "30", "--n-heads", "4"], "d_model = 30"),
    "odd head size with rope": Case(
        ["model", "--position", "rope", "--d-model", "24", "--n-heads", "8"], "d_model / n_heads = 3"
    ),
    "zero steps": Case(["train", "--steps", "0"], "train.steps = 0 must be at least 1"),
    "config file missing": Case(["model", "--config", "nope.toml"], "'nope.toml'"),
    "invalid toml": Case(
        ["model", "--config", "bad.toml"],
        "'bad.toml' is not valid TOML",
        _write("bad.toml", "[model\nd_model = \n"),
    ),
    "toml not utf-8": Case(
        ["model", "--config", "latin.toml"], "'latin.toml'", _write("latin.toml", b"[model]\n# caf\xe9\n")
    ),
    "missing text path": Case(["corpus", "--text", "missing.txt"], "'missing.txt'"),
    "empty corpus": Case(["corpus", "--text", "blank"], "corpus is empty", _write("blank/empty.txt", b"")),
    "binary file": Case(
        ["corpus", "--text", "blob.bin"],
        "blob.bin' looks binary (NUL byte at offset 3)",
        _write("blob.bin", b"abc\x00\x01\x02"),
    ),
    "non-utf-8 file": Case(
        ["corpus", "--text", "latin1.txt"],
        "byte 0xe9 at offset 3",
        _write("latin1.txt", b"caf\xe9 au lait\n"),
    ),
    "vocabulary too small for BPE": Case(
        ["tokenizer", "--text", "text", "--vocab-size", "100"], "vocab_size = 100"
    ),
    "negative temperature": Case([*GEN, "--temperature", "-0.5"], "temperature = -0.5"),
    "nan temperature": Case([*GEN, "--temperature", "nan"], "temperature = nan"),
    "top-k zero": Case([*GEN, "--top-k", "0"], "top-k = 0"),
    "top-k not a number": Case([*GEN, "--top-k", "many"], "'many'"),
    "top-p zero": Case([*GEN, "--top-p", "0"], "top-p = 0.0"),
    "top-p above one": Case([*GEN, "--top-p", "1.5"], "top-p = 1.5"),
    "negative max-new-tokens": Case([*GEN[:-1], "-3"], "max-new-tokens = -3"),
    "generate without a run": Case(
        ["generate", "--prompt", "hi"], "give the run folder to read first: octlm generate RUN"
    ),
    "run folder missing": Case(["generate", "runs/nope", "--prompt", "x"], "'runs/nope' does not exist"),
    "folder that is not a run": Case(["generate", "text", "--prompt", "x"], "'text' is not an octlm run"),
    "run with no checkpoint yet": Case(
        ["generate", "runs/early", "--prompt", "x"],
        "no checkpoint yet",
        _write("runs/early/metrics.jsonl", ""),
    ),
    "truncated weights": Case(GEN, "model.safetensors' is not a valid safetensors file", _truncate_weights),
    "one byte flipped in weights": Case(
        GEN, "model.safetensors' was modified or corrupted", _flip_weight_byte
    ),
    "future schema version": Case(
        GEN, "schema_version 99", _edit_meta(lambda m: m.update(schema_version=99))
    ),
    "checkpoint config edited": Case(
        GEN,
        "does not match its recorded config hash",
        _edit_meta(lambda m: m["config"]["model"].update(n_heads=4)),
    ),
    "config.json not json": Case(
        GEN, "config.json' is unreadable or not valid JSON", _write(f"{CKPT}/config.json", "{oops")
    ),
    "config.json nested too deep": Case(GEN, "config.json'", _write(f"{CKPT}/config.json", "[" * 100_000)),
    "run tokenizer replaced": Case(GEN, "tokenizer.json' was modified", _other_tokenizer),
    "resume with changed config": Case([*RESUME, "--lr", "0.1"], "train.lr 0.1 != 0.003"),
    "resume with changed model flag": Case([*RESUME, "--position", "rope"], "model.position rope != learned"),
    "resume with changed vocabulary": Case([*RESUME, "--vocab-size", "300"], "model.vocab_size 300 != 260"),
    "resume with changed corpus and tokenizer": Case(
        RESUME, "differs from the checkpoint's: SHA-256", _edit_corpus
    ),
    "resume with truncated weights": Case(
        RESUME, "model.safetensors' is not a valid safetensors", _truncate_weights
    ),
    "resume with tampered optimizer": Case(
        RESUME, "optimizer.pt' was modified or corrupted", _tamper_optimizer
    ),
    "resume of a finished run": Case(["train", "--resume", RUN], "already finished its 6 steps"),
    "resume of a missing run": Case(["train", "--resume", "runs/nope"], "'runs/nope' does not exist"),
    "train over an existing run": Case(
        ["train", *tiny_flags(Path("."), Path("text")), "--name", "tiny"], "already holds a run"
    ),
    "train with a config file that does not exist": Case(
        ["train", "--config", "runs/tiny.toml"], "'runs/tiny.toml'"
    ),
}
if not torch.cuda.is_available():
    CASES["cuda without a GPU"] = Case(
        ["train", *tiny_flags(Path("."), Path("text")), "--name", "gpu", "--device", "cuda"],
        "train.device = 'cuda'",
    )


# --- issue 14: output paths, standard output, resource limits, numbers where they enter --------------------
INSPECT = ["inspect", RUN, "--out", "rep"]
EXPORT = ["export", "hf", RUN, "--out"]
LENGTH = ["experiment", "length", "--quick"]
TASKS = ["experiment", "tasks", "--quick", "--out", "tk"]
FSIZE = {resource.RLIMIT_FSIZE: 20 * 1024}  # bytes: the tiny export's weights are 71 KB, its config 1 KB
AS = {resource.RLIMIT_AS: 8 << 30}  # 8 GiB of address space: torch loads, a 14.6 GiB table does not
HUGE_MODEL = [
    "model",
    "--vocab-size",
    "60000",
    "--d-model",
    "65536",
    "--n-heads",
    "1024",
    "--d-ff",
    "64",
    "--n-layers",
    "1",
]
FILE = _write("afile", "not a folder\n")
CORPUS = ["corpus", "--text", "text"]
CORPUS_WRITES = ("data", "data/corpus-*")  # `octlm corpus` writes the corpus manifest: its job
CASES.update(
    {
        # generate: flags checked where they enter
        "generate unknown device": Case(
            [*GEN, "--device", "gpu"], "unknown device 'gpu'; choose auto, cpu, cuda"
        ),
        "generate malformed cuda index": Case([*GEN, "--device", "cuda:x"], "unknown device 'cuda:x'"),
        "generate seed past 64 bits": Case(
            [*GEN, "--seed", str(2**64)],
            "--seed: 18446744073709551616 must be at most 18,446,744,073,709,551,615 (the largest unsigned 64-bit integer)",
        ),
        "generate negative seed": Case([*GEN, "--seed", "-1"], "--seed: -1 must be at least 0 (see --help)"),
        "generate threads past 64 bits": Case(
            [*GEN, "--threads", str(2**64)], "--threads: 18446744073709551616"
        ),
        "generate zero threads": Case([*GEN, "--threads", "0"], "--threads: 0 is outside [1, 4096]"),
        "generate negative threads": Case([*GEN, "--threads", "-4"], "--threads: -4 is outside"),
        "max-new-tokens in float notation": Case([*GEN[:-1], "1e12"], "'1e12'"),
        "prompt not utf-8": Case(
            [*GEN[:3], "\udcff", *GEN[4:]], "--prompt is not valid UTF-8 text (byte 0xff at character 0)"
        ),
        "prompt with a bad byte inside": Case(
            [*GEN[:3], "ab\udce9cd", *GEN[4:]], "(byte 0xe9 at character 2)"
        ),
        "run tokenizer deleted": Case(
            GEN,
            "tokenizer.json' is missing; copy back the tokenizer the run was trained with",
            _remove(f"{RUN}/tokenizer.json"),
        ),
        # inspect: --out, --export-web and the default report folder, refused before the analysis
        "inspect --out is a file": Case(
            [*INSPECT[:-1], "afile"], "--out 'afile' is a file, not a folder", FILE
        ),
        "inspect --out through a file": Case(
            [*INSPECT[:-1], "afile/rep"], "'afile' is a file, not a folder", FILE
        ),
        "inspect --out broken symlink": Case(
            INSPECT, "--out 'rep' is a broken symbolic link", _symlink("rep", "gone/rep")
        ),
        "inspect --out symlink loop": Case(
            INSPECT, "--out 'rep' is a broken symbolic link", _symlink("rep", "rep")
        ),
        "inspect --out read-only": Case([*INSPECT[:-1], "ro/rep"], "'ro' is not writable", _read_only("ro")),
        "inspect report folder read-only": Case(
            ["inspect", RUN], f"the report folder '{RUN}/report'", _read_only(RUN)
        ),
        "inspect --out name too long": Case(
            [*INSPECT[:-1], "n" * 300], "the name is too long (ENAMETOOLONG)"
        ),
        "inspect --export-web is a folder": Case(
            [*INSPECT, "--export-web", "text"], "--export-web 'text' is a folder"
        ),
        "inspect --export-web through a file": Case(
            [*INSPECT, "--export-web", "afile/e.json"], "'afile' is a file", FILE
        ),
        "inspect --export-web broken symlink": Case(
            [*INSPECT, "--export-web", "e.json"],
            "'e.json' is a broken symbolic link",
            _symlink("e.json", "gone/e.json"),
        ),
        "inspect --export-web read-only": Case(
            [*INSPECT, "--export-web", "ro/e.json"], "'ro' is not writable", _read_only("ro")
        ),
        "inspect --export-web a FIFO": Case(
            [*INSPECT, "--export-web", "fifo"], "'fifo' is not a regular file", _fifo("fifo")
        ),
        "inspect --tokens not utf-8": Case(
            [*INSPECT, "--tokens", "\udcff"], "--tokens is not valid UTF-8 text (byte 0xff"
        ),
        # export hf: never into or over a run folder, never over what is not an earlier export
        "export --force over its run": Case(
            [*EXPORT, RUN, "--force"], f"--out '{RUN}' is or holds the run folder"
        ),
        "export --force over the folder holding its run": Case(
            [*EXPORT, "runs", "--force"], "--out 'runs' is or holds the run"
        ),
        "export into its run": Case([*EXPORT, f"{RUN}/hf"], "is inside the run folder"),
        "export --force over its checkpoint": Case(
            [*EXPORT, str(CKPT), "--force"], "is inside the run folder"
        ),
        "export into another run": Case(
            [*EXPORT, "runs/other/hf"], "is inside the run folder", _write("runs/other/metrics.jsonl", "")
        ),
        "export --force over a folder holding a run": Case(
            [*EXPORT, "keep", "--force"],
            "holds the run folder 'keep/run'",
            _steps(_write("keep/config.json", "{}"), _mkdir("keep/run/checkpoint")),
        ),
        "export --force over a folder with folders": Case(
            [*EXPORT, "keep", "--force"],
            "holds the folder 'keep/sub'",
            _steps(_write("keep/config.json", "{}"), _mkdir("keep/sub")),
        ),
        "export --force over what is no export": Case(
            [*EXPORT, "text", "--force"], "--out 'text' is no earlier export"
        ),
        "export over a non-empty folder": Case(
            [*EXPORT, "text"], "--out 'text' already exists and is not empty"
        ),
        "export to a file": Case([*EXPORT, "afile"], "--out 'afile' is a file, not a folder", FILE),
        "export through a file": Case([*EXPORT, "afile/hf"], "'afile' is a file, not a folder", FILE),
        "export to a broken symlink": Case(
            [*EXPORT, "hf"], "--out 'hf' is a broken symbolic link", _symlink("hf", "gone")
        ),
        "export to a symlink to a folder": Case(
            [*EXPORT, "hf"], "--out 'hf' is a symbolic link (to 'text')", _symlink("hf", "text")
        ),
        "export into a read-only folder": Case([*EXPORT, "ro/hf"], "'ro' is not writable", _read_only("ro")),
        "export with a file-size limit": Case(
            [*EXPORT, "hf"], "'hf': file too large for the file-size limit", limits=FSIZE, slow=True
        ),
        "export --force with a file-size limit keeps the old export": Case(
            [*EXPORT, "old", "--force"],
            "'old': file too large for the file-size limit",
            _write("old/config.json", "{}"),
            limits=FSIZE,
            slow=True,
        ),
        # export fixtures and experiment length
        "fixtures --out is a file": Case(
            ["export", "fixtures", "--out", "afile"], "--out 'afile' is a file", FILE
        ),
        "fixtures --out broken symlink": Case(
            ["export", "fixtures", "--out", "fx"], "'fx' is a broken symbolic link", _symlink("fx", "gone")
        ),
        "fixtures --out read-only": Case(
            ["export", "fixtures", "--out", "ro/fx"], "'ro' is not writable", _read_only("ro")
        ),
        "length --out is a file": Case(
            [*LENGTH, "--out", "afile"], "--out 'afile' is a file, not a folder", FILE
        ),
        "length --out read-only": Case(
            [*LENGTH, "--out", "ro/len"], "'ro' is not writable", _read_only("ro")
        ),
        "length --out broken symlink": Case(
            [*LENGTH, "--out", "len"], "--out 'len' is a broken symbolic link", _symlink("len", "gone/len")
        ),
        "export through a symlink loop": Case(
            [*EXPORT, "loop/hf"], "'loop' is a broken symbolic link", _symlink("loop", "loop")
        ),
        "length --export-web is a folder": Case(
            [*LENGTH, "--out", "len", "--export-web", "text"], "--export-web 'text' is a folder"
        ),
        "length threads past 64 bits": Case(
            [*LENGTH, "--threads", str(2**64)], "--threads: 18446744073709551616 is outside"
        ),
        "length negative jobs": Case([*LENGTH, "--jobs", "-1"], "--jobs: -1 is outside [0, 4096]"),
        "length too many seeds": Case([*LENGTH, "--seeds", "100000"], "--seeds 100000 is more than 1000"),
        # experiment tasks (issue 27): every grid mistake before a model trains
        "tasks unknown task": Case(
            [*TASKS, "--tasks", "copy", "sorting"], "unknown task 'sorting'; choose one of copy,"
        ),
        "tasks misspelt task": Case([*TASKS, "--tasks", "copyy"], "passkey; did you mean copy?"),
        "tasks unknown scheme": Case(
            [*TASKS, "--schemes", "rope", "rpoe"], "unknown position scheme 'rpoe' in row 'rpoe'"
        ),
        "tasks unknown row option": Case(
            [*TASKS, "--schemes", "rope+randomized"],
            "'randomized' is not random, ssmax, nopeK (K a layer index) or ftF, piF, ntkF, yarnF",
        ),
        "tasks nope layer past the model": Case(
            [*TASKS, "--schemes", "rope+nope5"], "layer 5 is not one of 0 .. 0"
        ),
        "tasks randomized nope": Case([*TASKS, "--schemes", "nope+random"], "nope reads no position ids"),
        "tasks test size below training": Case(
            [*TASKS, "--factors", "0", "2"], "factors [0, 2] must be at least 1"
        ),
        "tasks factor too large": Case([*TASKS, "--factors", "100000000000"], "use factors up to 524,288"),
        "tasks too few seeds": Case([*TASKS, "--seeds", "0"], "--seeds: 0 is outside [1, 1000]"),
        "tasks target past 1": Case([*TASKS, "--target", "1.5"], "--target 1.5 must be in (0, 1]: a share"),
        "tasks target not a number": Case([*TASKS, "--target", "nan"], "--target nan must be in (0, 1]"),
        "tasks --check-every 0": Case(
            [*TASKS, "--check-every", "0"], "--check-every: 0 is outside [1, 10000000"
        ),
        "tasks mqar past its keys": Case(
            [*TASKS, "--tasks", "mqar", "--factors", "16"],
            "mqar has sizes up to 64 pairs; a factor of 16 asks for 128",
        ),
        "tasks --only not a cell": Case([*TASKS, "--only", "copy:rope:7"], "copy:rope:7 is not a cell"),
        "tasks --only malformed": Case([*TASKS, "--only", "copy:rope"], "must look like TASK:SCHEME:SEED"),
        "tasks --out is a file": Case(
            [*TASKS, "--out", "afile"], "--out 'afile' is a file, not a folder", FILE
        ),
        "tasks --collect with no cells": Case([*TASKS, "--collect", "--out", "text"], "no cells"),
        # standard output and memory, as real processes
        "generate into a closed pipe": Case(GEN, "", status=141, stdout="closed"),
        "model --dry-run into a closed pipe": Case(["model", "--dry-run"], "", status=141, stdout="closed"),
        "corpus into a closed pipe": Case(CORPUS, "", status=141, stdout="closed", changes=CORPUS_WRITES),
        "generate to a full device": Case(
            GEN, "standard output: no space left on the device (ENOSPC)", stdout="full", slow=True
        ),
        "corpus to a full device": Case(
            CORPUS, "standard output: no space left", stdout="full", changes=CORPUS_WRITES
        ),
        "model too large to allocate": Case(
            HUGE_MODEL, "out of memory: tried to allocate 14.6 GiB at once", limits=AS
        ),
        "score with a file-size limit of 0": Case(  # torch's import (tempfile's test write) meets it first
            ["score", RUN, "--lengths", "8"],
            "cannot write a temporary file there: file too large for the file-size limit or the file system: "
            "`ulimit -f` is 0 bytes here (EFBIG)",
            limits={resource.RLIMIT_FSIZE: 0},
        ),
    }
)
# --- issue 31: one vocabulary of flags; a flag a command would ignore is refused ---------------------------------
CASES.update(
    {
        "length --position": Case(
            [*LENGTH, "--position", "rope"],
            "--position rope: octlm experiment length trains every scheme of --schemes; use --schemes rope",
        ),
        "length --set model.position": Case([*LENGTH, "--set", "model.position=t5"], "use --schemes t5"),
        "length --context-length": Case([*LENGTH, "--context-length", "32"], "use --train-length 32"),
        "length --sample-tokens": Case(
            [*LENGTH, "--set", "train.sample_tokens=5"], "the experiment prints no samples"
        ),
        "model --set of a train field": Case(
            ["model", "--set", "train.steps=5"], "this command does not read train.steps"
        ),
        "model given a train flag": Case(["model", "--steps", "5"], "unrecognized arguments: --steps 5"),
        "export without --out": Case(
            ["export", "hf", RUN], f"give the folder to write: octlm export hf {RUN} --out DIR"
        ),
        "export onnx without a run": Case(
            ["export", "onnx", "--out", "o"], "give the run folder to read first"
        ),
        "train --out beside --name": Case(
            ["train", "--out", "runs/a", "--name", "b"],
            "--out 'runs/a' names the run folder; leave out --name",
        ),
        "train --out of no folder name": Case(
            ["train", "--out", "runs/.."], "must end in the run's own folder name"
        ),
        "train negative steps": Case(["train", "--steps", "-5"], "train.steps = -5 must be at least 1"),
    }
)
if not torch.cuda.is_available():
    CASES["generate cuda without a GPU"] = Case(
        [*GEN, "--device", "cuda"], "--device = 'cuda' but CUDA is not"
    )


def run_process(case: Case) -> tuple[int, str]:
    """`python -m octlm ARGV` in the workspace, its stdout and resource limits as the case says."""
    if case.stdout == "full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    if case.stdout == "closed":
        reader, out = os.pipe()
        os.close(reader)  # the reader is gone before the first write: EPIPE on it, every time
    else:
        out = os.open("/dev/full" if case.stdout == "full" else os.devnull, os.O_WRONLY)
    limits = case.limits or {}

    def limit() -> None:
        for which, value in limits.items():
            resource.setrlimit(which, (value, value))

    env = dict(quiet_env(), PYTHONDONTWRITEBYTECODE="1")  # no .pyc writes under the file-size limit
    try:
        done = subprocess.run(
            [PYTHON, "-m", "octlm", *case.argv],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=Path.cwd(),
            preexec_fn=limit if limits else None,
            timeout=300,
        )
    finally:
        os.close(out)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=[pytest.mark.slow] if case.slow else []) for name, case in CASES.items()],
)
def test_bad_input(name: str, workspace: Path) -> None:
    case = CASES[name]
    if case.setup is not None:
        case.setup()
    before = snapshot(workspace)
    if case.real:
        code, err = run_process(case)
    else:
        code, _out, err = run_cli(case.argv)
    check_one_line(code, err, case.needle, case.status)
    after = snapshot(workspace)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    changed = [k for k in changed if not any(fnmatch.fnmatch(k, pattern) for pattern in case.changes)]
    assert not changed, f"files written or changed: {changed}"


def test_catalogue_size() -> None:
    assert len(CASES) >= 103  # 47 before issue 14 (46 with CUDA), 105 after (103 with CUDA)
