"""The byte-level BPE tokenizer: exact round trip, no special tokens from text, save/load, determinism."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm.cli import main
from octlm.config import DataConfig
from octlm.data import cache as data_module
from octlm.data.cache import prepare_data
from octlm.data.sources import Document
from octlm.data.tokenizer import EOT, Tokenizer, train_tokenizer
from octlm.errors import UserError

SAMPLE = """def greet(name: str) -> str:
    \"\"\"Say hello.\"\"\"
    return f"Hello, {name}!"


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def increment(self) -> int:
        self.count += 1
        return self.count
"""
PROSE = "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.\n"


def small_docs() -> list[Document]:
    return [Document(f"doc{i}.py", SAMPLE.replace("name", f"name{i}") + PROSE * (i + 1)) for i in range(8)]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(small_docs(), vocab_size=400)


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_round_trip_is_exact_for_any_text(tokenizer: Tokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.eot_id not in ids


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "  leading and trailing spaces  ",
        "tabs\tand\r\nCRLF\rand lone CR\n\n\n",
        "nul \x00 inside",
        "emoji 👩‍👩‍👧 and flags 🇳🇱",
        "combining e\u0301 vs \u00e9",
        "punctuation before spaces: don't , . ! ?",
        "中文 日本語 한국어 العربية",
        "\ufeffbyte order mark",
        "private use \ue000 and max \U0010ffff",
        EOT,
        f"a document that mentions {EOT} literally",
    ],
)
def test_round_trip_on_tricky_text(tokenizer: Tokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.eot_id not in ids  # literal "<|endoftext|>" is plain text, never a document boundary
    assert b"".join(tokenizer.token_bytes(i) for i in ids) == text.encode("utf-8")


def test_eot_is_one_special_token_kept_by_decode(tokenizer: Tokenizer) -> None:
    a, b = tokenizer.encode("first doc"), tokenizer.encode("second doc")
    assert tokenizer.decode(a + [tokenizer.eot_id] + b) == f"first doc{EOT}second doc"
    assert tokenizer.token_str(tokenizer.eot_id) == EOT
    assert tokenizer.encode("") == []
    assert tokenizer.encode_batch(["first doc", "", "second doc"]) == [a, [], b]


def test_vocabulary_is_bytes_plus_eot_plus_merges(tokenizer: Tokenizer) -> None:
    assert 300 < tokenizer.vocab_size <= 400  # a tiny corpus can run out of pairs to merge before 400
    singles = [tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size) if i != tokenizer.eot_id]
    one_byte = [b for b in singles if len(b) == 1]
    assert sorted(one_byte) == [bytes([i]) for i in range(256)]  # every byte, exactly once
    merged = [b for b in singles if len(b) > 1]
    assert len(merged) == tokenizer.vocab_size - 257
    assert b" the" in merged or b"the" in merged  # frequent in the training text


def test_token_str_is_readable(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(" self.count")
    assert "".join(tokenizer.token_str(i) for i in ids) == " self.count"
    (space,) = tokenizer.encode(" ")
    assert tokenizer.token_str(space) == " "  # not ByteLevel's stand-in "Ġ"
    (half,) = [i for i in range(tokenizer.vocab_size) if tokenizer.token_bytes(i) == b"\xc3"]
    assert tokenizer.token_str(half) == "\ufffd"
    with pytest.raises(UserError, match="out of range"):
        tokenizer.token_str(10_000)


def test_training_is_deterministic() -> None:
    first = train_tokenizer(small_docs(), vocab_size=350)
    second = train_tokenizer(small_docs(), vocab_size=350)
    assert first.to_json() == second.to_json()
    assert first.sha256 == second.sha256


def test_training_depends_on_the_documents() -> None:
    other = [Document("x", "zebra zebra zebra quagga quagga " * 20), Document("y", "okapi " * 30)]
    assert train_tokenizer(other, 300).sha256 != train_tokenizer(small_docs(), 300).sha256


def test_too_small_vocabulary_is_a_user_error() -> None:
    with pytest.raises(UserError, match="too small"):
        train_tokenizer(small_docs(), vocab_size=100)


def test_save_and_load(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "sub" / "tokenizer.json"
    tokenizer.save(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == tokenizer.sha256
    loaded = Tokenizer.load(path)
    assert loaded.sha256 == tokenizer.sha256
    text = f"x {EOT} y 👩‍👩‍👧"
    assert loaded.encode(text) == tokenizer.encode(text)
    assert loaded.decode(loaded.encode(text)) == text
    assert [p.name for p in path.parent.iterdir()] == ["tokenizer.json"]  # no temp file left


def test_load_missing_or_corrupt_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        Tokenizer.load(tmp_path / "absent.json")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"version": "1.0", "model": ')
    with pytest.raises(UserError, match="corrupt"):
        Tokenizer.load(corrupt)


def test_cli_trains_on_train_split_and_data_reuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = tmp_path / "texts"
    texts.mkdir()
    for doc in small_docs():
        (texts / doc.name).write_text(doc.text)
    data_dir = tmp_path / "data"
    args = ["--text", str(texts), "--data-dir", str(data_dir), "--vocab-size", "300"]
    assert main(["tokenizer", *args]) == 0
    out = capsys.readouterr().out
    assert "vocabulary       300" in out and "bytes per token" in out
    (saved,) = data_dir.glob("*/tokenizer.json")

    def no_training(*a: object, **k: object) -> None:
        raise AssertionError("prepare_data retrained a tokenizer that `octlm tokenizer` had saved")

    monkeypatch.setattr(data_module, "train_tokenizer", no_training)
    prepared = prepare_data(DataConfig(source="text", text=[str(texts)], data_dir=str(data_dir)), 300, False)
    assert prepared.tokenizer_path == saved
    assert prepared.tokenizer_sha256 == hashlib.sha256(saved.read_bytes()).hexdigest()


def test_cli_reuses_the_tokenizer_of_the_same_inputs_and_retrains_for_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = tmp_path / "texts"
    texts.mkdir()
    for doc in small_docs():
        (texts / doc.name).write_text(doc.text)
    args = ["--text", str(texts), "--data-dir", str(tmp_path / "data"), "--vocab-size", "300"]
    assert main(["tokenizer", *args]) == 0
    first = capsys.readouterr().out.splitlines()
    (saved,) = (tmp_path / "data").glob("*/tokenizer.json")
    before = (saved.read_bytes(), saved.stat().st_mtime_ns)
    assert first[2].startswith("training         ") and first[2].endswith(" s")
    assert main(["tokenizer", *args]) == 0  # the same inputs: reused, said so, the file untouched
    again = capsys.readouterr().out.splitlines()
    reused = (
        "training         none: reused the tokenizer trained before on this same text with these settings"
    )
    assert again == [*first[:2], reused, *first[3:]]
    assert (saved.read_bytes(), saved.stat().st_mtime_ns) == before
    edited = json.loads(saved.read_text())
    edited["model"]["merges"].pop()  # a merge fewer: meta.json no longer vouches for it, so it is retrained
    saved.write_text(json.dumps(edited))
    assert main(["tokenizer", *args]) == 0
    assert capsys.readouterr().out.splitlines()[2] != reused and saved.read_bytes() == before[0]
    assert main(["tokenizer", *args[:-1], "299"]) == 0  # another vocabulary size: trained, in its own folder
    assert capsys.readouterr().out.splitlines()[2] != reused
    (texts / "more.txt").write_text("more text for the training split\n" * 20)  # another corpus: trained
    assert main(["tokenizer", *args]) == 0
    assert capsys.readouterr().out.splitlines()[2] != reused
    assert len(list((tmp_path / "data").glob("*/tokenizer.json"))) == 3


def test_cli_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenizer", "--text", str(tmp_path / "nowhere"), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere" in err


def test_a_tokenizer_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"tokenizer file '.*' is not a file; train one"):
        Tokenizer.load(tmp_path)
    with pytest.raises(
        UserError, match=r"^could not read tokenizer file '/proc/self/mem': Input/output error$"
    ):
        Tokenizer.load("/proc/self/mem")  # a real EIO
    (tmp_path / "latin.json").write_bytes(b'{"caf\xe9": 1}')
    with pytest.raises(UserError, match=r"latin.json' is not UTF-8 \(invalid continuation byte\)"):
        Tokenizer.load(tmp_path / "latin.json")
