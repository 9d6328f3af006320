"""Writing files (octlm/files.py): an atomic write leaves no temporary file behind, and every file octlm writes
(atomic, durable, a run folder's, a checkpoint's, a report's, an export's) gets the mode a plain open() would."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tiny import run_cli, tiny_flags, write_corpus

from octlm.files import write_atomic, write_durable


def test_write_atomic_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.json"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["file.json"]


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(folder: Path) -> dict[str, int]:
    return {
        p.relative_to(folder).as_posix(): p.stat().st_mode & 0o777 for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("mask", [0o077, 0o002])
def test_writes_take_the_mode_a_plain_open_gives(tmp_path: Path, mask: int) -> None:
    with umask(mask):
        with open(tmp_path / "plain", "wb"):
            pass
        write_atomic(tmp_path / "atomic", b"x")
        write_durable(tmp_path / "durable", b"x")
    expected = 0o666 & ~mask  # 0o600 and 0o664: neither is the fixed 0o644 octlm used to give
    assert modes(tmp_path) == {"plain": expected, "atomic": expected, "durable": expected}


@pytest.mark.parametrize("mask", [0o077, 0o002])
def test_every_file_of_a_run_and_its_export_has_one_mode(tmp_path: Path, mask: int) -> None:
    pytest.importorskip("transformers")
    from octlm.interop.hf import export_hf

    corpus = write_corpus(tmp_path / "corpus")
    with umask(mask):
        flags = tiny_flags(tmp_path, corpus, steps=6, report=True)  # the report's figures and pages too
        code, _, err = run_cli(["train", *flags, "--no-progress"])
        assert code == 0, err
        export_hf(tmp_path / "runs" / "day1-learned", tmp_path / "export")
    found = modes(tmp_path / "runs") | {f"export/{k}": v for k, v in modes(tmp_path / "export").items()}
    for name in (
        "day1-learned/checkpoint/model.safetensors",
        "day1-learned/metrics.jsonl",
        "day1-learned/tokenizer.json",
        "day1-learned/report/report.md",
        "export/model.safetensors",
    ):
        assert name in found
    assert {name: mode for name, mode in found.items() if mode != 0o666 & ~mask} == {}
