"""The decoder's attention (octlm/model/decoder.py) with expected values worked out by hand: `attention` against
softmax attention, its masks and its kernels, attention over a bias built per query chunk, where the decoder
builds a bias whole or per chunk, and the KV cache (its shapes, its growth, where it lives)."""

from __future__ import annotations

import math

import pytest
import torch
from decoders import small
from torch import Tensor

import octlm.model.decoder
import octlm.positions.rotary
from octlm.config import ModelConfig, config_from_dict
from octlm.model.decoder import ChunkedBias, ContextualBias, Decoder, KVCache, attention, chunked_attention
from octlm.positions.bias import AlibiPositions

# ------------------------------------------------------------------------------------------------------------
# `attention`, its masks and kernels, and the KV cache, by hand


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=16, context_length=6)
    return ModelConfig(**{**base, **kw})


def test_kv_cache_shapes_reserve_and_update():
    c = KVCache(tiny(n_layers=2, n_kv_heads=1), batch=3, capacity=4, dtype=torch.float64)
    assert c.k.shape == c.v.shape == (2, 3, 1, 4, 4) and c.k.dtype == torch.float64 and c.length == 0
    assert not c.k.any() and not c.v.any()
    c.reserve(4)
    assert c.k.shape[3] == 4  # fits: no growth
    c.reserve(5)
    assert c.k.shape[3] == c.v.shape[3] == 8  # doubles
    c.reserve(20)
    assert c.k.shape[3] == 20  # or grows straight to what is asked
    k, v = torch.ones(3, 1, 2, 4, dtype=torch.float64), 2 * torch.ones(3, 1, 2, 4, dtype=torch.float64)
    c.length = 1
    ks, vs = c.update(1, k, v)
    assert ks.shape == vs.shape == (3, 1, 3, 4)
    assert ks[:, :, 0].sum() == 0 and (ks[:, :, 1:] == 1).all() and (vs[:, :, 1:] == 2).all()
    assert not c.k[0].any() and not c.k[1, :, :, 3:].any()  # other layers and later slots untouched


def reference_attention(q, k, v, bias):
    """Float64 softmax(q kᵀ / √D + bias) v, keys repeated for grouped heads."""
    q, k, v, bias = q.double(), k.double(), v.double(), bias.double()
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("kv_heads", [2, 1])
@pytest.mark.parametrize("mask_dim", [3, 4])
def test_attention_with_a_causal_bias_matches_softmax_attention(kv_heads, mask_dim):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 5, 4, generator=g)
    k, v = torch.randn(1, kv_heads, 5, 4, generator=g), torch.randn(1, kv_heads, 5, 4, generator=g)
    d = torch.arange(5).unsqueeze(1) - torch.arange(5).unsqueeze(0)
    bias = (-0.3 * d).float().masked_fill(d < 0, float("-inf")).expand(2, 5, 5)  # [H, T, T]
    mask = bias if mask_dim == 3 else bias.unsqueeze(0)
    got = attention(q, k, v, mask, True, 0.0)
    torch.testing.assert_close(got.double(), reference_attention(q, k, v, bias), rtol=0, atol=1e-6)  # 2e-7


def test_attention_plain_causal_and_an_explicit_boolean_mask():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 4, 4, generator=g) for _ in range(3))
    causal = torch.zeros(4, 4).masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf"))
    want = reference_attention(q, k, v, causal)
    torch.testing.assert_close(attention(q, k, v, None, True, 0.0).double(), want, rtol=0, atol=1e-6)
    allowed = torch.ones(4, 4, dtype=torch.bool).tril()
    torch.testing.assert_close(attention(q, k, v, allowed, False, 0.0).double(), want, rtol=0, atol=1e-6)


def test_new_cache_defaults_to_the_context_and_the_parameters_dtype():
    m = Decoder(tiny(n_layers=2)).double()
    c = m.new_cache(3)
    assert c.k.shape == (2, 3, 2, 6, 4) and c.k.dtype == torch.float64
    assert m.new_cache(1, capacity=9).k.shape[3] == 9


