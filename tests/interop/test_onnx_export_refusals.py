"""`octlm export onnx` refuses what it cannot export faithfully, and never loses an export: refusals write
nothing, --force replaces only an export, a full disk keeps the previous one. (The graphs themselves:
test_onnx_export.py; the runs both make: tests/onnx_runs.py.)"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import resource
import signal
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from onnx_runs import TINY, make_run, small_tokenizer  # noqa: E402

from octlm.commands.export_onnx import add_arguments, run  # noqa: E402
from octlm.data.tokenizer import Tokenizer  # noqa: E402
from octlm.errors import UserError  # noqa: E402
from octlm.interop.onnx_export import INFO_FILE, ONNX_FILE, TOKENIZER_FILE, export_onnx  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return small_tokenizer()


@pytest.fixture(scope="module")
def learned_run(tokenizer: Tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("refusals") / "run"
    make_run(folder, dataclasses.replace(TINY, vocab_size=tokenizer.vocab_size), tokenizer)
    return folder


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_length": 17}, "--max-length 17 is longer than the learned position table (16 rows)"),
        ({"rope_scaling": "ntk"}, "--rope-scaling ntk: the learned scheme has no RoPE frequencies to scale"),
        ({"rope_factor": 2.0}, "--rope-factor 2.0 needs --rope-scaling METHOD"),
        ({"max_length": 1}, "--max-length 1 is outside [2, 65536]"),
    ],
)
def test_refusals_write_nothing(learned_run: Path, tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        export_onnx(learned_run, tmp_path / "out", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_dynamic_ntk_is_refused_in_one_line(tokenizer: Tokenizer, tmp_path: Path) -> None:
    config = dataclasses.replace(TINY, vocab_size=tokenizer.vocab_size, position="rope")
    make_run(tmp_path / "run", config, tokenizer)
    with pytest.raises(UserError, match="--rope-scaling dynamic: dynamic NTK changes") as caught:
        export_onnx(tmp_path / "run", tmp_path / "out", rope_scaling="dynamic")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_fine_tuned_rope_run_refuses_a_second_scaling(tokenizer: Tokenizer, tmp_path: Path) -> None:
    config = dataclasses.replace(
        TINY,
        vocab_size=tokenizer.vocab_size,
        position="rope",
        rope_scaling="yarn",
        rope_factor=4.0,
        rope_original_length=4,
    )
    make_run(tmp_path / "run", config, tokenizer)
    with pytest.raises(
        UserError,
        match=r"^--rope-scaling ntk: this run was fine-tuned with model.rope_scaling = "
        r"'yarn' \(factor 4\), which the export keeps; drop the flag$",
    ):
        export_onnx(tmp_path / "run", tmp_path / "out", rope_scaling="ntk")
    assert not (tmp_path / "out").exists()


def test_output_folder_refusals(learned_run: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("mine")
    for out, message in [
        (learned_run, "is or holds the run folder"),
        (learned_run.parent, "is or holds the run folder"),
        (learned_run / "onnx", "is inside the run folder"),
        (tmp_path / "file", "is a file, not a folder"),
        (tmp_path / "notes", "already exists and is not empty; pass --force"),
    ]:
        with pytest.raises(UserError, match=message):
            export_onnx(learned_run, out)
    with pytest.raises(UserError, match="is no earlier ONNX export"):
        export_onnx(learned_run, tmp_path / "notes", force=True)
    assert (tmp_path / "notes" / "mine.txt").read_text() == "mine"
    assert sorted(p.name for p in learned_run.iterdir()) == ["checkpoint", "tokenizer.json"]


def test_force_replaces_an_export_and_a_full_disk_keeps_it(
    learned_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--force over an earlier export, through the command; then a real write failure (RLIMIT_FSIZE below the
    graph's size, SIGXFSZ ignored so that the write fails with EFBIG) leaves that export untouched."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "onnx"
    out.mkdir()
    (out / INFO_FILE).write_text(
        json.dumps({"format": "octlm-onnx"})
    )  # an earlier export, as far as it shows
    (out / "stale.bin").write_bytes(b"old")
    run(parser.parse_args([str(learned_run), "--out", str(out), "--force"]))
    assert f"wrote {out}: {ONNX_FILE}" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted([ONNX_FILE, TOKENIZER_FILE, INFO_FILE])
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"], "a temporary or set-aside folder was left"
    with pytest.raises(SystemExit):
        parser.parse_args([str(learned_run), "--out", str(out), "--max-length", "1"])

    before = {p.name: p.read_bytes() for p in out.iterdir()}
    limit, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, limit[1]))  # the graph is about 200 kB
        with pytest.raises(OSError) as caught:
            export_onnx(learned_run, out, force=True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    assert caught.value.errno == errno.EFBIG, caught.value
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"], "a temporary or set-aside folder was left"
