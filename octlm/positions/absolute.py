"""Absolute position vectors added to the token vectors before the first block: a learned table (GPT-2) and
the sinusoidal formula (Vaswani et al.)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from torch import Tensor, nn

from octlm.positions.formulas import add_positions, sinusoidal_table
from octlm.positions.scheme import PositionScheme, register

if TYPE_CHECKING:
    from octlm.config import ModelConfig


@register
class LearnedPositions(PositionScheme):
    """A learned table with one row per position (GPT-2). It has no row past its last one."""

    name = "learned"
    bounded = True
    options = ("context_length",)
    shows = ("vectors",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> LearnedPositions:
        return cls(config.context_length, config.d_model)

    def __init__(self, context_length: int, width: int) -> None:
        super().__init__()
        self.max_length = context_length
        self.table, self.vector_width = nn.Embedding(context_length, width), width

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return add_positions(x, self.table(positions))


@register
class SinusoidalPositions(PositionScheme):
    """The fixed sinusoidal table of Vaswani et al. (times `sinusoidal_scale`), added to the token vectors; it
    is computed once and grown on demand, so it has no maximum length.

    The waves have amplitude 1, but token rows start at std 0.02: added unscaled, position drowns out which
    token it is, and the day1 model sat at the unigram level (3.25 bits per byte) for its first ~750 steps.
    Scaling the table to the rows' starting size trains like the learned table (docs/LOG.md). `scale = 1`
    gives the unscaled sum of the seed and of Vaswani et al. (who multiplied token rows by sqrt(C) instead).
    """

    name = "sinusoidal"
    options = ("sinusoidal_base", "sinusoidal_scale")
    shows = ("vectors",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> SinusoidalPositions:
        return cls(config.d_model, config.sinusoidal_base, config.context_length, config.sinusoidal_scale)

    @classmethod
    def problems(cls, config: ModelConfig) -> list[str]:
        if config.d_model % 2:
            return [f"model.position = 'sinusoidal' needs an even d_model, got {config.d_model}"]
        return []

    def __init__(self, width: int, base: float = 10000.0, initial_length: int = 128, scale: float = 1.0):
        super().__init__()
        self.width, self.base, self.scale, self.vector_width = width, base, scale, width
        self.register_buffer("table", self._rows(initial_length), persistent=False)

    def _rows(self, length: int) -> Tensor:
        return sinusoidal_table(length, self.width, self.base) * self.scale

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        needed = int(positions[-1]) + 1
        if needed > self.table.shape[0]:
            # Grow to the next power of two so that decoding token by token rebuilds rarely.
            self.table = self._rows(2 ** math.ceil(math.log2(needed))).to(self.table.device)
        return add_positions(x, self.table[positions].to(x.dtype))
