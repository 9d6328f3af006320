"""PaTH attention (Yang et al., 2025, "PaTH Attention: Position Encoding via Accumulating Householder
Transformations"): each token s turns every earlier key by a Householder-like matrix read from its own input,
and a query sees a key through the product of the matrices of the tokens between them.

In every layer and key head, token s carries

    H_s = I - β_s w_s w_sᵀ,   w_s = (W_w x_s) / ‖W_w x_s‖  `[D]`,   β_s = 2 σ(W_β x_s + b_β)  in (0, 2)

(β_s = 2 is a true reflection, β_s = 0 the identity), and the score of query i for a key j <= i is

    s_ij = q_iᵀ H_i H_{i-1} ⋯ H_{j+1} k_j / sqrt(D)      (the identity for j = i)

followed by a softmax over j <= i. The newest matrix stands next to the query, so the product builds up on the
keys' side: when token i arrives, every earlier key is multiplied by H_i and k_i joins unchanged. A KV cache
therefore keeps the transformed keys, not the raw ones, and each new token costs one rank-one update of them.

A key carried forward through s = j+1 .. i becomes k_j - Σ_s w_s a_s with a_s = β_s w_sᵀ (the key before H_s);
over a chunk of c new tokens the a_s of every key solve one unit lower-triangular system (the UT form of a
product of Householder matrices), so a chunk of queries is scored against every earlier key at once and the
keys leave the chunk transformed by the whole chunk (`chunk_scores`). Chunk by chunk the cost is
O(T² (D + c)) time and O(T (D + c)) memory without gradients; the chunks run one after another.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.positions.scheme import AttentionCall, PositionScheme, register

if TYPE_CHECKING:
    from octlm.config import ModelConfig

# New tokens per step of the chunked algorithm. Each step solves a c x c triangular system per head and holds
# [B, H, c, Tk] scores, so memory is linear in the length; c = 64 is the block fla's kernels use. (The
# decoder's own CHUNK_BIAS_ENTRIES cannot be imported here: octlm.positions sits below octlm.model.)
CHUNK_TOKENS = 64


def householder_factors(
    x: Tensor, directions: nn.Linear, strengths: nn.Linear, heads: int
) -> tuple[Tensor, Tensor]:
    """Each token's unit direction w `[B, Hkv, T, D]` and strength β in (0, 2) `[B, Hkv, T]` from the layer's
    input x `[B, T, C]`, in float32 at least (the keys' updates accumulate over the whole sequence)."""
    B, T, _ = x.shape
    dtype = torch.promote_types(x.dtype, torch.float32)
    w = directions(x).to(dtype).view(B, T, heads, -1).transpose(1, 2)
    w = F.normalize(w, dim=-1, eps=1e-6)  # eps: a zero projection stays zero instead of dividing by 0
    beta = 2.0 * torch.sigmoid(strengths(x).to(dtype)).transpose(1, 2)
    return w, beta


def solve_unit_lower(system: Tensor, rhs: Tensor) -> Tensor:
    """a `[..., c, n]` with `system` a = `rhs`, for a lower-triangular `system` `[..., c, c]` whose diagonal
    is taken as ones (it is never read)."""
    return torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)


