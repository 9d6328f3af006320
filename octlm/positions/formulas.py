"""The position formulas as plain functions of tensors: what the schemes compute, and what the web site's
TypeScript (`web/src/math.ts`) mirrors and is tested against (`octlm export fixtures`).

The sinusoidal table, RoPE's frequencies and rotation, ALiBi's slopes and bias, T5's buckets, the addition of
a position table to token vectors, and the cosine similarity of rows. Each is checked against an independent
reference in the tests (a NumPy re-derivation, a real library, or a property such as "the RoPE score depends
only on the distance").
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from octlm.errors import UserError


def sinusoidal_table(length: int, width: int, base: float = 10000.0) -> Tensor:
    """The fixed sinusoidal table of Vaswani et al., `[length, width]` float32.

    Column pair i of position t holds sin and cos of t / base^(2i / width): sin in column 2i, cos in 2i + 1.
    Computed in float64 and cast once, so that large positions keep their precision.
    """
    if width % 2:
        raise UserError(f"the sinusoidal table needs an even width (sin and cos pairs), got width {width}")
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # [T, 1]
    inv_freq = base ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)  # [C/2]
    angle = position * inv_freq  # [T, C/2]
    table = torch.stack((angle.sin(), angle.cos()), dim=-1).reshape(length, width)  # interleave sin, cos
    return table.to(torch.float32)


def add_positions(token_vectors: Tensor, position_rows: Tensor) -> Tensor:
    """`[B, T, C]` token vectors plus `[T, C]` position rows, broadcast over the batch.

    This is where a mismatch in context length or width first shows, so the error names both shapes.
    """
    if token_vectors.shape[-2:] != position_rows.shape:
        raise UserError(
            f"cannot add position table of shape {list(position_rows.shape)} to token vectors of shape "
            f"{list(token_vectors.shape)}: the position table must be "
            f"[T, C] = {list(token_vectors.shape[-2:])}"
        )
    return token_vectors + position_rows


def rope_frequencies(head_dim: int, base: float = 10000.0) -> Tensor:
    """RoPE's angular frequency per channel pair, θ_i = base^(-2i / head_dim), `[head_dim // 2]` float64."""
    if head_dim % 2:
        raise UserError(f"RoPE rotates channel pairs and needs an even head size, got {head_dim}")
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "half") -> Tensor:
    """Rotate channel pairs of `x` `[..., T, D]` by the angles whose cos/sin are `[T, D/2]`.

    A pair (a, b) becomes (a cos φ - b sin φ, a sin φ + b cos φ). The `half` layout (Llama, Hugging Face)
    pairs channel i with i + D/2; the `interleaved` layout (the RoFormer paper) pairs 2i with 2i + 1.
    """
    if layout == "half":
        a, b = x.chunk(2, dim=-1)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    if layout == "interleaved":
        pairs = x.unflatten(-1, (-1, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    raise UserError(f"unknown RoPE layout {layout!r}; choose half or interleaved")


def rope_rotate(x: Tensor, positions: Tensor, base: float = 10000.0, layout: str = "half") -> Tensor:
    """Rotate `x` `[..., T, D]` for the given positions `[T]` (uncached; for tests, fixtures and teaching)."""
    angle = positions.to(torch.float64).unsqueeze(-1) * rope_frequencies(x.shape[-1], base)  # [T, D/2]
    return apply_rope(x, angle.cos().to(x.dtype), angle.sin().to(x.dtype), layout)


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's per-head slopes (Press et al., 2022), `[H]` float32.

    For a power of two n the slopes are the geometric sequence starting at 2^(-8/n) with that same ratio, so
    8 heads get 1/2, 1/4, ..., 1/256. Otherwise the paper takes the slopes of the nearest lower power of two
    and fills the remaining heads with every other slope of the next power of two.
    """

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads < 1:
        raise UserError(f"ALiBi needs at least one head, got {n_heads}")
    lower = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(lower)
    if lower != n_heads:
        slopes += geometric(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """ALiBi's score bias with the causal mask folded in, `[H, Tq, Tk]`: -slope·(q - k), -inf where k > q.

    The -inf goes into the `[Tq, Tk]` distances (as +inf) before the slopes multiply them, so the
    `[H, Tq, Tk]` result is written in one pass: long sequences build this per query chunk in every layer
    (octlm/model/decoder.py).
    """
    distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(0)).to(slopes.dtype)  # [Tq, Tk]
    distance.masked_fill_(distance < 0, float("inf"))  # -slope · inf = -inf: the causal mask
    return -slopes.view(-1, 1, 1) * distance


def t5_bucket(relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's causal relative-position bucket for `relative_position` = key position - query position.

    Distances below num_buckets / 2 get a bucket each; longer ones share logarithmically wider buckets up to
    `max_distance`, beyond which everything lands in the last bucket. Keys after the query count as distance 0
    (the causal mask hides them anyway).
    """
    distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    scaled = torch.log(distance.clamp(min=1).to(torch.float32) / max_exact) / math.log(
        max_distance / max_exact
    )
    large = (max_exact + (scaled * (num_buckets - max_exact)).to(torch.long)).clamp(max=num_buckets - 1)
    return torch.where(distance < max_exact, distance, large)


def cosine_similarity_matrix(x: Tensor) -> Tensor:
    """Cosine similarity between every pair of rows of `x` `[N, C]`, `[N, N]`. A zero row has similarity 0."""
    unit = x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    return unit @ unit.T
