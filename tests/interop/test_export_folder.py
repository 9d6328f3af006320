"""octlm/interop/export_folder.py on its own: the swap at the end of an export, and the refusals it shares between
`octlm export hf` and `octlm export onnx` (their own tests run both commands end to end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from octlm.errors import UserError
from octlm.interop.export_folder import ONLY_AN_EXPORT, check_out, sibling, swap_in


def folder(path: Path, **files: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def contents(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_a_new_or_empty_out_receives_the_export(tmp_path: Path) -> None:
    for out in (tmp_path / "new", folder(tmp_path / "empty")):
        tmp = folder(sibling(out, "tmp"), a="new")
        swap_in(tmp, out, force=False)
        assert contents(out) == {"a": "new"} and not tmp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "new"]  # no sibling left


def test_an_earlier_export_is_replaced_only_with_force(tmp_path: Path) -> None:
    out = folder(tmp_path / "out", a="old", b="old")
    tmp = folder(sibling(out, "tmp"), a="new")
    with pytest.raises(UserError, match="already exists and is not empty; pass --force"):
        swap_in(tmp, out, force=False)  # it was empty at the check, and filled during the export
    assert contents(out) == {"a": "old", "b": "old"} and contents(tmp) == {"a": "new"}
    swap_in(tmp, out, force=True)
    assert contents(out) == {"a": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old export is gone, no sibling left


def test_a_failed_move_puts_the_old_export_back(tmp_path: Path) -> None:
    """A real failure of the second rename (its source is gone): OUT is the old export again, whole."""
    out = folder(tmp_path / "out", a="old")
    with pytest.raises(FileNotFoundError):
        swap_in(tmp_path / ".out.tmp-gone", out, force=True)
    assert contents(out) == {"a": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_file_at_out_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_text("keep")
    tmp = folder(sibling(out, "tmp"), a="new")
    with pytest.raises(UserError, match="exists and is not a folder; choose another output path"):
        swap_in(tmp, out, force=True)
    assert out.read_text() == "keep"


def test_sibling_clears_a_crashed_exports_leftover(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stale = folder(sibling(out, "tmp"), half="written")
    again = sibling(out, "tmp")
    assert again == stale and not again.exists() and again.name.startswith(".out.tmp-")


def test_check_out_asks_the_exporter_whether_out_is_an_earlier_export(tmp_path: Path) -> None:
    out = folder(tmp_path / "out", x="1")
    asked: list[Path] = []

    def not_an_export(path: Path) -> str | None:
        asked.append(path)
        return None if (path / "x").read_text() == "1" else "is no earlier test export"

    check_out(out, True, None, "-x", not_an_export)  # an earlier export: replaced with --force
    (out / "x").write_text("2")
    with pytest.raises(UserError) as refused:
        check_out(out, True, None, "-x", not_an_export)
    assert str(refused.value) == f"--out {str(out)!r} is no earlier test export; {ONLY_AN_EXPORT}"
    with pytest.raises(UserError, match="already exists and is not empty; pass --force to replace it"):
        check_out(out, False, None, "-x", not_an_export)
    assert asked == [out, out]  # not asked without --force, nor for an empty or new folder
    check_out(tmp_path / "new", False, None, "-x", not_an_export)


def test_check_out_never_writes_into_or_over_a_run(tmp_path: Path) -> None:
    run = folder(tmp_path / "run", **{"metrics.jsonl": "{}\n"})
    with pytest.raises(UserError) as over:
        check_out(tmp_path, True, run, "-x", lambda p: None)
    assert str(over.value) == (
        f"--out {str(tmp_path)!r} is or holds the run folder {str(run)!r}; an export never replaces a run: "
        f"choose a new folder, e.g. {str(run) + '-x'!r}"
    )
    with pytest.raises(UserError, match="is inside the run folder"):
        check_out(run / "export", False, None, "-x", lambda p: None)
