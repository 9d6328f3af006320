"""The decoder of octlm/model/decoder.py against a NumPy float64 forward pass written from the formulas (token lookup,
position scheme, pre-norm block, causal softmax attention, tied head) for every scheme, and RoPE's values, which
are never rotated.

The models are tests/decoders.py's `randomized` ones (weights at a scale where every part moves the output).
Tolerances are float32 at 1e-5 unless a comment says otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from decoders import SCHEMES, randomized, tiny

from octlm.config import ModelConfig
from octlm.model.decoder import Decoder

# ------------------------------------------------------------------------------------------------------------
# A NumPy float64 re-derivation of the 1-layer decoder


def np_sinusoidal(length: int, width: int, base: float) -> np.ndarray:
    t = np.arange(length, dtype=np.float64)[:, None]
    i = np.arange(width // 2, dtype=np.float64)[None, :]
    angle = t / base ** (2 * i / width)
    table = np.empty((length, width))
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table


def np_rope(x: np.ndarray, base: float, layout: str) -> np.ndarray:
    """x [B, T, H, D] rotated pair by pair at positions 0..T-1."""
    d = x.shape[-1]
    out = x.copy()
    t = np.arange(x.shape[1], dtype=np.float64)[None, :, None]
    for i in range(d // 2):
        phi = t * base ** (-2.0 * i / d)
        a_i, b_i = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
        a, b = x[..., a_i], x[..., b_i]
        out[..., a_i], out[..., b_i] = a * np.cos(phi) - b * np.sin(phi), a * np.sin(phi) + b * np.cos(phi)
    return out


def np_alibi_slopes(n: int) -> np.ndarray:
    def pow2(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    low = 2 ** int(math.floor(math.log2(n)))
    return np.array(pow2(low) + pow2(2 * low)[0::2][: n - low])


def py_t5_bucket(rel: int, num_buckets: int, max_distance: int) -> int:
    n, exact = max(-rel, 0), num_buckets // 2
    if n < exact:
        return n
    return min(
        exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)),
        num_buckets - 1,
    )


def np_norm(x: np.ndarray, prefix: str, params: dict[str, np.ndarray], config: ModelConfig) -> np.ndarray:
    w = params[prefix + ".weight"]
    if config.norm == "rmsnorm":
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + config.norm_eps) * w
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + config.norm_eps) * w + params.get(prefix + ".bias", 0.0)


def np_linear(x: np.ndarray, prefix: str, params: dict[str, np.ndarray]) -> np.ndarray:
    return x @ params[prefix + ".weight"].T + params.get(prefix + ".bias", 0.0)


def np_attention(x: np.ndarray, params: dict[str, np.ndarray], config: ModelConfig, zero_q: bool = False):
    """Causal attention of block 0 from its fused qkv weights; x [B, T, C] -> [B, T, C]."""
    B, T, C = x.shape
    H, Hkv, D = config.n_heads, config.kv_heads, config.head_dim
    qkv = np_linear(x, "blocks.0.attn.qkv", params)
    q = qkv[..., : H * D].reshape(B, T, H, D)
    k = qkv[..., H * D : (H + Hkv) * D].reshape(B, T, Hkv, D)
    v = qkv[..., (H + Hkv) * D :].reshape(B, T, Hkv, D)
    if zero_q:
        q = np.zeros_like(q)
    if config.position == "rope":
        q, k = (
            np_rope(q, config.rope_base, config.rope_layout),
            np_rope(k, config.rope_base, config.rope_layout),
        )
    group = H // Hkv  # query head h reads kv head h // group
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scores = np.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    if config.position == "alibi":
        scores = scores - np_alibi_slopes(H)[:, None, None] * (i - j)
    if config.position == "t5":
        table = params["positions.table.weight"]  # [buckets, H]
        buckets = np.vectorize(py_t5_bucket)(j - i, config.t5_buckets, config.t5_max_distance)
        scores = scores + table[buckets].transpose(2, 0, 1)
    scores = np.where(j <= i, scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = np.einsum("bhij,bjhd->bihd", p, v).reshape(B, T, C)  # values: never rotated
    return np_linear(y, "blocks.0.attn.proj", params)


def np_forward(ids: np.ndarray, params: dict[str, np.ndarray], config: ModelConfig):
    """(input of block 0's attention, its output, logits), all float64."""
    T = ids.shape[1]
    h = params["token_embedding.weight"][ids]
    if config.position == "learned":
        h = h + params["positions.table.weight"][:T]
    if config.position == "sinusoidal":
        h = h + config.sinusoidal_scale * np_sinusoidal(T, config.d_model, config.sinusoidal_base)
    a_in = np_norm(h, "blocks.0.norm1", params, config)
    a_out = np_attention(a_in, params, config)
    h = h + a_out
    f = np_linear(np_norm(h, "blocks.0.norm2", params, config), "blocks.0.mlp.fc", params)
    if config.mlp == "swiglu":
        gate, up = np.split(f, 2, axis=-1)
        f = gate / (1 + np.exp(-gate)) * up
    else:
        f = 0.5 * f * (1 + np.vectorize(math.erf)(f / math.sqrt(2)))  # exact GELU
    h = h + np_linear(f, "blocks.0.mlp.proj", params)
    head = params["token_embedding.weight"] if config.tie_embeddings else params["head.weight"]
    return a_in, a_out, np_norm(h, "norm", params, config) @ head.T


def numpy_params(model: Decoder) -> dict[str, np.ndarray]:
    return {name: p.detach().double().numpy() for name, p in model.state_dict().items()}


def run_with_attention_hook(model: Decoder, ids: torch.Tensor):
    seen = {}

    def hook(module, args, output):
        seen["in"], seen["out"] = args[0].detach(), output.detach()

    handle = model.blocks[0].attn.register_forward_hook(hook)
    try:
        with torch.no_grad():
            logits, _ = model(ids)
    finally:
        handle.remove()
    return seen["in"], seen["out"], logits


ATTENTION_CASES = [(*s, {}) for s in SCHEMES] + [
    ("rope-half-gqa", "rope", {"rope_layout": "half", "n_kv_heads": 2}, {}),
    (
        "rope-interleaved-modern",
        "rope",
        {"rope_layout": "interleaved"},
        {"norm": "rmsnorm", "mlp": "swiglu", "bias": False},
    ),
    ("alibi-gqa", "alibi", {"n_kv_heads": 2}, {}),
    (
        "t5-gqa-untied",
        "t5",
        {"n_kv_heads": 1, "t5_buckets": 8, "t5_max_distance": 16},
        {"tie_embeddings": False},
    ),
    ("learned-modern", "learned", {}, {"norm": "rmsnorm", "mlp": "swiglu", "bias": False}),
]


@pytest.mark.parametrize(
    ("name", "position", "extra", "more"), ATTENTION_CASES, ids=[c[0] for c in ATTENTION_CASES]
)
def test_attention_and_logits_match_numpy(name: str, position: str, extra: dict, more: dict) -> None:
    config = tiny(position, **extra, **more)
    model = randomized(config, seed=1)
    ids = torch.randint(0, config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(2))
    a_in, a_out, logits = run_with_attention_hook(model, ids)
    ref_in, ref_out, ref_logits = np_forward(ids.numpy(), numpy_params(model), config)
    # float32 model vs float64 reference, all values O(1) and reductions over <= 64 terms: 1e-5 absolute.
    np.testing.assert_allclose(a_in.numpy(), ref_in, rtol=0, atol=1e-5)
    np.testing.assert_allclose(a_out.numpy(), ref_out, rtol=0, atol=1e-5)
    np.testing.assert_allclose(logits.numpy(), ref_logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_never_rotates_values(layout: str) -> None:
    """With the query weights zeroed every score is 0, so attention at t is the plain mean of v_0..v_t: the
    output is proj(cumulative mean of the *unrotated* values). A rotated value path would not match."""
    config = tiny("rope", rope_layout=layout)
    model = randomized(config, seed=3)
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[: config.d_model].zero_()
        model.blocks[0].attn.qkv.bias[: config.d_model].zero_()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(4))
    a_in, a_out, _ = run_with_attention_hook(model, ids)
    params = numpy_params(model)
    v = np_linear(a_in.double().numpy(), "blocks.0.attn.qkv", params)[..., 2 * config.d_model :]
    mean_v = np.cumsum(v, axis=1) / np.arange(1, 9)[None, :, None]
    expected = np_linear(mean_v, "blocks.0.attn.proj", params)
    np.testing.assert_allclose(a_out.numpy(), expected, rtol=0, atol=1e-5)  # float32, O(1) values
    # The same thing from the general reference with q forced to zero (keys are still rotated there).
    np.testing.assert_allclose(
        a_out.numpy(), np_attention(a_in.double().numpy(), params, config, zero_q=True), rtol=0, atol=1e-5
    )
