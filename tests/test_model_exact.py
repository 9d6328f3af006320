"""Exact expected values for octlm/model/decoder.py, written to kill its mutants (scripts/mutation, docs/MUTANTS.md).

Expected values come from hand-written references (float64 softmax attention, masks written out) or from
what the docstrings promise (sizes, messages, initial scales), never from a second run of the same code.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.model.decoder import Decoder, KVCache, attention


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


def test_init_scales_by_hand():
    torch.manual_seed(0)
    m = Decoder(tiny(d_model=64, d_ff=256, n_heads=4, n_layers=8, vocab_size=512, context_length=8))
    proj_std = 0.02 / math.sqrt(16)  # GPT-2: 0.02 / √(2 · layers)
    for block in m.blocks:
        assert block.attn.proj.weight.std().item() == pytest.approx(proj_std, rel=0.1)
        assert block.mlp.proj.weight.std().item() == pytest.approx(proj_std, rel=0.06)
        assert block.attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert not block.attn.qkv.bias.any() and not block.mlp.fc.bias.any()
    assert m.token_embedding.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert m.positions.table.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_num_parameters_counts_a_tied_table_once():
    # V=11, C=8, H=2, 1 layer, d_ff 16, learned table of 6 rows, biases, LayerNorms.
    per_block = 2 * 8 * 2 + (8 * 24 + 24) + (8 * 8 + 8) + (8 * 16 + 16) + (16 * 8 + 8)
    want = 11 * 8 + 6 * 8 + per_block + 2 * 8
    assert Decoder(tiny()).num_parameters() == want
    assert Decoder(tiny(tie_embeddings=False)).num_parameters() == want + 11 * 8


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.zeros(1, 2), "^token ids must be an integer tensor, got torch.float32$"),
        (torch.zeros(1, 2, dtype=torch.bool), "^token ids must be an integer tensor, got torch.bool$"),
        (
            torch.zeros(1, 2, dtype=torch.complex64),
            "^token ids must be an integer tensor, got torch.complex64$",
        ),
        ([[1, 2]], "^token ids must be an integer tensor, got list$"),
        (torch.zeros(3, dtype=torch.long), r"^token ids must have shape \[B, T\] with B, T >= 1, got \[3\]$"),
        (
            torch.zeros(1, 0, dtype=torch.long),
            r"^token ids must have shape \[B, T\] with B, T >= 1, got \[1, 0\]$",
        ),
        (
            torch.tensor([[0, -1, 11]]),
            r"^token id -1 is outside the vocabulary \[0, 11\); encode text with the ",
        ),
        (torch.tensor([[0, 11]]), r"^token id 11 is outside the vocabulary \[0, 11\)"),
    ],  # fmt: skip
)
def test_check_ids_messages(ids, message):
    with pytest.raises(UserError, match=message):
        Decoder(tiny()).check_ids(ids)


def test_check_ids_accepts_the_edges_and_counts_the_offset():
    m = Decoder(tiny())
    m.check_ids(torch.tensor([[0, 10, 3, 4, 5, 6]]))  # ids 0 and V - 1, exactly the table's 6 rows
    m.check_ids(torch.tensor([[1, 2]], dtype=torch.int32), offset=4)
    with pytest.raises(UserError, match=r"^a sequence of length 7 is longer than the learned position table "
                                        r"\(6 rows\); use at most 6 tokens, or a scheme with no maximum: "
                                        r"sinusoidal, rope, p-rope, xpos, alibi, t5, fire, cope, nope$"):  # fmt: skip
        m.check_ids(torch.tensor([[1, 2]]), offset=5)
    Decoder(tiny(position="rope")).check_ids(torch.zeros(1, 50, dtype=torch.long))


def test_new_cache_defaults_to_the_context_and_the_parameters_dtype():
    m = Decoder(tiny(n_layers=2)).double()
    c = m.new_cache(3)
    assert c.k.shape == (2, 3, 2, 6, 4) and c.k.dtype == torch.float64
    assert m.new_cache(1, capacity=9).k.shape[3] == 9


def test_an_invalid_config_lists_its_problems():
    with pytest.raises(UserError, match="^invalid model config: "):
        Decoder(tiny(n_heads=3))


@pytest.mark.parametrize("position", ["alibi", "rope", "learned"])
def test_loss_without_logits_equals_cross_entropy_of_the_logits(position):
    torch.manual_seed(0)
    m = Decoder(tiny(position=position, n_layers=2)).double()
    ids, targets = torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 5))
    logits, loss = m(ids, targets)
    none, chunked = m(ids, targets, return_logits=False)
    assert none is None and logits.shape == (2, 5, 11)
    want = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert loss.item() == pytest.approx(want.item(), abs=1e-6)  # float32 upcast of float64 logits
    assert chunked.item() == pytest.approx(want.item(), abs=1e-12)
    assert m(ids)[1] is None


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
    assert plain._attention_mask(torch.arange(4), 4) == (None, True)
    assert plain._attention_mask(torch.tensor([4]), 5) == (None, False)
    mask, causal = plain._attention_mask(torch.tensor([3, 4]), 5)
    assert not causal and mask.tolist() == [[True] * 4 + [False], [True] * 5]
    alibi = Decoder(tiny(position="alibi")).double()
    bias, causal = alibi._attention_mask(torch.arange(2), 2)
    assert causal and bias.dtype == torch.float64
    assert bias[0].tolist() == [[0.0, float("-inf")], [-1 / 16, 0.0]]
    assert alibi._attention_mask(torch.tensor([2]), 3)[1] is False


def test_a_new_cache_lives_on_the_parameters_device():
    # "meta" stands in for a GPU: the cache must be made where the model is.
    m = Decoder(tiny()).to("meta")
    c = m.new_cache(1)
    assert c.k.device.type == c.v.device.type == "meta"
    direct = KVCache(tiny(), 1, 2, device="meta")
    assert direct.k.device.type == direct.v.device.type == "meta"


@pytest.mark.parametrize("position", ["nope", "alibi", "t5"])
def test_the_attention_mask_is_made_on_the_positions_device(position):
    # "meta" stands in for a GPU: key positions made on the CPU cannot meet query positions there.
    m = Decoder(tiny(position=position)).to("meta")
    mask, causal = m._attention_mask(torch.arange(3, 5, device="meta"), 5)
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


def test_an_invalid_config_lists_every_problem_separated_by_semicolons():
    cfg = tiny(n_heads=3, dropout=1.5)
    problems = cfg.problems()  # config.py's wording; what the model adds is the prefix and the separator
    assert len(problems) == 2
    with pytest.raises(UserError) as e:
        Decoder(cfg)
    assert str(e.value) == f"invalid model config: {problems[0]}; {problems[1]}"


def test_init_means_are_zero():
    torch.manual_seed(0)
    m = Decoder(tiny(d_model=64, d_ff=256, n_heads=4, n_layers=8, vocab_size=512, context_length=8))
    # N(0, σ²) over n entries: the mean's standard error is σ/√n, at most 0.02/√4096 = 3e-4 here
    for block in m.blocks:
        for p in (block.attn.qkv.weight, block.attn.proj.weight, block.mlp.fc.weight, block.mlp.proj.weight):
            assert abs(p.mean().item()) < 2e-3
    assert abs(m.token_embedding.weight.mean().item()) < 2e-3
    assert abs(m.positions.table.weight.mean().item()) < 2e-3
    assert m.head.bias is None  # the head is the token table: no bias


def test_layer_norm_takes_the_configs_eps_and_bias():
    m = Decoder(tiny(norm_eps=1e-3, bias=False))
    for norm in (m.blocks[0].norm1, m.blocks[0].norm2, m.norm):
        assert isinstance(norm, torch.nn.LayerNorm) and norm.eps == 1e-3 and norm.bias is None
    assert Decoder(tiny(norm_eps=1e-3)).norm.bias is not None
    rms = Decoder(tiny(norm="rmsnorm", norm_eps=1e-4)).norm
    assert isinstance(rms, torch.nn.RMSNorm) and rms.eps == 1e-4
