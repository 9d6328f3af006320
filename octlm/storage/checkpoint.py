"""Checkpoints: the weights, the optimizer and their description, written atomically, loaded without running code.

A checkpoint is one folder inside a run folder (its layout and file names belong to `octlm.storage.run`): the weights
as safetensors (a tied head stored once, as the token table), the optimizer state (torch.save, read back with
weights_only=True) and, written last, the description (schema, step, config, RNG states, SHA-256 of everything).
Everything is written inside a temporary folder; after every file is fsynced the folder is swapped in by
renames (checkpoint -> previous, temporary -> checkpoint, previous removed). A crash at any point leaves a
complete current or a complete previous checkpoint, and the loader falls back to the latter when the former is
missing; a reader that read across a swap reads the new checkpoint again. A failed write is one UserError naming
the file, the cause (by its errno, found by writing the bytes again where a library hides it) and the fix; the
checkpoint folders are never symbolic links (nothing is renamed or deleted outside the run).

Loading is safe with untrusted files: safetensors holds raw tensors only, `torch.load(weights_only=True)`
refuses pickled objects other than tensors and plain containers, and the description is JSON. RNG states,
which are byte tensors, travel inside it as base64 (`octlm.storage.checkpoint_meta` checks every entry).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor, nn

from octlm.config.schema import Config, config_from_dict
from octlm.errors import UserError
from octlm.os_errors import WriteFailed, explain, first_line, stage
from octlm.storage.checkpoint_meta import decode, encode, seal
from octlm.storage.run import (
    META_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    SCHEMA_VERSION,
    Run,
    read_meta,
    write_meta,
)

if TYPE_CHECKING:
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder

T = TypeVar("T")  # what a read returns
TIED_KEY = "head.weight"  # stored once as token_embedding.weight when the head is tied
TABLE_KEY = "token_embedding.weight"


@dataclass
class Checkpoint:
    """`model_state` has every key `Decoder.load_state_dict` expects (tied head re-added)."""

    config: Config
    model_state: dict[str, Tensor]
    optimizer_state: dict[str, Any] | None
    step: int
    meta: dict[str, Any]  # config.json as read
    state: dict[str, Any] = field(
        default_factory=dict
    )  # the `state` passed to save_checkpoint, tensors restored
    path: Path | None = None  # the folder it was read from


# ------------------------------------------------------------------------------------------------------------
# Helpers


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_array(array: Any) -> str:
    """SHA-256 of an array's raw bytes (token memmaps)."""
    import numpy as np

    return hashlib.sha256(memoryview(np.ascontiguousarray(array)).cast("B")).hexdigest()


def _fsync(path: Path) -> None:
    """Flush a file to disk; an error (ENOSPC, EIO: the data did not reach the disk) propagates."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Flush a directory's entries (the renames); best effort, since not every OS or filesystem allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unwrap(model: nn.Module) -> nn.Module:
    """The plain module under DistributedDataParallel and/or torch.compile wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod  # type: ignore[assignment]
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def weights_for_saving(model: nn.Module) -> dict[str, Tensor]:
    """The state dict as contiguous CPU tensors, a tied head dropped (safetensors refuses aliased tensors)."""
    model = _unwrap(model)
    state = model.state_dict()
    tied = (
        TIED_KEY in state and TABLE_KEY in state and state[TIED_KEY].data_ptr() == state[TABLE_KEY].data_ptr()
    )
    return {k: v.detach().cpu().contiguous() for k, v in state.items() if not (tied and k == TIED_KEY)}


# ------------------------------------------------------------------------------------------------------------
# Save


def _torch_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def check_checkpoint_layout(run_dir: str | Path) -> None:
    """Refuse, before anything is written, what a checkpoint swap would write through or trip over.

    The run folder may itself be a link (runs/ on another disk is fine), but its checkpoint folders may not:
    renaming or deleting them would act on a folder outside the run.
    """
    run = Run.of(run_dir)
    if run.path.exists() and not run.path.is_dir():
        raise UserError(
            f"{str(run.path)!r} is a file, not a run folder; move it away or choose another --name"
        )
    for path in (run.checkpoint_dir, run.old_checkpoint_dir):
        if path.is_symlink():
            raise UserError(
                f"{str(path)!r} is a symbolic link (to {os.readlink(path)!r}); octlm writes checkpoints only "
                "inside the run folder, never through a link: replace the link by the folder it points to "
                "(rm the link, then mv that folder here), or make the whole run folder the link instead"
            )
        if path.exists() and not path.is_dir():
            raise UserError(f"{str(path)!r} is a file, not a checkpoint folder; move it out of the way")


