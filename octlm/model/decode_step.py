"""One cached decoding step, lean: the model's weights through plain tensor ops, no module calls.

At batch 1 a decoding step is a chain of small ops around one matrix-vector product per weight matrix, so
what it costs beyond those products is per-op overhead, and the products themselves run slower the longer the
step takes (between tokens the weights drift out of the shared cache: benchmarks/README.md, "Decoding at
the floor"). `DecodeStep` does the same arithmetic as `model(tokens[:, None], cache=cache)` for one new
token per sequence with fewer and cheaper ops:

- activations are `[B, C]`, so queries, keys and values are views of the fused projection, not copies;
- each weight is kept transposed, `[in, out]`, the layout torch's CPU GEMV reads fastest at batch 1, with the
  bias added by the same `addmm` (`Dense`); the copies follow in-place changes to the model's parameters;
- no per-token `check_ids` device sync, no `arange`: positions are slices of one preallocated range.

The sums run in another order than `nn.Linear`'s, so logits agree with the model's forward to float32
rounding (tests/model/test_decode_step.py, 1e-5). What the step does not cover goes through `model(...)` as
before: a scheme whose bias depends on the content (`is_contextual`) or that computes attention itself
(`replaces_attention`), and a model with forward hooks (a probe or a
recorder expects to see every step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from octlm.model.decoder import Decoder, KVCache


def norm_fn(norm: nn.Module):
    """`norm`'s forward as a plain function of `x` (LayerNorm or RMSNorm, its parameters read at each
    call)."""
    if isinstance(norm, nn.RMSNorm):
        return lambda x: F.rms_norm(x, norm.normalized_shape, norm.weight, norm.eps)
    return lambda x: F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


class Dense:
    """`linear(x)` for `x` `[B, in]` -> `[B, out]`, from a copy of the weight transposed to `[in, out]`
    (`take()` copies again: `DecodeStep` calls it when the parameters have changed in place)."""

    def __init__(self, linear: nn.Linear) -> None:
        self.linear = linear
        self.take()

    def take(self) -> None:
        """Copy the weight `[out, in]` to `[in, out]` and the bias to `[1, out]`, as they are now."""
        with torch.no_grad():
            self.weight = self.linear.weight.t().contiguous()
            bias = self.linear.bias
            self.bias = None if bias is None else bias.view(1, -1).clone()

    def __call__(self, x: Tensor) -> Tensor:
        if self.bias is None:
            return torch.mm(x, self.weight)
        return torch.addmm(self.bias, x, self.weight)


class DecodeStep:
    """`step(tokens, cache)`: the next-token logits `[B, V]` after `tokens` `[B]`, one per cached sequence.

    The tokens sit at position `cache.length` (every sequence of the batch has the same length); their keys
    and values are added to `cache`, and `cache.length` grows by one, as `model(tokens[:, None], cache=cache)`
    would do.
    """

    def __init__(self, model: Decoder) -> None:
        c = model.config
        self.model = model
        self.heads, self.kv_heads, self.head_dim, self.width = c.n_heads, c.kv_heads, c.head_dim, c.d_model
        self.q_end = c.n_heads * c.head_dim  # the fused projection's columns: q, then k, then v
        self.k_end = self.q_end + c.kv_heads * c.head_dim
        self.gqa = c.kv_heads != c.n_heads
        self.swiglu = c.mlp == "swiglu"
        self.schemes = [model.layer_scheme(i) for i in range(c.n_layers)]
        self.norms = [(norm_fn(b.norm1), norm_fn(b.norm2)) for b in model.blocks]
        self.final_norm = norm_fn(model.norm)
        # Per layer: the attention's fused qkv and output projections, the MLP's two layers.
        self.layers = [
            tuple(map(Dense, (b.attn.qkv, b.attn.proj, b.mlp.fc, b.mlp.proj))) for b in model.blocks
        ]
        self.head = Dense(model.head)
        self.dense = [d for layer in self.layers for d in layer] + [self.head]
        # The copies follow in-place changes (an optimizer step, `load_state_dict`) through the parameters'
        # version counters; a parameter made under `inference_mode` has none and is taken as it is.
        self.watched = [
            p
            for d in self.dense
            for p in (d.linear.weight, d.linear.bias)
            if p is not None and not p.is_inference()
        ]
        self.versions = [p._version for p in self.watched]
        device = model.token_embedding.weight.device
        # Positions are slices of one preallocated range: no arange per step (regrown by doubling).
        self.range = torch.arange(max(c.context_length, 1), device=device)

    @staticmethod
    def supports(model: nn.Module) -> bool:
        """Whether `DecodeStep` computes exactly what `model` would; otherwise decode with `model(...)`."""
        hooked = any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
        schemes = {model.layer_scheme(i) for i in range(model.config.n_layers)}
        return not hooked and not any(s.is_contextual or s.replaces_attention for s in schemes)

    def _follow_weights(self) -> None:
        """Copy the weights again if any changed in place since they were taken."""
        versions = [p._version for p in self.watched]
        if versions != self.versions:
            for dense in self.dense:
                dense.take()
            self.versions = versions

    def _positions(self, offset: int) -> tuple[Tensor, Tensor]:
        """The new tokens' positions `[1]` and every key's `[offset + 1]`, as views of `self.range`."""
        if offset >= self.range.shape[0]:
            self.range = torch.arange(2 * (offset + 1), device=self.range.device)
        return self.range[offset : offset + 1], self.range[: offset + 1]

    def _masks(self, positions: Tensor, keys: Tensor) -> dict[int, Tensor | None]:
        """Each scheme's bias `[H, 1, Tk]` (in the weights' dtype) or None: one new token sees every key."""
        dtype, masks = self.model.token_embedding.weight.dtype, {}
        for scheme in self.schemes:
            if id(scheme) not in masks:
                bias = scheme.bias(positions, keys)
                masks[id(scheme)] = None if bias is None else bias.to(dtype)
        return masks

    def _attention(
        self, x: Tensor, layer: int, mask: Tensor | None, positions: Tensor, cache: KVCache
    ) -> Tensor:
        """`Attention.forward` for one token: `[B, C]` -> `[B, C]`."""
        B, D = x.shape[0], self.head_dim
        qkv = self.layers[layer][0](x)  # [B, (H + 2 Hkv) D]
        q = qkv[:, : self.q_end].view(B, self.heads, 1, D)  # [B, H, 1, D], a view: one token
        k = qkv[:, self.q_end : self.k_end].view(B, self.kv_heads, 1, D)  # [B, Hkv, 1, D]
        v = qkv[:, self.k_end :].view(B, self.kv_heads, 1, D)
        q, k = self.schemes[layer].rotate(q, k, positions)
        k, v = cache.update(layer, k, v)
        q = self.model.blocks[layer].attn.scaling(q, positions, k.shape[2])
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.gqa)  # [B, H, 1, D]
        return self.layers[layer][1](y.reshape(B, self.width))  # with one token, [B, H, 1, D] is [B, 1, H, D]

    def _mlp(self, x: Tensor, layer: int) -> Tensor:
        """`MLP.forward`: `[B, C]` -> `[B, C]`."""
        _, _, fc, proj = self.layers[layer]
        h = fc(x)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            return proj(F.silu(gate) * up)
        return proj(F.gelu(h))

    def __call__(self, tokens: Tensor, cache: KVCache) -> Tensor:
        self._follow_weights()
        offset, B = cache.length, tokens.shape[0]
        positions, keys = self._positions(offset)
        masks = self._masks(positions, keys)
        model = self.model
        x = F.embedding(tokens.view(B, 1), model.token_embedding.weight)  # [B, 1, C]
        x = model.positions.embed(x, positions).view(B, self.width)
        cache.reserve(offset + 1)
        cache.positions[offset : offset + 1] = positions
        for layer, scheme in enumerate(self.schemes):
            norm1, norm2 = self.norms[layer]
            x = x + self._attention(norm1(x), layer, masks[id(scheme)], positions, cache)
            x = x + self._mlp(norm2(x), layer)
        cache.length = offset + 1
        return self.head(self.final_norm(x))  # [B, V]