@pytest.mark.parametrize("position", ["nope", "alibi", "t5", "rope", "sinusoidal"])
def test_cached_decoding_one_and_several_tokens_equals_the_full_pass(position):
    torch.manual_seed(0)
    m = Decoder(tiny(position=position, n_layers=2)).double().eval()
    ids = torch.randint(0, 11, (2, 6))
    full, _ = m(ids)
    cache = m.new_cache(2, capacity=2)  # grows twice on the way
    parts = [m(ids[:, :3], cache=cache)[0], m(ids[:, 3:4], cache=cache)[0], m(ids[:, 4:], cache=cache)[0]]
    assert cache.length == 6
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-12)


def test_attention_masks_by_hand():
    plain = Decoder(tiny(position="nope"))
    assert plain._attention_mask(torch.arange(4), torch.arange(4)) == (None, True)
    assert plain._attention_mask(torch.tensor([4]), torch.arange(5)) == (None, False)
    mask, causal = plain._attention_mask(torch.tensor([3, 4]), torch.arange(5))
    assert not causal and mask.tolist() == [[True] * 4 + [False], [True] * 5]
    alibi = Decoder(tiny(position="alibi")).double()
    bias, causal = alibi._attention_mask(torch.arange(2), torch.arange(2))
    assert causal and bias.dtype == torch.float64
    assert bias[0].tolist() == [[0.0, float("-inf")], [-1 / 16, 0.0]]
    assert alibi._attention_mask(torch.tensor([2]), torch.arange(3))[1] is False


def test_a_new_cache_lives_on_the_parameters_device():
    # "meta" stands in for a GPU: the cache must be made where the model is.
    m = Decoder(tiny()).to("meta")
    c = m.new_cache(1)
    assert c.k.device.type == c.v.device.type == c.positions.device.type == "meta"
    direct = KVCache(tiny(), 1, 2, device="meta")
    assert direct.k.device.type == direct.v.device.type == direct.positions.device.type == "meta"


@pytest.mark.parametrize("position", ["nope", "alibi", "t5"])
def test_the_attention_mask_is_made_on_the_positions_device(position):
    # "meta" stands in for a GPU: key positions made on the CPU cannot meet query positions there.
    m = Decoder(tiny(position=position)).to("meta")
    mask, causal = m._attention_mask(torch.arange(3, 5, device="meta"), torch.arange(5, device="meta"))
    assert mask.device.type == "meta" and not causal