def _remove_stale(run: Run) -> None:
    """Temporary folders left by a crash mid-save (never a complete checkpoint); a link is unlinked, not
    followed."""
    for stale in run.stale_tmp_dirs():
        with contextlib.suppress(OSError):  # whatever blocks it blocks our own mkdir too, which names it
            if stale.is_symlink() or not stale.is_dir():
                stale.unlink()
            else:
                shutil.rmtree(stale, ignore_errors=True)


def _write_files(
    tmp: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None, meta: dict[str, Any]
) -> None:
    """Weights, optimizer state and (last) config.json into `tmp`, each fsynced."""
    from safetensors.torch import save, save_file  # looked up per call: tests hook save_file

    weights, header = weights_for_saving(model), {"format": "pt"}
    model_path, opt_path = tmp / MODEL_FILE, tmp / OPTIMIZER_FILE
    stage(model_path, lambda: save_file(weights, str(model_path), metadata=header),
           lambda: save(weights, metadata=header))  # fmt: skip
    meta["sha256"][MODEL_FILE] = stage(model_path, lambda: sha256_file(model_path))
    if optimizer is not None:
        opt_state = optimizer.state_dict()
        stage(opt_path, lambda: torch.save(opt_state, opt_path), lambda: _torch_bytes(opt_state))
        meta["sha256"][OPTIMIZER_FILE] = stage(opt_path, lambda: sha256_file(opt_path))
    sealed = seal(meta)
    stage(tmp / META_FILE, lambda: write_meta(tmp, sealed))
    for path in (model_path, opt_path, tmp / META_FILE):
        if path.exists():
            stage(path, functools.partial(_fsync, path))
    _fsync_dir(tmp)


def _swap(run: Run, tmp: Path) -> None:
    """checkpoint -> .checkpoint-old, tmp -> checkpoint, old removed; a failure keeps the previous one."""
    final, old = run.checkpoint_dir, run.old_checkpoint_dir
    if final.exists():
        if old.exists():  # `final` is complete, so an older fallback is no longer needed
            stage(old, lambda: shutil.rmtree(old), folder=old)
        stage(final, lambda: final.rename(old), folder=final)
    try:
        tmp.rename(final)
    except OSError as error:
        if old.is_dir() and not final.exists():
            with contextlib.suppress(OSError):
                old.rename(final)  # put the previous checkpoint back where readers look first
        raise WriteFailed(final, error, folder=run.path) from None
    _fsync_dir(run.path)
    shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(run.path)


def _kept(run: Run) -> str:
    try:
        folder = run.find_checkpoint()
        step = read_meta(folder)["step"]
    except UserError:
        return "no earlier checkpoint exists"
    return f"the checkpoint of step {step} in {str(folder)!r} is kept; resume from it with `octlm train --resume {run.path}`"


def _write_error(run: Run, step: int, failed: WriteFailed) -> UserError:
    """One line: which file, why (by errno), the fix, and which checkpoint is kept."""
    what = failed.path.name if failed.path != run.path else "the run folder"
    if failed.error is not None:
        folder = failed.folder or run.path
        if failed.path == run.path and failed.error.filename:
            folder = Path(failed.error.filename).parent
        why = explain(failed.error, folder)
    else:
        why = f"{failed.detail}, yet writing the same bytes again worked: the disk may be failing; check it"
    return UserError(
        f"could not write the checkpoint of step {step} in {str(run.path)!r} ({what}): {why}; {_kept(run)}"
    )


