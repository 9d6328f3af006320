"""Token files: the corpus encoded once, cached, and opened as memmaps.

`prepare_data` turns the corpus into two flat token streams, train and validation, each laid out as
`doc EOT doc EOT ... doc EOT`, stored as raw `uint16` (`uint32` for vocabularies past 65,536) and opened as
read-only memmaps. Everything lives in one cache folder per (corpus, tokenizer setup, validation fraction,
vocabulary size):

    <data_dir>/<corpus sha256[:12]>-v<vocab>-t<tokenizer version>-val<fraction>/
        tokenizer.json   trained on the training split only
        train.bin        val.bin
        meta.json        hashes, counts, bytes, dtype; written last, so it vouches for the files above

A second call with the same settings trains nothing and encodes nothing. A cache whose meta.json is missing or
disagrees with the files (wrong size, changed tokenizer) is rebuilt rather than trusted. The corpus is loaded
and hashed once per call, or not at all when the caller passes the `Corpus` it already loaded. What can fail
is checked before work (`check_vocab_size`, `check_streams` against the context, `check_writable`), and a
write that fails anyway is a UserError naming the cache folder and the fix for its cause.

Batches from these streams are `octlm.data.batches`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from octlm.config import DataConfig
from octlm.data.corpus import Corpus, data_dir_error, describe_source, load_corpus
from octlm.data.sources import Document
from octlm.data.tokenizer import TOKENIZER_VERSION, Tokenizer, check_vocab_size, train_tokenizer
from octlm.errors import UserError
from octlm.files import write_atomic
from octlm.hashing import sha256_array
from octlm.runtime import process_alive

META_FORMAT = 1
META_FILE = "meta.json"  # the cache folder's files (a run folder's are octlm.storage.run's)
TOKENIZER_FILE = "tokenizer.json"
ENCODE_CHUNK_BYTES = 4_000_000  # documents per encode_batch call add up to about this much text


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every id below `vocab_size`."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def cache_folder(cfg: DataConfig, corpus: Corpus, vocab_size: int) -> Path:
    """Where the tokenizer and token files for this corpus (split as it is) and these settings live."""
    name = f"{corpus.sha256[:12]}-v{vocab_size}-t{TOKENIZER_VERSION}-val{corpus.val_fraction:g}"
    return Path(cfg.data_dir) / name


@dataclass
class PreparedData:
    """The encoded corpus: token memmaps `[N]`, the tokenizer, and the figures needed for bits per byte."""

    folder: Path
    train: np.ndarray  # [N_train] token ids, read-only memmap
    val: np.ndarray  # [N_val]
    tokenizer: Tokenizer
    tokenizer_path: Path
    tokenizer_sha256: str
    corpus_sha256: str
    train_bytes: int  # UTF-8 bytes of the training documents
    val_bytes: int
    train_documents: int
    val_documents: int
    manifest: dict[str, Any]
    reused: bool  # True when nothing was trained or encoded
    encode_mb_per_s: float | None = None  # set when this call encoded
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def val_bytes_per_token(self) -> float:
        """Bytes per token of the validation stream, EOTs counted (bits/byte = nats/token / ln 2 / this)."""
        return self.val_bytes / len(self.val)

    @property
    def train_bytes_per_token(self) -> float:
        return self.train_bytes / len(self.train)

    @cached_property
    def hashes(self) -> dict[str, str]:
        """The SHA-256 of everything training read (tokenizer, corpus, both token streams), hashed once: a
        checkpoint records them, a resume and a report check them."""
        return {
            "tokenizer": self.tokenizer_sha256,
            "corpus": self.corpus_sha256,
            "train_tokens": sha256_array(self.train),
            "val_tokens": sha256_array(self.val),
        }


def _read_meta(folder: Path, corpus_sha: str) -> dict[str, Any] | None:
    """meta.json when it is readable and belongs to this corpus; None means "rebuild"."""
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        return None
    return meta if meta.get("corpus_sha256") == corpus_sha else None


def _write_meta(folder: Path, meta: dict[str, Any]) -> None:
    write_atomic(folder / META_FILE, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))


def _new_meta(corpus: Corpus, vocab_size: int) -> dict[str, Any]:
    return {
        "format": META_FORMAT,
        "corpus_sha256": corpus.sha256,
        "manifest": corpus.manifest(),
        "vocab_size_requested": vocab_size,
        "val_fraction": corpus.val_fraction,
        "tokenizer_version": TOKENIZER_VERSION,
    }


def write_tokenizer_meta(
    cfg: DataConfig, corpus: Corpus, tokenizer: Tokenizer, vocab_size: int, seconds: float
) -> None:
    """Record a tokenizer trained on `corpus.train`, just saved in the cache folder, so `prepare_data` reuses
    it.

    Existing token files stay listed; `prepare_data` re-encodes them only if the tokenizer's hash changed.
    """
    folder = cache_folder(cfg, corpus, vocab_size)
    try:
        _record_tokenizer(folder, corpus, tokenizer, vocab_size, seconds)
    except OSError as error:
        raise data_dir_error(error, folder) from None


def _record_tokenizer(
    folder: Path, corpus: Corpus, tokenizer: Tokenizer, vocab_size: int, seconds: float
) -> None:
    meta = _read_meta(folder, corpus.sha256) or _new_meta(corpus, vocab_size)
    meta["tokenizer"] = {
        "sha256": tokenizer.sha256,
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "train_documents": len(corpus.train),
        "train_bytes": corpus.train_bytes,
        "train_seconds": round(seconds, 3),
    }
    _write_meta(folder, meta)


def cached_tokenizer(cfg: DataConfig, corpus: Corpus, vocab_size: int) -> Tokenizer | None:
    """The tokenizer saved for this corpus and vocabulary size, when meta.json vouches for its bytes; None:
    train one. Its inputs are in the folder's name (the corpus hash, which covers the split, the vocabulary
    size, the tokenizer version), so the same inputs find it and different ones never do."""
    folder = cache_folder(cfg, corpus, vocab_size)
    return _cached_tokenizer(folder, _read_meta(folder, corpus.sha256))


def _cached_tokenizer(folder: Path, meta: dict[str, Any] | None) -> Tokenizer | None:
    """The saved tokenizer, if meta.json vouches for exactly these bytes."""
    path = folder / TOKENIZER_FILE
    expected = (meta or {}).get("tokenizer", {}).get("sha256")
    if not expected or not path.is_file():
        return None
    try:
        tokenizer = Tokenizer.load(path)
    except UserError:
        return None
    return tokenizer if tokenizer.sha256 == expected else None


def _cached_tokens(folder: Path, meta: dict[str, Any], tokenizer: Tokenizer) -> tuple[np.ndarray, ...] | None:
    """(train, val) memmaps when meta.json describes token files that exist with the right sizes."""
    tokens = meta.get("tokens")
    if not isinstance(tokens, dict) or tokens.get("tokenizer_sha256") != tokenizer.sha256:
        return None
    try:
        dtype = np.dtype(tokens["dtype"])
        arrays = []
        for split in ("train", "val"):
            path = folder / f"{split}.bin"
            count = int(tokens[split]["tokens"])
            if count < 1 or not path.is_file() or path.stat().st_size != count * dtype.itemsize:
                return None
            arrays.append(np.memmap(path, dtype=dtype, mode="r", shape=(count,)))
    except (KeyError, TypeError, ValueError, OSError):  # OSError: unreadable, so rebuilt
        return None
    return tuple(arrays)


STALE_TMP_SECONDS = 600  # a live writer touches its file far more often than this


def _remove_stale_tmp(path: Path) -> None:
    """Delete `path`'s temporary files (`.name.<pid>.tmp`) left by a process that is gone (SIGKILL, a power
    cut) and untouched for STALE_TMP_SECONDS: another live process may be building the same cache."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 : -len(".tmp")]
        with contextlib.suppress(OSError):
            if (
                pid.isdigit()
                and not process_alive(int(pid))
                and time.time() - tmp.stat().st_mtime > STALE_TMP_SECONDS
            ):
                tmp.unlink()


