"""One cached decoding step, lean: the model's own weights through functional ops, no module calls.

At batch 1 a decoding step's matrix-vector products read 13.6 MB of weights (config b) in about 0.55 ms; the
~150 other ops of `Decoder.forward` (module calls, `check_ids` with its device sync, the position and mask
set-up) cost as much again (benchmarks/README.md, "Where the time goes"). `DecodeStep` runs exactly the
same arithmetic for one new token per sequence -- the same kernels in the same order, so its logits equal
`model(tokens, cache=cache)` (tests/test_decode.py) -- without that overhead. It holds references to the
model's parameters, not copies, so a model trained further between two generations is read as it is now.

What it does not cover goes through `model(...)` as before: a scheme whose bias depends on the content
(`is_contextual`), and a model with forward hooks (a probe or a recorder expects to see every step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from octlm.model import Decoder, KVCache
    from octlm.positions import PositionScheme


def norm_fn(norm: nn.Module):
    """`norm`'s forward as a plain function of `x` (LayerNorm or RMSNorm, its parameters read at each call)."""
    if isinstance(norm, nn.RMSNorm):
        return lambda x: F.rms_norm(x, norm.normalized_shape, norm.weight, norm.eps)
    return lambda x: F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


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
        self.split = [c.n_heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim]
        self.gqa = c.kv_heads != c.n_heads
        self.swiglu = c.mlp == "swiglu"
        self.schemes = [model.layer_scheme(i) for i in range(c.n_layers)]
        self.norms = [(norm_fn(b.norm1), norm_fn(b.norm2)) for b in model.blocks]
        self.final_norm = norm_fn(model.norm)
        device = model.token_embedding.weight.device
        # Positions are slices of one preallocated range: no arange per step (regrown by doubling).
        self.range = torch.arange(max(c.context_length, 1), device=device)

    @staticmethod
    def supports(model: nn.Module) -> bool:
        """Whether `DecodeStep` computes exactly what `model` would; otherwise decode with `model(...)`."""
        hooked = any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
        schemes = {model.layer_scheme(i) for i in range(model.config.n_layers)}
        return not hooked and not any(s.is_contextual for s in schemes)

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

    def _attention(self, x: Tensor, layer: int, scheme: PositionScheme, mask: Tensor | None, positions: Tensor,
                   cache: KVCache) -> Tensor:  # fmt: skip
        """`Attention.forward` for one token: `[B, 1, C]` -> `[B, 1, C]`."""
        attn = self.model.blocks[layer].attn
        B = x.shape[0]
        q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).split(self.split, -1)
        q = q.view(B, 1, self.heads, self.head_dim).transpose(1, 2)  # [B, H, 1, D]
        k = k.view(B, 1, self.kv_heads, self.head_dim).transpose(1, 2)  # [B, Hkv, 1, D]
        v = v.view(B, 1, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = scheme.rotate(q, k, positions)
        k, v = cache.update(layer, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.gqa)
        return F.linear(y.transpose(1, 2).reshape(B, 1, self.width), attn.proj.weight, attn.proj.bias)

    def _mlp(self, x: Tensor, layer: int) -> Tensor:
        """`MLP.forward`: `[B, 1, C]` -> `[B, 1, C]`."""
        mlp = self.model.blocks[layer].mlp
        h = F.linear(x, mlp.fc.weight, mlp.fc.bias)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h)
        return F.linear(h, mlp.proj.weight, mlp.proj.bias)

    def __call__(self, tokens: Tensor, cache: KVCache) -> Tensor:
        offset = cache.length
        positions, keys = self._positions(offset)
        masks = self._masks(positions, keys)
        model = self.model
        x = model.positions.embed(F.embedding(tokens.view(-1, 1), model.token_embedding.weight), positions)
        cache.reserve(offset + 1)
        for layer, scheme in enumerate(self.schemes):
            norm1, norm2 = self.norms[layer]
            x = x + self._attention(norm1(x), layer, scheme, masks[id(scheme)], positions, cache)
            x = x + self._mlp(norm2(x), layer)
        cache.length = offset + 1
        return F.linear(self.final_norm(x), model.head.weight)[:, 0]  # [B, V]
