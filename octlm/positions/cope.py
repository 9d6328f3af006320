"""CoPE, contextual position encoding (Golovneva et al., 2024, "Contextual Position Encoding: Learning to
Count What's Important"): positions counted by gates that depend on the content, looked up in a learned table.

For a query i and a key j <= i, in every head and layer:

    g_ij = σ(q_i · k_j / sqrt(D))                    how much key j counts for query i
    p_ij = min(Σ_{t=j}^{i} g_it, npos - 1)           the keys from j to i inclusive, counted by their gates
    z_ij = (1 - w) q_i · e[⌊p_ij⌋] + w q_i · e[⌈p_ij⌉],  w = p_ij - ⌊p_ij⌋

and z_ij is added to the attention score q_i · k_j / sqrt(D) before the softmax (keys after the query get
-inf). With every gate 1 the count is the ordinary relative position plus one: p_ij = i - j + 1, and
p_ii = g_ii, so the key a query sits on counts itself. The count of a key only ever grows with its distance,
and it is continuous in the gates, so the interpolation passes gradients back to them; `⌊p⌋` and `⌈p⌉`
themselves do not.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from octlm.positions.scheme import PositionScheme, register

if TYPE_CHECKING:
    from octlm.config import ModelConfig


def reversed_counts(q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor, limit: int) -> Tensor:
    """CoPE's contextual positions p_ij of queries `[B, H, Tq, D]` over keys `[B, Hkv, Tk, D]`, clamped to
    `limit`, with the key axis reversed: `[B, H, Tq, Tk]`, column c for the key at k_positions[Tk - 1 - c].

    The count is a reverse cumulative sum over keys, so the keys are reversed before the scores (`[Tk, D]`,
    not `[Tq, Tk]`) and the sum runs forwards; the bias is reversed back once, at the end. Keys after the
    query get gate 0, so the sum over every key is the sum from j to i, and a query's counts add the same
    numbers in the same order in a full pass and alone after a KV cache (its future keys add exact zeros
    first; `total - cumsum` would not). Counting is done in float32 whatever q's dtype: in bfloat16 counts
    past 256 would lose whole units. Grouped heads: query head h reads key head h // (H / Hkv).
    """
    B, H, Tq, D = q.shape
    Hkv = k.shape[1]
    # The same scaled product attention scores with (see `CopePositions`), the scale applied to q: [Tq, D].
    scaled = q * (1.0 / math.sqrt(D))
    keys = k.flip(2).unsqueeze(2).transpose(-1, -2)  # [B, Hkv, 1, D, Tk]: grouped heads share, not copy
    logits = (scaled.view(B, Hkv, H // Hkv, Tq, D) @ keys).view(B, H, Tq, -1)
    future = k_positions.flip(0).unsqueeze(0) > q_positions.unsqueeze(1)  # [Tq, Tk], reversed keys
    dtype = torch.promote_types(logits.dtype, torch.float32)  # float32, or float64 for gradcheck
    gates = logits.to(dtype).masked_fill_(future, float("-inf")).sigmoid_()  # the future's gates: 0
    return gates.cumsum(-1).clamp_(max=limit)


def gated_counts(q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor, limit: int) -> Tensor:
    """p_ij `[B, H, Tq, Tk]` in key order (`reversed_counts` reversed back): what `contextual_bias` counts."""
    return reversed_counts(q, k, q_positions, k_positions, limit).flip(-1)


def interpolated_bias(q: Tensor, table: Tensor, counts: Tensor) -> Tensor:
    """z = q · e[p] for fractional positions `counts` >= 0 `[B, H, Tq, Tk]` (overwritten: it is the largest
    temporary), linear between the rows e[⌊p⌋] and e[⌊p⌋ + 1] of `table` `[npos, D]` (counts stop at
    npos - 1, where the weight of the next row is 0).

    q meets every row once (`[B, H, Tq, npos]`, a small matmul) and the pairs gather from that: z[⌊p⌋] and the
    step z[⌊p⌋ + 1] - z[⌊p⌋], so that the bias is one fused multiply-add. The fraction carries the gradient to
    the gates; the row index does not. (x-transformers interpolates between ⌊p⌋ and ⌈p⌉: the same values; at
    a whole count its gradient to p is 0 where this one takes the next step, a set of measure zero.)
    """
    per_row = (q @ table.T.to(q.dtype)).to(counts.dtype)  # [B, H, Tq, npos]
    step = torch.nn.functional.pad(per_row.diff(dim=-1), (0, 1))  # z[p + 1] - z[p]; 0 after the last row
    index = counts.long()  # ⌊p⌋: counts are >= 0, and the cast truncates
    # In place where autograd allows it: at T = 1,024 each [1, 4, T, T] temporary is 16 MB (index 32 MB).
    bias = per_row.gather(-1, index)
    return bias.addcmul_(counts.frac_(), step.gather(-1, index))


@register
class CopePositions(PositionScheme):
    """CoPE: a bias from content-gated counts of the keys between query and key, one table per layer.

    `tables[layer]` holds e[0 .. npos - 1], `[npos, head_dim]`, shared by that layer's heads (the paper's
    appendix code and its authors' repository keep one `[head_dim, npos]` table per attention layer; each head
    counts with its own q and k). They are `nn.Embedding` tables so that, like octlm's other position tables,
    they are not weight-decayed (octlm/training/optimizer.py); the decoder initialises them N(0, 0.02) where
    the paper starts from zeros (both start the bias near 0: mean |z| = 0.035 in an untrained config-b model,
    T = 256).

    The scale, checked against the paper's appendix code, its authors' repository
    (facebookresearch/RAM, projects/cope) and x-transformers' `CoPE`: the gates are σ of the *scaled* score
    q · k / sqrt(D), the number attention itself uses. Unscaled, the gate logits would be sqrt(D) = 8 times
    the scores at head size 64, so gates would saturate at 0 or 1 (where σ passes no gradient) far sooner,
    and the count would lose what makes it contextual. The bias q · e[p] is added unscaled to the scaled
    scores, as in the appendix code and x-transformers; the authors' repository by default divides
    (q · k + q · e) by sqrt(D) together: the same model with e scaled by 1/sqrt(D) (only the table's
    effective learning rate differs).

    Counts stop at npos - 1 (`cope_positions` - 1): every key that far away, counted, shares the last row, so
    the scheme has no maximum length.
    """

    name = "cope"
    options = ("cope_positions",)
    shows = ("vectors",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> CopePositions:
        shown = next((i for i in range(config.n_layers) if i not in config.nope_layers), 0)
        return cls(config.n_layers, config.cope_positions, config.head_dim, shown)

    def __init__(self, n_layers: int, npos: int, head_dim: int, shown_layer: int = 0) -> None:
        super().__init__()
        self.npos, self.shown_layer = npos, shown_layer
        self.tables = nn.ModuleList(nn.Embedding(npos, head_dim) for _ in range(n_layers))
        for table in self.tables:
            nn.init.zeros_(table.weight)  # the paper's start; octlm's Decoder re-initialises (see the class)

    def contextual_bias(
        self, q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int
    ) -> Tensor:
        """`[B, H, Tq, Tk]` (float32 at least): z_ij for j <= i, -inf for keys after the query."""
        counts = reversed_counts(q, k, q_positions, k_positions, self.npos - 1)
        bias = interpolated_bias(q, self.tables[layer].weight, counts)
        future = k_positions.flip(0).unsqueeze(0) > q_positions.unsqueeze(1)
        return bias.masked_fill_(future, float("-inf")).flip(-1)  # keys back in order

    def vectors(self, length: int) -> Tensor:
        """ "vectors": the embedding rows e[0 .. min(length, npos) - 1] `[rows, head_dim]` of the first layer
        that uses CoPE (layer 0 unless `model.nope_layers` lists it). Row p is what a key p counted positions
        back contributes, through q · e[p]; counts stop at npos - 1, so there are no rows past it."""
        return self.tables[self.shown_layer].weight[: min(length, self.npos)].detach()
