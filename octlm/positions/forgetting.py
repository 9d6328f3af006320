"""FoX, forgetting attention (Lin et al., ICLR 2025, "Forgetting Transformer: Softmax Attention with a Forget
Gate"): softmax attention whose scores are down-weighted by a forget gate that each token sets from its
content.

In every layer and head h, each token t sets a scalar gate from the layer's normed input x_t:

    f_t = σ(w_h · x_t + b_h)                                       in (0, 1), one per head and token
    c_t = Σ_{s <= t} log f_s                                       its running sum, from the first token on
    logit_ij = q_i · k_j / sqrt(D) + Σ_{t=j+1}^{i} log f_t = q_i · k_j / sqrt(D) + c_i - c_j,   j <= i

and the softmax runs over the keys j <= i. A key's weight is multiplied by the product of the gates of every
token after it, up to the query: a gate near 1 lets the past through, a gate near 0 erases it. The key a query
sits on gets no decay (the sum is empty), and there is no other position signal: with every gate 1 this is
NoPE's attention. With every gate the same constant e^-m the bias is ALiBi's, -m (i - j).
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

# Bias entries (batch x heads x queries x keys) per query chunk: the bias is per sequence, and [B, H, T, T]
# would grow as T^2 (64 GB in float64 at B = 8, H = 4, T = 16,384). 2^21 entries is the decoder's chunk
# (octlm/model/decoder.py's CHUNK_BIAS_ENTRIES, which this layer cannot import): 16 MB while it is float64.
CHUNK_ENTRIES = 2**21


def decay_bias(
    c_q: Tensor, c_k: Tensor, q_positions: Tensor, k_positions: Tensor, dtype: torch.dtype
) -> Tensor:
    """c_i - c_j `[B, H, Tq, Tk]` in `dtype` for queries' running sums `c_q` `[B, H, Tq]` and keys' `c_k`
    `[B, H, Tk]` (float64), -inf for keys after the query.

    The difference is taken in float64 and only then rounded: c reaches -10^4 at 16k tokens, where float32's
    spacing (2^-10) would be the error of every bias, however near the key."""
    bias = c_q.unsqueeze(-1) - c_k.unsqueeze(-2)
    future = k_positions.unsqueeze(0) > q_positions.unsqueeze(1)  # [Tq, Tk]
    return bias.masked_fill(future, float("-inf")).to(dtype)


def forgetting_attention(
    q: Tensor, k: Tensor, v: Tensor, c: Tensor, q_positions: Tensor, k_positions: Tensor, dropout: float = 0.0
) -> Tensor:
    """softmax(q · kᵀ / sqrt(D) + c_i - c_j) · v of queries `[B, H, Tq, D]` over keys and values
    `[B, Hkv, Tk, D]` (the queries are the last Tq keys) with every key's running sum `c` `[B, H, Tk]`
    (float64): `[B, H, Tq, D]`.

    Per query chunk of at most CHUNK_ENTRIES bias entries, each over the keys up to its last query (the rest
    are hidden from all of them): memory linear in Tk, and no work on the hidden triangle's far blocks."""
    B, H, Tq, _ = q.shape
    Tk = k.shape[2]
    past = Tk - Tq  # cached keys before the first query
    size = max(1, CHUNK_ENTRIES // (B * H * Tk))
    gqa = k.shape[1] != H
    outputs = []
    for start in range(0, Tq, size):
        stop = min(start + size, Tq)
        end = past + stop
        bias = decay_bias(
            c[..., past + start : end], c[..., :end], q_positions[start:stop], k_positions[:end], q.dtype
        )
        outputs.append(
            F.scaled_dot_product_attention(
                q[:, :, start:stop], k[:, :, :end], v[:, :, :end], bias, dropout_p=dropout, enable_gqa=gqa
            )
        )
    return torch.cat(outputs, dim=2)


def recorded_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    c: Tensor,
    q_positions: Tensor,
    k_positions: Tensor,
    dropout: float,
    record: list[Tensor],
) -> Tensor:
    """`forgetting_attention` written out (whole, not chunked: the weights `[B, H, Tq, Tk]` are the point),
    the weights that multiplied the values appended to `record`."""
    group = q.shape[1] // k.shape[1]
    if group > 1:  # query head h reads KV head h // group, as SDPA's enable_gqa does
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    weights = (scores + decay_bias(c[..., -q.shape[2] :], c, q_positions, k_positions, q.dtype)).softmax(-1)
    weights = F.dropout(weights, dropout) if dropout else weights
    record.append(weights)
    return weights @ v


