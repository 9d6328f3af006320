"""A checkpoint's description (its config.json): the tensor encoding, every check of its entries, its hash.

Entries, all checked on every read (`validate_meta`, called by `octlm.storage.run.read_meta`):

    schema_version  int, 1 .. SCHEMA_VERSION (the reader checks the upper bound)
    step            int >= 0, at most config.train.steps
    config_name     str
    config          a valid config (`config_from_dict`) whose hash is sha256.config
    sha256          {name: 64 lower-case hex digits}: files, tokenizer, corpus, token streams and the config
    state           what the trainer saved; known entries are checked (rng, world_size, rank_rng,
                    tokens_seen, losses_since_eval), every tensor must decode to its recorded dtype and shape
    meta_sha256     {key: SHA-256 of that value's JSON} for every leaf of schema_version, step, config_name,
                    config and state: a hand edit is named by its key

The `sha256` table is left out of `meta_sha256` on purpose: each entry is checked against the thing it
describes (the file, the tokenizer, the corpus), so an edit there is caught where it matters. A checkpoint
written before `meta_sha256` existed (same schema, the entry is additive) is validated but cannot show edits.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from octlm.config.schema import Config, config_from_dict
from octlm.errors import UserError

TOP_KEYS = ("schema_version", "step", "config_name", "config", "sha256", "state", "meta_sha256")
HASHED_KEYS = ("schema_version", "step", "config_name", "config", "state")
HEX64 = re.compile(r"[0-9a-f]{64}")
TENSOR_DTYPES = (
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "bool",
)


# ------------------------------------------------------------------------------------------------------------
# Tensors inside JSON


def encode(value: Any) -> Any:
    """JSON-able form of `value`: tensors become {"__tensor__": dtype, "shape", "base64"}."""
    if isinstance(value, Tensor):
        t = value.detach().cpu().contiguous()
        raw = t.view(torch.uint8) if t.dtype != torch.uint8 else t
        return {
            "__tensor__": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "base64": base64.b64encode(raw.numpy().tobytes()).decode("ascii"),
        }
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def decode(value: Any) -> Any:
    """The inverse of `encode`, for a value `validate_meta` accepted."""
    if isinstance(value, dict):
        if "__tensor__" in value:
            dtype = getattr(torch, value["__tensor__"])
            data = bytearray(base64.b64decode(value["base64"]))
            flat = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
            return flat.view(dtype).reshape(value["shape"]).clone()
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def _tensor_problem(value: dict[str, Any]) -> str | None:
    """Why an encoded tensor does not decode, or None."""
    dtype, shape, data = value.get("__tensor__"), value.get("shape"), value.get("base64")
    if set(value) != {"__tensor__", "shape", "base64"}:
        return "a tensor entry must have exactly the keys __tensor__, shape and base64"
    if dtype not in TENSOR_DTYPES:
        return f"tensor type {dtype!r} is not one of {', '.join(TENSOR_DTYPES)}"
    if not isinstance(shape, list) or not all(_is_int(n) and n >= 0 for n in shape) or len(shape) > 8:
        return f"tensor shape {shape!r} must be a list of at most 8 non-negative integers"
    if not isinstance(data, str):
        return "tensor data (base64) must be a string"
    try:
        size = len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return "tensor data is not valid base64"
    needed = math.prod(shape) * getattr(torch, dtype).itemsize
    if size != needed:
        return f"tensor data is {size} bytes, but {dtype} of shape {shape} needs {needed}"
    return None


# ------------------------------------------------------------------------------------------------------------
# The hash of the entries


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _leaves(value: Any, key: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every leaf; an encoded tensor, a list or an empty dict is one leaf."""
    if isinstance(value, dict) and value and "__tensor__" not in value:
        for k, v in value.items():
            yield from _leaves(v, f"{key}.{k}")
    else:
        yield key, value


def meta_hashes(meta: dict[str, Any]) -> dict[str, str]:
    """{dotted key: SHA-256 of its canonical JSON} for the entries `meta_sha256` covers."""
    hashes = {}
    for top in HASHED_KEYS:
        if top in meta:
            for key, value in _leaves(meta[top], top):
                text = json.dumps(value, sort_keys=True, separators=(",", ":"))
                hashes[key] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return hashes


def seal(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` with its `meta_sha256` table (re)computed: what `save_checkpoint` writes."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return {**body, "meta_sha256": meta_hashes(body)}


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


# ------------------------------------------------------------------------------------------------------------
# Validation


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
            f"{str(path)!r} was edited by hand: {edited} does not match the hash recorded when it was written "
            "(meta_sha256); restore the file or train again"
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


def _tensors(value: Any, key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every encoded tensor inside `value`, with its dotted key."""
    if isinstance(value, dict):
        if "__tensor__" in value:
            yield key, value
        else:
            for k, v in value.items():
                yield from _tensors(v, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{key}[{i}]")


def _check_state(state: Any, config: Config, step: int, path: Path) -> None:
    """The trainer's entries have the type, range and shape it writes; every tensor decodes."""
    if not isinstance(state, dict):
        raise _fail(path, "state", "a JSON object", state)
    for key, tensor in _tensors(state, "state"):
        problem = _tensor_problem(tensor)
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
