"""The decoder, top to bottom: token table, position scheme, pre-norm blocks, tied output head.

    ids [B, T] -> token_embedding -> [B, T, C] -> positions.embed -> blocks (attention + MLP) -> norm
               -> head (the token table, transposed) -> logits [B, T, V]

The position scheme (the interface in octlm/positions/scheme.py, the schemes in octlm/positions/) acts in one
place: added to the input (learned, sinusoidal), rotating queries and keys in every attention layer (rope and
its variants), or biasing attention scores (alibi, t5, fire; cope's bias depends on q and k as well). NoPE
uses none, and layers listed in `model.nope_layers` skip the scheme. Positions are explicit, so incremental
decoding with a KV cache runs the same code as a full pass. A bias too large to build whole (long sequences)
is built one query chunk at a time (`ChunkedBias`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.model.loss import linear_cross_entropy
from octlm.positions import NoPositions, PositionScheme, build_positions, unbounded_schemes
from octlm.positions.scheme import AttentionCall

# A bias scheme's [H, Tq, Tk] bias is built whole, once per forward and shared by every layer, up to this many
# query-key pairs: 1,024 x 1,024, where it is the fastest form (the flash kernel skips the hidden triangle)
# and costs 4 MB per head. Past it the bias would grow as T^2 (9.5 GB at T = 16,384 for ALiBi at config b), so
# each layer builds it per query chunk instead (`ChunkedBias`): memory linear in T.
WHOLE_BIAS_PAIRS = 1024 * 1024
# Bias entries (heads x queries x keys) per query chunk: 2^21 float32 = 8 MB, about the size of one activation
# [T, C] at T = 16,384, C = 128; the bias's own temporaries (distances, buckets) are a few times that. Larger
# chunks were no faster on CPU (benchmarks/README.md), smaller ones pay per-call overhead.
CHUNK_BIAS_ENTRIES = 2**21


class KVCache:
    """Preallocated keys and values for every layer, `[L, B, Hkv, capacity, D]`, filled left to right, and the
    position each cached token sat at, `[capacity]`.

    `length` tokens are cached; the next forward pass writes its keys at `length .. length + T - 1`.
    The buffers double when decoding runs past `capacity`.
    """

    def __init__(self, config: ModelConfig, batch: int, capacity: int, device=None, dtype=torch.float32):
        shape = (config.n_layers, batch, config.kv_heads, capacity, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.positions = torch.zeros(capacity, device=device, dtype=torch.long)
        self.length = 0
        # What a scheme that computes attention itself keeps of the earlier tokens, per layer
        # (`AttentionCall`).
        self.states: list[dict] = [{} for _ in range(config.n_layers)]

    def reserve(self, total: int) -> None:
        """Make room for `total` cached positions."""
        capacity = self.k.shape[3]
        if total > capacity:
            new = max(total, 2 * capacity)
            pad = (0, 0, 0, new - capacity)
            self.k, self.v = F.pad(self.k, pad), F.pad(self.v, pad)
            self.positions = F.pad(self.positions, (0, new - capacity))

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store this layer's new `[B, Hkv, T, D]` keys/values; return all cached ones
        `[B, Hkv, length+T, D]`."""
        end = self.length + k.shape[2]
        self.k[layer, :, :, self.length : end] = k
        self.v[layer, :, :, self.length : end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]