@register
class ForgettingPositions(PositionScheme):
    """FoX: every token sets a forget gate per head from its content, and a key's score loses the log-gates of
    every token between it and the query: a decay like ALiBi's, learned token by token.

    One forget-gate projection `nn.Linear(d_model, n_heads)` per layer (`gates[layer]`), its output
    f = σ(w_h · x + b_h) per head; the model hands it attention itself (`attend`).

    Initialisation: weights N(0, 0.02), biases 0, so every gate starts near σ(0) = 1/2 (a half-life of about
    one token: attention starts local and learns how far to see). This is the authors' data-dependent gate
    (zhixuan-lin/forgetting-transformer, modeling_forgetting_transformer.py: `fgate_proj` under the model's
    normal(0.02) / zero-bias init; their decay-time bias init, T_min .. T_max, is asserted off for this gate
    and kept for the data-independent ones), and fla's `ForgettingAttention` (`f_proj`) starts the same way.
    x-transformers' `DataDependentAlibi` starts its biases at 5 instead (f = 0.993, a half-life of ~100
    tokens); the paper's results are with the authors' init. octlm's Decoder re-initialises every Linear to
    N(0, 0.02) and zero bias anyway, so a different init here would not survive model building.

    The running sums c are kept in float64 (the authors' kernel uses float32 over one training sequence; octlm
    evaluates at 16k tokens and more). With a KV cache, `state["log_forget"]` holds c of every cached token,
    `[B, H, P]`, and new tokens continue from its last value: decoding equals the full pass.
    """

    name = "fox"
    shows = ("gates",)  # forget gates from the text: octlm/inspect/gates.py measures them

    @classmethod
    def from_config(cls, config: ModelConfig) -> ForgettingPositions:
        return cls(config.d_model, config.n_layers, config.n_heads)

    def __init__(self, d_model: int, n_layers: int, n_heads: int) -> None:
        super().__init__()
        self.gates = nn.ModuleList(nn.Linear(d_model, n_heads) for _ in range(n_layers))
        for gate in self.gates:
            nn.init.normal_(gate.weight, mean=0.0, std=0.02)
            nn.init.zeros_(gate.bias)

    def forget_gates(self, x: Tensor, layer: int) -> Tensor:
        """log f `[B, H, T]` (float64, <= 0) of the tokens whose normed input to layer `layer` is `x`
        `[B, T, C]`. Its mean over tokens m gives a head's half-life, ln 2 / -m tokens."""
        gate = self.gates[layer]
        # [B, T, H]; x to the weights' dtype: a bfloat16 x may meet float32 weights outside autocast
        logits = gate(x.to(gate.weight.dtype))
        return F.logsigmoid(logits.double()).transpose(1, 2)

    def running_sums(self, x: Tensor, layer: int, state: dict | None, keys: int) -> Tensor:
        """c `[B, H, keys]` (float64) of every key: the cached tokens' from `state`, then the new tokens' (the
        input `x` `[B, Tq, C]`) continuing from the last cached one; `state` is updated to hold them all."""
        c = self.forget_gates(x, layer).cumsum(-1)
        earlier = state.get("log_forget") if state is not None else None
        cached = 0 if earlier is None else earlier.shape[-1]
        if cached + c.shape[-1] != keys:
            raise ValueError(
                f"fox keeps the forget gates of every cached token: {cached} kept, {c.shape[-1]} new tokens, "
                f"but {keys} keys (was this KV cache filled without the scheme?)"
            )
        if earlier is not None:
            c = torch.cat([earlier, earlier[..., -1:] + c], dim=-1)
        if state is not None:
            state["log_forget"] = c
        return c

    def attend(self, q: Tensor, k: Tensor, v: Tensor, call: AttentionCall) -> Tensor:
        """softmax(q_i · k_j / sqrt(D) + c_i - c_j) · v over keys j <= i: `[B, H, Tq, D]`."""
        c = self.running_sums(call.x, call.layer, call.state, k.shape[2])
        positions = (call.q_positions, call.k_positions)
        if call.record is not None:
            return recorded_attention(q, k, v, c, *positions, call.dropout, call.record)
        return forgetting_attention(q, k, v, c, *positions, call.dropout)
