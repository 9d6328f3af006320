"""RoPE (Su et al.) and p-RoPE (Barbero et al., 2025): queries and keys rotated inside every attention layer,
by position times a frequency per channel pair.

RoPE may rotate only a share of each head's channels (`model.rope_fraction`, GPT-NeoX / Pythia's
`rotary_pct`); p-RoPE keeps every channel but sets its lowest frequencies to 0, so that those pairs never
turn.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from octlm.positions.formulas import apply_rope, rope_frequencies
from octlm.positions.rope_scaling import scaled_frequencies
from octlm.positions.scheme import PositionScheme, register

if TYPE_CHECKING:
    from octlm.config import ModelConfig


def rotary_dims(head_dim: int, fraction: float = 1.0) -> int:
    """The channels of a head that RoPE rotates: GPT-NeoX's `int(head_dim × rotary_pct)`, rounded down to an
    even count (whole pairs)."""
    return int(head_dim * fraction) // 2 * 2


def prope_frequencies(head_dim: int, base: float = 10000.0, kept: float = 0.75) -> Tensor:
    """p-RoPE's θ_i, `[head_dim // 2]` float64: RoPE's base^(-2i / head_dim) for the `round(kept × D/2)`
    highest (i small, rounded half up), 0 for the rest (pairs that never rotate: channels free for
    content)."""
    theta = rope_frequencies(head_dim, base)
    keep = math.floor(kept * theta.shape[0] + 0.5)
    theta[keep:] = 0.0
    return theta


@register
class RotaryPositions(PositionScheme):
    """RoPE (Su et al.): rotate query and key channel pairs by position × frequency inside attention.

    Only the first `rotary_dims` channels of each head rotate (all of them unless `model.rope_fraction` < 1),
    with θ_i = base^(-2i / rotary_dims) over those channels in the chosen layout; the rest pass through
    untouched, exactly GPT-NeoX's `rotary_pct`. The cos/sin tables are non-persistent buffers grown on demand.
    `set_frequencies` swaps in scaled frequencies (position interpolation, NTK, YaRN) and an attention scaling
    factor that multiplies cos and sin (YaRN's temperature), as context-extension methods do at inference.
    A subclass changes the frequencies (p-RoPE) or the tables themselves (xPos: `tables`, `_build`, `_rows`);
    `rotate` = grow the tables, read the rows at the positions (`_rows`), `turn` queries and keys.
    """

    name = "rope"
    options = (
        "rope_base",
        "rope_layout",
        "rope_fraction",
        "rope_scaling",
        "rope_factor",
        "rope_original_length",
    )
    shows = ("frequencies",)
    tables: ClassVar[tuple[str, ...]] = (
        "cos",
        "sin",
    )  # the buffers `_build` fills, [length, rotary_dims / 2]

    @classmethod
    def from_config(cls, config: ModelConfig) -> RotaryPositions:
        dims = rotary_dims(config.head_dim, config.rope_fraction)
        rope = cls(config.head_dim, config.rope_base, config.rope_layout, config.context_length, dims)
        if config.rope_scaling != "none":  # a model fine-tuned (or to be) with rescaled frequencies
            rope.set_frequencies(
                *scaled_frequencies(
                    config.rope_scaling,
                    dims,
                    config.rope_base,
                    config.rope_factor,
                    config.rope_original_length,
                )
            )
        return rope

    @classmethod
    def problems(cls, config: ModelConfig) -> list[str]:
        if not (
            config.n_heads >= 1 and config.d_model % config.n_heads == 0 and 0 < config.rope_fraction <= 1
        ):
            return []  # the head size is not a whole number, or the fraction is out of range: named elsewhere
        if config.rope_fraction == 1:
            return _even_head_problems(cls.name, config)
        return _fraction_problems(config.head_dim, config.rope_fraction)

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        layout: str = "half",
        initial_length: int = 128,
        rotary_dims: int | None = None,
    ):
        super().__init__()
        self.head_dim, self.layout = head_dim, layout
        self.rotary_dims = head_dim if rotary_dims is None else rotary_dims
        self.inv_freq = rope_frequencies(self.rotary_dims, base)  # float64, [rotary_dims / 2]
        self.attention_scaling = 1.0
        for table in self.tables:
            self.register_buffer(table, torch.empty(0), persistent=False)
        self._build(initial_length)

    def frequencies(self) -> Tensor:
        """θ_i of each rotated pair, `[rotary_dims / 2]` float64: fewer than D/2 entries when
        rope_fraction < 1 (the other channels have no frequency at all), and 0 for a pair that never turns
        (p-RoPE)."""
        return self.inv_freq.clone()

    def set_frequencies(self, inv_freq: Tensor, attention_scaling: float = 1.0) -> None:
        """Replace θ_i (float64 `[rotary_dims / 2]`) and the cos/sin scaling; the cached tables are
        rebuilt."""
        if inv_freq.shape != self.inv_freq.shape:
            raise ValueError(
                f"{self.name} rotates {self.rotary_dims} channels of each head and needs "
                f"{self.rotary_dims // 2} frequencies, got shape {list(inv_freq.shape)}"
            )
        self.inv_freq = inv_freq.to(
            device=self.inv_freq.device, dtype=torch.float64
        )  # CPU (meta in a shape check)
        self.attention_scaling = attention_scaling
        self._build(self.cos.shape[0])

    def _angles(self, length: int) -> tuple[Tensor, Tensor]:
        """cos and sin (attention scaling included) of positions 0 .. length - 1, float64 `[length, P]`."""
        angle = torch.arange(length, dtype=torch.float64).unsqueeze(1) * self.inv_freq  # [T, P]
        return angle.cos() * self.attention_scaling, angle.sin() * self.attention_scaling

    def _build(self, length: int) -> None:
        cos, sin = self._angles(length)
        self._store(cos=cos, sin=sin)

    def _store(self, **tables: Tensor) -> None:
        """Cast float64 tables once to float32 and keep them where the old ones lived."""
        device = self.cos.device
        for table, values in tables.items():
            setattr(self, table, values.to(torch.float32).to(device))

    def _grow(self, needed: int) -> None:
        """Make the tables cover positions 0 .. needed - 1 (grown to a power of two, so rarely rebuilt)."""
        if needed > self.cos.shape[0]:
            self._build(2 ** math.ceil(math.log2(needed)))

    def _rows(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """cos and sin `[T, P]` at `positions` for the queries, then for the keys (the same for RoPE)."""
        cos, sin = self.cos[positions].to(dtype), self.sin[positions].to(dtype)
        return cos, sin, cos, sin

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        self._grow(int(positions[-1]) + 1)
        q_cos, q_sin, k_cos, k_sin = self._rows(positions, q.dtype)
        return self.turn(q, q_cos, q_sin), self.turn(k, k_cos, k_sin)

    def turn(self, x: Tensor, cos: Tensor, sin: Tensor, fused: bool = True) -> Tensor:
        """`x` `[..., T, D]` with its first rotary_dims channels turned by the angles of cos/sin `[T, P]`.

        `fused=False` uses the plain formula instead of `_HalfRotation` (for a graph exporter that cannot
        trace a custom autograd function); the numbers agree to float32 rounding.
        """
        r = self.rotary_dims
        if r < x.shape[-1]:  # GPT-NeoX's partial rotary: rotate a slice, pass the rest through
            return torch.cat((self.turn(x[..., :r], cos, sin, fused), x[..., r:]), dim=-1)
        if self.layout == "half" and fused:
            return _HalfRotation.apply(x, cos, sin)
        return apply_rope(x, cos, sin, self.layout)


@register
class PartialRotaryPositions(RotaryPositions):
    """p-RoPE (Barbero et al., 2025): RoPE keeping its `round(p × D/2)` highest frequencies and setting the
    lowest to 0, so those pairs never rotate and carry content alone. p = 1 is RoPE, p = 0 is NoPE."""

    name = "p-rope"
    family = "rope"
    options = ("rope_base", "rope_layout", "prope_fraction")

    @classmethod
    def from_config(cls, config: ModelConfig) -> PartialRotaryPositions:
        return cls(
            config.head_dim,
            config.rope_base,
            config.rope_layout,
            config.context_length,
            config.prope_fraction,
        )

    @classmethod
    def problems(cls, config: ModelConfig) -> list[str]:
        return _even_head_problems(cls.name, config)

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        layout: str = "half",
        initial_length: int = 128,
        kept: float = 0.75,
    ):
        super().__init__(head_dim, base, layout, initial_length)
        self.kept = kept
        # A zero frequency gives cos 1 and sin 0: the rotation leaves those pairs exactly as they were. Set
        # directly, not through set_frequencies: a model built on the meta device (checkpoint's shape check)
        # has no data to copy to the CPU.
        self.inv_freq = prope_frequencies(head_dim, base, kept)
        self._build(self.cos.shape[0])


class _HalfRotation(torch.autograd.Function):
    """`apply_rope(x, cos, sin, "half")` with less memory traffic, for the hot path.

    The forward writes both halves straight into one output (no temporaries, no `cat`). The gradient of a
    rotation is its transpose, the same formula with -sin, so the backward is one more rotation instead of
    autograd's chain of products, a negation and a `cat` (RoPE's training overhead over learned positions
    fell from 13% to about 6% at config b; benchmarks/README.md). That holds for a scaled rotation too (xPos
    folds its scale into cos and sin). cos and sin are fixed tables: no gradient.
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


def _even_head_problems(name: str, config: ModelConfig) -> list[str]:
    """A rotation turns channel pairs: the head size must be even (when it is a whole number at all)."""
    if config.n_heads >= 1 and config.d_model % config.n_heads == 0 and config.head_dim % 2:
        return [
            f"model.position = {name!r} needs an even head size, but d_model / n_heads = {config.head_dim}; "
            "change d_model or n_heads"
        ]
    return []


def _fraction_problems(head_dim: int, fraction: float) -> list[str]:
    """A fraction must leave at least one pair to rotate; name the smallest (short) fraction that does."""
    if rotary_dims(head_dim, fraction):
        return []
    # 2 / head_dim, shown rounded up to 4 significant digits (still a fraction that rotates one pair)
    digits = 3 - math.floor(math.log10(2 / head_dim))
    smallest = math.ceil(2 / head_dim * 10**digits) / 10**digits
    return [
        f"model.rope_fraction = {fraction!r} rotates "
        f"int({head_dim} × {fraction!r}) = {int(head_dim * fraction)} "
        f"of each head's {head_dim} channels, not a single pair; use at least {smallest!r} (2 / {head_dim})"
    ]