def _encode_split(
    tokenizer: Tokenizer, docs: Sequence[Document], path: Path, dtype: np.dtype, bar: tqdm
) -> int:
    """Write `doc EOT doc EOT ...` for `docs` to `path` atomically; returns the token count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # per process: two may build one cache at once
    eot = np.array([tokenizer.eot_id], dtype=dtype)
    count = 0
    try:
        with open(tmp, "wb") as f:
            start = 0
            while start < len(docs):
                # Group documents so that each encode_batch call has enough text to keep every core busy.
                end, size = start, 0
                while end < len(docs) and (end == start or size < ENCODE_CHUNK_BYTES):
                    size += len(docs[end].text)
                    end += 1
                for ids in tokenizer.encode_batch([d.text for d in docs[start:end]]):
                    f.write(np.asarray(ids, dtype=dtype).tobytes())
                    f.write(eot.tobytes())
                    count += len(ids) + 1
                bar.update(sum(len(d.text.encode("utf-8")) for d in docs[start:end]))
                start = end
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return count


def _check_corpus(cfg: DataConfig, corpus: Corpus) -> None:
    """A passed-in corpus must be the one `cfg` describes, or the cache folder's name would lie about it."""
    if (corpus.val_fraction, corpus.source) != (cfg.val_fraction, describe_source(cfg)):
        raise ValueError(
            f"corpus ({corpus.source}, val_fraction {corpus.val_fraction}) was not loaded from this "
            f"DataConfig ({describe_source(cfg)}, val_fraction {cfg.val_fraction})"
        )


