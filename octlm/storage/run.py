"""A run folder: the one place that knows its layout, its file names and how its records are read and written.

    <train.out_dir>/<name>/        name: train.run_name, or <config name>-<position>
        tokenizer.json             a copy of the tokenizer the run was trained with
        metrics.jsonl              one JSON record per evaluation
        checkpoint/                the last complete checkpoint (octlm.storage.checkpoint writes it):
            model.safetensors      the weights
            optimizer.pt           the optimizer state
            config.json            schema version, step, config, RNG states, SHA-256 of everything
        .checkpoint-old/           the previous checkpoint, only for the moment of a swap (or after a crash)
        .checkpoint-tmp-<pid>/     a checkpoint being written
        report/                    what `octlm inspect` writes (probe/: what `octlm probe` writes)
        tensorboard/               TensorBoard event files, with `--log tensorboard` (octlm.training.tracking)
        .lock                      the writer's lock, holding its PID, while `octlm train` writes the folder
        .replaced/                 the previous run's files, while an `--overwrite` has no checkpoint of
                                   its own
        .replacing/                the same, while being moved (out of the way, or back after a failure)

One writer at a time: `Run.lock()` holds an `fcntl.flock` on `.lock` for the whole of a train or resume (the
kernel drops it when the process dies, so a lock is never stale); a second writer is refused, naming the PID.
Readers (generate, inspect, export) never lock. A new run in a folder that holds one (`--overwrite`) first
moves the old run's files into `.replaced/` (`set_aside`); `settle()` deletes them once the new run's first
checkpoint exists, and puts them back when the new run fails before it, or, after a crash, when the next
writer locks the folder. Metrics are written with O_NOFOLLOW: a symlink in the run folder is refused, never
written through.

Every other module asks a `Run` for a path or a record instead of spelling a file name. Reading never executes
code: config.json and metrics.jsonl are JSON, and every problem is a UserError naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.config import Config
from octlm.config.registry import nearest
from octlm.errors import UserError
from octlm.files import FILE_MODE, fsync_dir

CHECKPOINT = "checkpoint"
OLD_CHECKPOINT = ".checkpoint-old"
TMP_PREFIX = ".checkpoint-tmp-"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
META_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.jsonl"
REPORT_DIR = "report"
PROBE_DIR = "probe"  # inside report/: what `octlm probe` writes
PROBE_FILES = {"markdown": "probe.md", "json": "probe.json", "figure": "probe.png"}
TENSORBOARD_DIR = "tensorboard"
LOCK_FILE = ".lock"
REPLACED_DIR = ".replaced"
REPLACING_DIR = ".replacing"
# What a run consists of: what `--overwrite` sets aside, and what a failed new run leaves to be removed.
RUN_ENTRIES = (CHECKPOINT, OLD_CHECKPOINT, METRICS_FILE, TOKENIZER_FILE, TENSORBOARD_DIR, REPORT_DIR)


@dataclass(frozen=True)
class Run:
    """One run folder. Cheap to make: nothing is read until a method asks."""

    path: Path

    @classmethod
    def of(cls, path: str | Path | Run) -> Run:
        return path if isinstance(path, Run) else cls(Path(path))

    @classmethod
    def default(cls, config: Config) -> Run:
        """`<out_dir>/<run_name>`, or `<out_dir>/<config name>-<position>` when the config names no run."""
        name = config.train.run_name or f"{config.name}-{config.model.position}"
        return cls(Path(config.train.out_dir) / name)

    # --- layout -------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def old_checkpoint_dir(self) -> Path:
        return self.path / OLD_CHECKPOINT

    def tmp_checkpoint_dir(self, pid: int) -> Path:
        return self.path / f"{TMP_PREFIX}{pid}"

    def stale_tmp_dirs(self) -> Iterator[Path]:
        """Checkpoint folders left half-written by a crash: never complete, safe to delete."""
        return self.path.glob(TMP_PREFIX + "*")

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def report_dir(self) -> Path:
        return self.path / REPORT_DIR

    @property
    def probe_dir(self) -> Path:
        return self.report_dir / PROBE_DIR

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / TENSORBOARD_DIR

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def replaced_dir(self) -> Path:
        return self.path / REPLACED_DIR

    @property
    def replacing_dir(self) -> Path:
        return self.path / REPLACING_DIR

    def has_checkpoint(self) -> bool:
        """A checkpoint folder (complete or not) is there: a new run must not start over it by accident."""
        return self.checkpoint_dir.is_dir() or self.old_checkpoint_dir.is_dir()

    def is_run(self) -> bool:
        """The folder holds a run (a checkpoint, complete or not, or a metrics log): no export writes
        there."""
        return self.has_checkpoint() or self.metrics_path.is_file()

    def find_checkpoint(self) -> Path:
        """The folder of the last complete checkpoint, or a UserError saying why there is none."""
        run_dir = self.path
        if not run_dir.exists():
            raise UserError(f"run folder {str(run_dir)!r} does not exist; {_instead(run_dir)}")
        if not run_dir.is_dir():
            raise UserError(f"{str(run_dir)!r} is a file, not a run folder (runs/<name>/)")
        for folder in (self.checkpoint_dir, self.old_checkpoint_dir):
            if (folder / META_FILE).is_file():
                return folder
        if self.checkpoint_dir.is_dir():
            raise UserError(f"{str(self.checkpoint_dir)!r} has no {META_FILE}; the checkpoint is incomplete")
        if self.replaced_dir.is_dir() or self.replacing_dir.is_dir():
            raise UserError(
                f"run {str(run_dir)!r} has no checkpoint of its own yet: an --overwrite is replacing it and "
                f"has not written its first; the previous run is kept in {REPLACED_DIR}/ until then, and if "
                f"the new run died, the next `octlm train` here puts it back "
                f"(e.g. octlm train --resume {run_dir})"
            )
        if self.metrics_path.is_file() or self.tokenizer_path.is_file():
            raise UserError(
                f"run {str(run_dir)!r} has no checkpoint yet (it stopped before its first one); "
                "train it again with `octlm train`"
            )
        raise UserError(
            f"{str(run_dir)!r} is not an octlm run folder (no {CHECKPOINT}/ inside); "
            "pass a folder made by `octlm train`, e.g. runs/day1-learned"
        )

    def resume_source(self) -> Path:
        """The checkpoint a resume continues: the run's own or, when an --overwrite died before its first,
        the old run's in `.replaced/` (which `train` puts back, under the lock, before loading it)."""
        for aside in (self.replaced_dir, self.replacing_dir):
            if aside.is_dir() and not self.has_checkpoint() and Run(aside).has_checkpoint():
                return Run(aside).find_checkpoint()
        return self.find_checkpoint()

    # --- metrics.jsonl ------------------------------------------------------------------------------------
    def reset_metrics(self) -> None:
        """An empty metrics file: a new run starts its record."""
        with _open_inside(self.metrics_path, os.O_TRUNC):
            pass

    def append_metrics(self, record: dict[str, Any]) -> None:
        with _open_inside(self.metrics_path, os.O_APPEND) as f:
            f.write(json.dumps(record) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every readable record, in order; lines that are not JSON objects are skipped."""
        try:
            lines = self.metrics_path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def last_metrics(self) -> dict[str, Any]:
        """The last record (empty when there is none)."""
        records = self.read_metrics()
        return records[-1] if records else {}

    def truncate_metrics(self, up_to_step: int) -> None:
        """Keep the records of steps <= up_to_step: evaluations after a checkpoint are redone by the resume.
        A stop's own record (`"stopped": true`) goes too: the resumed run goes on past it, as if never
        stopped."""
        if not self.metrics_path.is_file():
            return
        kept = [r for r in self.read_metrics() if _step_of(r) <= up_to_step and r.get("stopped") is not True]
        tmp = self.metrics_path.with_name(f".{METRICS_FILE}.tmp")
        with _open_inside(tmp, os.O_TRUNC) as f:
            f.write("".join(json.dumps(r) + "\n" for r in kept))
        tmp.replace(self.metrics_path)

    def refuse_links(self) -> None:
        """A UserError when a file the run writes is a symlink: octlm never writes through one out of the
        run."""
        for path in (self.metrics_path, self.tokenizer_path, self.tensorboard_dir, self.lock_path):
            if path.is_symlink():
                raise UserError(
                    f"{str(path)!r} is a symbolic link (to {os.readlink(path)!r}); octlm writes only inside "
                    "the run folder: remove the link, or train under another --name"
                )

    # --- one writer: the lock ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder's writer lock (creating the folder); a UserError naming the holder's PID if taken.

        The lock file is removed on release (safe: a waiter that locked the removed file notices and retries).
        A writer that failed before writing anything leaves no trace: the folders it created are removed and
        the modification time of the folder it created them in is put back.
        """
        anchor = self.path if self.path.is_dir() else next(p for p in self.path.parents if p.is_dir())
        before, names = os.stat(anchor), set(os.listdir(anchor))
        created = [p for p in (self.path, *self.path.parents) if not p.exists()][::-1]
        fd = -1
        try:
            fd = self._acquire()
            yield
        finally:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.unlink(self.lock_path)  # ours: we hold it
                os.close(fd)
            for folder in reversed(created):
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty: nothing was written
            with contextlib.suppress(OSError):
                if set(os.listdir(anchor)) == names:
                    os.utime(anchor, ns=(before.st_atime_ns, before.st_mtime_ns))

    def _acquire(self) -> int:
        """Lock `.lock` (O_NOFOLLOW), write our PID into it and return its descriptor."""
        try:
            if self.path.exists() and not self.path.is_dir():
                raise FileExistsError(errno.EEXIST, "it is a file, not a folder", str(self.path))
            self.path.mkdir(parents=True, exist_ok=True)
            for _ in range(100):
                flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(self.lock_path, flags, FILE_MODE)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _holder(fd)
                    os.close(fd)
                    raise UserError(
                        f"run folder {str(self.path)!r} is in use: another octlm train (PID {holder}) is "
                        "writing it; wait for it to finish or stop it, or train under another --name"
                    ) from None
                if _same_file(fd, self.lock_path):
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                    return fd
                os.close(fd)  # locked a file its holder removed on release: lock the new one
            raise UserError(f"could not lock {str(self.lock_path)!r}: it keeps being replaced")
        except OSError as error:
            if error.errno == errno.ELOOP:
                self.refuse_links()
            raise UserError(
                f"cannot write in run folder {str(self.path)!r}: {error.strerror or error}; make it a "
                "writable folder, or choose another --out or --name"
            ) from None

    # --- the checkpoint folders: a new one swapped in whole --------------------------------------------
    def check_checkpoint_layout(self) -> None:
        """Refuse, before anything is written, what a checkpoint swap would write through or trip over.

        The run folder may itself be a link (runs/ on another disk is fine), but its checkpoint folders may
        not: renaming or deleting them would act on a folder outside the run.
        """
        if self.path.exists() and not self.path.is_dir():
            raise UserError(
                f"{str(self.path)!r} is a file, not a run folder; move it away or choose another --name"
            )
        for path in (self.checkpoint_dir, self.old_checkpoint_dir):
            if path.is_symlink():
                raise UserError(
                    f"{str(path)!r} is a symbolic link (to {os.readlink(path)!r}); octlm writes checkpoints "
                    "only inside the run folder, never through a link: replace the link by the folder it "
                    "points to (rm the link, then mv that folder here), or make the whole run folder the "
                    "link instead"
                )
            if path.exists() and not path.is_dir():
                raise UserError(f"{str(path)!r} is a file, not a checkpoint folder; move it out of the way")

    def remove_stale_checkpoints(self) -> None:
        """Temporary folders left by a crash mid-save (never a complete checkpoint); a link is unlinked, not
        followed."""
        for stale in self.stale_tmp_dirs():
            with contextlib.suppress(OSError):  # whatever blocks it blocks our own mkdir too, which names it
                if stale.is_symlink() or not stale.is_dir():
                    stale.unlink()
                else:
                    shutil.rmtree(stale, ignore_errors=True)

    def swap_in_checkpoint(self, tmp: Path) -> None:
        """checkpoint -> .checkpoint-old, tmp -> checkpoint, old removed; a failure keeps the previous one."""
        final, old = self.checkpoint_dir, self.old_checkpoint_dir
        if final.exists():
            if old.exists():  # `final` is complete, so an older fallback is no longer needed
                shutil.rmtree(old)
            final.rename(old)
        try:
            tmp.rename(final)
        except OSError as error:
            if old.is_dir() and not final.exists():
                with contextlib.suppress(OSError):
                    old.rename(final)  # put the previous checkpoint back where readers look first
            error.filename, error.filename2 = str(final), None  # what failed is the new checkpoint's place
            raise
        fsync_dir(self.path)
        shutil.rmtree(old, ignore_errors=True)
        fsync_dir(self.path)

    # --- replace, don't destroy ---------------------------------------------------------------------------
    def set_aside(self) -> bool:
        """Move the run's files into `.replaced/` (via `.replacing/`) for a new run; False if there were
        none."""
        present = [self.path / name for name in RUN_ENTRIES if os.path.lexists(self.path / name)]
        if not present:
            return False
        self.replacing_dir.mkdir()
        for path in present:
            path.rename(self.replacing_dir / path.name)
        self.replacing_dir.rename(
            self.replaced_dir
        )  # the commit: from here on, top-level files are the new run's
        fsync_dir(self.path)
        return True

    def settle(self) -> None:
        """Finish or undo a replacement: drop `.replaced/` once the run has a checkpoint of its own, else put
        the old run back (removing the new run's files). Safe to repeat after a crash at any point."""
        if self.replaced_dir.is_dir():
            if self.has_checkpoint():
                shutil.rmtree(self.replaced_dir)
                fsync_dir(self.path)
                return
            for name in RUN_ENTRIES:
                _remove(self.path / name)
            for stale in self.stale_tmp_dirs():
                _remove(stale)
            self.replaced_dir.rename(self.replacing_dir)
        if self.replacing_dir.is_dir():  # its entries belong at the top, where none of their names are
            for entry in self.replacing_dir.iterdir():
                entry.rename(self.path / entry.name)
            self.replacing_dir.rmdir()
            fsync_dir(self.path)


def _instead(run_dir: Path) -> str:
    """For a run folder that does not exist: the sibling folder closest to its name (a typo), else how to make
    one."""
    try:
        siblings = [p.name for p in run_dir.parent.iterdir() if p.is_dir()]
    except OSError:  # no parent folder either, or one that cannot be read
        siblings = []
    close = nearest(run_dir.name, siblings)
    return f"did you mean {str(run_dir.parent / close)!r}?" if close else "train one with `octlm train`"


def _open_inside(path: Path, mode: int) -> Any:
    """`path` opened for writing text without following a symlink (refused in one line instead)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | mode, FILE_MODE)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise UserError(
            f"{str(path)!r} is a symbolic link; octlm writes only inside the run folder: remove the link"
        ) from None
    return os.fdopen(fd, "w", encoding="utf-8")


def _holder(fd: int) -> str:
    """The PID in a lock file (its holder writes it just after locking: wait a moment for it)."""
    for _ in range(20):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.01)
    return "unknown"


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _step_of(record: dict[str, Any]) -> float:
    step = record.get("step", 0)
    return step if isinstance(step, (int, float)) else float("inf")
