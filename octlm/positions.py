"""Every position scheme behind one small interface.

Attention compares queries with keys and has no notion of order beyond the causal mask, so a model must be told
where each token sits. There are three places to do it, and each scheme uses at most one:

- `embed(x, positions)`: add a position vector to each token vector before the first block
  (learned table, sinusoidal formula);
- `rotate(q, k, positions)`: rotate query and key channel pairs by an angle proportional to the position,
  inside every attention layer (RoPE); values are never rotated;
- `bias(q_positions, k_positions)`: add a number to each attention score that depends on the distance
  (ALiBi's fixed slope, T5's learned buckets).

NoPE uses none of them: the causal mask is its only order information.

Every hook takes explicit integer positions, so decoding with a KV cache (new tokens at positions
`offset .. offset + T - 1`) goes through exactly the same code as a full forward pass.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from octlm.config import ModelConfig
from octlm.errors import UserError

UNBOUNDED_SCHEMES = ("sinusoidal", "rope", "alibi", "t5", "nope")


# ---------------------------------------------------------------------------------------------------------------
# The formulas, as plain functions (the web site's math and its fixtures mirror these)


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
            f"{list(token_vectors.shape)}: the position table must be [T, C] = {list(token_vectors.shape[-2:])}"
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

    The -inf goes into the `[Tq, Tk]` distances (as +inf) before the slopes multiply them, so the `[H, Tq, Tk]`
    result is written in one pass: long sequences build this per query chunk in every layer (octlm/model.py).
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


# ---------------------------------------------------------------------------------------------------------------
# The schemes, as modules behind one interface


class PositionScheme(nn.Module):
    """The interface every scheme implements; each default does nothing.

    `max_length` is the longest sequence the scheme can describe (None: no maximum).
    """

    name = "nope"
    max_length: int | None = None

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Token vectors `[B, T, C]` plus position information; positions `[T]`."""
        return x

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Queries `[B, H, T, D]` and keys `[B, Hkv, T, D]` at `positions` `[T]`, rotated."""
        return q, k

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor | None:
        """Additive attention-score bias `[H, Tq, Tk]` (causal -inf included), or None."""
        return None

    @property
    def has_bias(self) -> bool:
        """Whether the scheme overrides `bias`. The model may then ask for any rows of it (query chunks)."""
        return type(self).bias is not PositionScheme.bias


class NoPositions(PositionScheme):
    """NoPE: no position signal at all; the causal mask alone tells a token what came before it."""

    name = "nope"


class LearnedPositions(PositionScheme):
    """A learned table with one row per position (GPT-2). It has no row past its last one."""

    name = "learned"

    def __init__(self, context_length: int, width: int) -> None:
        super().__init__()
        self.max_length = context_length
        self.table = nn.Embedding(context_length, width)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return add_positions(x, self.table(positions))


class SinusoidalPositions(PositionScheme):
    """The fixed sinusoidal table times `scale`, computed once and grown on demand; no maximum length.

    The waves have amplitude 1, but token rows start at std 0.02: added unscaled, position drowns out which
    token it is, and the day1 model sat at the unigram level (3.25 bits per byte) for its first ~750 steps.
    Scaling the table to the rows' starting size trains like the learned table (docs/LOG.md). `scale = 1`
    gives the unscaled sum of the seed and of Vaswani et al. (who multiplied token rows by sqrt(C) instead).
    """

    name = "sinusoidal"

    def __init__(self, width: int, base: float = 10000.0, initial_length: int = 128, scale: float = 1.0):
        super().__init__()
        self.width, self.base, self.scale = width, base, scale
        self.register_buffer("table", self._rows(initial_length), persistent=False)

    def _rows(self, length: int) -> Tensor:
        return sinusoidal_table(length, self.width, self.base) * self.scale

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        needed = int(positions[-1]) + 1
        if needed > self.table.shape[0]:
            # Grow to the next power of two so that decoding token by token rebuilds rarely.
            self.table = self._rows(2 ** math.ceil(math.log2(needed))).to(self.table.device)
        return add_positions(x, self.table[positions].to(x.dtype))


class RotaryPositions(PositionScheme):
    """RoPE (Su et al.): rotate query and key channel pairs by position × frequency inside attention.

    The cos/sin tables are non-persistent buffers grown on demand. `set_frequencies` swaps in scaled
    frequencies (position interpolation, NTK, YaRN) and an attention scaling factor that multiplies cos and sin
    (YaRN's temperature), as context-extension methods do at inference.
    """

    name = "rope"

    def __init__(self, head_dim: int, base: float = 10000.0, layout: str = "half", initial_length: int = 128):
        super().__init__()
        self.head_dim, self.layout = head_dim, layout
        self.inv_freq = rope_frequencies(head_dim, base)  # float64, [D/2]
        self.attention_scaling = 1.0
        self.register_buffer("cos", torch.empty(0), persistent=False)
        self.register_buffer("sin", torch.empty(0), persistent=False)
        self._build(initial_length)

    def set_frequencies(self, inv_freq: Tensor, attention_scaling: float = 1.0) -> None:
        """Replace θ_i (float64 `[D/2]`) and the cos/sin scaling; the cached tables are rebuilt."""
        self.inv_freq = inv_freq.to(torch.float64).cpu()
        self.attention_scaling = attention_scaling
        self._build(self.cos.shape[0])

    def _build(self, length: int) -> None:
        angle = torch.arange(length, dtype=torch.float64).unsqueeze(1) * self.inv_freq  # [T, D/2]
        device = self.cos.device
        self.cos = (angle.cos() * self.attention_scaling).to(torch.float32).to(device)
        self.sin = (angle.sin() * self.attention_scaling).to(torch.float32).to(device)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        needed = int(positions[-1]) + 1
        if needed > self.cos.shape[0]:
            self._build(2 ** math.ceil(math.log2(needed)))
        cos, sin = self.cos[positions].to(q.dtype), self.sin[positions].to(q.dtype)
        if self.layout == "half":
            return _HalfRotation.apply(q, cos, sin), _HalfRotation.apply(k, cos, sin)
        return apply_rope(q, cos, sin, self.layout), apply_rope(k, cos, sin, self.layout)


class _HalfRotation(torch.autograd.Function):
    """`apply_rope(x, cos, sin, "half")` with less memory traffic, for the hot path.

    The forward writes both halves straight into one output (no temporaries, no `cat`). A rotation's gradient
    is the inverse rotation, the same formula with -sin, so the backward is one more rotation instead of
    autograd's chain of products, a negation and a `cat` (RoPE's training overhead over learned positions
    fell from 13% to about 6% at config b; benchmarks/README.md). cos and sin are fixed tables: no gradient.
    """

    @staticmethod
    def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        out = torch.empty_like(x)
        (a, b), (out_a, out_b) = x.chunk(2, dim=-1), out.chunk(2, dim=-1)
        torch.mul(a, cos, out=out_a).addcmul_(b, sin, value=-1)  # a cos - b sin
        torch.mul(a, sin, out=out_b).addcmul_(b, cos)  # a sin + b cos
        return out

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        ctx.save_for_backward(cos, sin)
        return _HalfRotation.rotate(x, cos, sin)

    @staticmethod
    @once_differentiable  # the rotation writes with out=, which autograd cannot differentiate again
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        return _HalfRotation.rotate(grad, cos, -sin), None, None


class AlibiPositions(PositionScheme):
    """ALiBi: a fixed penalty proportional to distance, with a different slope per head."""

    name = "alibi"

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        return alibi_bias(self.slopes, q_positions, k_positions)


class T5Positions(PositionScheme):
    """T5's relative bias: one learned number per head and distance bucket, shared by all layers."""

    name = "t5"

    def __init__(self, n_heads: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, n_heads)

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """`[H, Tq, Tk]`, looked up per distance and gathered: one pass over the result, not the bucket
        formula's dozen (long sequences build this per query chunk in every layer, octlm/model.py).

        Every distance from `max_distance` on lands in the last bucket (the buckets never decrease and
        `max_distance` already reaches the last), so distances clamp to 0 .. max_distance, and -1 stands for
        every key after the query (-inf).
        """
        distances = torch.arange(self.max_distance + 1, device=self.table.weight.device)
        per_distance = self.table(t5_bucket(-distances, self.num_buckets, self.max_distance)).T  # [H, D+1]
        future = per_distance.new_full((per_distance.shape[0], 1), float("-inf"))
        values = torch.cat((future, per_distance), dim=1)  # [H, D+2]: column d + 1 holds distance d
        index = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(0)).clamp_(-1, self.max_distance) + 1
        return values.index_select(1, index.flatten()).view(-1, *index.shape)


def build_positions(config: ModelConfig) -> PositionScheme:
    """The position scheme named by `config.position`."""
    if config.position == "learned":
        return LearnedPositions(config.context_length, config.d_model)
    if config.position == "sinusoidal":
        return SinusoidalPositions(
            config.d_model, config.sinusoidal_base, config.context_length, config.sinusoidal_scale
        )
    if config.position == "rope":
        return RotaryPositions(config.head_dim, config.rope_base, config.rope_layout, config.context_length)
    if config.position == "alibi":
        return AlibiPositions(config.n_heads)
    if config.position == "t5":
        return T5Positions(config.n_heads, config.t5_buckets, config.t5_max_distance)
    if config.position == "nope":
        return NoPositions()
    raise UserError(f"unknown position scheme {config.position!r}")
