"""Plain JSON values from what octlm computes, and tensors that travel inside JSON exactly.

`to_json` is the one converter behind report.json, the web fixtures and length.json: tensors and arrays become
nested lists, NumPy scalars Python ones, tuples lists and dict keys strings. Floats are rounded, so a file
does not change with last-bit noise and stays short, and -0.0 is written as 0.0.

`encode_tensors` keeps tensors bit for bit instead ({"__tensor__": dtype, "shape", "base64"}): a checkpoint's
RNG states travel in its config.json that way. `decode_tensors` is its inverse, for values `tensor_problem`
accepted.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch


def to_json(
    value: Any, digits: int, *, significant: bool = False, nonfinite: Literal["null", "mask"] = "null"
) -> Any:
    """`value` as plain JSON values, floats rounded to `digits` decimals (`significant`: significant digits).

    JSON has no NaN or infinity. `nonfinite="null"` writes each as null; `"mask"` writes only -inf as null
    (a masked attention entry) and raises ValueError on NaN and +inf, which there can only be a bug.
    """
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = (value.double() if value.is_floating_point() else value).tolist()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, dict):
        return {
            str(k): to_json(v, digits, significant=significant, nonfinite=nonfinite) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [to_json(v, digits, significant=significant, nonfinite=nonfinite) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, (float, np.floating)):
        return _float(float(value), digits, significant, nonfinite)
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def _float(value: float, digits: int, significant: bool, nonfinite: str) -> float | None:
    if not math.isfinite(value):
        if nonfinite == "null" or value == -math.inf:
            return None
        raise ValueError(f"{value!r} cannot be written as JSON")
    rounded = float(f"{value:.{digits}g}") if significant else round(value, digits)
    return 0.0 if rounded == 0 else rounded  # no "-0.0"


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


def encode_tensors(value: Any) -> Any:
    """JSON-able form of `value`: tensors become {"__tensor__": dtype, "shape", "base64"}."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        raw = t.view(torch.uint8) if t.dtype != torch.uint8 else t
        return {
            "__tensor__": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "base64": base64.b64encode(raw.numpy().tobytes()).decode("ascii"),
        }
    if isinstance(value, dict):
        return {str(k): encode_tensors(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_tensors(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def decode_tensors(value: Any) -> Any:
    """The inverse of `encode_tensors`, for a value whose tensors `tensor_problem` accepted."""
    if isinstance(value, dict):
        if "__tensor__" in value:
            dtype = getattr(torch, value["__tensor__"])
            data = bytearray(base64.b64decode(value["base64"]))
            flat = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
            return flat.view(dtype).reshape(value["shape"]).clone()
        return {k: decode_tensors(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_tensors(v) for v in value]
    return value


def tensor_problem(value: dict[str, Any]) -> str | None:
    """Why an encoded tensor does not decode, or None."""
    dtype, shape, data = value.get("__tensor__"), value.get("shape"), value.get("base64")
    if set(value) != {"__tensor__", "shape", "base64"}:
        return "a tensor entry must have exactly the keys __tensor__, shape and base64"
    if dtype not in TENSOR_DTYPES:
        return f"tensor type {dtype!r} is not one of {', '.join(TENSOR_DTYPES)}"
    if (
        not isinstance(shape, list)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        or len(shape) > 8
    ):
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


def encoded_tensors(value: Any, key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every encoded tensor inside `value`, with its dotted key."""
    if isinstance(value, dict):
        if "__tensor__" in value:
            yield key, value
        else:
            for k, v in value.items():
                yield from encoded_tensors(v, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from encoded_tensors(v, f"{key}[{i}]")
