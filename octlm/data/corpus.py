"""The corpus: a list of named text documents, from the stdlib, your own files, or a Hugging Face data set.

Three sources (`DataConfig.source`):

- `stdlib` (the default): the running interpreter's standard library `.py` files, one file per document,
  named by their POSIX path relative to the stdlib root. Skipped: `site-packages`, `dist-packages`, the
  build folder `config-*`, `__pycache__`, hidden entries, test folders (`test`, `tests`, `idle_test`) and
  test files (`test_*.py`), because test code is mostly repetitive fixtures rather than the library itself.
  The rare stdlib file that is not UTF-8 is skipped silently (pass a list to `stdlib_documents` to get names).
- `text`: files and folders you name. Folders are walked recursively in sorted order; hidden files and folders
  are skipped. A document is named by its path relative to the parent of the path you gave (a link by its own
  name), so the same files get the same names (and the same split) wherever they live. Policy: every file is
  UTF-8 text with a UTF-8 name, and nothing is skipped silently (dropping your data is worse than stopping):
  a binary or non-UTF-8 file, a broken link, a link to a folder inside a folder, or a FIFO, socket or device
  (refused unopened, so never a hang) is an error naming the file and the fix.
- `hub`: a Hugging Face data set through `datasets.load_dataset`, or a local file or folder it understands.

Text is read as bytes and decoded strictly, with no newline translation, so a document's text is exactly its
file's content. Empty documents (e.g. many `__init__.py` files) are dropped by `load_documents`; they would
only add end-of-text tokens.

The split into training and validation is by a hash of each document's name: deterministic, independent of
the order and number of other documents, and never cutting a document in two.

`load_corpus` gives a `Corpus`: the documents, their split, byte counts and SHA-256, each computed once when it
is built, so that the commands and `octlm.data.cache` pass one value around instead of reloading or rehashing text.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import platform
import stat
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from octlm.config.schema import DataConfig, add_config_arguments, config_from_args
from octlm.errors import UserError, explain
from octlm.files import write_atomic

SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"})
# Extensions `datasets` has a builder for, for a single local file passed as the hub data set.
LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}


@dataclass(frozen=True)
class Document:
    """One unit of text that is never cut: a file or a data set row."""

    name: str
    text: str


def data_dir_error(error: OSError, folder: Path) -> UserError:
    """A failed write in the data folder as one line: where, the cause, and the fix for that cause."""
    return UserError(
        f"could not write in data folder {str(folder)!r}: {explain(error, folder)} (or pass --data-dir another folder)"
    )


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_documents(skipped: list[str] | None = None) -> list[Document]:
    """The standard library's `.py` sources in sorted name order (the module docstring says what is skipped);
    names of files that are not UTF-8 are appended to `skipped` when given."""
    root = stdlib_root()
    docs: list[Document] = []
    for folder, dirs, files in os.walk(root):
        # Pruning `dirs` in place stops os.walk descending; sorting it makes the walk order deterministic.
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith((".", "config-")))
        for file in sorted(files):
            if not file.endswith(".py") or file.startswith((".", "test_")):
                continue
            path = Path(folder) / file
            name = path.relative_to(root).as_posix()
            try:
                docs.append(Document(name, path.read_bytes().decode("utf-8")))
            except UnicodeDecodeError:
                if skipped is not None:
                    skipped.append(name)
    docs.sort(key=lambda d: d.name)
    return docs


def _decode_file(path: Path) -> str:
    """A file's exact text, or a UserError saying why it is not UTF-8 text and what to do."""
    data = _read_regular(path)
    nul = data.find(b"\0")
    if nul >= 0:
        raise UserError(
            f"{str(path)!r} looks binary (NUL byte at offset {nul}); remove it from the --text paths "
            "or pass only text files"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(
            f"{str(path)!r} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}); "
            "remove it or convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


SPECIAL_FILES = {stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFSOCK: "a socket",
                 stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}  # fmt: skip


def _not_regular(path: Path, mode: int) -> UserError:
    kind = SPECIAL_FILES.get(stat.S_IFMT(mode), "not a regular file")
    return UserError(f"{str(path)!r} is {kind}; octlm reads only files and folders: remove it from --text")


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file. Opened non-blocking and checked again once open, so that a FIFO swapped in
    after `_text_file` looked can never hang the read."""
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            if not stat.S_ISREG(mode := os.fstat(f.fileno()).st_mode):
                raise _not_regular(path, mode)
            return f.read()
    except OSError as error:
        denied = error.errno in (errno.EACCES, errno.EPERM)
        raise UserError(
            f"could not read {str(path)!r}: {error.strerror} ({errno.errorcode.get(error.errno or 0, '?')}); "
            f"{'check its permissions (ls -l)' if denied else 'check the disk'}, or leave it out of --text"
        ) from None


def _utf8_name(path: Path) -> None:
    """A name that is not UTF-8 bytes (Python holds it with surrogates) cannot name a document."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"the file name {os.fsencode(path)!r} is not UTF-8; rename it to UTF-8 "
            "(e.g. convmv -f latin1 -t utf-8 --notest) or move it out of the --text paths"
        ) from None


def _text_file(path: Path, inside: bool) -> bool:
    """True for a regular file (or a link to one), False for a folder; anything else is refused unopened. Walks
    follow no link to a folder (a loop would never end), so one inside a folder is refused, not skipped."""
    _utf8_name(path)
    try:
        mode = path.stat().st_mode
    except OSError as error:
        if path.is_symlink():
            loop = error.errno == errno.ELOOP
            what = "a symbolic link loop" if loop else f"a broken symbolic link (to {os.readlink(path)!r})"
            raise UserError(f"{str(path)!r} is {what}; remove it or point it at a file") from None
        if error.errno == errno.ENOENT and not inside:
            raise UserError(
                f"text path {str(path)!r} does not exist; check the path passed to --text"
            ) from None
        raise UserError(f"could not read {str(path)!r}: {error.strerror or error}; check the path") from None
    if stat.S_ISDIR(mode):
        if inside and path.is_symlink():
            raise UserError(
                f"{str(path)!r} is a symbolic link to a folder, which a --text folder walk does not follow; "
                f"pass its target ({os.readlink(path)!r}) to --text as well, or remove the link"
            )
        return False
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    return True


def _walk_files(folder: Path) -> list[Path]:
    """Every non-hidden file under `folder`, recursively, in sorted order (each checked by `_text_file`)."""

    def unreadable(error: OSError) -> None:
        raise UserError(f"could not read folder {str(error.filename)!r}: {error.strerror or error}; check its "
                        "permissions (ls -ld) or leave it out of --text")  # fmt: skip

    found: list[Path] = []
    for parent, dirs, files in os.walk(folder, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in list(dirs):
            _text_file(Path(parent) / d, inside=True)  # a non-UTF-8 folder name or a link to a folder
        found += [Path(parent) / f for f in sorted(files) if not f.startswith(".")]
    return [file for file in found if _text_file(file, inside=True)]


def text_documents(paths: list[str]) -> list[Document]:
    """Documents from files and folders, in the order given (folders sorted inside). Raises UserError."""
    docs: list[Document] = []
    seen: dict[str, str] = {}
    for given in paths:
        path = Path(given)
        if _text_file(path, inside=False):
            files, names = [path], [path.resolve().name]
        else:
            # Named from the folder's own name down, as walked: a link inside names itself, not its target.
            files = _walk_files(path)
            names = [(Path(path.resolve().name) / f.relative_to(path)).as_posix() for f in files]
        for file, name in zip(files, names, strict=True):
            if name in seen:
                raise UserError(
                    f"two text inputs are both named {name!r} ({seen[name]!r} and {str(file)!r}); "
                    "pass each file once, or rename one"
                )
            seen[name] = str(file)
            docs.append(Document(name, _decode_file(file)))
    return docs


def hub_documents(name: str, split: str, text_field: str, max_documents: int) -> list[Document]:
    """The first `max_documents` rows of a Hugging Face data set (or a local file/folder) as documents.

    Rows are streamed, so only what is used is downloaded. Names look like `name/split/0000042`; for a local
    file or folder `name` is its base name, so the same data gets the same names (and split) anywhere.
    """
    try:
        import datasets
    except ImportError:
        raise UserError("data.source = 'hub' needs the datasets package: pip install datasets") from None

    local = Path(name)
    label = local.resolve().name if local.exists() else name
    if local.is_file():
        builder = LOCAL_BUILDERS.get(local.suffix.lower())
        if builder is None:
            known = ", ".join(LOCAL_BUILDERS)
            raise UserError(f"local data set {name!r} has an unknown extension; use one of {known}")
        # A bare data file always lands in the "train" split; the configured split names nothing here.
        args: dict[str, Any] = {"path": builder, "data_files": str(local), "split": "train"}
    else:
        args = {"path": name, "split": split}
    docs: list[Document] = []
    try:
        rows = datasets.load_dataset(**args, streaming=True)
        for index, row in enumerate(rows):
            if index >= max_documents:
                break
            if text_field not in row:
                fields = ", ".join(sorted(row))
                raise UserError(
                    f"data set {name!r} has no field {text_field!r}; its fields are {fields} "
                    "(set data.hub_text_field)"
                )
            text = row[text_field]
            if not isinstance(text, str):
                raise UserError(
                    f"data set {name!r} field {text_field!r} holds {type(text).__name__}, not text "
                    f"(row {index}); set data.hub_text_field to a text column"
                )
            docs.append(Document(f"{label}/{split}/{index:07d}", text))
    except UserError:
        raise
    except Exception as error:  # datasets raises many types for "not found", offline, bad split, ...
        first_line = (str(error).strip().splitlines() or [""])[0][:300]
        raise UserError(
            f"could not load data set {name!r} split {split!r} ({type(error).__name__}: {first_line}); "
            "check the name, the split and your internet connection"
        ) from None
    return docs


def describe_source(cfg: DataConfig) -> str:
    """A one-line description of where the documents come from, for manifests and reports."""
    if cfg.source == "stdlib":
        return f"stdlib of Python {platform.python_version()} at {stdlib_root()}"
    if cfg.source == "text":
        return "text: " + ", ".join(cfg.text)
    return (
        f"hub: {cfg.hub_dataset} split={cfg.hub_split} field={cfg.hub_text_field} max={cfg.hub_max_documents}"
    )


def load_documents(cfg: DataConfig) -> list[Document]:
    """The configured corpus, empty documents dropped. Raises UserError when nothing is left."""
    if cfg.source == "stdlib":
        docs = stdlib_documents()
        fix = "your Python installation has no standard library sources; use --text PATH instead"
    elif cfg.source == "text":
        docs = text_documents(cfg.text)
        fix = "pass files or folders that contain text"
    elif cfg.source == "hub":
        docs = hub_documents(cfg.hub_dataset, cfg.hub_split, cfg.hub_text_field, cfg.hub_max_documents)
        fix = "check data.hub_split and data.hub_text_field"
    else:
        raise UserError(f"data.source = {cfg.source!r} is unknown; choose one of stdlib, text, hub")
    docs = [d for d in docs if d.text]
    if not docs:
        raise UserError(f"the corpus is empty ({describe_source(cfg)} gave no non-empty documents); {fix}")
    return docs


def corpus_sha256(docs: Sequence[Document]) -> str:
    """SHA-256 over every name and text, each prefixed by its UTF-8 length, so no two corpora collide."""
    h = hashlib.sha256()
    for doc in docs:
        for part in (doc.name.encode("utf-8"), doc.text.encode("utf-8")):
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
    return h.hexdigest()


def total_bytes(docs: Sequence[Document]) -> int:
    return sum(len(d.text.encode("utf-8")) for d in docs)


def _manifest(source: str, documents: int, size: int, sha: str) -> dict[str, Any]:
    return {"python": platform.python_version(), "source": source, "documents": documents, "bytes": size,
            "sha256": sha}  # fmt: skip


def manifest(docs: Sequence[Document], source: str) -> dict[str, Any]:
    """A JSON-able record of the corpus; the same documents always give the same manifest."""
    return _manifest(source, len(docs), total_bytes(docs), corpus_sha256(docs))


def _val_score(name: str) -> float:
    """A number in [0, 1) fixed by the name alone."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2**64


def split_documents(docs: list[Document], val_fraction: float) -> tuple[list[Document], list[Document]]:
    """(train, validation): a document goes to validation when its name's hash score is below val_fraction.

    Both sides always get at least one document. Order within each side follows `docs`.
    """
    if len(docs) < 2:
        raise UserError(
            f"the corpus has {len(docs)} document(s); holding one out for validation needs at least 2 "
            "(add files, or split your text into several files)"
        )
    scores = [_val_score(d.name) for d in docs]
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
    """The configured corpus, loaded, split and hashed once. Raises UserError (empty, or too few documents)."""
    return Corpus(tuple(load_documents(cfg)), cfg.val_fraction, describe_source(cfg))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """`octlm corpus`: build the corpus, write its manifest, print its figures."""
    cfg = config_from_args(args).data
    start = time.perf_counter()
    corpus = load_corpus(cfg)
    info = corpus.manifest()
    seconds = time.perf_counter() - start
    info["split"] = split = corpus.split_figures()
    path = Path(cfg.data_dir) / f"corpus-{corpus.sha256[:12]}" / "manifest.json"
    try:
        write_atomic(path, (json.dumps(info, indent=2) + "\n").encode("utf-8"))
    except OSError as error:
        raise data_dir_error(error, path.parent) from None
    print(f"source      {info['source']}")
    print(f"documents   {info['documents']:,} ({info['bytes'] / 1e6:.2f} MB)")
    print(f"train       {split['train_documents']:,} documents, {split['train_bytes'] / 1e6:.2f} MB")
    print(f"validation  {split['val_documents']:,} documents, {split['val_bytes'] / 1e6:.2f} MB")
    print(f"sha256      {info['sha256']}")
    print(f"manifest    {path}")
    print(f"seconds     {seconds:.2f}")
    return 0
