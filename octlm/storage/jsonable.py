"""Plain JSON values from what octlm computes: the one converter behind report.json, the web fixtures and
length.json.

Tensors and arrays become nested lists, NumPy scalars Python ones, tuples lists and dict keys strings. Floats
are rounded, so a file does not change with last-bit noise and stays short, and -0.0 is written as 0.0.
"""

from __future__ import annotations

import math
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
