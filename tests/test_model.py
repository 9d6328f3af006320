"""The decoder of octlm/model.py against independent checks: a NumPy float64 forward pass written from the
formulas (token lookup, position scheme, pre-norm block, causal softmax attention, tied head), hand-counted
parameter totals, causality and KV-cache equivalence.

Weights are re-drawn at a scale where every part of the model moves the output (the default GPT-2 init makes
the logits so small that a 1e-5 tolerance would hide almost anything). Tolerances are float32 at 1e-5 unless a
comment says otherwise.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from octlm.config import ModelConfig, load_config
from octlm.errors import UserError
from octlm.model import Decoder
from octlm.positions import add_positions

# (name, position, extra config) for every scheme; RoPE in both layouts.
SCHEMES = [
    ("learned", "learned", {}),
    ("sinusoidal", "sinusoidal", {}),
    ("rope-half", "rope", {"rope_layout": "half"}),
    ("rope-interleaved", "rope", {"rope_layout": "interleaved"}),
    ("alibi", "alibi", {}),
    ("t5", "t5", {"t5_buckets": 8, "t5_max_distance": 16}),  # small, so short sequences reach the log buckets
    ("nope", "nope", {}),
]
SCHEME_IDS = [s[0] for s in SCHEMES]
UNBOUNDED = ["sinusoidal", "rope", "alibi", "t5", "nope"]


def tiny(position: str, **overrides) -> ModelConfig:
    fields = dict(
        vocab_size=64, d_model=32, context_length=8, n_layers=1, n_heads=4, d_ff=64, position=position
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def randomized(config: ModelConfig, seed: int = 0) -> Decoder:
    """A Decoder whose every parameter is O(1)-relevant: matrices N(0, 1/fan_in), norm gains 1 + N(0, 0.1),
    biases N(0, 0.1), and the T5 bias table N(0, 1)."""
    torch.manual_seed(seed)
    model = Decoder(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "positions.table.weight" and config.position == "t5":
                p.normal_(0.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    return model.eval()


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
    ("rope-interleaved-modern", "rope", {"rope_layout": "interleaved"},
     {"norm": "rmsnorm", "mlp": "swiglu", "bias": False}),
    ("alibi-gqa", "alibi", {"n_kv_heads": 2}, {}),
    ("t5-gqa-untied", "t5", {"n_kv_heads": 1, "t5_buckets": 8, "t5_max_distance": 16},
     {"tie_embeddings": False}),
    ("learned-modern", "learned", {}, {"norm": "rmsnorm", "mlp": "swiglu", "bias": False}),
]  # fmt: skip


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


# ------------------------------------------------------------------------------------------------------------
# The token table


def test_one_hot_times_table_is_the_looked_up_row() -> None:
    model = randomized(tiny("learned"))
    E = model.token_embedding.weight.detach()
    ids = torch.tensor([[0, 5, 63, 5], [17, 2, 2, 40]])
    one_hot = F.one_hot(ids, 64).to(E.dtype)  # [B, T, V]
    looked_up = model.token_embedding(ids).detach()
    # Exact: each output is 1 * E[i, c] plus zeros.
    assert torch.equal(one_hot @ E, looked_up)
    assert torch.equal(looked_up, E[ids])
    # And against NumPy.
    assert np.array_equal(np.eye(64)[ids.numpy()] @ E.double().numpy(), E.double().numpy()[ids.numpy()])


def test_gradient_reaches_only_the_rows_used() -> None:
    model = randomized(tiny("learned"))
    ids = torch.tensor([[3, 7, 3, 60], [7, 7, 1, 3]])
    upstream = torch.randn(2, 4, 32, generator=torch.Generator().manual_seed(0))
    (model.token_embedding(ids) * upstream).sum().backward()
    grad = model.token_embedding.weight.grad
    expected = np.zeros((64, 32))
    np.add.at(expected, ids.numpy().ravel(), upstream.numpy().reshape(-1, 32))  # scatter-add by hand
    used = sorted(set(ids.flatten().tolist()))
    unused = [i for i in range(64) if i not in used]
    assert torch.equal(grad[unused], torch.zeros(len(unused), 32))  # exactly zero, not just small
    np.testing.assert_allclose(grad.numpy(), expected, rtol=0, atol=1e-6)  # float32 sums of <= 3 terms


def test_untied_model_leaves_unused_rows_without_gradient() -> None:
    """Through the whole model (untied head): a token that never appears gets exactly zero gradient."""
    model = randomized(tiny("learned", tie_embeddings=False))
    model.train()
    ids = torch.tensor([[3, 7, 3, 60, 9], [7, 7, 1, 3, 9]])
    _, loss = model(ids, targets=torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1)))
    loss.backward()
    grad = model.token_embedding.weight.grad
    used = set(ids.flatten().tolist())
    for row in range(64):
        if row in used:
            assert grad[row].abs().sum() > 0
        else:
            assert torch.equal(grad[row], torch.zeros(32)), row


def test_input_embedding_shapes_from_the_seed() -> None:
    """ids [8, 4] -> token vectors [8, 4, 256]; a [4, 256] position table broadcast over the batch."""
    model = Decoder(tiny("learned", d_model=256, context_length=4, vocab_size=100))
    ids = torch.randint(0, 100, (8, 4), generator=torch.Generator().manual_seed(0))
    tokens = model.token_embedding(ids)
    assert tokens.shape == (8, 4, 256)
    pos = model.positions.table(torch.arange(4))
    assert pos.shape == (4, 256)
    inputs = add_positions(tokens, pos)
    assert inputs.shape == (8, 4, 256)
    for b in range(8):
        assert torch.equal(inputs[b], tokens[b] + pos)
    # The scheme's own embed step does the same thing.
    assert torch.equal(model.positions.embed(tokens, torch.arange(4)), inputs)
    for bad in ([4, 128], [5, 256]):
        with pytest.raises(UserError) as info:
            add_positions(tokens, torch.zeros(bad))
        assert str(bad) in str(info.value) and "[8, 4, 256]" in str(info.value)


# ------------------------------------------------------------------------------------------------------------
# Causality and length


@pytest.mark.parametrize(("name", "position", "extra"), SCHEMES, ids=SCHEME_IDS)
def test_changing_a_later_token_leaves_earlier_logits_unchanged(
    name: str, position: str, extra: dict
) -> None:
    config = tiny(position, n_layers=2, **extra)
    model = randomized(config, seed=5)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        base, _ = model(ids)
        for t in range(7):
            changed = ids.clone()
            changed[:, t + 1] = (changed[:, t + 1] + 1 + t) % 64
            logits, _ = model(changed)
            # Masked scores contribute exact zeros; 1e-6 allows for a different reduction order only.
            torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-6)
            assert (logits[:, t + 1] - base[:, t + 1]).abs().max() > 1e-3  # the change itself is visible


def test_learned_positions_stop_at_the_table() -> None:
    model = Decoder(tiny("learned"))
    model(torch.zeros(1, 8, dtype=torch.long))  # exactly the table is fine
    with pytest.raises(UserError) as info:
        model(torch.zeros(1, 9, dtype=torch.long))
    message = str(info.value)
    assert "9" in message and "8" in message
    for scheme in UNBOUNDED:
        assert scheme in message
    # The same limit applies to cached decoding: 6 cached + 3 new = 9 positions.
    cache = model.new_cache(1)
    model(torch.zeros(1, 6, dtype=torch.long), cache=cache)
    with pytest.raises(UserError, match="9"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=cache)


@pytest.mark.parametrize(("name", "position", "extra"), SCHEMES[1:], ids=SCHEME_IDS[1:])
def test_unbounded_schemes_run_at_four_times_the_context(name: str, position: str, extra: dict) -> None:
    model = randomized(tiny(position, **extra))
    ids = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits, loss = model(ids, targets=ids)
    assert logits.shape == (2, 32, 64)
    assert torch.isfinite(logits).all() and torch.isfinite(loss)


# ------------------------------------------------------------------------------------------------------------
# KV cache


def cached_logits(
    model: Decoder, ids: torch.Tensor, prompt: int, step: int, capacity: int | None
) -> torch.Tensor:
    cache = model.new_cache(ids.shape[0], capacity)
    parts = [model(ids[:, :prompt], cache=cache)[0]]
    for start in range(prompt, ids.shape[1], step):
        parts.append(model(ids[:, start : start + step], cache=cache)[0])
    assert cache.length == ids.shape[1]
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize(("name", "position", "extra"), SCHEMES, ids=SCHEME_IDS)
def test_cached_decoding_equals_a_full_pass(name: str, position: str, extra: dict, kv_heads: int) -> None:
    config = tiny(position, n_layers=2, n_kv_heads=kv_heads, **extra)
    model = randomized(config, seed=8)
    # Past the training context (8) for every scheme that has no maximum.
    length = 8 if position == "learned" else 21
    ids = torch.randint(0, 64, (2, length), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        full, _ = model(ids)
        for step, capacity in (
            (1, None),
            (3, None),
            (3, 2),
            (1, 4),
        ):  # small capacities force the cache to grow
            cached = cached_logits(model, ids, prompt=5, step=step, capacity=capacity)
            # float32, O(1) logits, different matmul shapes: 1e-5 absolute.
            torch.testing.assert_close(
                cached, full, rtol=0, atol=1e-5, msg=f"step {step}, capacity {capacity}"
            )


def test_cache_offset_matters() -> None:
    """Sanity for the test above: decoding at the wrong positions does change RoPE's logits by far more than
    the tolerance, so agreement there is evidence that the cache passes the right positions."""
    model = randomized(tiny("rope", n_layers=2), seed=8)
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        full, _ = model(ids)
        wrong, _ = model(ids[:, 6:])  # the same tokens seen from position 0 with no context
    assert (full[:, 6:] - wrong).abs().max() > 1e-2


# ------------------------------------------------------------------------------------------------------------
# Bad ids


@pytest.mark.parametrize(
    ("ids", "named"),
    [
        (torch.zeros(2, 4), "float32"),
        (torch.zeros(2, 4, dtype=torch.float64), "float64"),
        (torch.zeros(2, 4, dtype=torch.bool), "bool"),
        (torch.tensor([[1, 2, 64]]), "64"),
        (torch.tensor([[1, 2, 1000]]), "1000"),
        (torch.tensor([[1, -1, 2]]), "-1"),
        (torch.tensor([[-7, 3]]), "-7"),
        (torch.tensor([1, 2, 3]), "[3]"),
        (torch.zeros(1, 2, 3, dtype=torch.long), "[1, 2, 3]"),
        (torch.zeros(2, 0, dtype=torch.long), "[2, 0]"),
        (torch.tensor(5), "[]"),
    ],
    ids=[
        "float32",
        "float64",
        "bool",
        "eq-V",
        "far-above-V",
        "minus-one",
        "minus-seven",
        "1d",
        "3d",
        "empty-T",
        "0d",
    ],
)
def test_bad_ids_raise_a_user_error_naming_the_value(ids: torch.Tensor, named: str) -> None:
    model = Decoder(tiny("rope"))
    with pytest.raises(UserError) as info:
        model(ids)
    assert named in str(info.value)
    assert "\n" not in str(info.value)


def test_non_tensor_ids_raise_a_user_error() -> None:
    with pytest.raises(UserError, match="list"):
        Decoder(tiny("rope"))([[1, 2, 3]])


@pytest.mark.parametrize("shape", [(0, 4), (2, 0), (0, 0)])
def test_empty_batch_is_not_a_crash(shape: tuple[int, int]) -> None:
    """ids with no rows or no columns: a UserError naming the shape, never a raw RuntimeError from inside."""
    model = Decoder(tiny("rope"))
    with pytest.raises(UserError, match=re.escape(f"got {list(shape)}")):
        model(torch.zeros(shape, dtype=torch.long))


# ------------------------------------------------------------------------------------------------------------
# Tied head and parameter counts


def test_tied_head_is_the_token_table() -> None:
    tied = Decoder(tiny("learned"))
    assert tied.head.weight is tied.token_embedding.weight
    assert tied.head.weight.data_ptr() == tied.token_embedding.weight.data_ptr()
    untied = Decoder(tiny("learned", tie_embeddings=False))
    assert untied.head.weight is not untied.token_embedding.weight
    assert untied.head.weight.data_ptr() != untied.token_embedding.weight.data_ptr()
    assert untied.num_parameters() - tied.num_parameters() == 64 * 32  # the second table counts


def test_day1_parameter_count_by_hand() -> None:
    C, V, T, F_, L = 128, 1024, 128, 512, 2
    token_table = 1024 * 128  # 131,072; the head reuses it
    learned_positions = 128 * 128  # 16,384
    per_layer = (
        2 * (128 + 128)  # two LayerNorms, weight and bias
        + (128 * 384 + 384)  # qkv
        + (128 * 128 + 128)  # attention proj
        + (128 * 512 + 512)  # mlp fc
        + (512 * 128 + 128)  # mlp proj
    )  # 198,272
    final_norm = 128 + 128
    expected = token_table + learned_positions + 2 * per_layer + final_norm
    assert expected == 544_256
    config = load_config("day1").model
    assert (config.vocab_size, config.d_model, config.context_length, config.d_ff, config.n_layers) == (
        V,
        C,
        T,
        F_,
        L,
    )
    model = Decoder(config)
    assert model.num_parameters() == expected
    assert sum(p.numel() for p in model.parameters()) == expected


def test_modern_parameter_count_by_hand() -> None:
    token_table = 1024 * 128  # 131,072; tied head, RoPE has no parameters
    per_layer = (
        2 * 128  # two RMSNorms, weight only
        + 128 * 384  # qkv, no bias
        + 128 * 128  # attention proj
        + 128 * (2 * 344)  # SwiGLU gate and up, fused
        + 344 * 128  # mlp proj
    )  # 197,888
    final_norm = 128
    expected = token_table + 2 * per_layer + final_norm
    assert expected == 526_976
    assert Decoder(load_config("modern").model).num_parameters() == expected
