"""Independent references for the position schemes: each re-derives a paper's formula in NumPy float64 or pure
Python, one pair or one position at a time, sharing no code with octlm. The schemes' own tests compare against
them, and so does the ONNX export's recomputation of the first layer's attention
(tests/interop/test_onnx_export.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from octlm.positions.fire import FirePositions


def np_sinusoidal(length: int, width: int, base: float) -> np.ndarray:
    """Vaswani et al.: P[t, 2i] = sin(t / base^(2i/C)), P[t, 2i+1] = cos(t / base^(2i/C)), in float64."""
    table = np.zeros((length, width), dtype=np.float64)
    for i in range(width // 2):
        angle = np.arange(length, dtype=np.float64) / base ** (2 * i / width)
        table[:, 2 * i] = np.sin(angle)
        table[:, 2 * i + 1] = np.cos(angle)
    return table


def np_rope(x: np.ndarray, positions: np.ndarray, base: float, layout: str) -> np.ndarray:
    """Rotate pairs of the last axis of `x` [..., T, D] by position * base^(-2i/D), one pair at a time."""
    d = x.shape[-1]
    out = np.array(x, dtype=np.float64, copy=True)
    for i in range(d // 2):
        phi = positions.astype(np.float64) * base ** (-2.0 * i / d)  # [T]
        a_idx, b_idx = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
        a, b = x[..., a_idx].astype(np.float64), x[..., b_idx].astype(np.float64)
        out[..., a_idx] = a * np.cos(phi) - b * np.sin(phi)
        out[..., b_idx] = a * np.sin(phi) + b * np.cos(phi)
    return out


def paper_alibi_slopes(n: int) -> list[float]:
    """Press et al.'s reference `get_slopes`, transcribed from the paper's code (recursive)."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_alibi_slopes(2 * closest)[0::2][: n - closest]


def t5_bucket_reference(relative_position: int, num_buckets: int, max_distance: int) -> int:
    """T5's `_relative_position_bucket` with bidirectional=False, one integer at a time, from the formula."""
    n = max(-relative_position, 0)  # how far back the key is; future keys count as 0
    max_exact = num_buckets // 2
    if n < max_exact:
        return n
    large = max_exact + int(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return min(large, num_buckets - 1)


def np_xpos(x: np.ndarray, positions: np.ndarray, base: float, scale_base: float, key: bool) -> np.ndarray:
    """The paper's xPos, half layout, float64: pair i (channels i, i + D/2) turns by n · base^(-2i / D) and is
    multiplied by ζ_i^(±n / scale_base), ζ_i = (2i / D + 0.4) / 1.4, + for queries and - for keys."""
    d = x.shape[-1]
    out = np.empty(x.shape, dtype=np.float64)
    n = positions.astype(np.float64)
    for i in range(d // 2):
        phi, zeta = n * base ** (-2.0 * i / d), (2.0 * i / d + 0.4) / 1.4
        scale = zeta ** ((-n if key else n) / scale_base)
        a, b = x[..., i].astype(np.float64), x[..., i + d // 2].astype(np.float64)
        out[..., i] = (a * np.cos(phi) - b * np.sin(phi)) * scale
        out[..., i + d // 2] = (a * np.sin(phi) + b * np.cos(phi)) * scale
    return out


def np_fire(scheme: FirePositions, q_positions: np.ndarray, k_positions: np.ndarray) -> np.ndarray:
    """The paper's bias in float64, one (head, query, key) at a time from the formula, -inf for j > i."""
    p = {n: t.detach().double().numpy() for n, t in scheme.named_parameters()}
    c = abs(float(p["c"]))
    L = abs(float(p["threshold_scale"])) * scheme.initial_threshold
    out = np.empty((p["w2"].shape[0], len(q_positions), len(k_positions)))
    for a, i in enumerate(q_positions):
        for b, j in enumerate(k_positions):
            if j > i:
                out[:, a, b] = -np.inf
                continue
            x = math.log(c * (i - j) + 1) / math.log(c * max(L, i) + 1)
            out[:, a, b] = p["w2"] @ np.maximum(p["w1"] * x + p["b1"], 0.0) + p["b2"]
    return out


def np_cope_bias(q: np.ndarray, k: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The paper's formulas, one query-key pair at a time, float64; q `[B, H, T, D]`, k `[B, Hkv, T, D]`,
    positions 0 .. T - 1, table `[npos, D]`. Query head h reads key head h // (H / Hkv).

    g_it = σ(q_i · k_t / sqrt(D)); p_ij = min(Σ_{t=j}^{i} g_it, npos - 1);
    z_ij = (1 - w) q_i · e[⌊p⌋] + w q_i · e[⌈p⌉] with w = p - ⌊p⌋; -inf for j > i.
    """
    B, Hq, T, Dh = q.shape
    group = Hq // k.shape[1]
    npos = table.shape[0]
    out = np.full((B, Hq, T, T), -np.inf)
    for b in range(B):
        for h in range(Hq):
            for i in range(T):
                qi, keys = q[b, h, i], k[b, h // group]
                for j in range(i + 1):
                    p = 0.0
                    for t in range(j, i + 1):
                        p += 1.0 / (1.0 + math.exp(-float(qi @ keys[t]) / math.sqrt(Dh)))
                    p = min(p, npos - 1)
                    lo, hi = math.floor(p), math.ceil(p)
                    w = p - lo
                    out[b, h, i, j] = (1 - w) * float(qi @ table[lo]) + w * float(qi @ table[hi])
    return out
