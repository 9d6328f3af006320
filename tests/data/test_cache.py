"""Token files: their layout, caching and held-out validation, the corpus loaded and hashed once, and the
checks made before any work. Batches from the token streams are in tests/data/test_batches.py."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from octlm.cli import main
from octlm.config import DataConfig
from octlm.data import cache as data_module
from octlm.data import corpus as corpus_module
from octlm.data import tokenizer as tokenizer_module
from octlm.data.batches import eval_blocks
from octlm.data.cache import STALE_TMP_SECONDS, prepare_data, token_dtype
from octlm.data.corpus import load_corpus, split_documents
from octlm.data.sources import Document, text_documents
from octlm.data.tokenizer import Tokenizer
from octlm.errors import UserError

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
WORDS += ["kappa", "lambda", "mu", "nu", "omicron", "pi", "rho", "sigma", "tau"]


def write_corpus(folder: Path, n: int = 12) -> Path:
    """n small text files with varied, repetitive prose (enough pairs for BPE to merge)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(120)]
        (folder / f"doc{i:02d}.txt").write_text(f"Document {i}.\n" + " ".join(words) + "\n")
    return folder


def config(tmp_path: Path, texts: Path) -> DataConfig:
    return DataConfig(source="text", text=[str(texts)], data_dir=str(tmp_path / "data"), val_fraction=0.25)


def test_token_files_hold_each_split_with_eot_after_every_document(tmp_path: Path) -> None:
    texts = write_corpus(tmp_path / "corpus")
    cfg = config(tmp_path, texts)
    prepared = prepare_data(cfg, vocab_size=300, progress=False)

    train_docs, val_docs = split_documents(text_documents([str(texts)]), cfg.val_fraction)
    tok = prepared.tokenizer
    for docs, stream in ((train_docs, prepared.train), (val_docs, prepared.val)):
        expected = [i for d in docs for i in tok.encode(d.text) + [tok.eot_id]]
        assert stream.tolist() == expected
        assert stream.dtype == np.uint16
    assert prepared.val_bytes == sum(len(d.text.encode()) for d in val_docs)
    assert prepared.train_documents == len(train_docs) and prepared.val_documents == len(val_docs)
    assert tok.decode(prepared.val.tolist()).split("<|endoftext|>")[:-1] == [d.text for d in val_docs]

    meta = json.loads((prepared.folder / "meta.json").read_text())
    assert meta["tokens"]["train"]["tokens"] == len(prepared.train)
    assert meta["tokens"]["dtype"] == "uint16"
    assert meta["corpus_sha256"] == prepared.corpus_sha256 == prepared.manifest["sha256"]
    assert prepared.folder.name.startswith(prepared.corpus_sha256[:12] + "-v300-")
    assert not prepared.reused and prepared.encode_mb_per_s is not None


def test_bytes_per_token_by_hand(tmp_path: Path) -> None:
    """At the smallest vocabulary (256 bytes + EOT) there are no merges: every byte is one token and each
    document ends in one EOT, so 12-byte documents (one of the four in validation) give exactly 12/13."""
    texts = tmp_path / "corpus"
    texts.mkdir()
    for i, word in enumerate(["alpha", "bravo", "delta", "gamma"]):
        (texts / f"doc{i}.txt").write_text(f"{word} {i}-end\n", encoding="utf-8")  # 12 bytes each
    prepared = prepare_data(config(tmp_path, texts), vocab_size=257, progress=False)
    assert prepared.val_bytes == 12 and len(prepared.val) == 13
    assert prepared.val_bytes_per_token == 12 / 13


def test_second_call_trains_and_encodes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path, write_corpus(tmp_path / "corpus"))
    first = prepare_data(cfg, vocab_size=300, progress=False)
    mtimes = {p.name: p.stat().st_mtime_ns for p in first.folder.iterdir()}

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cache should have been reused")

    monkeypatch.setattr(data_module, "train_tokenizer", forbidden)
    monkeypatch.setattr(Tokenizer, "encode_batch", forbidden)
    second = prepare_data(cfg, vocab_size=300, progress=False)
    assert second.reused and second.encode_mb_per_s is None
    assert np.array_equal(second.train, first.train) and np.array_equal(second.val, first.val)
    assert {p.name: p.stat().st_mtime_ns for p in second.folder.iterdir()} == mtimes


