"""Where documents come from: one registered class per data source, chosen by `data.source`.

- `stdlib` (the default): the running interpreter's standard library `.py` files, one file per document,
  named by their POSIX path relative to the stdlib root. Skipped: `site-packages`, `dist-packages`, the
  build folder `config-*`, `__pycache__`, hidden entries, test folders (`test`, `tests`, `idle_test`) and
  test files (`test_*.py`), because test code is mostly repetitive fixtures rather than the library itself.
  The rare stdlib file that is not UTF-8 is skipped silently (pass a list to `stdlib_documents` to get names).
- `prose`: English every machine has, from the same standard-library files: one document per module holding
  its docstrings (module, classes, functions, in source order, each cleaned as `inspect.cleandoc` does) of at
  least `MIN_DOCSTRING_CHARS` characters, joined by blank lines, named `docstrings/<file>`; then one document
  per pydoc help topic (`pydoc_data/topics.py`), named `topics/<topic>`. Files are parsed with `ast`, never
  imported, so loading runs no code. A file that is not UTF-8 or does not parse is skipped and counted.
- `text`: files and folders you name. Folders are walked recursively in sorted order; hidden files and folders
  are skipped. A document is named by its path relative to the parent of the path you gave (a link by its own
  name), so the same files get the same names (and the same split) wherever they live. Policy: every file is
  UTF-8 text with a UTF-8 name, and nothing is skipped silently (dropping your data is worse than stopping):
  a binary or non-UTF-8 file, a broken link, a link to a folder inside a folder, or a FIFO, socket or device
  (refused unopened, so never a hang) is an error naming the file and the fix.
- `hub`: a Hugging Face data set through `datasets.load_dataset`, or a local file or folder it understands.

Text is read as bytes and decoded strictly, with no newline translation, so a document's text is exactly its
file's content. A source of your own is a `Source` subclass decorated with `register`, imported before the
config is read; `octlm.data.corpus` turns what a source gives into the corpus.
"""

from __future__ import annotations

import ast
import errno
import functools
import os
import platform
import stat
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from octlm.config import DataConfig
from octlm.config.registry import SOURCES
from octlm.data.hub import is_hub_id, quiet_hub, require_hub
from octlm.errors import UserError, first_line

SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"})
# Extensions `datasets` has a builder for, for a single local file passed as the hub data set.
LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}


@dataclass(frozen=True)
class Document:
    """One unit of text that is never cut: a file or a data set row."""

    name: str
    text: str


class Source:
    """A kind of corpus: what `data.source` names. `problems` lists what a config gets wrong for it (with the
    config's other problems); each source's classmethods `describe(config)` (one line for manifests and
    reports) and `documents(config)` (the `Document`s, in a fixed order) say where its text comes from and
    read it."""

    name: ClassVar[str]
    empty_fix: ClassVar[str] = ""  # what to do when the source gives no non-empty document

    @classmethod
    def problems(cls, config: DataConfig) -> list[str]:
        return []


def register(cls: type[Source]) -> type[Source]:
    """Class decorator: file a `Source` subclass under its `name` in `SOURCES`, the registry config asks."""
    return SOURCES.register(cls)


# ------------------------------------------------------------------------------------------------------------
# stdlib


@register
class StdlibSource(Source):
    """The running interpreter's standard library sources (the module docstring says what is skipped)."""

    name = "stdlib"
    empty_fix = "your Python installation has no standard library sources; use --text PATH instead"

    @classmethod
    def describe(cls, config: DataConfig) -> str:
        return f"stdlib of Python {platform.python_version()} at {stdlib_root()}"

    @classmethod
    def documents(cls, config: DataConfig) -> list[Document]:
        return stdlib_documents()


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


# ------------------------------------------------------------------------------------------------------------
# prose: the standard library's docstrings and pydoc topics

# Shorter docstrings are mostly a one-line summary ("Return the ...") or generated boilerplate (each codec
# module's "Python Character Mapping Codec ... generated from ..."): on Python 3.11 the 6,166 docstrings under
# 200 characters are 72% of them by count but 26% of their text. From 200 on, a docstring is a paragraph.
MIN_DOCSTRING_CHARS = 200
TOPICS_FILE = "pydoc_data/topics.py"  # the text of `help("assert")` and the other topics, as a dict literal
HAS_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


@register
class ProseSource(Source):
    """English from the standard library: docstrings and pydoc topics (the module docstring says which)."""

    name = "prose"
    empty_fix = "your Python installation has no standard library sources; use --text PATH instead"

    @classmethod
    def describe(cls, config: DataConfig) -> str:
        skipped: list[str] = []
        docs = prose_documents(skipped)
        modules = sum(d.name.startswith("docstrings/") for d in docs)
        return (
            f"prose of Python {platform.python_version()} at {stdlib_root()}: docstrings of "
            f"{MIN_DOCSTRING_CHARS}+ characters from {modules} modules, {len(docs) - modules} pydoc topics "
            f"({len(skipped)} file{'s' * (len(skipped) != 1)} skipped: not UTF-8 or not parsable)"
        )

    @classmethod
    def documents(cls, config: DataConfig) -> list[Document]:
        return prose_documents()


def prose_documents(skipped: list[str] | None = None) -> list[Document]:
    """The docstring documents in file name order, then the topic documents in topic order (so the whole list
    is sorted by name); names of stdlib files that are not UTF-8, do not parse, or (the topics file) hold no
    `topics` dict of text are appended to `skipped` when given."""
    failed: list[str] = []
    docs: list[Document] = []
    topics: dict[str, str] = {}
    for file in stdlib_documents(failed):
        prose = module_docstrings(file.name, file.text)
        if prose is None:
            failed.append(file.name)
            continue
        if prose:
            docs.append(Document(f"docstrings/{file.name}", prose))
        if file.name == TOPICS_FILE:
            found = pydoc_topics(file.text)
            if found is None:
                failed.append(file.name)
            topics = found or {}
    docs += [Document(f"topics/{topic}", text) for topic, text in sorted(topics.items())]
    if skipped is not None:
        skipped += sorted(failed)
    return docs


