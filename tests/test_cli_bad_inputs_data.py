"""The bad-input catalogue, data side: numbers out of range, `--text` inputs that are not text files, data
folders that cannot be written, and text too short for the context, each refused before any work.

Same contract as tests/test_cli_bad_inputs.py: every case runs the real CLI, and ends with exit code 2, exactly one
stderr line naming the bad value, no traceback, and the workspace's file tree (paths, SHA-256, mtimes)
unchanged. The workspace (`text/`, and its token cache in `data/` for the tiny vocabulary) is built once per
module and copied for each case, so a case may break its copy freely.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tiny import PYTHON, quiet_env, run_cli, snapshot, tiny_flags, write_corpus

from octlm.config import config_from_dict
from octlm.data.cache import prepare_data
from octlm.data.corpus import split_documents
from octlm.data.sources import text_documents

VOCAB = "260"  # the tiny vocabulary; the template's cache in data/ is for this size


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`text/` (the tiny corpus: 4 training documents, 1 of validation, 1,169 validation tokens) and its cache."""
    root = tmp_path_factory.mktemp("template-data")
    before = Path.cwd()
    os.chdir(root)
    try:
        write_corpus(Path("text"))
        write_corpus(Path("skew"), files=4, lines=1, per_line=2)  # a few bytes of training text ...
        (val,) = split_documents(text_documents(["skew"]), 0.1)[1]
        Path(val.name).write_text("def class " * 300, encoding="utf-8")  # ... and 3 kB of validation
        Path("elsewhere").mkdir()
        (Path("elsewhere") / "more.txt").write_text("more text\n", encoding="utf-8")
        Path("afile").write_text("not a folder\n", encoding="utf-8")
        data = config_from_dict({"data": {"source": "text", "text": ["text"], "data_dir": "data"}}).data
        prepared = prepare_data(data, int(VOCAB), progress=False)
        assert (len(prepared.val), len(prepared.train)) == (1169, 4585)  # the lengths the cases below rely on
    finally:
        os.chdir(before)
    return root


@pytest.fixture
def workspace(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    ws = tmp_path / "ws"
    shutil.copytree(template, ws, symlinks=True)
    monkeypatch.chdir(ws)
    yield ws
    while IMMUTABLE:  # undo `chattr +i`, or the temporary folder cannot be removed
        subprocess.run(["chattr", "-i", str(ws / IMMUTABLE.pop())], capture_output=True, check=False)


# ---------------------------------------------------------------------------------------------------------------
# Setups


def _write(path: str, data: bytes | str) -> Callable[[], None]:
    def setup() -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)

    return setup


def _link(target: str, path: str) -> Callable[[], None]:
    return lambda: os.symlink(target, path)


def _fifo(path: str) -> Callable[[], None]:
    return lambda: os.mkfifo(path)


def _socket() -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("text/control.sock")  # relative: the 108-byte limit on socket paths
    sock.close()  # the socket file stays


def _bad_name(folder: bool) -> Callable[[], None]:
    def setup() -> None:
        if folder:
            os.mkdir(b"text/caf\xe9")
            Path(os.fsdecode(b"text/caf\xe9/inside.txt")).write_text("words\n", encoding="utf-8")
        else:
            Path(os.fsdecode(b"text/caf\xe9.txt")).write_text("words\n", encoding="utf-8")

    return setup


IMMUTABLE: list[str] = []  # folders a case made immutable, made mutable again after it