def solve_unit_lower_by_doubling(system: Tensor, rhs: Tensor, steps: int) -> Tensor:
    """`solve_unit_lower` with matrix products only, for graphs (ONNX has no triangular solve): exact once
    2^steps >= c; the diagonal is not read either.

    The inverse is built block by block: X starts as the inverse of the 1 x 1 diagonal blocks (I); a step that
    joins blocks of size b into blocks of size 2b, [[A, 0], [C, D]], sets their lower-left block to
    -D⁻¹ C A⁻¹, which is X ← X - X (system on those lower-left blocks) X. Unlike the Neumann product Π
    (I + (-N)^(2^k)), no power of the system is formed, so float32 stays as close to the solve as forward
    substitution is.
    """
    index = torch.arange(system.shape[-1], device=system.device)
    inverse = (index.unsqueeze(1) == index.unsqueeze(0)).to(system.dtype)  # the identity, on index's device
    for step in range(steps):
        size = 2**step
        joined = index.unsqueeze(1) // (2 * size) == index.unsqueeze(0) // (2 * size)
        lower_left = joined & (index.unsqueeze(1) // size > index.unsqueeze(0) // size)
        inverse = inverse - inverse @ (system * lower_left) @ inverse
    return inverse @ rhs


def chunk_scores(q: Tensor, keys: Tensor, new_keys: Tensor, w: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """Unscaled scores of c new queries over every key, and the keys transformed by the c new tokens.

    q `[B, Hkv, G, c, D]` (G query heads per key head), `keys` `[B, Hkv, P, D]`: the P earlier keys as they
    stand before the chunk, `new_keys` `[B, Hkv, c, D]` raw, w `[B, Hkv, c, D]`, β `[B, Hkv, c]`.
    Returns scores `[B, Hkv, G, c, P + c]` (entries of new keys after their query are meaningless: masked by
    the caller) and the keys after the chunk `[B, Hkv, P + c, D]`.

    For key j, a_s = β_s w_sᵀ (key j before H_s) for chunk tokens s after j: (I + L) a = R with
    L_st = β_s w_sᵀ w_t (t < s), R_sj = β_s w_sᵀ (key j at the chunk's start), zero unless s > j. Query i sees
    key j after the tokens s <= i: q_iᵀ key_j - Σ_{s <= i} (q_iᵀ w_s) a_sj.
    """
    c, P = w.shape[2], keys.shape[2]
    both = torch.cat([keys, new_keys], dim=2)  # [B, Hkv, P + c, D]
    ones = torch.ones(c, P + c, dtype=torch.bool, device=w.device)
    after_key = ones.tril(P - 1)  # chunk token s is after key j: every earlier key, new keys j < s
    lower = (w @ w.transpose(-1, -2)) * beta.unsqueeze(-1) * after_key[:, P:]  # strictly lower: t < s
    system = lower + torch.eye(c, dtype=w.dtype, device=w.device)
    rhs = (w @ both.transpose(-1, -2)) * beta.unsqueeze(-1) * after_key
    a = solve_unit_lower(system, rhs)  # [B, Hkv, c, P + c]
    reach = (q @ w.unsqueeze(2).transpose(-1, -2)) * ones[:, P:].tril()  # q_i · w_s for s <= i: [.., c, c]
    scores = q @ both.unsqueeze(2).transpose(-1, -2) - reach @ a.unsqueeze(2)
    return scores, both - a.transpose(-1, -2) @ w


def path_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: Tensor,
    beta: Tensor,
    keys: Tensor | None = None,
    dropout: float = 0.0,
    record: list[Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """PaTH attention of Tq new queries `[B, H, Tq, D]` over every key and value `[B, Hkv, Tk, D]`.

    The new tokens' raw keys are the last Tq of k; their directions w `[B, Hkv, Tq, D]` and strengths β
    `[B, Hkv, Tq]`. The Tk - Tq earlier keys come as `keys`, already transformed by every token up to the
    first new one (None when there are none). Returns the output `[B, H, Tq, D]` (q's dtype) and every key
    transformed up to the last new token `[B, Hkv, Tk, D]` (float32 at least), the next call's `keys`.
    With `record` a list, appends the weights `[B, H, Tq, Tk]` that multiplied the values.
    """
    B, H, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    dtype = torch.promote_types(q.dtype, torch.float32)
    if keys is None:
        keys = k.new_zeros(B, Hkv, 0, D, dtype=dtype)
    if keys.shape[2] != Tk - Tq:
        raise ValueError(f"PaTH needs the {Tk - Tq} earlier keys transformed; got {keys.shape[2]}")
    grouped = q.to(dtype).view(B, Hkv, H // Hkv, Tq, D)  # query head h reads key head h // (H / Hkv)
    new_keys, values = k[:, :, Tk - Tq :].to(dtype), v.to(dtype).unsqueeze(2)
    outputs, rows = [], []
    # Bounds written as comparisons a graph exporter can settle from a length's declared range (at most one
    # chunk): `range` and `min` over a symbolic length would pin it to the example's
    for start in range(0, Tq, CHUNK_TOKENS) if Tq > CHUNK_TOKENS else (0,):
        stop = Tq if start + CHUNK_TOKENS >= Tq else start + CHUNK_TOKENS
        scores, keys = chunk_scores(
            grouped[:, :, :, start:stop],
            keys,
            new_keys[:, :, start:stop],
            w[:, :, start:stop],
            beta[:, :, start:stop],
        )
        seen = keys.shape[2]  # every key up to the chunk's last query
        ones = torch.ones(stop - start, seen, dtype=torch.bool, device=q.device)
        future = ones.triu(seen - (stop - start) + 1)  # new keys after their query
        weights = (scores / math.sqrt(D)).masked_fill(future, float("-inf")).softmax(-1)
        if dropout > 0:
            weights = F.dropout(weights, dropout)
        outputs.append(weights @ values[..., :seen, :])  # [B, Hkv, G, c, D]
        if record is not None:
            rows.append(F.pad(weights.reshape(B, H, stop - start, seen), (0, Tk - seen)))
    if record is not None:
        record.append(torch.cat(rows, dim=2))
    return torch.cat(outputs, dim=3).reshape(B, H, Tq, D).to(q.dtype), keys


@register
class PathAttention(PositionScheme):
    """PaTH: attention whose keys are turned by the Householder-like matrices of the tokens after them.

    Per layer, `directions[layer]` (C -> Hkv·D, no bias) gives w and `strengths[layer]` (C -> Hkv, with bias)
    gives β, one of each per key head: as in fla's `PaTHAttention`, the transformations act on the keys, so
    the query heads that share a key head share its w and β, and the cache keeps Hkv transformed keys (grouped
    heads need no copies). Plain linear layers: fla's layer adds a short causal convolution (width 3, SiLU) on
    w and, with as many key heads as query heads, a rank-32 bottleneck for W_w; neither is here.

    Scale 1/sqrt(D), as fla's kernel defaults to. The decoder initialises both N(0, 0.02) with zero bias, so
    β starts at 1 (the paper's range is (0, 2); 2 reflects). A KV cache keeps the transformed keys in
    `state["keys"]` `[B, Hkv, P, D]` (float32 at least); the raw cached keys are then not read.
    """

    name = "path"
    # Under autograd each chunk's scores, solutions and keys are kept for backward: T² memory when training.
    cost = "time T²(D + 64); memory linear in T at inference, T² in training; sequential over 64-token chunks"

    @classmethod
    def from_config(cls, config: ModelConfig) -> PathAttention:
        return cls(config.n_layers, config.d_model, config.kv_heads, config.head_dim)

    def __init__(self, n_layers: int, d_model: int, kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.kv_heads = kv_heads
        self.directions = nn.ModuleList(
            nn.Linear(d_model, kv_heads * head_dim, bias=False) for _ in range(n_layers)
        )
        self.strengths = nn.ModuleList(nn.Linear(d_model, kv_heads) for _ in range(n_layers))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, call: AttentionCall) -> Tensor:
        """`[B, H, Tq, D]`: PaTH attention of the new queries over every key, the earlier ones read from
        `call.state["keys"]` (transformed) and the state updated to include the new tokens."""
        w, beta = householder_factors(
            call.x, self.directions[call.layer], self.strengths[call.layer], self.kv_heads
        )
        earlier = call.state.get("keys") if call.state is not None else None
        if earlier is None and k.shape[2] > q.shape[2]:
            raise ValueError("PaTH needs its cache state for the cached keys: use one cache from the start")
        y, keys = path_attention(q, k, v, w, beta, earlier, call.dropout, call.record)
        if call.state is not None:
            call.state["keys"] = keys
        return y