class QueryScaling(nn.Module):
    """Queries times a factor that grows with the length (`model.attention_scaling`), so that attention can
    stay as sharp over many keys as over few; combines with any scheme. Queries `[B, H, Tq, D]` -> the same
    shape.

    - "ssmax", scalable softmax (Nakanishi 2025): softmax(s log(n) z) for the scores z of a query that sees n
      keys, s learned per head and layer (from `model.ssmax_init`, the value the paper reports). Scaling q_i
      scales that query's q·k/√D; a bias added to the scores (ALiBi, FoX's gates) is not scaled, since the
      paper scales the attention logits of a model whose logits are q·k alone. n counts keys, not positions,
      so randomized position ids do not change it.
    - "llama4", Llama 4's attention temperature (transformers' `attn_temperature_tuning`): in the layers with
      no position signal only, q times 1 + τ log(⌊(p + 1) / F⌋ + 1) at position p,
      τ = `attention_temperature`, F = `attention_floor`; exactly 1 before position F - 1.
    """

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        nope = config.position == "nope" or layer in config.nope_layers
        self.kind = config.attention_scaling if config.attention_scaling != "llama4" or nope else "none"
        self.floor, self.temperature = config.attention_floor, config.attention_temperature
        if self.kind == "ssmax":
            self.s = nn.Parameter(torch.full((config.n_heads,), float(config.ssmax_init)))

    def forward(self, q: Tensor, positions: Tensor, keys: int) -> Tensor:
        """`q` of the queries at `positions` `[Tq]`, the last of `keys` keys, scaled."""
        if self.kind == "none":
            return q
        if self.kind == "ssmax":
            seen = torch.arange(keys - q.shape[2] + 1, keys + 1, device=q.device, dtype=torch.float32)  # n
            factor = self.s.float()[:, None] * seen.log()  # [H, Tq]
        else:
            steps = torch.floor((positions.to(torch.float32) + 1.0) / self.floor)
            factor = torch.log1p(steps) * self.temperature + 1.0  # [Tq]
        return q * factor.unsqueeze(-1).to(q.dtype)


class Attention(nn.Module):
    """Causal self-attention through `scaled_dot_product_attention`, with optional grouped KV heads."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.scaling = QueryScaling(config, layer)
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.kv_heads, config.head_dim
        # One fused projection for q, k and v: one matmul instead of three.
        self.qkv = nn.Linear(
            config.d_model, (self.n_heads + 2 * self.n_kv_heads) * self.head_dim, config.bias
        )
        self.proj = nn.Linear(config.d_model, config.d_model, config.bias)
        self.dropout = config.dropout

    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        scheme: PositionScheme,
        mask: Tensor | ChunkedBias | None,
        is_causal: bool,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        """`[B, T, C]` -> `[B, T, C]`. `mask`: a bool or additive float mask `[.., Tq, Tk]`, a `ChunkedBias`, or None."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(
            [self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim, self.n_kv_heads * self.head_dim],
            -1,
        )
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # [B, H, T, D]
        k = k.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # [B, Hkv, T, D]
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = scheme.rotate(q, k, positions)  # keys are cached after rotation; values are never rotated
        k_positions = positions
        if cache is not None:
            k, v = cache.update(layer, k, v)
            k_positions = cache.positions[: k.shape[2]]
        q = self.scaling(q, positions, k.shape[2])
        dropout = self.dropout if self.training else 0.0
        if scheme.replaces_attention:  # FoX, PaTH, stick-breaking: the scheme computes attention itself
            state = cache.states[layer] if cache is not None else None
            call = AttentionCall(x, positions, k_positions, layer, state, dropout)
            y = scheme_attention(scheme, q, k, v, call)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))
        if scheme.is_contextual:  # the bias needs this layer's q and k: the shared mask is not used
            mask = ContextualBias(scheme, q, k, positions, k_positions, layer)
            if q.shape[2] * k.shape[2] <= WHOLE_BIAS_PAIRS:
                mask, is_causal = mask.rows(0, q.shape[2])[0], False
        y = attention(q, k, v, mask, is_causal, dropout)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class ChunkedBias:
    """A scheme's attention bias `[H, Tq, Tk]` that is never built whole: `rows` builds one query chunk of it.

    Queries sit at `q_positions` `[Tq]`, keys at `k_positions` `[Tk]`: the queries are the last Tq keys (a
    full pass, or a cache followed by new tokens).
    """

    def __init__(
        self, scheme: PositionScheme, q_positions: Tensor, k_positions: Tensor, dtype: torch.dtype
    ) -> None:
        self.scheme, self.q_positions, self.k_positions, self.dtype = scheme, q_positions, k_positions, dtype
        self.keys = k_positions.shape[0]

    def rows(self, start: int, stop: int) -> tuple[Tensor, int]:
        """The bias `[H, stop - start, end]` of queries start .. stop - 1 over the keys they can see, and
        `end`.

        The last of these queries is key Tk - Tq + stop - 1, so keys from `end` = Tk - Tq + stop on are in
        every query's future: they are left out, not masked (half the work of a full pass).
        """
        end = self.keys - self.q_positions.shape[0] + stop
        return self.scheme.bias(self.q_positions[start:stop], self.k_positions[:end]).to(self.dtype), end