def test_attention_called_without_a_layer_writes_layer_0_of_the_cache():
    cfg = tiny(n_layers=2)
    attn = Decoder(cfg).blocks[0].attn.double()
    scheme = Decoder(tiny(position="nope")).positions
    cache = KVCache(cfg, batch=1, capacity=3, dtype=torch.float64)
    x = torch.randn(1, 3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    attn(x, torch.arange(3), scheme, None, True, cache)
    assert cache.k[0].abs().sum() > 0 and not cache.k[1].any() and not cache.v[1].any()


def test_attention_dropout_acts_in_training_only():
    torch.manual_seed(0)
    cfg = tiny(dropout=0.5, position="nope")
    attn = Decoder(cfg).blocks[0].attn.double()
    scheme = Decoder(tiny(position="nope")).positions
    x = torch.randn(1, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    attn.eval()
    # eval: exactly the reference attention, no dropout
    q, k, v = attn.qkv(x).split(8, -1)
    heads = [t.view(1, 5, 2, 4).transpose(1, 2) for t in (q, k, v)]
    causal = torch.zeros(5, 5, dtype=torch.float64).masked_fill(
        torch.ones(5, 5).triu(1).bool(), float("-inf")
    )
    want = attn.proj(reference_attention(*heads, causal).transpose(1, 2).reshape(1, 5, 8))
    torch.testing.assert_close(attn(x, torch.arange(5), scheme, None, True), want, rtol=0, atol=1e-12)
    attn.train()
    a, b = attn(x, torch.arange(5), scheme, None, True), attn(x, torch.arange(5), scheme, None, True)
    assert (a - want).abs().max() > 1e-3 and (a - b).abs().max() > 1e-3  # p = 0.5: far from the mean path


def test_attention_takes_the_cpu_flash_kernel_exactly_where_the_docstring_says(monkeypatch):
    """A same-dtype float mask with `is_causal`, no dropout, no grouped heads: the CPU flash kernel, told the
    attention is causal (so it skips the hidden key blocks, the 1.8x of benchmarks/README.md); otherwise SDPA."""
    real = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    calls = []

    def spy(q, k, v, dropout_p, is_causal, attn_mask=None):
        calls.append((dropout_p, is_causal))
        return real(q, k, v, dropout_p, is_causal, attn_mask=attn_mask)

    monkeypatch.setattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", spy)
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g) for _ in range(3))  # T = 5 differs from H = 2 and D = 4
    d = torch.arange(5).unsqueeze(1) - torch.arange(5).unsqueeze(0)
    bias = (-0.5 * d).float().masked_fill(d < 0, float("-inf")).expand(2, 5, 5)
    got = attention(q, k, v, bias, True, 0.0)
    assert calls == [(0.0, True)]
    torch.testing.assert_close(got.double(), reference_attention(q, k, v, bias), rtol=0, atol=1e-6)  # 2e-7
    calls.clear()
    attention(q, k[:, :1], v[:, :1], bias, True, 0.0)  # grouped heads
    attention(q, k, v, bias, True, 0.1)  # dropout
    attention(q, k, v, bias.clone().requires_grad_(), True, 0.0)  # a mask being trained (T5)
    attention(q, k, v, bias, False, 0.0)  # not causal
    assert calls == []


# ------------------------------------------------------------------------------------------------------------
# Attention over a bias built per query chunk, and the schemes the layers use


def whole_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(D) + bias) v in float64, grouped heads repeated: `[B, H, Tq, D]`."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).double(), v.repeat_interleave(group, 1).double()
    scores = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias.double()
    return scores.softmax(-1) @ v


def test_chunked_attention_of_grouped_heads_with_as_many_keys_as_heads() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    alibi = AlibiPositions(4)
    out = chunked_attention(q, k, v, ChunkedBias(alibi, torch.arange(4), torch.arange(4), torch.float32), 0.0)
    expected = whole_attention(q, k, v, alibi.bias(torch.arange(4), torch.arange(4)))
    # float32 SDPA against the float64 formula: measured 1.3e-7
    torch.testing.assert_close(out.double(), expected, atol=5e-7, rtol=0)


def test_chunked_attention_hands_sdpa_four_dimensional_masks_and_the_dropout(monkeypatch) -> None:  # noqa: ANN001
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, mask, **kwargs):  # noqa: ANN001, ANN202
        seen.append((mask.dim(), kwargs.get("dropout_p", 0.0)))
        return sdpa(q, k, v, mask, **kwargs)

    monkeypatch.setattr(
        octlm.model.decoder, "CHUNK_BIAS_ENTRIES", 4 * 6 * 2
    )  # two queries per chunk of 6 keys
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)
    bias = ChunkedBias(AlibiPositions(4), torch.arange(6), torch.arange(6), torch.float32)
    plain = chunked_attention(q, k, v, bias, 0.0)
    dropped = chunked_attention(q, k, v, bias, 0.5)
    # the CPU flash kernel takes 4-D masks only (a 3-D one runs the 4-6x slower math backend)
    assert seen == [(4, 0.0)] * 3 + [(4, 0.5)] * 3
    assert not torch.allclose(plain, dropped)


