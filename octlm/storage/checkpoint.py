"""Checkpoints: the weights, the optimizer and their description, written atomically, loaded without running
code.

A checkpoint is one folder inside a run folder (whose layout and file names are `octlm.storage.run`'s): the
weights as safetensors (a tied head stored once, as the token table), the optimizer state (torch.save, read
back with weights_only=True) and, written last, the description, config.json. Each file is serialized in
memory and written with plain file operations, so a failed write is the operating system's own OSError, errno
included, and becomes one UserError naming the file, the cause and the fix. The files go into a temporary
folder that is swapped in by renames once all are flushed (checkpoint -> previous, temporary -> checkpoint,
previous removed): a crash at any point leaves a complete current or previous checkpoint, the loader falls
back to the latter, and a reader that read across a swap reads again. The checkpoint folders are never
symbolic links.

The description's entries, all checked on every read (`validate_meta`):

    schema_version  int, 1 .. SCHEMA_VERSION
    step            int >= 0, at most config.train.steps
    config_name     str
    config          a valid config (`config_from_dict`) whose hash is sha256.config
    sha256          {name: 64 lower-case hex digits}: files, tokenizer, corpus, token streams and the config
    state           what the trainer saved; known entries are checked (rng, world_size, rank_rng,
                    tokens_seen, losses_since_eval), every tensor must decode to its recorded dtype and shape
    meta_sha256     {key: SHA-256 of that value's JSON} for every leaf of schema_version, step, config_name,
                    config and state: a hand edit is named by its key

`sha256` is left out of `meta_sha256` on purpose: each entry is checked against the thing it describes, so an
edit there is caught where it matters. Loading is safe with untrusted files: safetensors holds raw tensors
only, `torch.load(weights_only=True)` refuses pickled objects other than tensors and plain containers, and the
description is JSON, with the RNG states' byte tensors as base64 (`octlm.storage.jsonable.encode_tensors`).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from octlm.config import Config, config_from_dict
from octlm.errors import UserError, explain, first_line
from octlm.files import fsync_dir, write_durable
from octlm.hashing import meta_hashes, seal, sha256_bytes
from octlm.storage.jsonable import decode_tensors, encode_tensors, encoded_tensors, tensor_problem
from octlm.storage.run import META_FILE, MODEL_FILE, OPTIMIZER_FILE, Run

if TYPE_CHECKING:
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder

SCHEMA_VERSION = 1
TIED_KEY = "head.weight"  # stored once as token_embedding.weight when the head is tied
TABLE_KEY = "token_embedding.weight"
TOP_KEYS = ("schema_version", "step", "config_name", "config", "sha256", "state", "meta_sha256")
HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass
class Checkpoint:
    """`model_state` has every key `Decoder.load_state_dict` expects (tied head re-added)."""

    config: Config
    model_state: dict[str, Tensor]
    optimizer_state: dict[str, Any] | None
    step: int
    meta: dict[str, Any]  # config.json as read
    state: dict[str, Any] = field(default_factory=dict)  # what save_checkpoint was given, tensors restored
    path: Path | None = None  # the folder it was read from


# ------------------------------------------------------------------------------------------------------------
# The description: its hash table and every check of its entries


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _edited_key(meta: dict[str, Any], prefix: str = "") -> str | None:
    """The first key whose value differs from `meta_sha256` (missing, added or changed), or None."""
    recorded = meta.get("meta_sha256")
    if not isinstance(recorded, dict):
        return None
    actual = meta_hashes(meta)
    for key in [*recorded, *actual]:
        if key.startswith(prefix) and recorded.get(key) != actual.get(key):
            if key not in actual:
                return f"{key} (removed)"
            return f"{key} (added)" if key not in recorded else key
    return None


def _fail(path: Path, key: str, expected: str, value: Any) -> UserError:
    shown = json.dumps(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return UserError(
        f"{str(path)!r} has an invalid {key}: expected {expected}, found {shown}; it was edited or is "
        "corrupt, restore it or train again"
    )


def validate_meta(meta: dict[str, Any], path: Path) -> Config:
    """Check every entry of a checkpoint description (see the module docstring); return its config.

    Types and ranges first (a bad value is named with what was expected), then the config hash, then the
    `meta_sha256` table (an edit that still validates is named by its key).
    """
    for key in meta:
        if key not in TOP_KEYS:
            raise UserError(
                f"{str(path)!r} has an entry {key!r} octlm never writes; remove it or restore the file"
            )
    step = meta.get("step")
    if not _is_int(step) or step < 0:
        raise _fail(path, "step", "an integer >= 0", step)
    if not isinstance(meta.get("config_name", ""), str):
        raise _fail(path, "config_name", "a string", meta["config_name"])
    if not isinstance(meta.get("config"), dict):
        raise _fail(path, "config", "a JSON object", meta.get("config"))
    try:
        config = config_from_dict(meta["config"], name=str(meta.get("config_name", "custom")))
    except UserError as error:
        raise UserError(
            f"{str(path)!r} holds an invalid config ({error}); restore it or train again"
        ) from None
    if step > config.train.steps:
        raise _fail(path, "step", f"an integer <= config.train.steps ({config.train.steps})", step)
    _check_sha256_table(meta.get("sha256"), path)
    _check_state(meta.get("state", {}), config, step, path)
    _check_table(meta.get("meta_sha256", {}), "meta_sha256", path)
    if meta["sha256"].get("config") != config.hash():
        edited = _edited_key(meta, "config.")
        raise UserError(
            f"{str(path)!r} was modified: its config does not match its recorded config hash"
            + (f" ({edited} was edited)" if edited else "")
            + "; restore it or train again"
        )
    edited = _edited_key(meta)
    if edited:
        raise UserError(
            f"{str(path)!r} was edited by hand: {edited} does not match the hash recorded "
            "when it was written (meta_sha256); restore the file or train again"
        )
    return config


def _check_table(table: Any, key: str, path: Path) -> None:
    if not isinstance(table, dict):
        raise _fail(path, key, "a JSON object of SHA-256 digests", table)
    for name, digest in table.items():
        if not (isinstance(digest, str) and HEX64.fullmatch(digest)):
            raise _fail(path, f"{key}.{name}", "a SHA-256 (64 lower-case hex digits)", digest)


def _check_sha256_table(table: Any, path: Path) -> None:
    _check_table(table, "sha256", path)
    if "config" not in table:
        raise _fail(path, "sha256", "an entry 'config' (the config's SHA-256)", table)


def _check_state(state: Any, config: Config, step: int, path: Path) -> None:
    """The trainer's entries have the type, range and shape it writes; every tensor decodes."""
    if not isinstance(state, dict):
        raise _fail(path, "state", "a JSON object", state)
    for key, tensor in encoded_tensors(state, "state"):
        problem = tensor_problem(tensor)
        if problem:
            raise UserError(f"{str(path)!r} has an invalid {key}: {problem}; restore it or train again")
    if "rng" in state:
        _check_rng(state["rng"], path, "state.rng", ("torch", "batches"))
    world = state.get("world_size", 1)
    if not _is_int(world) or world < 1:
        raise _fail(path, "state.world_size", "an integer >= 1", world)
    if "rank_rng" in state:  # every DDP rank's own streams, in rank order
        ranks = state["rank_rng"]
        if not isinstance(ranks, list) or len(ranks) != world:
            raise _fail(path, "state.rank_rng", f"a list of {world} (world_size) rank states", ranks)
        for i, rank in enumerate(ranks):
            _check_rng(rank, path, f"state.rank_rng[{i}]", ("torch",))
    if "tokens_seen" in state:
        tokens = step * config.train.batch_size * config.model.context_length * world
        if state["tokens_seen"] != tokens or not _is_int(state["tokens_seen"]):
            expected = f"step x batch_size x context_length x world_size = {tokens}"
            raise _fail(path, "state.tokens_seen", expected, state["tokens_seen"])
    losses = state.get("losses_since_eval", [])
    finite = isinstance(losses, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in losses
    )
    if not finite or len(losses) > step:
        raise _fail(path, "state.losses_since_eval", f"a list of at most {step} finite numbers", losses)


