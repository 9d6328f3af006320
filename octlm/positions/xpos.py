"""xPos (Sun et al., 2022, "A Length-Extrapolatable Transformer"): RoPE whose queries and keys are also
scaled, per channel pair and inversely, so that every score decays exponentially with the distance.

Pair i has a scale ζ_i = (2i / D + γ) / (1 + γ), γ = 0.4, in (0, 1). A query at position n is multiplied by
ζ_i^(n / scale_base) and a key at m by ζ_i^(-m / scale_base), so their product carries
ζ_i^((n - m) / scale_base): it shrinks with the distance and depends on n - m alone, as RoPE's rotation does.

Positions are absolute. x-transformers measures them from the middle of the sequence (t - T // 2) to halve the
range the scales span, but then a key's scale depends on how long the sequence is, and a key cached at one
length would be wrong at the next. The score is the same for any fixed origin, so octlm keeps origin 0 (a KV
cache stays valid) and pays for it in range: ζ_0^(-m / scale_base) grows without bound with m and leaves
float32 (2^128) past m = 128 ln 2 / ln(1 / ζ_0) × scale_base, about 36,000 positions at the default 512.
`XPosPositions.safe_length` stops at 2^±64, leaving the other half of float32's exponent range to the vectors
themselves: 18,130 positions at scale_base 512 (16,384 tokens fit), refused past it in one line rather than
computed as inf or NaN.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from octlm.errors import UserError
from octlm.positions.rotary import RotaryPositions, _even_head_problems
from octlm.positions.scheme import register

if TYPE_CHECKING:
    from octlm.config import ModelConfig

GAMMA = 0.4  # the paper's γ: ζ_i runs from γ / (1 + γ) ≈ 0.286 (pair 0, the fastest) towards 1
SCALE_LIMIT = 64  # the scales stay within 2^±64 (float32 spans 2^±128)


def xpos_scales(head_dim: int, gamma: float = GAMMA) -> Tensor:
    """ζ_i = (2i / D + γ) / (1 + γ) for pairs i = 0 .. D/2 - 1, `[D/2]` float64 (the paper's and
    x-transformers')."""
    return (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim + gamma) / (1 + gamma)


def xpos_safe_length(head_dim: int, scale_base: float, gamma: float = GAMMA) -> int:
    """Positions 0 .. L - 1 keep every scale ζ_i^(±t / scale_base) within 2^±SCALE_LIMIT; this is L."""
    # The smallest ζ (pair 0: γ / (1 + γ)) grows fastest. Plain floats: a model built on the meta device (the
    # checkpoint's shape check) has no tensor values to read.
    slowest = -math.log(gamma / (1 + gamma))
    return math.floor(SCALE_LIMIT * math.log(2) * scale_base / slowest) + 1


@register
class XPosPositions(RotaryPositions):
    """xPos: RoPE with queries scaled by ζ_i^(n / scale_base) and keys by ζ_i^(-m / scale_base).

    The scales are folded into the cos/sin tables (four of them: queries' and keys'), so the rotation, its
    fused half-layout kernel and its backward are RoPE's own.
    """

    name = "xpos"
    family = "rope"
    options = ("rope_base", "rope_layout", "xpos_scale_base")
    shows = ("frequencies",)
    tables = ("cos", "sin", "key_cos", "key_sin")

    @classmethod
    def from_config(cls, config: ModelConfig) -> XPosPositions:
        return cls(
            config.head_dim,
            config.rope_base,
            config.rope_layout,
            config.xpos_scale_base,
            config.context_length,
        )

    @classmethod
    def problems(cls, config: ModelConfig) -> list[str]:
        return _even_head_problems(cls.name, config)

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        layout: str = "half",
        scale_base: float = 512.0,
        initial_length: int = 128,
    ):
        # Set before RotaryPositions.__init__, which builds the first tables through `_build` (plain values,
        # so nn.Module accepts them before its own __init__).
        self.scale_base = float(scale_base)
        self.zeta = xpos_scales(head_dim)  # float64 [D/2]
        self.safe_length = xpos_safe_length(head_dim, self.scale_base)
        super().__init__(head_dim, base, layout, min(initial_length, self.safe_length))

    def _build(self, length: int) -> None:
        cos, sin = self._angles(length)  # float64 [T, D/2]
        position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
        scale = torch.exp(
            position / self.scale_base * self.zeta.log()
        )  # ζ^(t / scale_base) <= 1: the queries'
        self._store(cos=cos * scale, sin=sin * scale, key_cos=cos / scale, key_sin=sin / scale)

    def _grow(self, needed: int) -> None:
        if needed > self.safe_length:
            raise UserError(
                f"xpos scales keys by ζ^(-position / xpos_scale_base), which leaves float32's range past "
                f"{self.safe_length} positions at model.xpos_scale_base = {self.scale_base:g}; use at most "
                f"{self.safe_length} tokens, or train with model.xpos_scale_base of at least "
                f"{math.ceil(self.scale_base * (needed - 1) / (self.safe_length - 1))} for {needed}"
            )
        if needed > self.cos.shape[0]:
            self._build(min(2 ** math.ceil(math.log2(needed)), self.safe_length))

    def _rows(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Queries' cos and sin `[T, D/2]` (times ζ^(n / scale_base) <= 1), then keys'
        (times ζ^(-m / scale_base))."""
        return (
            self.cos[positions].to(dtype),
            self.sin[positions].to(dtype),
            self.key_cos[positions].to(dtype),
            self.key_sin[positions].to(dtype),
        )