def _encode_corpus(
    corpus: Corpus,
    tokenizer: Tokenizer,
    folder: Path,
    meta: dict[str, Any],
    say: Callable[..., object],
    progress: bool,
) -> float:
    """Write train.bin and val.bin, then record them in meta.json; returns the encoding speed in MB/s."""
    dtype = token_dtype(tokenizer.vocab_size)
    total = corpus.bytes
    interactive = progress and sys.stderr.isatty()
    start = time.perf_counter()
    with tqdm(total=total, unit="B", unit_scale=True, desc="encode", disable=not interactive) as bar:
        counts = {
            name: _encode_split(tokenizer, split_docs, folder / f"{name}.bin", dtype, bar)
            for name, split_docs in (("train", corpus.train), ("val", corpus.val))
        }
    seconds = time.perf_counter() - start
    mb_per_s = total / 1e6 / max(seconds, 1e-9)
    n_tokens = sum(counts.values())
    say(f"encoded {total / 1e6:.2f} MB into {n_tokens:,} tokens in {seconds:.2f} s ({mb_per_s:.2f} MB/s)")
    meta["tokens"] = {
        "tokenizer_sha256": tokenizer.sha256,
        "dtype": dtype.name,
        "eot_id": tokenizer.eot_id,
        "layout": "doc EOT doc EOT ... doc EOT",
        "encode_seconds": round(seconds, 3),
        "encode_mb_per_s": round(mb_per_s, 3),
        "train": {"documents": len(corpus.train), "bytes": corpus.train_bytes, "tokens": counts["train"]},
        "val": {"documents": len(corpus.val), "bytes": corpus.val_bytes, "tokens": counts["val"]},
    }
    _write_meta(folder, meta)  # written last: its token section vouches for both files
    return mb_per_s


def prepare_data(
    cfg: DataConfig,
    vocab_size: int,
    progress: bool = True,
    corpus: Corpus | None = None,
    block: int | None = None,
) -> PreparedData:
    """Load, split, tokenize and encode the corpus, or reuse the cache folder when complete and intact.

    Pass `corpus` when the caller has already loaded it from `cfg` (e.g. to check its hash first); it is used
    as is. Otherwise it is loaded here. Either way its documents are hashed once, when the Corpus is built.
    Pass `block` (the context length) to have both streams checked to hold one block (`check_streams`):
    before any tokenizer training when the text cannot be long enough, exactly once encoded. Everything that
    can fail is checked before work: the vocabulary size, the text's length, a cache folder that cannot be
    written (a file on its path, read-only); a write that still fails is a UserError naming the folder.
    """
    say = print if progress else (lambda *a, **k: None)
    check_vocab_size(vocab_size)
    if corpus is None:
        corpus = load_corpus(cfg)
    else:
        _check_corpus(cfg, corpus)
    if block is not None:  # a token is at least one byte: bytes + one EOT per document bound the count
        check_streams(
            corpus, block, len(corpus.train) + corpus.train_bytes, len(corpus.val) + corpus.val_bytes
        )
    folder = cache_folder(cfg, corpus, vocab_size)
    try:
        tokenizer, meta, arrays, mb_per_s, reused = _build(corpus, folder, vocab_size, say, progress)
    except OSError as error:
        raise data_dir_error(error, folder) from None
    train, val = arrays
    if block is not None:
        check_streams(corpus, block, len(train), len(val), exact=True)
    return PreparedData(
        folder=folder,
        train=train,
        val=val,
        tokenizer=tokenizer,
        tokenizer_path=folder / TOKENIZER_FILE,
        tokenizer_sha256=tokenizer.sha256,
        corpus_sha256=corpus.sha256,
        train_bytes=corpus.train_bytes,
        val_bytes=corpus.val_bytes,
        train_documents=len(corpus.train),
        val_documents=len(corpus.val),
        manifest=meta["manifest"],
        reused=reused,
        encode_mb_per_s=mb_per_s,
        meta=meta,
    )


