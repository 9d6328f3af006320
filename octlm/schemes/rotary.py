"""RoPE (Su et al.): queries and keys rotated inside every attention layer, by position times a frequency per
channel pair."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from octlm.positions import PositionScheme, apply_rope, register, rope_frequencies

if TYPE_CHECKING:
    from octlm.config import ModelConfig


@register
class RotaryPositions(PositionScheme):
    """RoPE (Su et al.): rotate query and key channel pairs by position × frequency inside attention.

    The cos/sin tables are non-persistent buffers grown on demand. `set_frequencies` swaps in scaled
    frequencies (position interpolation, NTK, YaRN) and an attention scaling factor that multiplies cos and sin
    (YaRN's temperature), as context-extension methods do at inference.
    """

    name = "rope"
    options = ("rope_base", "rope_layout")
    shows = ("frequencies",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> RotaryPositions:
        return cls(config.head_dim, config.rope_base, config.rope_layout, config.context_length)

    @classmethod
    def problems(cls, config: ModelConfig) -> list[str]:
        return _even_head_problems(cls.name, config)

    def __init__(self, head_dim: int, base: float = 10000.0, layout: str = "half", initial_length: int = 128):
        super().__init__()
        self.head_dim, self.layout = head_dim, layout
        self.inv_freq = rope_frequencies(head_dim, base)  # float64, [D/2]
        self.attention_scaling = 1.0
        self.register_buffer("cos", torch.empty(0), persistent=False)
        self.register_buffer("sin", torch.empty(0), persistent=False)
        self._build(initial_length)

    def frequencies(self) -> Tensor:
        return self.inv_freq.clone()

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


def _even_head_problems(name: str, config: ModelConfig) -> list[str]:
    """A rotation turns channel pairs: the head size must be even (when it is a whole number at all)."""
    if config.n_heads >= 1 and config.d_model % config.n_heads == 0 and config.head_dim % 2:
        return [f"model.position = {name!r} needs an even head size, but d_model / n_heads = {config.head_dim}; "
                "change d_model or n_heads"]  # fmt: skip
    return []
