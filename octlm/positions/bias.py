"""Schemes that add a number to each attention score by distance: ALiBi's fixed slopes and T5's learned
buckets."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from octlm.positions.formulas import alibi_bias, alibi_slopes, t5_bucket
from octlm.positions.scheme import PositionScheme, register

if TYPE_CHECKING:
    from octlm.config import ModelConfig


@register
class AlibiPositions(PositionScheme):
    """ALiBi: a fixed penalty proportional to distance, with a different slope per head."""

    name = "alibi"
    shows = ("bias",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> AlibiPositions:
        return cls(config.n_heads)

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        return alibi_bias(self.slopes, q_positions, k_positions)


@register
class T5Positions(PositionScheme):
    """T5's relative bias: one learned number per head and distance bucket, shared by all layers."""

    name = "t5"
    options = ("t5_buckets", "t5_max_distance")
    shows = ("bias",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> T5Positions:
        return cls(config.n_heads, config.t5_buckets, config.t5_max_distance)

    @classmethod
    def problems(cls, config: ModelConfig) -> list[str]:
        if config.t5_buckets >= 2 and config.t5_max_distance <= config.t5_buckets // 2:
            # Below this the log-spaced buckets divide by log(max_distance / exact range) <= 0.
            return [
                f"model.t5_max_distance = {config.t5_max_distance} must be larger than half of "
                f"model.t5_buckets ({config.t5_buckets // 2}), the range of exact buckets"
            ]
        return []

    def __init__(self, n_heads: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, n_heads)

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """`[H, Tq, Tk]`, looked up per distance and gathered: one pass over the result, not the bucket
        formula's dozen (long sequences build this per query chunk in every layer, octlm/model/decoder.py).

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
