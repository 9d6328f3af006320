"""The bad-input catalogue: every user mistake ends with exit code 2, one readable line and no side effects.

One trained tiny run (relative paths: `text/`, `data/`, `runs/tiny/`) is made once per module and copied into
a fresh workspace for each case, so a case may break its copy freely. For every case: the exit code is 2,
stderr is exactly one line that names the bad value, there is no traceback, and the workspace's file tree
(paths, SHA-256, mtimes) is the same before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny import PYTHON, ROOT, quiet_env, run_cli, snapshot, tiny_flags, tiny_raw, write_corpus

from octlm.config import config_from_dict
from octlm.corpus import Document
from octlm.errors import UserError
from octlm.model import Decoder
from octlm.tokenizer import train_tokenizer
from octlm.train import train

RUN = "runs/tiny"
CKPT = Path(RUN) / "checkpoint"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace holding a finished tiny run; every path in its config is relative to the workspace."""
    root = tmp_path_factory.mktemp("template")
    before = Path.cwd()
    os.chdir(root)
    try:
        write_corpus(Path("text"))
        config = config_from_dict(tiny_raw(Path("."), Path("text"), steps=6, eval_interval=6, run_name="tiny"),
                                  name="tiny")  # fmt: skip
        torch.set_num_threads(1)
        train(config, progress=False)
    finally:
        os.chdir(before)
    return root


@pytest.fixture
def workspace(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    monkeypatch.chdir(ws)
    return ws


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


@dataclass
class Case:
    argv: list[str]
    needle: str
    setup: Callable[[], None] | None = None


GEN = ["generate", "--run", RUN, "--prompt", "def ", "--max-new-tokens", "2"]
RESUME = ["train", "--resume", RUN, "--no-progress", "--steps", "12"]

CASES: dict[str, Case] = {
    "unknown command": Case(["frobnicate"], "'frobnicate'"),
    "group without subcommand": Case(["export"], "'export' needs one of"),
    "unknown config key": Case(["model", "--set", "model.widht=64"], "model.widht"),
    "override without =": Case(["model", "--set", "model.d_model"], "'model.d_model'"),
    "wrong type": Case(["model", "--d-model", "wide"], "'wide'"),
    "unknown position scheme": Case(["model", "--position", "sideways"], "'sideways'"),
    "width not divisible by heads": Case(["model", "--d-model", "30", "--n-heads", "4"], "d_model = 30"),
    "odd head size with rope": Case(
        ["model", "--position", "rope", "--d-model", "24", "--n-heads", "8"], "d_model / n_heads = 3"
    ),
    "zero steps": Case(["model", "--steps", "0"], "train.steps = 0"),
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
    "prompt encodes to nothing": Case(
        ["generate", "--run", RUN, "--prompt", ""], "prompt encodes to no tokens"
    ),
    "negative temperature": Case([*GEN, "--temperature", "-0.5"], "temperature = -0.5"),
    "nan temperature": Case([*GEN, "--temperature", "nan"], "temperature = nan"),
    "top-k zero": Case([*GEN, "--top-k", "0"], "top-k = 0"),
    "top-k not a number": Case([*GEN, "--top-k", "many"], "'many'"),
    "top-p zero": Case([*GEN, "--top-p", "0"], "top-p = 0.0"),
    "top-p above one": Case([*GEN, "--top-p", "1.5"], "top-p = 1.5"),
    "negative max-new-tokens": Case([*GEN[:-1], "-3"], "max-new-tokens = -3"),
    "generate without --run": Case(["generate", "--prompt", "hi"], "--run"),
    "run folder missing": Case(
        ["generate", "--run", "runs/nope", "--prompt", "x"], "'runs/nope' does not exist"
    ),
    "folder that is not a run": Case(
        ["generate", "--run", "text", "--prompt", "x"], "'text' is not an octlm run"
    ),
    "run with no checkpoint yet": Case(
        ["generate", "--run", "runs/early", "--prompt", "x"],
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
    CASES["cuda without a GPU"] = Case(["train", *tiny_flags(Path("."), Path("text")), "--name", "gpu",
                                        "--device", "cuda"], "train.device = 'cuda'")  # fmt: skip


def check_one_line(code: int, err: str, needle: str) -> None:
    assert "Traceback" not in err, err
    assert code == 2, f"exit code {code}, stderr: {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith("octlm") and "error:" in lines[0], lines[0]
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name: str, workspace: Path) -> None:
    case = CASES[name]
    if case.setup is not None:
        case.setup()
    before = snapshot(workspace)
    code, _out, err = run_cli(case.argv)
    check_one_line(code, err, case.needle)
    after = snapshot(workspace)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"files written or changed: {changed}"


def test_catalogue_size() -> None:
    assert len(CASES) >= 20


# ---------------------------------------------------------------------------------------------------------------
# The real exit code, from real processes (commands that do not import torch, so they start fast)


def test_real_process_exit_codes(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x00binary")
    cases = [(["frobnicate"], "'frobnicate'"), (["corpus", "--text", "blob.bin"], "looks binary"),
             (["corpus", "--text", "missing.txt"], "'missing.txt'")]  # fmt: skip
    procs = [subprocess.Popen([PYTHON, "-m", "octlm", *argv], cwd=tmp_path, env=quiet_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for argv, _ in cases]  # fmt: skip
    for proc, (_argv, needle) in zip(procs, cases, strict=True):
        _out, err = proc.communicate(timeout=60)
        check_one_line(proc.returncode, err, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.bin"]
    assert ROOT.is_dir()


# ---------------------------------------------------------------------------------------------------------------
# Mistakes the CLI cannot express, through the library: a UserError that names the value


@pytest.mark.parametrize(
    ("ids", "needle"),
    [
        ([[0, 5, 260]], "token id 260 is outside the vocabulary [0, 260)"),
        ([[3, -1, 4]], "token id -1 is outside the vocabulary"),
        ([list(range(17))], "length 17 is longer than the learned position table (16 rows)"),
        ([[1.5, 2.0]], "integer tensor"),
        ([[]], "T >= 1"),
    ],
    ids=["id too large", "negative id", "longer than learned table", "float ids", "empty"],
)
def test_decoder_refuses_bad_ids(ids: list[list[float]], needle: str) -> None:
    config = config_from_dict({"model": {"vocab_size": 260, "d_model": 32, "n_layers": 1, "n_heads": 2,
                                         "d_ff": 64, "context_length": 16}})  # fmt: skip
    model = Decoder(config.model)
    tensor = torch.tensor(ids) if ids != [[]] else torch.zeros((1, 0), dtype=torch.long)
    with pytest.raises(UserError) as info:
        model(tensor)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_generate_refuses_prompt_ids_outside_the_vocabulary(template: Path) -> None:
    from octlm.checkpoint import load_model
    from octlm.generate import generate

    model, _config, tokenizer = load_model(template / RUN)
    with pytest.raises(UserError, match=r"prompt token id 999 is outside the model's vocabulary \[0, 260\)"):
        generate(model, tokenizer, [1, 999], 3)
    with pytest.raises(UserError, match="prompt token id -2"):
        generate(model, tokenizer, [-2], 3)