def test_attention_mask_is_in_the_models_dtype_and_chunked_only_past_the_limit(monkeypatch) -> None:  # noqa: ANN001
    # FIRE computes its bias in float32 whatever the model's dtype: the mask must be cast to it.
    model = Decoder(small("fire")).double()
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", 64)
    mask, causal = model._attention_mask(torch.arange(8), torch.arange(8))  # 64 pairs: still whole
    assert isinstance(mask, Tensor) and (mask.dtype, mask.shape, causal) == (torch.float64, (4, 8, 8), True)
    mask, causal = model._attention_mask(torch.arange(8), torch.arange(9))  # 72 pairs: per chunk
    assert isinstance(mask, ChunkedBias) and (mask.dtype, mask.keys, causal) == (torch.float64, 9, False)
    assert mask.rows(0, 8)[0].dtype == torch.float64


def test_layer_schemes_list_only_the_schemes_some_layer_uses() -> None:
    every = Decoder(small("alibi", nope_layers=[0, 1]))
    assert every._layer_schemes() == [every.no_positions]
    assert [every.layer_scheme(i) for i in range(2)] == [every.no_positions] * 2
    none = Decoder(small("alibi"))
    assert none._layer_schemes() == [none.positions]
    some = Decoder(small("alibi", nope_layers=[1]))
    assert some._layer_schemes() == [some.positions, some.no_positions]
    assert [some.layer_scheme(i) for i in range(2)] == [some.positions, some.no_positions]


@pytest.mark.parametrize(("length", "whole"), [(8, True), (9, False)])
def test_cope_builds_its_bias_whole_up_to_the_pair_limit_and_per_chunk_past_it(
    length: int, whole: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CoPE's bias depends on each layer's queries and keys, so `Attention.forward` decides itself: whole (the
    fast path) while queries × keys ≤ WHOLE_BIAS_PAIRS, per query chunk past it. 8 × 8 = 64 is the limit here;
    at 9 tokens the head size (4) must not stand in for a length (4 × 9 ≤ 64), nor `<` for `<=` at 8."""
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", 64)
    seen: list[type] = []
    real = octlm.model.decoder.attention

    def spy(q: Tensor, k: Tensor, v: Tensor, mask, *args, **kwargs) -> Tensor:  # noqa: ANN001
        seen.append(type(mask))
        return real(q, k, v, mask, *args, **kwargs)

    monkeypatch.setattr(octlm.model.decoder, "attention", spy)
    config = ModelConfig(
        vocab_size=64,
        d_model=16,
        context_length=16,
        n_layers=1,
        n_heads=4,
        d_ff=32,
        position="cope",
        cope_positions=8,
    )
    torch.manual_seed(0)
    model = Decoder(config).eval()
    assert config.head_dim == 4
    with torch.inference_mode():
        model(torch.randint(0, 64, (1, length)))
    assert seen == [Tensor if whole else ContextualBias]


# ---------------------------------------------------------------------------------------------------------------
# The KV cache grows as decoding needs it


def rope_model() -> Decoder:
    config = config_from_dict(
        {
            "model": {
                "vocab_size": 260,
                "d_model": 32,
                "n_layers": 1,
                "n_heads": 2,
                "d_ff": 64,
                "context_length": 16,
                "position": "rope",
            }
        }
    )
    torch.manual_seed(0)
    return Decoder(config.model)


def test_reserve_doubles_and_keeps_what_is_cached() -> None:
    model = rope_model()
    cache = KVCache(model.config, 1, 4)
    cache.k[..., :4, :] = 1.0
    for total, capacity in [(3, 4), (5, 8), (8, 8), (9, 16), (40, 40)]:
        cache.reserve(total)
        assert cache.k.shape[3] == capacity == cache.v.shape[3]
    assert torch.equal(cache.k[..., :4, :], torch.ones_like(cache.k[..., :4, :]))
    assert not cache.k[..., 4:, :].any()