def _immutable(path: str) -> Callable[[], None]:
    """`chattr +i`: a folder read-only even for root (permission bits are not), where the file system has it."""

    def setup() -> None:
        Path(path).mkdir(exist_ok=True)
        done = subprocess.run(["chattr", "+i", path], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not available here: {done.stderr.strip()}")
        IMMUTABLE.append(path)

    return setup


def _needs_permission_error(path: str) -> Callable[[], None]:
    """/proc/1/mem: opening another process's memory is refused by the kernel (EACCES), even for root."""

    def setup() -> None:
        try:
            with open(path, "rb") as f:
                f.read(1)
        except PermissionError:
            return
        except OSError:
            pass
        pytest.skip(f"{path} does not raise EACCES here (this process may be allowed to read it)")

    return setup


# ---------------------------------------------------------------------------------------------------------------
# The catalogue: (argv, a piece of the one stderr line, optional setup)


@dataclass
class Case:
    argv: list[str]
    needle: str
    setup: Callable[[], None] | None = None


def corpus(*paths: str) -> list[str]:
    return ["corpus", "--text", *paths, "--data-dir", "data"]


def data(*flags: str) -> list[str]:
    return ["data", "--text", "text", "--vocab-size", VOCAB, *flags]


def train(name: str, text: str = "text", **model: int) -> list[str]:
    """A tiny new run in runs/<name>; nothing of it may exist after a refusal."""
    return ["train", *tiny_flags(Path("."), Path(text), model=model), "--name", name, "--no-progress"]


DIGITS_5000 = "9" * 5000

CASES: dict[str, Case] = {
    # Names: a misspelt one ends with the nearest; two spellings of one field that disagree are refused
    "misspelt position scheme": Case(["model", "--position", "rop"], "nope; did you mean rope?"),
    "misspelt config key": Case(
        ["model", "--set", "model.dmodel=3"], "unknown key model.dmodel; did you mean model.d_model?"
    ),
    "another library's key name": Case(
        ["train", "--set", "train.learning_rate=1e-3"],
        "unknown key train.learning_rate; did you mean train.lr?",
    ),
    "field flag and --set disagree": Case(
        ["train", "--position", "alibi", "--set", "model.position=rope"],
        "error: --position alibi and --set model.position=rope both set model.position; give only one",
    ),
    # Numbers, range-checked where they enter (`octlm model` and `octlm train` validate the whole config first)
    "nan rope base": Case(["model", "--rope-base", "nan"], "model.rope_base = nan"),
    "rope base of one": Case(["model", "--rope-base", "1"], "model.rope_base = 1.0 must be greater than 1"),
    "infinite learning rate": Case(["train", "--lr", "inf"], "train.lr = inf must be a finite number"),
    "learning rate overflowing to inf": Case(["train", "--lr", "1e400"], "train.lr = inf"),
    "dropout of one": Case(["model", "--dropout", "1"], "model.dropout = 1.0 must be in [0, 1)"),
    "validation fraction of one": Case(["train", "--val-fraction", "1"], "data.val_fraction = 1.0"),
    "seed past 64 bits": Case(
        ["train", "--seed", str(2**64)], "train.seed = 18446744073709551616 does not fit in 64 bits"
    ),
    "negative seed": Case(
        ["train", "--seed", "-1"],
        "train.seed = -1 must be at least 0 (torch seeds are unsigned 64-bit numbers)",
    ),
    "negative steps, said in words": Case(["train", "--steps", "-5"], "train.steps = -5 must be at least 1"),
    "seed of 5,000 digits": Case(
        ["train", "--seed", DIGITS_5000], "(5002 characters) must be a whole number"
    ),
    "width past 64 bits": Case(["model", "--d-model", str(2**70)], "model.d_model = 1180591620717411303424"),
    "vocabulary past uint32": Case(
        ["model", "--vocab-size", str(2**32 + 1)],
        "model.vocab_size = 4294967297 must be between 1 and 4,294,967,296",
    ),
    "context of 100 million": Case(
        ["model", "--context-length", "100000000"],
        "model.context_length = 100000000 must be between 1 and 16,777,216",
    ),
    "5,000 layers": Case(
        ["model", "--n-layers", "5000"], "model.n_layers = 5000 must be between 1 and 1,024"
    ),
    "batch of zero": Case(["train", "--batch-size", "0"], "train.batch_size = 0"),
    "sample of a million tokens": Case(
        ["train", "--sample-tokens", "1000000"], "train.sample_tokens = 1000000 must be between 0 and 100,000"
    ),
    "norm epsilon of zero": Case(["model", "--norm-eps", "0"], "model.norm_eps = 0.0 must be in (0, 1]"),
    "norm epsilon of two": Case(["model", "--norm-eps", "2"], "model.norm_eps = 2.0"),
    "negative weight decay": Case(["train", "--weight-decay", "-0.1"], "train.weight_decay = -0.1"),
    "decay that flips weights": Case(
        ["train", "--lr", "2", "--weight-decay", "0.5"], "train.lr * train.weight_decay = 2 * 0.5"
    ),
    "more kv heads than heads": Case(
        ["model", "--n-kv-heads", "8"], "model.n_kv_heads = 8 must be at most model.n_heads = 4"
    ),
    "beta2 of one": Case(["train", "--beta2", "1"], "train.beta2 = 1.0 must be in [0, 1)"),
    "min lr above lr": Case(
        ["train", "--min-lr", "0.01"], "train.min_lr = 0.01 must be at most train.lr = 0.003"
    ),
    "negative warmup": Case(["train", "--warmup-steps", "-5"], "train.warmup_steps = -5"),
    "one t5 bucket": Case(["model", "--t5-buckets", "1"], "model.t5_buckets = 1 must be between 2 and"),
    "no hub documents": Case(["train", "--hub-max-documents", "0"], "data.hub_max_documents = 0"),
    "empty data folder name": Case(["train", "--data-dir", ""], "data.data_dir is empty"),
    "run name climbing out of runs/": Case(
        ["train", "--name", "../escape"], "train.run_name = '../escape' must be one folder name"
    ),
    "empty --text path": Case(["corpus", "--text", ""], "data.text[0] is empty"),
    "NUL in a TOML path": Case(
        ["model", "--config", "nul.toml"],
        "data.data_dir = 'a\\x00b' holds a NUL",
        _write("nul.toml", '[data]\ndata_dir = "a\\u0000b"\n'),
    ),
    "TOML nan": Case(
        ["model", "--config", "nan.toml"],
        "model.sinusoidal_scale = nan",
        _write("nan.toml", "[model]\nsinusoidal_scale = nan\n"),
    ),
    "TOML integer past 64 bits": Case(
        ["model", "--config", "big.toml"],
        "train.steps = 1180591620717411303424 does not fit in 64 bits",
        _write("big.toml", f"[train]\nsteps = {2**70}\n"),
    ),
    "TOML integer of 5,000 digits": Case(
        ["model", "--config", "huge.toml"],
        "'huge.toml' is not valid TOML: Exceeds the limit",
        _write("huge.toml", f"[train]\nsteps = {DIGITS_5000}\n"),
    ),
    # --text inputs that are not text files: refused by name, never opened
    "broken link in a text folder": Case(
        corpus("text"),
        "'text/gone.txt' is a broken symbolic link (to 'nowhere.txt')",
        _link("nowhere.txt", "text/gone.txt"),
    ),
    "link loop in a text folder": Case(
        corpus("text"), "'text/loop' is a symbolic link loop", _link("loop", "text/loop")
    ),
    "link to a folder in a text folder": Case(
        corpus("text"), "'text/more' is a symbolic link to a folder", _link("../elsewhere", "text/more")
    ),
    "non-UTF-8 file name": Case(
        corpus("text"), "the file name b'text/caf\\xe9.txt' is not UTF-8", _bad_name(folder=False)
    ),
    "non-UTF-8 folder name": Case(
        corpus("text"), "the file name b'text/caf\\xe9' is not UTF-8", _bad_name(folder=True)
    ),
    "FIFO in a text folder": Case(corpus("text"), "'text/pipe' is a named pipe (FIFO)", _fifo("text/pipe")),
    "FIFO given as --text": Case(corpus("pipe", "text"), "'pipe' is a named pipe (FIFO)", _fifo("pipe")),
    "socket in a text folder": Case(corpus("text"), "'text/control.sock' is a socket", _socket),
    "device given as --text": Case(corpus("/dev/null", "text"), "'/dev/null' is a character device"),
    "file the kernel refuses to read": Case(
        corpus("/proc/1/mem", "text"),
        "could not read '/proc/1/mem': Permission denied (EACCES)",
        _needs_permission_error("/proc/1/mem"),
    ),
    "input/output error reading a file": Case(
        corpus("/proc/self/mem", "text"), "could not read '/proc/self/mem': Input/output error (EIO)"
    ),
    "--text path through a file": Case(corpus("afile/doc.txt"), "'afile/doc.txt': Not a directory"),
    "broken link given as --text": Case(
        corpus("gone"), "'gone' is a broken symbolic link", _link("nowhere", "gone")
    ),
    # Data folders that cannot be written, refused before the tokenizer is trained
    "data folder that is a file": Case(data("--data-dir", "afile"), "'afile' is a file, not a folder"),
    "data folder through a file": Case(data("--data-dir", "afile/cache"), "'afile' is a file, not a folder"),
    "data folder a broken link": Case(
        data("--data-dir", "dangling"), "'dangling' is a broken symbolic link", _link("nowhere", "dangling")
    ),
    "immutable data folder": Case(
        ["data", "--text", "text", "--vocab-size", "270", "--data-dir", "ro"],
        "operation not permitted (an immutable or append-only attribute, or a protected path) (EPERM)",
        _immutable("ro"),
    ),
    "corpus manifest into a file": Case(
        ["corpus", "--text", "text", "--data-dir", "afile"], "'afile/corpus-"
    ),
    "vocabulary too small, before loading": Case(
        data("--vocab-size", "100"), "vocab_size = 100 is too small"
    ),
    # Text too short for the context, refused before a run folder or a step
    "context longer than the validation stream": Case(
        train("long", context_length=1200), "the validation stream has 1,169 tokens (1 document, 1,248 bytes)"
    ),
    "context longer than all the text": Case(
        train("longer", context_length=9000), "the training stream has at most 4,991 tokens"
    ),
    "training stream shorter than one window": Case(
        train("skewed", "skew", context_length=600), "the training stream has at most 39 tokens"
    ),
}


@pytest.fixture
def alarm() -> Iterator[None]:
    """A case that hangs (a FIFO opened for reading) fails after 60 s instead of hanging the suite."""

    def timeout(signum: int, frame: object) -> None:
        raise TimeoutError("the command hung")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def check_one_line(code: int, err: str, needle: str) -> None:
    assert "Traceback" not in err, err
    assert code == 2, f"exit code {code}, stderr: {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith("octlm") and "error:" in lines[0], lines[0]
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert len(lines[0]) < 500, f"{len(lines[0])} characters: a value was not cut short"


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name: str, workspace: Path, alarm: None) -> None:
    case = CASES[name]
    if case.setup is not None:
        case.setup()
    before = snapshot(workspace)
    code, _out, err = run_cli(case.argv)
    check_one_line(code, err, case.needle)
    after = snapshot(workspace)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"files written or changed: {changed}"