@pytest.mark.parametrize("damage", ["truncate train", "delete meta", "corrupt meta", "edit tokenizer"])
def test_damaged_cache_is_rebuilt_not_trusted(tmp_path: Path, damage: str) -> None:
    cfg = config(tmp_path, write_corpus(tmp_path / "corpus"))
    good = prepare_data(cfg, vocab_size=300, progress=False)
    train, val = good.train.copy(), good.val.copy()
    folder = good.folder
    del good  # release the memmaps before damaging their files
    if damage == "truncate train":
        (folder / "train.bin").write_bytes((folder / "train.bin").read_bytes()[:-2])
    elif damage == "delete meta":
        (folder / "meta.json").unlink()
    elif damage == "corrupt meta":
        (folder / "meta.json").write_text("{ not json")
    else:
        path = folder / "tokenizer.json"
        edited = json.loads(path.read_text())
        edited["model"]["merges"].reverse()  # still loads, but merges differently
        path.write_text(json.dumps(edited))
    rebuilt = prepare_data(cfg, vocab_size=300, progress=False)
    assert not rebuilt.reused
    assert np.array_equal(rebuilt.train, train) and np.array_equal(rebuilt.val, val)


def test_validation_documents_never_reach_tokenizer_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"corpus/doc{i:02d}.txt" for i in range(12)]
    _, val = split_documents([Document(n, "x") for n in names], 0.25)
    val_names = {d.name for d in val}
    texts = tmp_path / "corpus"
    texts.mkdir()
    for name in names:
        # Only validation documents use the letters q, j and x; their word repeats often enough to be merged.
        body = "qjxqjx " * 200 if name in val_names else (" ".join(WORDS) + " ") * 20
        (tmp_path / name).write_text(body)

    seen: list[str] = []
    real_train = data_module.train_tokenizer

    def spy(docs: list[Document], vocab_size: int) -> Tokenizer:
        seen.extend(d.name for d in docs)
        return real_train(docs, vocab_size)

    monkeypatch.setattr(data_module, "train_tokenizer", spy)
    prepared = prepare_data(config(tmp_path, texts), vocab_size=400, progress=False)
    assert seen and val_names.isdisjoint(seen) and set(seen) | val_names == set(names)
    assert len(prepared.tokenizer.encode("qjxqjx")) == 6  # no merge learned from held-out text
    assert len(prepared.tokenizer.encode(" alpha")) == 1  # while training text was merged


