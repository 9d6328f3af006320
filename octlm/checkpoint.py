"""Checkpoints: the weights, the optimizer and their description, written atomically, loaded without running code.

A checkpoint is one folder inside a run folder (its layout and file names belong to `octlm.run`): the weights
as safetensors (a tied output head is stored once, as the token table), the optimizer state (torch.save, read
back with weights_only=True), and the description (schema version, step, the full config, RNG states and the
SHA-256 of everything), written last.

Everything is written inside a temporary folder; after every file is fsynced the folder is swapped in by
renames (checkpoint -> previous, temporary -> checkpoint, previous removed). A crash at any point leaves a
complete current or a complete previous checkpoint, and the loader falls back to the latter when the former is
missing.

Loading is safe with untrusted files: safetensors holds raw tensors only, `torch.load(weights_only=True)`
refuses pickled objects other than tensors and plain containers, and the description is JSON. RNG states,
which are byte tensors, travel inside it as base64.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from octlm.config import Config, config_from_dict
from octlm.errors import UserError
from octlm.run import META_FILE, MODEL_FILE, OPTIMIZER_FILE, SCHEMA_VERSION, Run, read_meta, write_meta

if TYPE_CHECKING:
    from octlm.model import Decoder
    from octlm.tokenizer import Tokenizer

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


def _encode(value: Any) -> Any:
    """JSON-able form of `value`: tensors become {"__tensor__": dtype, "shape", "base64"}."""
    if isinstance(value, Tensor):
        t = value.detach().cpu().contiguous()
        raw = t.view(torch.uint8) if t.dtype != torch.uint8 else t
        data = raw.numpy().tobytes()
        return {
            "__tensor__": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "base64": base64.b64encode(data).decode("ascii"),
        }
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "__tensor__" in value:
            dtype = getattr(torch, str(value["__tensor__"]), None)
            if not isinstance(dtype, torch.dtype):
                raise UserError(f"checkpoint state names an unknown tensor type {value['__tensor__']!r}")
            data = bytearray(base64.b64decode(value["base64"]))
            flat = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
            return flat.view(dtype).reshape(value["shape"]).clone()
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


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
    `state`.
    """
    from safetensors.torch import save_file

    run = Run.of(run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    state = dict(state or {})
    extra_hashes = dict(state.pop("sha256", {}) or {})
    for stale in run.stale_tmp_dirs():  # left by a crash mid-save; never a complete checkpoint
        shutil.rmtree(stale, ignore_errors=True)
    tmp = run.tmp_checkpoint_dir(os.getpid())
    tmp.mkdir()
    try:
        save_file(weights_for_saving(model), str(tmp / MODEL_FILE), metadata={"format": "pt"})
        hashes = {"config": config.hash(), MODEL_FILE: sha256_file(tmp / MODEL_FILE)}
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
            hashes[OPTIMIZER_FILE] = sha256_file(tmp / OPTIMIZER_FILE)
        hashes.update(extra_hashes)
        meta = {
            "schema_version": SCHEMA_VERSION,
            "step": int(step),
            "config_name": config.name,
            "config": config.to_dict(),
            "sha256": hashes,
            "state": _encode(state),
        }
        write_meta(tmp, meta)
        for name in (MODEL_FILE, OPTIMIZER_FILE, META_FILE):
            if (tmp / name).exists():
                _fsync(tmp / name)
        _fsync_dir(tmp)

        final, old = run.checkpoint_dir, run.old_checkpoint_dir
        if final.exists():
            if old.exists():  # `final` is complete, so an older fallback is no longer needed
                shutil.rmtree(old)
            final.rename(old)
        tmp.rename(final)
        _fsync_dir(run.path)
        shutil.rmtree(old, ignore_errors=True)
        _fsync_dir(run.path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# ------------------------------------------------------------------------------------------------------------
# Load


def _check_hash(path: Path, meta: dict[str, Any]) -> None:
    expected = meta["sha256"].get(path.name)
    if not expected:
        raise UserError(
            f"{str(path.parent / META_FILE)!r} records no SHA-256 for {path.name}; the checkpoint is corrupt"
        )
    actual = sha256_file(path)
    if actual != expected:
        raise UserError(
            f"{str(path)!r} was modified or corrupted: SHA-256 {actual[:16]}... does not match {META_FILE} "
            f"({expected[:16]}...); restore it or train again"
        )


def load_checkpoint(
    run_dir: str | Path, map_location: str | torch.device = "cpu", load_optimizer: bool = True
) -> Checkpoint:
    """Read and verify the last complete checkpoint of `run_dir`. Every problem is a UserError.

    Checks, in order: the folder is a run with a checkpoint, config.json parses and its schema is not from
    the future, the config is valid and matches its recorded hash, model.safetensors parses (a pickle or any
    other file planted there does not) and matches its SHA-256, and optimizer.pt (when asked for) matches
    its SHA-256 and loads with weights_only=True.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Run.of(run_dir).find_checkpoint()
    meta = read_meta(folder)
    config = config_from_dict(meta["config"], name=str(meta.get("config_name", "custom")))
    if meta["sha256"].get("config") != config.hash():
        raise UserError(
            f"{str(folder / META_FILE)!r} was modified: its config does not match its recorded config hash"
        )

    model_path = folder / MODEL_FILE
    if not model_path.is_file():
        raise UserError(f"{str(model_path)!r} is missing; the checkpoint is incomplete")
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
    weights = {k: v.to(map_location) for k, v in weights.items()}

    optimizer_state = None
    opt_path = folder / OPTIMIZER_FILE
    if load_optimizer and opt_path.is_file():
        _check_hash(opt_path, meta)
        try:
            optimizer_state = torch.load(opt_path, map_location=map_location, weights_only=True)
        except Exception as error:  # UnpicklingError for planted objects, others for truncation
            first = (str(error).strip().splitlines() or [""])[0][:200]
            raise UserError(
                f"{str(opt_path)!r} was refused: it is not a plain tensor file that loads with "
                f"weights_only=True ({type(error).__name__}: {first})"
            ) from None
        if not isinstance(optimizer_state, dict):
            raise UserError(f"{str(opt_path)!r} does not hold an optimizer state (a dict)")
    elif load_optimizer and OPTIMIZER_FILE in meta["sha256"]:
        raise UserError(f"{str(opt_path)!r} is missing; the checkpoint is incomplete")

    try:
        state = _decode(meta.get("state", {}))
    except (ValueError, TypeError, KeyError, RecursionError, RuntimeError) as error:
        raise UserError(f"{str(folder / META_FILE)!r} has an unreadable `state` entry ({error})") from None
    return Checkpoint(
        config=config,
        model_state=weights,
        optimizer_state=optimizer_state,
        step=int(meta["step"]),
        meta=meta,
        state=state,
        path=folder,
    )


def load_model(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[Decoder, Config, Tokenizer]:
    """The trained model (eval mode, on `device`), its config and its tokenizer, from a run folder."""
    from octlm.model import Decoder
    from octlm.tokenizer import Tokenizer

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
    tokenizer = Tokenizer.load(tokenizer_path)
    expected = ckpt.meta["sha256"].get("tokenizer")
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