class ContextualBias(ChunkedBias):
    """A bias that depends on this layer's queries `[B, H, Tq, D]` and keys `[B, Hkv, Tk, D]` as well as their
    positions (`PositionScheme.contextual_bias`): `rows` builds `[B, H, stop - start, end]` for a query
    chunk."""

    def __init__(
        self,
        scheme: PositionScheme,
        q: Tensor,
        k: Tensor,
        q_positions: Tensor,
        k_positions: Tensor,
        layer: int,
    ) -> None:
        super().__init__(scheme, q_positions, k_positions, q.dtype)
        self.q, self.k, self.layer = q, k, layer

    def rows(self, start: int, stop: int) -> tuple[Tensor, int]:
        end = self.keys - self.q_positions.shape[0] + stop
        q, k, q_positions = self.q[:, :, start:stop], self.k[:, :, :end], self.q_positions[start:stop]
        return self.scheme.contextual_bias(q, k, q_positions, self.k_positions[:end], self.layer).to(
            self.dtype
        ), end


def chunked_attention(q: Tensor, k: Tensor, v: Tensor, bias: ChunkedBias, dropout: float) -> Tensor:
    """Attention of `[B, H, Tq, D]` queries with `bias` built per query chunk; memory linear in Tq.

    Each chunk is an ordinary `scaled_dot_product_attention` call with its slice of the bias (the causal -inf
    included) over the keys it can see, so it equals the whole-bias result up to float rounding, and autograd
    differentiates it (a learned bias table gets its gradient) with no code of its own.
    """
    H, Tq = q.shape[1], q.shape[2]
    size = max(1, CHUNK_BIAS_ENTRIES // (H * bias.keys))  # queries per chunk
    gqa = k.shape[1] != H
    outputs = []
    for start in range(0, Tq, size):
        stop = min(start + size, Tq)
        mask, end = bias.rows(start, stop)
        # [1, H, .., ..]: SDPA's CPU flash kernel takes 4-D masks; a 3-D one runs the math backend, 4-6x
        # slower and a [B, H, chunk, end] score tensor more (a contextual bias is 4-D already: [B, H, .., ..])
        mask = mask.unsqueeze(0) if mask.dim() == 3 else mask
        outputs.append(
            F.scaled_dot_product_attention(
                q[:, :, start:stop], k[:, :, :end], v[:, :, :end], mask, dropout_p=dropout, enable_gqa=gqa
            )
        )
    return torch.cat(outputs, dim=2)


def attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | ChunkedBias | None, is_causal: bool, dropout: float
) -> Tensor:
    """`scaled_dot_product_attention` over `[B, H, T, D]` queries and `[B, Hkv, T, D]` keys and values.

    `mask` together with `is_causal` means: the mask already hides the future (ALiBi and T5 fold the causal
    -inf into their bias) and queries and keys are the same positions. SDPA refuses both arguments at once,
    and the mask alone makes it score every query against every key, the hidden upper triangle included.
    Its CPU flash kernel does take both and then skips the key blocks above the diagonal: half the attention
    work, 1.8-1.9x faster attention for ALiBi at T = 256-512 (benchmarks/README.md), same numbers.
    """
    if isinstance(mask, ChunkedBias):
        return chunked_attention(q, k, v, mask, dropout)
    gqa = k.shape[1] != q.shape[1]
    if mask is not None and is_causal:
        flash_cpu = q.device.type == "cpu" and mask.dtype == q.dtype and not mask.requires_grad
        if flash_cpu and not dropout and not gqa:
            mask = mask.unsqueeze(0) if mask.dim() == 3 else mask  # the kernel takes 2-D or 4-D masks
            flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
            return flash(q, k, v, 0.0, True, attn_mask=mask)[0]
        is_causal = False  # elsewhere the mask alone is the causal rule
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout, enable_gqa=gqa
    )


def scheme_attention(scheme: PositionScheme, q: Tensor, k: Tensor, v: Tensor, call: AttentionCall) -> Tensor:
    """The one call every layer of a scheme that computes attention itself makes (`PositionScheme.attend`):
    `[B, H, Tq, D]`. Like `attention`, it is swapped while attention is recorded."""
    return scheme.attend(q, k, v, call)