def _build(
    corpus: Corpus, folder: Path, vocab_size: int, say: Callable[..., object], progress: bool
) -> tuple[Tokenizer, dict[str, Any], tuple[np.ndarray, ...], float | None, bool]:
    """The tokenizer, meta.json, token memmaps, encoding speed (None: nothing encoded) and whether all was
    reused from `folder`; what is missing is made there, the folder checked writable first."""
    meta = _read_meta(folder, corpus.sha256)
    tokenizer = _cached_tokenizer(folder, meta)
    trained = tokenizer is None
    if tokenizer is None:
        check_writable(folder)
        start = time.perf_counter()
        tokenizer = train_tokenizer(corpus.train, vocab_size)  # validation is never seen by training
        seconds = time.perf_counter() - start
        say(f"trained tokenizer: {tokenizer.vocab_size:,} entries in {seconds:.2f} s")
        tokenizer.save(folder / TOKENIZER_FILE)
        # A fresh meta.json: token files listed by an older one were made with some other tokenizer.
        _write_meta(folder, _new_meta(corpus, vocab_size))
        _record_tokenizer(folder, corpus, tokenizer, vocab_size, seconds)
        meta = _read_meta(folder, corpus.sha256)
    assert meta is not None
    arrays = _cached_tokens(folder, meta, tokenizer)
    mb_per_s = None
    if arrays is None:
        check_writable(folder)
        mb_per_s = _encode_corpus(corpus, tokenizer, folder, meta, say, progress)
        arrays = _cached_tokens(folder, meta, tokenizer)
        assert arrays is not None
    return tokenizer, meta, arrays, mb_per_s, not trained and mb_per_s is None


def check_writable(folder: Path) -> None:
    """Refuse, before any work, a cache folder that cannot be written: a file on its path, or a folder that is
    read-only (permissions, `chattr +i`, a read-only mount; a probe file finds all of them, even as root)."""
    for part in (folder, *folder.parents):
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                what = "a broken symbolic link" if not part.exists() else "a file, not a folder"
                raise UserError(
                    f"data folder {str(folder)!r} cannot be made: {str(part)!r} is {what}; "
                    "pass --data-dir a folder"
                )
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise data_dir_error(error, folder) from None


def check_streams(
    corpus: Corpus, block: int, train_tokens: int, val_tokens: int, exact: bool = False
) -> None:
    """Both token streams hold one block of `block` tokens plus its target (`block + 1`), or a UserError
    naming the stream, its size and the fix. With `exact=False` the counts are upper bounds (before
    encoding)."""
    count = "" if exact else "at most "
    for name, tokens, docs, size, fix in (
        ("training", train_tokens, corpus.train, corpus.train_bytes, "add text"),
        (
            "validation",
            val_tokens,
            corpus.val,
            corpus.val_bytes,
            f"add text, raise --val-fraction (now {corpus.val_fraction:g})",
        ),
    ):
        if tokens < block + 1:
            raise UserError(
                f"the {name} stream has {count}{tokens:,} tokens ({len(docs):,} document"
                f"{'s' * (len(docs) != 1)}, {size:,} bytes), too few for one block of model.context_length = "
                f"{block:,} (needs {block + 1:,}); "
                f"{fix} or lower --context-length"
            )
