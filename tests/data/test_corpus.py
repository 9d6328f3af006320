"""The corpus (octlm/data/corpus.py): its documents, the manifest and its hash, the split, and `octlm corpus`.
The loaders it reads from are tests/data/test_sources.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from octlm.cli import main
from octlm.config import DataConfig
from octlm.data import corpus
from octlm.data.corpus import (
    Corpus,
    describe_source,
    load_corpus,
    load_documents,
    manifest,
    split_documents,
    total_bytes,
)
from octlm.data.sources import Document, text_documents
from octlm.errors import UserError


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_bytes(content.encode("utf-8"))  # bytes, so no newline translation sneaks in
    else:
        path.write_bytes(content)
    return path


# ------------------------------------------------------------------------------------------------------------
# Documents and the manifest


def test_empty_corpus_is_a_user_error(tmp_path: Path) -> None:
    write(tmp_path / "empty" / "a.txt", "")
    write(tmp_path / "empty" / "b.txt", "")
    (tmp_path / "nothing").mkdir()
    for folder in ("empty", "nothing"):
        cfg = DataConfig(source="text", text=[str(tmp_path / folder)])
        with pytest.raises(UserError, match="corpus is empty"):
            load_documents(cfg)


def test_load_documents_drops_empty_documents(tmp_path: Path) -> None:
    write(tmp_path / "c" / "a.txt", "")
    write(tmp_path / "c" / "b.txt", "text")
    docs = load_documents(DataConfig(source="text", text=[str(tmp_path / "c")]))
    assert docs == [Document("c/b.txt", "text")]


def test_manifest_is_deterministic_and_sensitive_to_every_byte() -> None:
    docs = [Document("a.py", "print(1)\n"), Document("b.py", "é")]
    first, second = manifest(docs, "test"), manifest(list(docs), "test")
    assert first == second
    assert json.loads(json.dumps(first)) == first
    assert first["documents"] == 2 and first["bytes"] == 9 + 2  # é is two UTF-8 bytes
    assert len(first["sha256"]) == 64
    changed = manifest([Document("a.py", "print(2)\n"), docs[1]], "test")
    renamed = manifest([Document("c.py", "print(1)\n"), docs[1]], "test")
    assert len({first["sha256"], changed["sha256"], renamed["sha256"]}) == 3


def test_manifest_hash_is_unambiguous_about_boundaries() -> None:
    # Plain concatenation would make these identical ("ab" + "c" == "a" + "bc").
    one = manifest([Document("ab", "c")], "x")["sha256"]
    two = manifest([Document("a", "bc")], "x")["sha256"]
    three = manifest([Document("a", "b"), Document("", "c")], "x")["sha256"]
    assert len({one, two, three}) == 3


def many_docs(n: int) -> list[Document]:
    return [Document(f"doc{i:04d}.txt", f"text of document {i}") for i in range(n)]


def test_split_is_deterministic_disjoint_complete_and_uncut() -> None:
    docs = many_docs(1000)
    train, val = split_documents(docs, 0.1)
    assert (train, val) == split_documents(docs, 0.1)
    assert {d.name for d in train}.isdisjoint(d.name for d in val)
    assert sorted(train + val, key=lambda d: d.name) == docs  # every document whole, on one side
    assert 60 <= len(val) <= 140  # about 10%


def test_split_depends_only_on_the_name() -> None:
    docs = many_docs(200)
    _, val = split_documents(docs, 0.2)
    _, val_more = split_documents(docs + [Document("zzz-new.txt", "new")], 0.2)
    assert {d.name for d in val} <= {d.name for d in val_more}
    reversed_val = split_documents(docs[::-1], 0.2)[1]
    assert {d.name for d in reversed_val} == {d.name for d in val}


def test_split_always_holds_one_out_on_each_side() -> None:
    docs = many_docs(2)
    for fraction in (1e-12, 1 - 1e-12):
        train, val = split_documents(docs, fraction)
        assert len(train) == 1 and len(val) == 1


def test_split_of_one_document_is_a_user_error() -> None:
    with pytest.raises(UserError, match="at least 2"):
        split_documents(many_docs(1), 0.5)


def test_corpus_computes_split_bytes_and_hash_once(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = many_docs(50) + [Document("é.txt", "é")]
    value = Corpus(tuple(docs), 0.2, "test")
    train, val = split_documents(docs, 0.2)
    assert value.documents == tuple(docs) and value.train == tuple(train) and value.val == tuple(val)
    assert (value.train_bytes, value.val_bytes) == (total_bytes(train), total_bytes(val))
    assert value.bytes == total_bytes(docs)
    assert value.manifest() == manifest(docs, "test") and value.sha256 == manifest(docs, "test")["sha256"]
    split = value.split_figures()
    assert split["train_documents"] + split["val_documents"] == len(docs) and split["val_fraction"] == 0.2
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.sha256 = "edited"  # type: ignore[misc]

    def forbidden(*args: object) -> None:
        raise AssertionError("a built Corpus must not hash or measure its documents again")

    monkeypatch.setattr(corpus, "corpus_sha256", forbidden)
    monkeypatch.setattr(corpus, "total_bytes", forbidden)
    assert value.manifest()["sha256"] == value.sha256 and value.split_figures() == split


def test_load_corpus_is_the_configured_documents_split(tmp_path: Path) -> None:
    for i in range(5):
        write(tmp_path / "c" / f"{i}.txt", f"text {i}")
    write(tmp_path / "c" / "empty.txt", "")
    cfg = DataConfig(source="text", text=[str(tmp_path / "c")], val_fraction=0.3)
    loaded = load_corpus(cfg)
    assert list(loaded.documents) == load_documents(cfg)
    assert (list(loaded.train), list(loaded.val)) == split_documents(load_documents(cfg), 0.3)
    assert loaded.source == describe_source(cfg) and loaded.val_fraction == 0.3
    (tmp_path / "one").mkdir()
    write(tmp_path / "one" / "a.txt", "alone")
    with pytest.raises(UserError, match="at least 2"):
        load_corpus(DataConfig(source="text", text=[str(tmp_path / "one")]))


def test_cli_missing_path_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing-folder"
    assert main(["corpus", "--text", str(missing), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err and err.startswith("octlm corpus: error:")


def test_cli_writes_manifest_and_prints_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(6):
        write(tmp_path / "texts" / f"{i}.txt", f"document {i}\n" * 10)
    assert main(["corpus", "--text", str(tmp_path / "texts"), "--data-dir", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    (path,) = (tmp_path / "data").glob("corpus-*/manifest.json")
    written = json.loads(path.read_text())
    expected = manifest(text_documents([str(tmp_path / "texts")]), written["source"])
    assert {k: written[k] for k in expected} == expected
    assert path.parent.name == f"corpus-{expected['sha256'][:12]}"
    split = written["split"]
    assert split["train_documents"] + split["val_documents"] == 6 and split["val_documents"] >= 1
    assert "documents   6" in out and "validation" in out and "seconds" in out