def test_catalogue_size() -> None:
    # issue 31 added "negative steps, said in words"; issue 47 three misspelt names and one disagreement
    assert len(CASES) == 59


# ---------------------------------------------------------------------------------------------------------------
# Real processes: a FIFO that would block forever, and a real full disk (RLIMIT_FSIZE) while encoding


def test_fifo_never_hangs_a_real_process(workspace: Path) -> None:
    os.mkfifo("text/pipe")
    proc = subprocess.run(
        [PYTHON, "-m", "octlm", "corpus", "--text", "text", "--data-dir", "data"],
        cwd=workspace,
        env=quiet_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    check_one_line(proc.returncode, proc.stderr, "'text/pipe' is a named pipe (FIFO)")


def test_file_size_limit_while_encoding_is_one_line_and_leaves_no_temporary(workspace: Path) -> None:
    """With RLIMIT_FSIZE at 4 KiB, tokenizer.json (2.8 kB) and meta.json fit and train.bin (9.2 kB) does not:
    a real EFBIG in the middle of the token files, whose fix is the limit, not free space."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    proc = subprocess.run(
        [PYTHON, "-m", "octlm", "data", "--text", "text", "--data-dir", "fresh", "--vocab-size", VOCAB],
        cwd=workspace,
        env=quiet_env(),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )
    check_one_line(
        proc.returncode,
        proc.stderr,
        "file too large for the file-size limit or the file system: `ulimit -f` is 4096 bytes here (EFBIG)",
    )
    (cache,) = (workspace / "fresh").iterdir()
    assert sorted(p.name for p in cache.iterdir()) == ["meta.json", "tokenizer.json"]  # no half token file


def test_a_complete_cache_is_reused_from_a_read_only_folder(workspace: Path) -> None:
    """A read-only cache (a shared, prepared data folder) needs no write: reading it is not refused."""
    _immutable("data")()
    before = snapshot(workspace)
    code, out, err = run_cli(data("--data-dir", "data"))
    assert (code, err) == (0, ""), err
    assert "reused cached files" in out
    assert snapshot(workspace) == before