def _check_rng(rng: Any, path: Path, key: str, names: tuple[str, ...]) -> None:
    """`names` (torch, batches): the CPU generator's byte state [5056] each; cuda: a byte vector."""
    if not isinstance(rng, dict) or not set(names) <= set(rng) <= {*names, "cuda"}:
        want = f"an object with {', '.join(names)} (and on CUDA, cuda) states"
        raise _fail(path, key, want, rng)
    cpu_size = torch.get_rng_state().numel()
    for name, value in rng.items():
        shape = value.get("shape") if isinstance(value, dict) else None
        if name == "cuda":
            ok, want = isinstance(shape, list) and len(shape) == 1 and shape[0] >= 1, "[n]"
        else:
            ok, want = shape == [cpu_size], f"[{cpu_size}]"
        if not (ok and value.get("__tensor__") == "uint8"):
            raise _fail(path, f"{key}.{name}", f"a uint8 tensor of shape {want}", value)


def read_meta(folder: Path) -> dict[str, Any]:
    """A checkpoint folder's config.json, every entry checked (`validate_meta`)."""
    return _read_description(folder)[0]


def _read_description(folder: Path) -> tuple[dict[str, Any], Config]:
    """A checkpoint folder's config.json, every entry checked, and the config it holds."""
    path = folder / META_FILE
    try:
        meta = json.loads(_read(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise UserError(
            f"{str(path)!r} is unreadable or not valid JSON ({error}); the checkpoint is corrupt"
        ) from None
    if not isinstance(meta, dict):
        raise UserError(f"{str(path)!r} is not a checkpoint description (expected a JSON object)")
    version = meta.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise UserError(f"{str(path)!r} has no schema_version; it was not written by octlm")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{str(path)!r} has schema_version {version}, newer than this octlm reads ({SCHEMA_VERSION}); "
            "upgrade octlm to load it"
        )
    if version < 1:
        raise UserError(f"{str(path)!r} has an invalid schema_version {version}")
    return meta, validate_meta(meta, path)


# ------------------------------------------------------------------------------------------------------------
# Save


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


def _torch_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _write_files(
    tmp: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None, meta: dict[str, Any]
) -> None:
    """Weights, optimizer state and (last) config.json into `tmp`, each flushed to the disk, then `tmp`
    itself.

    Each file is serialized in memory first: a library writing to the disk itself (safetensors' save_file,
    torch.save to a path) hides the errno of a failed write behind its own exception type.
    """
    from safetensors.torch import save

    payloads = {MODEL_FILE: save(weights_for_saving(model), metadata={"format": "pt"})}
    if optimizer is not None:
        payloads[OPTIMIZER_FILE] = _torch_bytes(optimizer.state_dict())
    for name, data in payloads.items():
        write_durable(tmp / name, data)
        meta["sha256"][name] = sha256_bytes(data)
    write_durable(tmp / META_FILE, (json.dumps(seal(meta), indent=2) + "\n").encode("utf-8"))
    fsync_dir(tmp)


def _kept(run: Run) -> str:
    try:
        folder = run.find_checkpoint()
        step = read_meta(folder)["step"]
    except UserError:
        return "no earlier checkpoint exists"
    return (
        f"the checkpoint of step {step} in {str(folder)!r} is kept; "
        f"resume from it with `octlm train --resume {run.path}`"
    )


def _write_error(run: Run, step: int, error: OSError) -> UserError:
    """One line: which file or folder, why (by its errno), the fix where it applies, and which checkpoint is
    kept."""
    path = Path(error.filename) if error.filename is not None else run.path
    old = run.old_checkpoint_dir
    if path == run.path or path in run.path.parents:  # making the run folder
        what, folder = "the run folder", path.parent
    elif path == run.checkpoint_dir or path == old or old in path.parents:  # the swap
        what, folder = (old if old in path.parents else path).name, old if old in path.parents else path
    else:  # a file of the new checkpoint, or its temporary folder
        what, folder = path.name, run.path
    return UserError(
        f"could not write the checkpoint of step {step} in {str(run.path)!r} ({what}): "
        f"{explain(error, folder)}; {_kept(run)}"
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
    run.check_checkpoint_layout()
    state = dict(state or {})
    hashes = {"config": config.hash(), **dict(state.pop("sha256", {}) or {})}
    meta = {
        "schema_version": SCHEMA_VERSION,
        "step": int(step),
        "config_name": config.name,
        "config": config.to_dict(),
        "sha256": hashes,
        "state": encode_tensors(state),
    }
    tmp = run.tmp_checkpoint_dir(os.getpid())
    try:
        run.path.mkdir(parents=True, exist_ok=True)
        run.remove_stale_checkpoints()
        tmp.mkdir()
        try:
            _write_files(tmp, model, optimizer, meta)
            run.swap_in_checkpoint(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as error:
        raise _write_error(run, int(step), error) from None
    return run.checkpoint_dir


# ------------------------------------------------------------------------------------------------------------
# Load


def _read(path: Path) -> bytes:
    """A file's bytes; its OSError (permission, I/O error, a folder in the way) as one line naming `path`."""
    try:
        return path.read_bytes()
    except OSError as error:
        raise UserError(
            f"could not read {str(path)!r}: {explain(error, path.parent, reading=True)}"
        ) from None


def _read_checked(path: Path, meta: dict[str, Any]) -> bytes:
    """The bytes of a checkpoint file, read once; a UserError when config.json vouches for other bytes."""
    expected = meta["sha256"].get(path.name)
    if not expected:
        raise UserError(
            f"{str(path.parent / META_FILE)!r} records no SHA-256 for {path.name}; the checkpoint is corrupt"
        )
    data = _read(path)
    if (actual := sha256_bytes(data)) != expected:
        raise UserError(
            f"{str(path)!r} was modified or corrupted: SHA-256 {actual[:16]}... does not match {META_FILE} "
            f"({expected[:16]}...); restore it or train again"
        )
    return data


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
    data = _read_checked(opt_path, meta)  # vouched for before anything is unpickled
    try:
        optimizer_state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
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
    the future and every entry is valid and unedited (`validate_meta`), model.safetensors parses
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


def _load_weights(path: Path, meta: dict[str, Any]) -> dict[str, Tensor]:
    """The tensors of model.safetensors, parsed (a pickle or any other file planted there is refused), then
    checked against their SHA-256."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    if not path.is_file():
        raise UserError(f"{str(path)!r} is missing; the checkpoint is incomplete")
    data = _read(path)  # a permission problem is not corruption
    try:
        weights = load(data)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise UserError(
            f"{str(path)!r} is not a valid safetensors file (truncated, corrupt or another format: "
            f"{error}); restore it or train again"
        ) from None
    _read_checked(path, meta)
    return weights


def _load_folder(folder: Path, map_location: str | torch.device, load_optimizer: bool) -> Checkpoint:
    meta, config = _read_description(folder)
    model_path = folder / MODEL_FILE
    weights = _load_weights(model_path, meta)
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
        state=decode_tensors(meta.get("state", {})),
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
            f"{str(expected)[:16]}...), "
            f"from {data}/{corpus}-v{ckpt.config.model.vocab_size}-*/tokenizer.json or a backup"
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
