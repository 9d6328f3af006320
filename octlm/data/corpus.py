"""The corpus: the configured source's documents, their split into training and validation, and their figures.

A source (`octlm.data.sources`) gives named documents; empty ones (e.g. many `__init__.py` files) are dropped
here, as they would only add end-of-text tokens. The split is by a hash of each document's name:
deterministic, independent of the order and number of other documents, and never cutting a document in two.

`load_corpus` gives a `Corpus`: the documents, their split, byte counts and SHA-256, each computed once when
it is built, so that the commands and `octlm.data.cache` pass one value around instead of reloading or
rehashing text.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from octlm.config import DataConfig
from octlm.config.registry import SOURCES
from octlm.data.sources import Document
from octlm.errors import UserError, explain
from octlm.hashing import corpus_sha256, name_fraction


def data_dir_error(error: OSError, folder: Path) -> UserError:
    """A failed write in the data folder as one line: where, the cause, and the fix for that cause."""
    return UserError(
        f"could not write in data folder {str(folder)!r}: {explain(error, folder)} "
        "(or pass --data-dir another folder)"
    )


def describe_source(cfg: DataConfig) -> str:
    """A one-line description of where the documents come from, for manifests and reports."""
    return SOURCES.choose(cfg.source).describe(cfg)


def load_documents(cfg: DataConfig) -> list[Document]:
    """The configured source's documents, empty ones dropped. Raises UserError when nothing is left."""
    source = SOURCES.choose(cfg.source)
    docs = [d for d in source.documents(cfg) if d.text]
    if not docs:
        raise UserError(
            f"the corpus is empty ({source.describe(cfg)} gave no non-empty documents); {source.empty_fix}"
        )
    return docs


def total_bytes(docs: Sequence[Document]) -> int:
    return sum(len(d.text.encode("utf-8")) for d in docs)


def _manifest(source: str, documents: int, size: int, sha: str) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "source": source,
        "documents": documents,
        "bytes": size,
        "sha256": sha,
    }


def manifest(docs: Sequence[Document], source: str) -> dict[str, Any]:
    """A JSON-able record of the corpus; the same documents always give the same manifest."""
    return _manifest(source, len(docs), total_bytes(docs), corpus_sha256(docs))


def split_documents(docs: list[Document], val_fraction: float) -> tuple[list[Document], list[Document]]:
    """(train, validation): a document goes to validation when its name's hash score is below val_fraction.

    Both sides always get at least one document. Order within each side follows `docs`.
    """
    if len(docs) < 2:
        raise UserError(
            f"the corpus has {len(docs)} document(s); holding one out for validation needs at least 2 "
            "(add files, or split your text into several files)"
        )
    scores = [name_fraction(d.name) for d in docs]
    is_val = [s < val_fraction for s in scores]
    if not any(is_val):  # the document closest to the threshold moves over
        is_val[min(range(len(docs)), key=scores.__getitem__)] = True
    if all(is_val):
        is_val[max(range(len(docs)), key=scores.__getitem__)] = False
    train = [d for d, v in zip(docs, is_val, strict=True) if not v]
    val = [d for d, v in zip(docs, is_val, strict=True) if v]
    return train, val


@dataclass(frozen=True)
class Corpus:
    """A loaded corpus: its documents, their train/validation split and its figures (see `load_corpus`).

    Split, byte counts and SHA-256 are computed once, at construction: hashing a large corpus takes seconds,
    and every consumer (cache folder, meta.json, a resume check) needs the same value."""

    documents: tuple[Document, ...]
    val_fraction: float
    source: str  # describe_source's line, recorded in manifests
    train: tuple[Document, ...] = field(init=False)
    val: tuple[Document, ...] = field(init=False)
    sha256: str = field(init=False)
    train_bytes: int = field(init=False)  # UTF-8 bytes of the training documents
    val_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        # object.__setattr__ because the dataclass is frozen; these are set here and never again.
        documents = tuple(self.documents)
        train, val = split_documents(list(documents), self.val_fraction)
        object.__setattr__(self, "documents", documents)
        object.__setattr__(self, "train", tuple(train))
        object.__setattr__(self, "val", tuple(val))
        object.__setattr__(self, "sha256", corpus_sha256(documents))
        object.__setattr__(self, "train_bytes", total_bytes(train))
        object.__setattr__(self, "val_bytes", total_bytes(val))

    @property
    def bytes(self) -> int:
        """UTF-8 bytes of every document's text."""
        return self.train_bytes + self.val_bytes

    def manifest(self) -> dict[str, Any]:
        """The same record as `manifest(documents, source)`, from the figures already computed."""
        return _manifest(self.source, len(self.documents), self.bytes, self.sha256)

    def split_figures(self) -> dict[str, Any]:
        """Documents and bytes on each side of the split, for manifests."""
        return {
            "val_fraction": self.val_fraction,
            "train_documents": len(self.train),
            "train_bytes": self.train_bytes,
            "val_documents": len(self.val),
            "val_bytes": self.val_bytes,
        }


def load_corpus(cfg: DataConfig) -> Corpus:
    """The configured corpus, loaded, split and hashed once.
    Raises UserError (empty, or too few documents)."""
    return Corpus(tuple(load_documents(cfg)), cfg.val_fraction, describe_source(cfg))
