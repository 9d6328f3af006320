"""The corpus sources (octlm/data/sources.py): the text loader (walk order, names, exact text, the error policy,
entries that are not text files: devices, FIFOs, links, names that are not UTF-8, unreadable folders), the
standard library, and the Hugging Face hub (offline, from a local data set)."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from octlm.config import DataConfig
from octlm.data import sources
from octlm.data.corpus import load_documents
from octlm.data.sources import Document, hub_documents, stdlib_documents, text_documents
from octlm.errors import UserError


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_bytes(content.encode("utf-8"))  # bytes, so no newline translation sneaks in
    else:
        path.write_bytes(content)
    return path


def test_text_documents_walks_sorted_skips_hidden_and_keeps_exact_text(tmp_path: Path) -> None:
    books = tmp_path / "books"
    write(books / "b.txt", "second\r\nwith CRLF\n")
    write(books / "a.txt", "first ✓")
    write(books / "sub" / "c.md", "third")
    write(books / ".hidden.txt", "secret")
    write(books / ".git" / "config", "not text of ours")
    single = write(tmp_path / "extra.txt", "alone")

    docs = text_documents([str(books), str(single)])

    assert [d.name for d in docs] == ["books/a.txt", "books/b.txt", "books/sub/c.md", "extra.txt"]
    assert docs[1].text == "second\r\nwith CRLF\n"
    assert docs[0].text == "first ✓"


def test_text_names_do_not_depend_on_where_the_folder_lives(tmp_path: Path) -> None:
    for place in ("one", "two/deeper"):
        write(tmp_path / place / "books" / "a.txt", "same")
    first = text_documents([str(tmp_path / "one" / "books")])
    second = text_documents([str(tmp_path / "two" / "deeper" / "books")])
    assert first == second


def test_missing_path_is_a_user_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(UserError, match="nope.txt"):
        text_documents([str(missing)])


def test_non_utf8_file_is_an_error_with_byte_and_offset(tmp_path: Path) -> None:
    bad = write(tmp_path / "docs" / "latin1.txt", b"caf\xe9 au lait")
    with pytest.raises(UserError) as error:
        text_documents([str(tmp_path / "docs")])
    message = str(error.value)
    assert "latin1.txt" in message and "0xe9" in message and "offset 3" in message
    assert "convert" in message
    assert bad.exists()


def test_binary_file_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "blob.bin", b"abc\x00\x01\x02")
    with pytest.raises(UserError, match=r"blob\.bin.*binary.*offset 3"):
        text_documents([str(tmp_path / "blob.bin")])


def test_two_inputs_with_the_same_name_are_an_error(tmp_path: Path) -> None:
    a = write(tmp_path / "x" / "notes.txt", "one")
    b = write(tmp_path / "y" / "notes.txt", "two")
    with pytest.raises(UserError, match="both named 'notes.txt'"):
        text_documents([str(a), str(b)])


# ------------------------------------------------------------------------------------------------------------
# The standard library and the Hugging Face hub


def test_stdlib_corpus() -> None:
    skipped: list[str] = []
    docs = stdlib_documents(skipped)
    names = [d.name for d in docs]
    assert len(docs) > 200
    assert names == sorted(names)
    assert "os.py" in names and "json/__init__.py" in names
    for name in names:
        parts = name.split("/")
        assert not {"site-packages", "dist-packages", "test", "tests", "idle_test"} & set(parts), name
        assert not parts[-1].startswith("test_") and name.endswith(".py")
    assert len(skipped) < 10


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No network and a private cache for `datasets`, so a test can never download or litter ~/.cache."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


@pytest.mark.usefixtures("offline_hub")
def test_hub_loader_reads_a_local_data_set(tmp_path: Path) -> None:
    rows = [{"text": f"story number {i}", "id": i} for i in range(5)]
    data = write_jsonl(tmp_path / "stories" / "part-0.jsonl", rows)

    docs = hub_documents(str(data), "train", "text", max_documents=3)
    assert docs == [Document(f"part-0.jsonl/train/{i:07d}", f"story number {i}") for i in range(3)]

    folder_docs = hub_documents(str(tmp_path / "stories"), "train", "text", max_documents=100)
    assert [d.text for d in folder_docs] == [r["text"] for r in rows]
    assert folder_docs[0].name == "stories/train/0000000"

    cfg = DataConfig(source="hub", hub_dataset=str(data), hub_max_documents=4)
    assert len(load_documents(cfg)) == 4


@pytest.mark.usefixtures("offline_hub")
def test_hub_loader_errors_are_user_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"body": "x", "n": 1}])
    with pytest.raises(UserError, match="no field 'text'; its fields are body, n"):
        hub_documents(str(data), "train", "text", 10)
    with pytest.raises(UserError, match="holds int, not text"):
        hub_documents(str(data), "train", "n", 10)

    import datasets

    def unreachable(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    # The Hub answers the quick try (tests/data/test_hub.py has it refuse) and then the load fails.
    monkeypatch.setattr(sources, "require_hub", lambda what, fix: None)
    with pytest.raises(UserError, match="could not load data set 'someone/stories'.*internet"):
        hub_documents("someone/stories", "train", "text", 10)


def test_hub_loader_without_datasets_says_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(UserError, match="pip install datasets"):
        hub_documents("someone/stories", "train", "text", 10)


# ---------------------------------------------------------------------------------------------------------------
# --text inputs that are not text files: refused by name, never opened (a FIFO would block the read forever)


@pytest.fixture
def guard() -> Iterator[None]:
    """Fail after 30 s instead of hanging the suite if a FIFO is ever opened for reading."""

    def timeout(signum: int, frame: object) -> None:
        raise TimeoutError("reading the --text paths hung")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(os.path.relpath(path))  # relative: socket paths are limited to 108 bytes
        sock.close()
    elif kind == "broken link":
        os.symlink("missing.txt", path)
    elif kind == "link loop":
        os.symlink(path.name, path)
    elif kind == "link to a folder":
        (path.parent.parent / "elsewhere").mkdir()
        os.symlink("../elsewhere", path)


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("fifo", "is a named pipe (FIFO); octlm reads only files and folders"),
        ("socket", "is a socket"),
        ("broken link", "is a broken symbolic link (to 'missing.txt'); remove it or point it at a file"),
        ("link loop", "is a symbolic link loop"),
        ("link to a folder", "is a symbolic link to a folder, which a --text folder walk does not follow"),
    ],
)
def test_entries_that_are_not_text_files_are_refused_by_name(
    kind: str, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: None
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = Path("books")
    write(folder / "a.txt", "alpha\n")
    _special(kind, folder / "odd")
    with pytest.raises(UserError) as info:
        text_documents(["books"])
    assert str(info.value).startswith("'books/odd' " + needle), str(info.value)


def test_devices_and_fifos_given_directly_are_refused(tmp_path: Path, guard: None) -> None:
    with pytest.raises(UserError, match=r"^'/dev/null' is a character device"):
        text_documents(["/dev/null"])
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UserError, match="is a named pipe"):
        text_documents([str(tmp_path / "pipe")])


def test_a_fifo_swapped_in_after_the_check_is_still_not_read(tmp_path: Path, guard: None) -> None:
    """The read opens non-blocking and checks what it opened, so even a race with the check cannot hang."""
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UserError, match="is a named pipe"):
        sources._read_regular(tmp_path / "pipe")


def test_names_that_are_not_utf8_are_refused_with_their_bytes(tmp_path: Path) -> None:
    folder = tmp_path / "books"
    write(folder / "a.txt", "alpha\n")
    Path(os.fsdecode(bytes(folder) + b"/caf\xe9.txt")).write_text("beta\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"the file name b'.*/books/caf\\xe9.txt' is not UTF-8; rename it"):
        text_documents([str(folder)])
    bad = Path(os.fsdecode(bytes(tmp_path) + b"/l\xe9a"))
    bad.mkdir()
    with pytest.raises(UserError, match=r"l\\xe9a' is not UTF-8"):  # the path given itself
        text_documents([str(bad)])


def test_a_link_to_a_file_is_read_and_named_by_the_link(tmp_path: Path) -> None:
    """A link inside a folder (even to a file outside it) is the link's document; a folder given through a
    link keeps its target's name, as before."""
    outside = write(tmp_path / "outside" / "target.txt", "from outside\n")
    folder = tmp_path / "books"
    write(folder / "a.txt", "alpha\n")
    os.symlink(outside, folder / "b.txt")
    docs = text_documents([str(folder)])
    assert [(d.name, d.text) for d in docs] == [("books/a.txt", "alpha\n"), ("books/b.txt", "from outside\n")]
    os.symlink(folder, tmp_path / "alias")
    assert [d.name for d in text_documents([str(tmp_path / "alias")])] == ["books/a.txt", "books/b.txt"]


def test_read_errors_are_one_line_naming_the_file() -> None:
    """/proc/self/mem reads fail with EIO at offset 0 (a real I/O error, no mock)."""
    with pytest.raises(
        UserError, match=r"^could not read '/proc/self/mem': Input/output error \(EIO\); check"
    ):
        text_documents(["/proc/self/mem"])


def test_an_unlistable_folder_is_refused_not_skipped(tmp_path: Path) -> None:
    """os.walk drops folders it cannot list unless told otherwise; that would silently lose text."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        write(locked / "a.txt", "alpha\n")
        locked.chmod(0)
    else:  # permission bits do not stop root; the kernel still refuses another process's map_files
        locked = Path("/proc/1/map_files")
        try:
            os.listdir(locked)
            pytest.skip("this process may list /proc/1/map_files")
        except PermissionError:
            pass
        except OSError as error:
            pytest.skip(f"/proc/1/map_files: {error}")
    try:
        with pytest.raises(
            UserError, match=r"could not read folder '.*': Permission denied; check its permissions"
        ):
            text_documents([str(locked)])
    finally:
        if os.geteuid() != 0:
            locked.chmod(0o755)