def save_checkpoint(
    run_dir: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    config: Config,
    step: int,
    state: dict[str, Any] | None = None,
) -> Path:
    """Write `run_dir/checkpoint/` atomically and return its path.

    `state` is anything JSON-able plus tensors (RNG states); its `sha256` entry (a dict of name -> hex digest,
    e.g. tokenizer and token files) is merged into config.json's `sha256` table; the rest is kept under
    `state`. A failed write (full disk, file-size limit, read-only or immutable folder) is a UserError naming
    the file, the cause found from its errno and the fix; the previous checkpoint stays, and no temporary
    folder is left.
    """
    run = Run.of(run_dir)
    check_checkpoint_layout(run.path)
    state = dict(state or {})
    hashes = {"config": config.hash(), **dict(state.pop("sha256", {}) or {})}
    meta = {"schema_version": SCHEMA_VERSION, "step": int(step), "config_name": config.name,
            "config": config.to_dict(), "sha256": hashes, "state": encode(state)}  # fmt: skip
    tmp = run.tmp_checkpoint_dir(os.getpid())
    try:
        stage(run.path, lambda: run.path.mkdir(parents=True, exist_ok=True))
        _remove_stale(run)
        stage(tmp, tmp.mkdir)
        try:
            _write_files(tmp, model, optimizer, meta)
            _swap(run, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except WriteFailed as failed:
        raise _write_error(run, int(step), failed) from None
    return run.checkpoint_dir


# ------------------------------------------------------------------------------------------------------------
# Load


def _read(path: Path, read: Callable[[], T]) -> T:
    """`read()`, its OSError (permission, I/O error, a folder in the way) as one line naming `path`."""
    try:
        return read()
    except OSError as error:
        raise UserError(
            f"could not read {str(path)!r}: {explain(error, path.parent, reading=True)}"
        ) from None


def _check_hash(path: Path, meta: dict[str, Any]) -> None:
    expected = meta["sha256"].get(path.name)
    if not expected:
        raise UserError(
            f"{str(path.parent / META_FILE)!r} records no SHA-256 for {path.name}; the checkpoint is corrupt"
        )
    actual = _read(path, lambda: sha256_file(path))
    if actual != expected:
        raise UserError(
            f"{str(path)!r} was modified or corrupted: SHA-256 {actual[:16]}... does not match {META_FILE} "
            f"({expected[:16]}...); restore it or train again"
        )


def _check_weights_fit(weights: dict[str, Tensor], config: Config, path: Path) -> None:
    """The stored tensors are the ones the config's model has, with its shapes; else name the first that
    is not (a state-dict error names nothing useful)."""
    from octlm.model.decoder import Decoder

    with torch.device("meta"):  # shapes only: nothing is allocated
        expected = {k: list(v.shape) for k, v in Decoder(config.model).state_dict().items()}
    problem = next(
        (f"it has no tensor {k!r} (shape {s})" for k, s in expected.items() if k not in weights), None
    )
    for key, shape in expected.items():
        if problem is None and key in weights and list(weights[key].shape) != shape:
            problem = f"tensor {key!r} has shape {list(weights[key].shape)}, the config's model needs {shape}"
    extra = [k for k in weights if k not in expected]
    problem = problem or (f"it has a tensor {extra[0]!r} the config's model does not" if extra else None)
    if problem:
        raise UserError(
            f"{str(path)!r} holds the weights of another model: {problem}; restore the run's own weights and "
            f"{META_FILE}, or train again"
        )


def _load_optimizer(opt_path: Path, meta: dict[str, Any], map_location: str | torch.device) -> dict[str, Any]:
    _check_hash(opt_path, meta)
    try:
        optimizer_state = torch.load(opt_path, map_location=map_location, weights_only=True)
    except OSError as error:
        raise UserError(
            f"could not read {str(opt_path)!r}: {explain(error, opt_path.parent, reading=True)}"
        ) from None
    except Exception as error:  # UnpicklingError for planted objects, others for truncation
        raise UserError(
            f"{str(opt_path)!r} was refused: it is not a plain tensor file that loads with "
            f"weights_only=True ({type(error).__name__}: {first_line(error)})"
        ) from None
    if not isinstance(optimizer_state, dict):
        raise UserError(f"{str(opt_path)!r} does not hold an optimizer state (a dict)")
    return optimizer_state


def load_checkpoint(
    run_dir: str | Path, map_location: str | torch.device = "cpu", load_optimizer: bool = True
) -> Checkpoint:
    """Read and verify the last complete checkpoint of `run_dir`. Every problem is a UserError.

    Checks, in order: the folder is a run with a checkpoint, config.json parses, its schema is not from
    the future and every entry is valid and unedited (`octlm.storage.checkpoint_meta`), model.safetensors parses
    (a pickle or any other file planted there does not), matches its SHA-256 and holds the tensors of the
    config's model with their shapes, and optimizer.pt (when asked for) matches its SHA-256 and loads with
    weights_only=True.
    """
    retries = 10  # a writer may swap a new checkpoint in while we read this one: then read the new one
    while True:
        folder = Run.of(run_dir).find_checkpoint()
        before = _identity(folder)
        try:
            return _load_folder(folder, map_location, load_optimizer)
        except UserError:
            if _identity(folder) == before or not retries:
                raise
            retries -= 1


def _identity(folder: Path) -> tuple[int, int] | None:
    """Which folder is at this path now: inode and change time (a reused inode number is a new folder)."""
    with contextlib.suppress(OSError):
        info = os.stat(folder)
        return info.st_ino, info.st_ctime_ns
    return None


def _load_folder(folder: Path, map_location: str | torch.device, load_optimizer: bool) -> Checkpoint:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta = read_meta(folder)  # validated, config included
    config = config_from_dict(meta["config"], name=str(meta.get("config_name", "custom")))

    model_path = folder / MODEL_FILE
    if not model_path.is_file():
        raise UserError(f"{str(model_path)!r} is missing; the checkpoint is incomplete")
    _read(model_path, lambda: open(model_path, "rb").close())  # a permission problem is not corruption
    try:
        weights = load_file(str(model_path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise UserError(
            f"{str(model_path)!r} is not a valid safetensors file (truncated, corrupt or another format: "
            f"{error}); restore it or train again"
        ) from None
    _check_hash(model_path, meta)
    if config.model.tie_embeddings and TABLE_KEY in weights and TIED_KEY not in weights:
        weights[TIED_KEY] = weights[TABLE_KEY]  # re-tie: the head reads the token table
    _check_weights_fit(weights, config, model_path)
    weights = {k: v.to(map_location) for k, v in weights.items()}

    optimizer_state = None
    opt_path = folder / OPTIMIZER_FILE
    if load_optimizer and opt_path.is_file():
        optimizer_state = _load_optimizer(opt_path, meta, map_location)
    elif load_optimizer and OPTIMIZER_FILE in meta["sha256"]:
        raise UserError(f"{str(opt_path)!r} is missing; the checkpoint is incomplete")
    return Checkpoint(
        config=config,
        model_state=weights,
        optimizer_state=optimizer_state,
        step=int(meta["step"]),
        meta=meta,
        state=decode(meta.get("state", {})),
        path=folder,
    )


def load_model(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[Decoder, Config, Tokenizer]:
    """The trained model (eval mode, on `device`), its config and its tokenizer, from a run folder."""
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder

    run_dir = Path(run_dir)
    ckpt = load_checkpoint(run_dir, map_location="cpu", load_optimizer=False)
    model = Decoder(ckpt.config.model)
    try:
        model.load_state_dict(ckpt.model_state, strict=True)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[0][:300]
        raise UserError(
            f"the weights in {str(run_dir)!r} do not fit the model its config describes ({first})"
        ) from None
    tokenizer_path = Run.of(run_dir).tokenizer_path
    expected = ckpt.meta["sha256"].get("tokenizer")
    if not tokenizer_path.exists() and not tokenizer_path.is_symlink():
        corpus, data = str(ckpt.meta["sha256"].get("corpus", "?"))[:12], ckpt.config.data.data_dir
        raise UserError(  # `octlm tokenizer` would train another one: the run needs the very one it used
            f"{str(tokenizer_path)!r} is missing; copy back the tokenizer the run was trained with (SHA-256 "
            f"{str(expected)[:16]}...), from {data}/{corpus}-v{ckpt.config.model.vocab_size}-*/tokenizer.json "
            "or a backup"
        )
    tokenizer = Tokenizer.load(tokenizer_path)
    if expected and tokenizer.sha256 != expected:
        raise UserError(
            f"{str(tokenizer_path)!r} was modified: SHA-256 {tokenizer.sha256[:16]}... does not match "
            f"the checkpoint's ({expected[:16]}...)"
        )
    if tokenizer.vocab_size > ckpt.config.model.vocab_size:
        raise UserError(
            f"tokenizer has {tokenizer.vocab_size} entries but the model only {ckpt.config.model.vocab_size}"
        )
    model.to(device).eval()
    return model, ckpt.config, tokenizer