class MLP(nn.Module):
    """GELU (GPT-2) or SwiGLU (Llama) feed-forward layer, `[B, T, C]` -> `[B, T, C]`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.swiglu = config.mlp == "swiglu"
        # SwiGLU's gate and up projections are fused into one matrix of twice the width.
        hidden = 2 * config.d_ff if self.swiglu else config.d_ff
        self.fc = nn.Linear(config.d_model, hidden, config.bias)
        self.proj = nn.Linear(config.d_ff, config.d_model, config.bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc(x)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            return self.proj(F.silu(gate) * up)
        return self.proj(F.gelu(h))


def make_norm(config: ModelConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias)


class Block(nn.Module):
    """Pre-norm residual block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.norm1, self.attn = make_norm(config), Attention(config, layer)
        self.norm2, self.mlp = make_norm(config), MLP(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        scheme: PositionScheme,
        mask: Tensor | ChunkedBias | None,
        is_causal: bool,
        cache: KVCache | None,
        layer: int,
    ) -> Tensor:
        x = x + self.dropout(self.attn(self.norm1(x), positions, scheme, mask, is_causal, cache, layer))
        return x + self.dropout(self.mlp(self.norm2(x)))


class Decoder(nn.Module):
    """A decoder-only language model whose first layer is the subject of octlm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        problems = config.problems()
        if problems:
            raise UserError("invalid model config: " + "; ".join(problems))
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)  # E: [V, C]
        self.positions = build_positions(config)
        self.no_positions = NoPositions()  # what the layers in config.nope_layers use
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layers))
        self.norm = make_norm(config)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.head.weight = self.token_embedding.weight  # the output head reads the same table
        self.apply(self._init_weights)
        # GPT-2: residual projections start smaller, so the residual stream's variance does not grow with
        # depth.
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_parameters(self) -> int:
        """Distinct parameters (a tied table counts once)."""
        return sum(p.numel() for p in self.parameters())

    def check_ids(self, ids: Tensor, offset: int = 0) -> None:
        """Raise a UserError naming the problem if `ids` is not a `[B, T]` integer tensor of valid token
        ids."""
        if (
            not isinstance(ids, Tensor)
            or ids.dtype.is_floating_point
            or ids.dtype.is_complex
            or ids.dtype == torch.bool
        ):
            kind = ids.dtype if isinstance(ids, Tensor) else type(ids).__name__
            raise UserError(f"token ids must be an integer tensor, got {kind}")
        if ids.dim() != 2 or ids.numel() == 0:
            raise UserError(f"token ids must have shape [B, T] with B, T >= 1, got {list(ids.shape)}")
        low, high = torch.stack(torch.aminmax(ids)).tolist()  # one pass, one device sync
        if low < 0 or high >= self.config.vocab_size:
            bad = low if low < 0 else high
            raise UserError(
                f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size}); "
                "encode text with the tokenizer the model was trained with"
            )
        limit, length = self.positions.max_length, offset + ids.shape[1]
        if limit is not None and length > limit:
            raise UserError(
                f"a sequence of length {length} is longer than the learned position table ({limit} rows); "
                f"use at most {limit} tokens, or a scheme with no maximum: {', '.join(unbounded_schemes())}"
            )

    def new_cache(self, batch: int, capacity: int | None = None) -> KVCache:
        """An empty KV cache for `batch` sequences (grows past `capacity` when needed)."""
        p = self.token_embedding.weight
        return KVCache(self.config, batch, capacity or self.config.context_length, p.device, p.dtype)

    def forward(
        self,
        ids: Tensor,
        targets: Tensor | None = None,
        cache: KVCache | None = None,
        return_logits: bool = True,
        positions: Tensor | None = None,
    ) -> tuple[Tensor | None, Tensor | None]:
        """ids `[B, T]` -> (logits `[B, T, V]`, mean cross-entropy against `targets` `[B, T]` or None).

        The tokens sit at `positions` `[T]` (increasing; by default the next ones, `cache.length ..` with a
        cache, `0 ..` without): randomized positions are a sorted subset of a longer range. With a cache,
        `ids` continue the cached sequence. `return_logits=False` with targets returns (None, loss) and never
        builds the `[B, T, V]` logits: the loss goes through the head in cache-sized chunks
        (octlm/model/loss.py), which is how training calls it.
        """
        offset = cache.length if cache is not None else 0
        if positions is None:
            self.check_ids(ids, offset)
            positions = torch.arange(offset, offset + ids.shape[1], device=ids.device)
        else:
            self._check_positions(ids, positions, cache)
        T = ids.shape[1]
        x = self.positions.embed(self.token_embedding(ids), positions)  # [B, T, C]
        k_positions = positions
        if cache is not None:
            cache.reserve(offset + T)
            cache.positions[offset : offset + T] = positions
            k_positions = cache.positions[: offset + T]
        masks = {s: self._attention_mask(positions, k_positions, s) for s in self._layer_schemes()}
        for layer, block in enumerate(self.blocks):
            scheme = self.layer_scheme(layer)
            x = block(x, positions, scheme, *masks[scheme], cache, layer)
        if cache is not None:
            cache.length = offset + T
        if targets is not None and not return_logits:
            return None, linear_cross_entropy(self.norm(x).flatten(0, 1), self.head.weight, targets.flatten())
        logits = self.head(self.norm(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        return logits, loss

    def layer_scheme(self, layer: int) -> PositionScheme:
        """The scheme layer `layer` uses: NoPE if `config.nope_layers` lists it, the model's otherwise."""
        return self.no_positions if layer in self.config.nope_layers else self.positions

    def _layer_schemes(self) -> list[PositionScheme]:
        """The schemes the layers use: the model's, and NoPE where `config.nope_layers` says so."""
        nope = len(self.config.nope_layers)
        return [self.positions] * (nope < len(self.blocks)) + [self.no_positions] * (nope > 0)

    def _check_positions(self, ids: Tensor, positions: Tensor, cache: KVCache | None) -> None:
        """Explicit positions: int64, increasing, past the cached ones, one per token (`check_ids` checks the
        ids, and the last position against a learned table's rows)."""
        after = int(cache.positions[cache.length - 1]) if cache is not None and cache.length else -1
        if not isinstance(positions, Tensor) or positions.dim() != 1 or positions.dtype != torch.long:
            raise UserError(
                f"positions must be a 1-D int64 tensor, got {getattr(positions, 'dtype', type(positions))}"
            )
        if positions.numel() == 0 or not bool((positions.diff() > 0).all()) or int(positions[0]) <= after:
            raise UserError(
                f"positions must increase, past the cached ones (the last at {after}); got "
                f"{positions.tolist()[:8]}"
            )
        self.check_ids(ids, int(positions[-1]) + 1 - positions.shape[0])
        if positions.shape[0] != ids.shape[1]:
            raise UserError(f"{positions.shape[0]} positions for {ids.shape[1]} tokens; give one per token")

    def _attention_mask(
        self, positions: Tensor, k_positions: Tensor, scheme: PositionScheme | None = None
    ) -> tuple[Tensor | ChunkedBias | None, bool]:
        """The mask every layer shares, for queries at `positions` `[Tq]` and keys at `k_positions` `[Tk]`
        (the queries last among them): the scheme's bias (causal part included), or the plain causal rule.

        A bias of more than WHOLE_BIAS_PAIRS query-key pairs is handed over as a `ChunkedBias`, built per
        chunk. Without a bias the cheapest correct form is used: SDPA's own `is_causal` when queries and keys
        are the same positions, no mask for one new token (it may see every cached key), and an explicit
        boolean mask for a chunk of several new tokens after a cache (where `is_causal` would align the wrong
        corner).
        """
        dtype, scheme, total = (
            self.token_embedding.weight.dtype,
            scheme or self.positions,
            k_positions.shape[0],
        )
        if scheme.has_bias and positions.shape[0] * total > WHOLE_BIAS_PAIRS:
            return ChunkedBias(scheme, positions, k_positions, dtype), False
        bias = scheme.bias(positions, k_positions)
        if bias is not None:
            # The bias holds the causal rule; `is_causal` (queries = keys) lets the kernel skip what it hides.
            return bias.to(dtype), positions.shape[0] == total
        if positions.shape[0] == total:
            return None, True
        if positions.shape[0] == 1:
            return None, False
        return k_positions.unsqueeze(0) <= positions.unsqueeze(1), False
