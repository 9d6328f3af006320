"""FIRE (Li et al., 2024): a learned function of the log-transformed relative distance, normalised by the
query's position, as an attention bias.

    b_h(i, j) = f_h( ψ(i - j) / ψ(max(L, i)) )   for key j <= i (-inf for j > i),   ψ(x) = log(c·x + 1)

f is a small MLP (1 -> hidden -> H, ReLU) shared by all layers, c > 0 and the threshold L > 0 are learned.
Dividing by the query's own ψ(i) maps every distance it can see into [0, 1] whatever the length ("functional
interpolation"), so a longer sequence asks f for inputs it was trained on. The threshold is the paper's
"progressive interpolation": below L a query divides by ψ(L) instead, so that the first tokens, which see few
keys, are not stretched over the whole of [0, 1].
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from octlm.positions.scheme import PositionScheme, register

if TYPE_CHECKING:
    from octlm.config import ModelConfig

# ψ(max(L, i)) > 0 whenever c > 0 and L > 0; the floor only keeps a degenerate |c| = 0 from dividing 0 by 0
# (the reference code adds 1e-6 instead, which would move every value by ~1e-6 relative).
NORMALISER_FLOOR = 1e-30
INITIAL_C = 0.1  # the paper's initial c


def fire_inputs(c: Tensor, threshold: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """The MLP's input ψ(i - j) / ψ(max(L, i)) `[Tq, Tk]`, in the dtype of `c` (keys after a query get 0).

    `c` and `threshold` are the positive values (scalars); positions `[Tq]`, `[Tk]` are integers.
    """
    dtype = c.dtype
    distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(0)).clamp_(min=0).to(dtype)  # [Tq, Tk]
    normaliser = torch.maximum(q_positions.to(dtype), threshold)  # [Tq]: the threshold L below it
    psi = torch.log1p(c * normaliser).clamp(min=NORMALISER_FLOOR)  # ψ(max(L, i))
    # A division, not a product with 1/ψ: the key at distance i >= L then gets exactly ψ(i) / ψ(i) = 1.
    return torch.log1p(distance * c) / psi.unsqueeze(-1)


def fire_mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """f(x) = w2 · relu(w1 x + b1) + b2 for every entry of `x` `[Tq, Tk]`: `[H, Tq, Tk]`.

    The hidden layer is laid out `[hidden, Tq·Tk]`, so the second layer is one `[H, hidden] @ [hidden, N]`
    matmul whose result is already `[H, Tq, Tk]` (no transpose copy of the bias). That hidden layer is the
    scheme's cost: hidden / H times the bias itself (64 MiB per query chunk of octlm.model.decoder at the
    defaults, 32 / 4), written and read once per chunk and layer. Plain ops, so autograd and the ONNX export
    take it as it is (a piecewise-linear lookup would be ~2.5x faster on CPU, but `searchsorted` has no ONNX
    export).
    """
    flat = x.reshape(1, -1)  # [1, N]
    hidden = torch.addmm(b1.unsqueeze(-1), w1.unsqueeze(-1), flat).relu_()  # [hidden, N]
    return torch.addmm(b2.unsqueeze(-1), w2, hidden).view(-1, *x.shape)


@register
class FirePositions(PositionScheme):
    """FIRE: one learned bias per head, a function of ψ(distance) / ψ(max(L, query position)), in every
    layer."""

    name = "fire"
    options = ("fire_hidden", "fire_threshold")
    shows = ("bias",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> FirePositions:
        return cls(config.n_heads, config.fire_hidden, config.fire_threshold)

    def __init__(self, n_heads: int, hidden: int = 32, threshold: float = 512.0) -> None:
        super().__init__()
        self.initial_threshold = float(threshold)
        # Plain parameters, not nn.Linear: the decoder re-draws every Linear at GPT-2's std 0.02, which would
        # put all ReLU kinks at x = 0 (zero biases) and make f start as a straight line of slope ~1e-4.
        # PyTorch's default Linear init (as in the paper's code), U(-1/sqrt(fan_in), 1/sqrt(fan_in)), spreads
        # the kinks over the inputs and starts f as a bent curve of size ~0.3.
        bound = 1.0 / math.sqrt(hidden)
        self.w1 = nn.Parameter(torch.empty(hidden).uniform_(-1.0, 1.0))  # fan-in 1
        self.b1 = nn.Parameter(torch.empty(hidden).uniform_(-1.0, 1.0))
        self.w2 = nn.Parameter(torch.empty(n_heads, hidden).uniform_(-bound, bound))
        self.b2 = nn.Parameter(torch.empty(n_heads).uniform_(-bound, bound))
        # c and L must stay positive: c·x + 1 must be > 0 for ψ to be defined (and increasing) at every
        # distance, and ψ(L) > 0 keeps the first query's normaliser from being 0. The paper's code takes
        # absolute values, which we follow: the stored numbers are the values, and the gradient keeps its
        # size (softplus shrinks it as the value nears 0). L is learned as a multiple of its initial value:
        # Adam steps are about lr in parameter units, which would barely move an L of 512 directly.
        self.c = nn.Parameter(torch.tensor(INITIAL_C))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))

    def values(self) -> tuple[Tensor, Tensor]:
        """The positive c and L (float32 scalars, differentiable)."""
        return self.c.float().abs(), self.threshold_scale.float().abs() * self.initial_threshold

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """`[H, Tq, Tk]` float32, -inf for keys after their query. Any query chunk: row i uses
        ψ(max(L, i))."""
        c, threshold = self.values()
        x = fire_inputs(c, threshold, q_positions, k_positions)
        mlp = (p.float() for p in (self.w1, self.b1, self.w2, self.b2))
        bias = fire_mlp(x, *mlp)
        future = k_positions.unsqueeze(0) > q_positions.unsqueeze(-1)  # [Tq, Tk]
        return bias.masked_fill_(future, float("-inf"))