def _parse(text: str, name: str) -> ast.Module | None:
    """The syntax tree of Python source, or None when it is not valid Python for this interpreter."""
    try:
        with warnings.catch_warnings():  # e.g. invalid escape sequences: the text is still what we want
            warnings.simplefilter("ignore")
            return ast.parse(text, name)
    except (SyntaxError, ValueError, RecursionError):  # ValueError: a NUL byte; RecursionError: deep nesting
        return None


# `describe` and `documents` both need the prose (a manifest records the description), and parsing the whole
# standard library takes seconds: each file is parsed once per process, keyed by its exact text.
@functools.lru_cache(maxsize=4096)
def module_docstrings(name: str, text: str) -> str | None:
    """The docstrings of a module's source of at least MIN_DOCSTRING_CHARS characters once cleaned, in source
    order, joined by blank lines ("" when none is that long); None when the source does not parse."""
    tree = _parse(text, name)
    if tree is None:
        return None
    owners = [node for node in ast.walk(tree) if isinstance(node, HAS_DOCSTRING)]
    # ast.walk goes breadth first; a definition's (line, column) puts them back in source order.
    owners.sort(key=lambda node: (getattr(node, "lineno", 0), getattr(node, "col_offset", -1)))
    found = (ast.get_docstring(node, clean=True) for node in owners)
    return "\n\n".join(doc for doc in found if doc and len(doc) >= MIN_DOCSTRING_CHARS)


def pydoc_topics(text: str) -> dict[str, str] | None:
    """The `topics = {...}` dict of pydoc_data/topics.py, read as a literal (nothing in the file is run);
    None when the file does not parse or assigns no literal dict of text to `topics`."""
    tree = _parse(text, TOPICS_FILE)
    value = next((node.value for node in (tree.body if tree else []) if _assigns_topics(node)), None)
    if value is None:
        return None
    try:
        topics = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, RecursionError):  # not a literal: e.g. a call or a name
        return None
    if not isinstance(topics, dict) or not all(isinstance(x, str) for item in topics.items() for x in item):
        return None
    return topics


def _assigns_topics(node: ast.stmt) -> bool:
    """`topics = ...` or `topics: ... = ...` at the top level of the file."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    else:
        return False
    return len(targets) == 1 and isinstance(targets[0], ast.Name) and targets[0].id == "topics"


# ------------------------------------------------------------------------------------------------------------
# text: your files and folders


@register
class TextSource(Source):
    """Files and folders you name (`data.text`, `--text PATH`), every file UTF-8 text, nothing skipped."""

    name = "text"
    empty_fix = "pass files or folders that contain text"

    @classmethod
    def problems(cls, config: DataConfig) -> list[str]:
        if config.text:
            return []
        return ["data.source = 'text' needs at least one path in data.text (or pass --text PATH)"]

    @classmethod
    def describe(cls, config: DataConfig) -> str:
        return "text: " + ", ".join(config.text)

    @classmethod
    def documents(cls, config: DataConfig) -> list[Document]:
        return text_documents(config.text)


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


SPECIAL_FILES = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


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
    """True for a regular file (or a link to one), False for a folder; anything else is refused unopened.
    Walks follow no link to a folder (a loop would never end), so one inside a folder is refused, not
    skipped."""
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
        raise UserError(
            f"could not read folder {str(error.filename)!r}: {error.strerror or error}; check its "
            "permissions (ls -ld) or leave it out of --text"
        )

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


# ------------------------------------------------------------------------------------------------------------
# hub: a Hugging Face data set


@register
class HubSource(Source):
    """A Hugging Face data set (`data.hub_dataset`), streamed, or a local file or folder `datasets` reads."""

    name = "hub"
    empty_fix = "check data.hub_split and data.hub_text_field"

    @classmethod
    def problems(cls, config: DataConfig) -> list[str]:
        if config.hub_dataset:
            return []
        return ["data.source = 'hub' needs data.hub_dataset, e.g. 'roneneldan/TinyStories'"]

    @classmethod
    def describe(cls, config: DataConfig) -> str:
        return (
            f"hub: {config.hub_dataset} split={config.hub_split} field={config.hub_text_field} "
            f"max={config.hub_max_documents}"
        )

    @classmethod
    def documents(cls, config: DataConfig) -> list[Document]:
        return hub_documents(
            config.hub_dataset, config.hub_split, config.hub_text_field, config.hub_max_documents
        )


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
        if not local.exists() and is_hub_id(name):  # streamed from the Hub: refused at once if it is gone
            require_hub(
                f"data set {name!r} is streamed from the Hugging Face Hub",
                "set data.hub_dataset to a local file or folder of the data",
            )
    try:
        with quiet_hub():
            rows = datasets.load_dataset(**args, streaming=True)
            docs = _rows_as_documents(rows, name, label, split, text_field, max_documents)
    except UserError:
        raise
    except Exception as error:  # datasets raises many types for "not found", offline, bad split, ...
        raise UserError(
            f"could not load data set {name!r} split {split!r} "
            f"({type(error).__name__}: {first_line(error, 300)}); "
            "check the name, the split and your internet connection"
        ) from None
    return docs


def _rows_as_documents(
    rows: Any, name: str, label: str, split: str, text_field: str, max_documents: int
) -> list[Document]:
    """The first `max_documents` rows' `text_field`, each as a document; a UserError for a missing or
    non-text field."""
    docs: list[Document] = []
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
    return docs