def count_corpus_work(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of corpus loads and corpus hashes from here on, whichever module makes the call."""
    calls = {"load": 0, "hash": 0}
    for key, name in (("load", "load_documents"), ("hash", "corpus_sha256")):
        real = getattr(corpus_module, name)

        def spy(*args: object, _real: object = real, _key: str = key) -> object:
            calls[_key] += 1
            return _real(*args)  # type: ignore[operator]

        for module in (corpus_module, data_module, tokenizer_module):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, spy)
    return calls


def test_prepare_data_loads_and_hashes_the_corpus_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(tmp_path, write_corpus(tmp_path / "corpus"))
    calls = count_corpus_work(monkeypatch)
    fresh = prepare_data(cfg, vocab_size=300, progress=False)
    assert not fresh.reused and calls == {"load": 1, "hash": 1}
    calls.update(load=0, hash=0)
    assert prepare_data(cfg, vocab_size=300, progress=False).reused
    assert calls == {"load": 1, "hash": 1}


def test_prepare_data_uses_a_given_corpus_as_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path, write_corpus(tmp_path / "corpus"))
    corpus = load_corpus(cfg)
    calls = count_corpus_work(monkeypatch)
    given = prepare_data(cfg, vocab_size=300, progress=False, corpus=corpus)
    assert calls == {"load": 0, "hash": 0}
    assert given.corpus_sha256 == corpus.sha256 == given.manifest["sha256"]
    assert (given.train_bytes, given.val_bytes) == (corpus.train_bytes, corpus.val_bytes)
    assert (given.train_documents, given.val_documents) == (len(corpus.train), len(corpus.val))
    loaded = prepare_data(cfg, vocab_size=300, progress=False)
    assert loaded.reused and loaded.folder == given.folder
    with pytest.raises(ValueError, match="not loaded from this DataConfig"):
        prepare_data(dataclasses.replace(cfg, val_fraction=0.5), 300, progress=False, corpus=corpus)


def test_commands_load_and_hash_the_corpus_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    texts = write_corpus(tmp_path / "corpus")
    args = ["--text", str(texts), "--data-dir", str(tmp_path / "data"), "--vocab-size", "300"]
    calls = count_corpus_work(monkeypatch)
    for command in ("tokenizer", "data", "corpus"):
        calls.update(load=0, hash=0)
        assert main([command, *(args[:-2] if command == "corpus" else args)]) == 0  # corpus has no vocabulary
        assert calls == {"load": 1, "hash": 1}, command
    capsys.readouterr()


def test_token_dtype_widens_past_16_bits() -> None:
    assert token_dtype(1024) == np.uint16
    assert token_dtype(65_536) == np.uint16  # ids 0..65,535 still fit
    assert token_dtype(65_537) == np.uint32


def test_cli_data_prints_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    texts = write_corpus(tmp_path / "corpus")
    args = ["data", "--text", str(texts), "--data-dir", str(tmp_path / "data"), "--vocab-size", "300"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "MB/s" in out and "bytes/token" in out and str(tmp_path / "data") in out
    assert main(args) == 0
    assert "reused cached files" in capsys.readouterr().out


def test_cli_data_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "--text", str(tmp_path / "gone.txt"), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gone.txt" in err


# ---------------------------------------------------------------------------------------------------------------
# Checked before work: the data folder writable, the text long enough for the context


def _no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make tokenizer training fail loudly: the checks below must refuse before any work."""

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the tokenizer was trained before the refusal")

    monkeypatch.setattr(data_module, "train_tokenizer", fail)


@pytest.mark.parametrize(
    ("data_dir", "needle"),
    [
        ("afile", "'afile' is a file, not a folder; pass --data-dir a folder"),
        ("afile/deeper/cache", "'afile' is a file, not a folder"),
        ("dangling", "'dangling' is a broken symbolic link"),
        ("dangling/cache", "'dangling' is a broken symbolic link"),
    ],
)
def test_a_data_folder_on_a_file_is_refused_before_work(
    data_dir: str, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    texts = write_corpus(Path("corpus"))
    Path("afile").write_text("x", encoding="utf-8")
    Path("dangling").symlink_to("nowhere")
    _no_training(monkeypatch)
    cfg = dataclasses.replace(config(tmp_path, texts), data_dir=data_dir)
    with pytest.raises(UserError, match=r"^data folder '.*' cannot be made: " + needle.replace("(", r"\(")):
        prepare_data(cfg, 300, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "corpus", "dangling"]


def _chattr(flag: str, path: Path) -> None:
    import subprocess

    done = subprocess.run(["chattr", flag, str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"chattr {flag} is not available here: {done.stderr.strip()}")


def test_a_read_only_data_folder_is_refused_before_work_and_a_complete_cache_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`chattr +i` is a real read-only folder even for root (permission bits are not). Permission is not free
    space: the fix says how to make it writable. A complete cache in a read-only folder needs no write."""
    texts = write_corpus(tmp_path / "corpus")
    cfg = config(tmp_path, texts)
    first = prepare_data(cfg, 300, progress=False)
    data_dir = Path(cfg.data_dir)
    _chattr("+i", data_dir)
    try:
        again = prepare_data(cfg, 300, progress=False)  # reused: nothing written
        assert again.reused and np.array_equal(again.val, first.val)
        _no_training(monkeypatch)
        with pytest.raises(UserError) as info:
            prepare_data(cfg, 310, progress=False)  # another vocabulary: a new cache folder is needed
        message = str(info.value)
        assert message.startswith(f"could not write in data folder '{data_dir}/") and "(EPERM)" in message
        assert "check it with `lsattr -d` and remove the attribute" in message and "space" not in message
    finally:
        _chattr("-i", data_dir)
    assert sorted(p.name for p in data_dir.iterdir()) == [first.folder.name]


def test_text_too_short_for_the_context_is_refused_before_the_tokenizer_is_trained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token is at least one byte, so bytes + one EOT per document bound a stream before any encoding."""
    texts = write_corpus(tmp_path / "corpus")
    cfg = config(tmp_path, texts)
    loaded = load_corpus(cfg)
    bound = loaded.val_bytes + len(loaded.val)
    _no_training(monkeypatch)
    with pytest.raises(UserError) as info:
        prepare_data(cfg, 300, progress=False, block=bound)  # needs bound + 1 tokens
    assert str(info.value).startswith(
        f"the validation stream has at most {bound:,} tokens ({len(loaded.val)}"
    )
    assert (
        f"needs {bound + 1:,}); add text, raise --val-fraction (now 0.25) or lower --context-length"
        in str(info.value)
    )
    assert not (tmp_path / "data").exists()


def test_the_exact_stream_lengths_are_checked_once_encoded(tmp_path: Path) -> None:
    texts = write_corpus(tmp_path / "corpus")
    cfg = config(tmp_path, texts)
    prepared = prepare_data(cfg, 300, progress=False)
    n_val, n_train = len(prepared.val), len(prepared.train)
    assert n_val < prepared.val_bytes  # BPE merged something: the exact count is below the bound
    assert prepare_data(cfg, 300, progress=False, block=n_val - 1).reused  # block + 1 = every token: enough
    with pytest.raises(
        UserError,
        match=rf"^the validation stream has {n_val:,} tokens \(2 documents, 1,344 bytes\), too few for one block of ",
    ):
        prepare_data(cfg, 300, progress=False, block=n_val)
    with pytest.raises(UserError, match=r"^the training stream has at most"):
        prepare_data(cfg, 300, progress=False, block=n_train + 10_000)
    eval_blocks(prepared.val, n_val - 1, 1)  # what training will ask of the streams works at that block


def test_vocabulary_too_small_is_refused_before_the_corpus_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(cfg: DataConfig) -> None:
        raise AssertionError("the corpus was loaded before the refusal")

    monkeypatch.setattr(data_module, "load_corpus", fail)
    with pytest.raises(UserError, match="vocab_size = 256 is too small; byte-level BPE needs 256 bytes"):
        prepare_data(config(tmp_path, tmp_path), 256, progress=False)


def test_a_folder_in_place_of_a_token_file_is_one_line_naming_the_cache(tmp_path: Path) -> None:
    """The damaged cache is rebuilt, and the rebuild's real OSError (EISDIR: a token file cannot replace a
    folder) is a UserError naming the cache folder, not a traceback."""
    texts = write_corpus(tmp_path / "corpus")
    cfg = config(tmp_path, texts)
    first = prepare_data(cfg, 300, progress=False)
    (first.folder / "val.bin").unlink()
    (first.folder / "val.bin").mkdir()
    with pytest.raises(
        UserError,
        match=rf"^could not write in data folder '{first.folder}': it is a folder, not a file \(EISDIR\)",
    ):
        prepare_data(cfg, 300, progress=False)
    assert sorted(p.name for p in first.folder.iterdir()) == [
        "meta.json",
        "tokenizer.json",
        "train.bin",
        "val.bin",
    ]


# ------------------------------------------------------------------------------------------------------------
# A crashed writer's temporary token file


def test_a_crashed_writers_temporary_token_file_is_removed_by_the_next_build(tmp_path: Path) -> None:
    """Only a file whose process is gone and that has been untouched for STALE_TMP_SECONDS: a live process
    (here: this one) may be building the same cache right now."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.py", "b.py"):
        (corpus / name).write_text(f"def {name[0]}(x):\n    return x + 1\n" * 400)
    cfg = DataConfig(source="text", text=[str(corpus)], data_dir=str(tmp_path / "data"), val_fraction=0.5)
    folder = prepare_data(cfg, 300, progress=False).folder
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # an id no process can have
    old = time.time() - STALE_TMP_SECONDS - 60
    files = {
        "stale": folder / f".train.bin.{dead}.tmp",  # its writer is gone, long ago: removed
        "fresh": folder / f".val.bin.{dead}.tmp",  # gone, but touched just now: kept (another pid namespace?)
        "live": folder / f".train.bin.{os.getppid()}.tmp",  # a live process's: kept
        "other": folder / f".train.bin.{dead}.tmp.keep",  # not a temporary file of ours: kept
    }
    for name, path in files.items():
        path.write_bytes(b"half")
        if name != "fresh":
            os.utime(path, (old, old))
    (folder / "meta.json").unlink()  # the cache is rebuilt (its token files written again)
    prepare_data(cfg, 300, progress=False)
    assert {name: path.exists() for name, path in files.items()} == {
        "stale": False,
        "fresh": True,
        "live": True,
        "other": True,
    }
