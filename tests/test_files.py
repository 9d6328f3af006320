"""Writing files (octlm/files.py): an atomic write leaves no temporary file behind."""

from __future__ import annotations

from pathlib import Path

from octlm.files import write_atomic


def test_write_atomic_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.json"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["file.json"]
