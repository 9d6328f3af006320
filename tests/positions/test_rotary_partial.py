"""RoPE on a share of each head's channels (`model.rope_fraction`, GPT-NeoX's `rotary_pct`) and p-RoPE
(Barbero et al., 2025: the lowest frequencies set to 0), against independent references: a NumPy float64
re-derivation of each formula, transformers' GPT-NeoX rotary embedding and x-transformers' partial rotary (where
importable), exact equalities (p = 1 is RoPE, p = 0 is NoPE, fraction 1 is today's RoPE), a gradient check,
KV-cache equality and a tiny training run. Tolerances are float32 at the figure a comment gives, measured.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny import memorise, run_cli

from octlm.config import ModelConfig
from octlm.model.decoder import Decoder
from octlm.positions import SCHEMES, NoPositions, family_of, table_order
from octlm.positions.formulas import apply_rope
from octlm.positions.rotary import (
    PartialRotaryPositions,
    RotaryPositions,
    _HalfRotation,
    prope_frequencies,
    rotary_dims,
)

LAYOUTS = ["half", "interleaved"]


def np_partial_rope(x: np.ndarray, positions: np.ndarray, base: float, layout: str, dims: int) -> np.ndarray:
    """GPT-NeoX's partial rotary, written from its definition: the first `dims` channels of `x` [..., T, D] turn
    pair by pair by position × base^(-2i / dims) (pair i = channels (i, i + dims/2) or (2i, 2i + 1) within
    them); channels dims .. D - 1 are copied."""
    out = np.array(x, dtype=np.float64, copy=True)
    for i in range(dims // 2):
        phi = positions.astype(np.float64) * base ** (-2.0 * i / dims)  # [T]
        a_idx, b_idx = (i, i + dims // 2) if layout == "half" else (2 * i, 2 * i + 1)
        a, b = x[..., a_idx].astype(np.float64), x[..., b_idx].astype(np.float64)
        out[..., a_idx] = a * np.cos(phi) - b * np.sin(phi)
        out[..., b_idx] = a * np.sin(phi) + b * np.cos(phi)
    return out


def np_prope(x: np.ndarray, positions: np.ndarray, base: float, kept: float) -> np.ndarray:
    """p-RoPE from the paper's description, half layout: pair i (channels i, i + D/2) turns by position ×
    base^(-2i / D) when i is among the round(p · D/2) highest frequencies (i small), and not at all otherwise."""
    d = x.shape[-1]
    keep = int(np.floor(kept * d / 2 + 0.5))
    out = np.array(x, dtype=np.float64, copy=True)
    for i in range(keep):
        phi = positions.astype(np.float64) * base ** (-2.0 * i / d)
        a, b = x[..., i].astype(np.float64), x[..., i + d // 2].astype(np.float64)
        out[..., i], out[..., i + d // 2] = (
            a * np.cos(phi) - b * np.sin(phi),
            a * np.sin(phi) + b * np.cos(phi),
        )
    return out


def qk(d: int, t: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 4, t, d, generator=g), torch.randn(2, 2, t, d, generator=g)  # GQA-shaped keys


def tiny(position: str, **overrides) -> ModelConfig:
    fields = dict(
        vocab_size=64, d_model=32, context_length=8, n_layers=2, n_heads=2, d_ff=64, position=position
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def randomized(config: ModelConfig, seed: int = 8) -> Decoder:
    """Weights at a scale where every part moves the logits (as tests/decoders.py's `randomized` does)."""
    torch.manual_seed(seed)
    model = Decoder(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    return model.eval()


# ------------------------------------------------------------------------------------------------------------
# rope_fraction


def test_rotary_dims_round_down_to_whole_pairs() -> None:
    assert [rotary_dims(64, f) for f in (1.0, 0.5, 0.25, 0.3, 0.03125, 0.03)] == [64, 32, 16, 18, 2, 0]
    assert rotary_dims(33, 0.5) == 16 and rotary_dims(48, 0.3) == 14  # int(16.5), int(14.4): whole pairs
    rope = RotaryPositions.from_config(
        ModelConfig(d_model=256, n_heads=4, position="rope", rope_fraction=0.25)
    )
    assert rope.rotary_dims == 16 and rope.head_dim == 64
    # one frequency per rotated pair, over the rotated channels: base^(-2i / 16), exactly
    assert rope.frequencies().tolist() == [10000.0 ** (-2 * i / 16) for i in range(8)]
    assert "rope_fraction" in RotaryPositions.options and rope.cos.shape == (128, 8)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.8])
def test_partial_rotation_matches_numpy(layout: str, fraction: float) -> None:
    d = 20  # fractions 0.25, 0.5, 0.8 rotate 4, 10 and 16 channels (5 = int(20 × 0.25) rounds down to 4)
    rope = RotaryPositions(d, 500.0, layout, initial_length=4, rotary_dims=rotary_dims(d, fraction))
    q, k = qk(d)
    positions = np.array([0, 3, 17, 40, 41, 99])
    rq, rk = rope.rotate(q, k, torch.tensor(positions))
    dims = rotary_dims(d, fraction)
    # float32 tables and products against float64: measured 3.1e-7 at most.
    for got, x in ((rq, q), (rk, k)):
        np.testing.assert_allclose(
            got.numpy(), np_partial_rope(x.numpy(), positions, 500.0, layout, dims), rtol=0, atol=1e-6
        )
        assert torch.equal(got[..., dims:], x[..., dims:])  # the other channels pass through, bit for bit


def test_fraction_one_is_todays_rope_bit_for_bit() -> None:
    """rope_fraction = 1 keeps the fused half-layout path: the same numbers as the default constructor."""
    q, k = qk(16)
    positions = torch.arange(30, 36)
    default = RotaryPositions(16, 10000.0, "half", initial_length=8)
    full = RotaryPositions.from_config(ModelConfig(d_model=64, n_heads=4, position="rope", rope_fraction=1.0))
    assert full.rotary_dims == 16
    for a, b in zip(default.rotate(q, k, positions), full.rotate(q, k, positions), strict=True):
        assert torch.equal(a, b)


def test_partial_rotation_equals_gpt_neox_in_transformers() -> None:
    """transformers' GPTNeoXRotaryEmbedding + apply_rotary_pos_emb with rotary_pct, as Pythia runs them."""
    neox = pytest.importorskip("transformers.models.gpt_neox.modeling_gpt_neox")
    from transformers import GPTNeoXConfig

    d, pct, base = 32, 0.25, 10000.0
    config = GPTNeoXConfig(hidden_size=4 * d, num_attention_heads=4, rotary_pct=pct, rotary_emb_base=base)
    embedding = neox.GPTNeoXRotaryEmbedding(config=config)
    q, k = qk(d, t=12)
    positions = torch.arange(5, 17)
    cos, sin = embedding(q, positions.unsqueeze(0))  # [1, T, rotary_dims]
    hf_q, hf_k = neox.apply_rotary_pos_emb(q, k, cos, sin)
    ours = RotaryPositions(d, base, "half", initial_length=8, rotary_dims=rotary_dims(d, pct))
    assert torch.allclose(ours.frequencies().float(), embedding.inv_freq, rtol=1e-7, atol=0)
    rq, rk = ours.rotate(q, k, positions)
    # transformers computes the angles in float32 (ours in float64, then cast): measured 2.4e-7.
    torch.testing.assert_close(rq, hf_q, rtol=0, atol=1e-6)
    torch.testing.assert_close(rk, hf_k, rtol=0, atol=1e-6)


def test_partial_rotation_equals_x_transformers() -> None:
    """x-transformers rotates the first `dim` channels (interleaved pairs) and passes the rest through."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    d, dims = 24, 8
    q, k = qk(d, t=10)
    positions = torch.arange(10)
    freqs, _ = xt.RotaryEmbedding(dims)(positions)  # [1, T, dims]
    ours = RotaryPositions(d, 10000.0, "interleaved", initial_length=4, rotary_dims=dims)
    rq, rk = ours.rotate(q, k, positions)
    # float32 angles there, float64 here: measured 2.4e-7.
    torch.testing.assert_close(rq, xt.apply_rotary_pos_emb(q, freqs), rtol=0, atol=1e-6)
    torch.testing.assert_close(rk, xt.apply_rotary_pos_emb(k, freqs), rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_partial_rotation_gradient(layout: str) -> None:
    """float64 finite differences through the slice, the rotation (the fused backward in half) and the cat."""
    torch.manual_seed(1)
    rope = RotaryPositions(10, 10000.0, layout, initial_length=4, rotary_dims=6)
    x = torch.randn(1, 2, 10, 5, dtype=torch.float64).transpose(-1, -2).requires_grad_()  # non-contiguous
    positions = torch.arange(7, 12)
    assert torch.autograd.gradcheck(lambda x: rope.rotate(x, x, positions)[0], (x,), eps=1e-6, atol=1e-8)
    g = torch.randn(1, 2, 5, 10, dtype=torch.float64)
    (ours,) = torch.autograd.grad(rope.rotate(x, x, positions)[0], x, g)
    cos, sin = rope.cos[positions].double(), rope.sin[positions].double()
    plain = torch.cat((apply_rope(x[..., :6], cos, sin, layout), x[..., 6:]), dim=-1)
    (want,) = torch.autograd.grad(plain, x, g)
    torch.testing.assert_close(ours, want, rtol=0, atol=1e-12)


def test_set_frequencies_needs_one_per_rotated_pair() -> None:
    rope = RotaryPositions(16, 10000.0, "half", initial_length=4, rotary_dims=8)
    rope.set_frequencies(torch.full((4,), 0.5, dtype=torch.float64))
    assert rope.cos.shape == (4, 4) and float(rope.cos[2, 3]) == pytest.approx(math.cos(1.0), abs=1e-7)
    with pytest.raises(
        ValueError, match=r"rotates 8 channels of each head and needs 4 frequencies, got shape \[8\]"
    ):
        rope.set_frequencies(torch.ones(8, dtype=torch.float64))


def test_fraction_problems_name_the_value_and_the_smallest_that_works() -> None:
    config = ModelConfig(d_model=256, n_heads=4, position="rope", rope_fraction=0.01)
    assert config.problems() == [
        "model.rope_fraction = 0.01 rotates int(64 × 0.01) = 0 of each head's 64 channels, not a single pair; "
        "use at least 0.03125 (2 / 64)"
    ]
    assert ModelConfig(d_model=256, n_heads=4, position="rope", rope_fraction=0.03125).problems() == []
    # 2 / 48 is shown rounded up, and the shown value works
    (line,) = ModelConfig(d_model=96, n_heads=2, position="rope", rope_fraction=0.03).problems()
    assert line.endswith("= 1 of each head's 48 channels, not a single pair; use at least 0.04167 (2 / 48)")
    assert ModelConfig(d_model=96, n_heads=2, position="rope", rope_fraction=0.04167).problems() == []
    # An odd head size is fine when only an even share of it turns, and refused when all of it should.
    assert ModelConfig(d_model=66, n_heads=2, position="rope", rope_fraction=0.5).problems() == []
    assert ModelConfig(d_model=66, n_heads=2, position="rope").problems() == [
        "model.position = 'rope' needs an even head size, but d_model / n_heads = 33; change d_model or n_heads"
    ]


def test_cli_refuses_a_fraction_without_a_pair_in_one_line() -> None:
    code, out, err = run_cli(["model", "--position", "rope", "--rope-fraction", "0.001"])
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "model.rope_fraction = 0.001 rotates int(32 × 0.001) = 0 of each head's 32 channels" in err


# ------------------------------------------------------------------------------------------------------------
# p-RoPE


def test_prope_frequencies_keep_the_highest_exactly() -> None:
    theta = [10000.0 ** (-2 * i / 8) for i in range(4)]  # 1, 0.1, 0.01, 0.001
    assert prope_frequencies(8, 10000.0, 0.5).tolist() == theta[:2] + [0.0, 0.0]
    assert prope_frequencies(8, 10000.0, 0.75).tolist() == theta[:3] + [0.0]
    assert prope_frequencies(8, 10000.0, 0.625).tolist() == theta[:3] + [0.0]  # 2.5 pairs round up to 3
    assert prope_frequencies(8, 10000.0, 0.6).tolist() == theta[:2] + [0.0, 0.0]  # 2.4 rounds down
    assert prope_frequencies(8, 10000.0, 1.0).tolist() == theta
    assert prope_frequencies(8, 10000.0, 0.0).tolist() == [0.0] * 4
    scheme = PartialRotaryPositions.from_config(ModelConfig(d_model=256, n_heads=4, position="p-rope"))
    assert scheme.frequencies().shape == (32,) and int((scheme.frequencies() > 0).sum()) == 24  # 0.75 of 32


@pytest.mark.parametrize("kept", [0.25, 0.5, 0.75])
def test_prope_matches_numpy_and_leaves_the_dropped_pairs_alone(kept: float) -> None:
    d = 16
    scheme = PartialRotaryPositions(d, 10000.0, "half", initial_length=4, kept=kept)
    q, k = qk(d)
    positions = np.array([0, 1, 9, 63, 64, 500])
    rq, rk = scheme.rotate(q, k, torch.tensor(positions))
    keep = round(kept * d / 2)
    still = [c for i in range(keep, d // 2) for c in (i, i + d // 2)]  # the dropped pairs' channels
    # float32 tables and products against float64: measured 1.8e-7.
    for got, x in ((rq, q), (rk, k)):
        np.testing.assert_allclose(
            got.numpy(), np_prope(x.numpy(), positions, 10000.0, kept), rtol=0, atol=1e-6
        )
        assert torch.equal(got[..., still], x[..., still])  # cos 0 = 1, sin 0 = 0: exactly untouched


def test_prope_one_is_rope_and_zero_is_nope_exactly() -> None:
    q, k = qk(16)
    positions = torch.arange(100, 106)
    rope = RotaryPositions(16, 10000.0, "half", initial_length=4)
    for a, b in zip(
        PartialRotaryPositions(16, kept=1.0).rotate(q, k, positions),
        rope.rotate(q, k, positions),
        strict=True,
    ):
        assert torch.equal(a, b)
    for a, b in zip(PartialRotaryPositions(16, kept=0.0).rotate(q, k, positions), (q, k), strict=True):
        assert torch.equal(a, b)
    # And whole models: the same weights give the same logits, bit for bit.
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))
    for kept, other in ((1.0, "rope"), (0.0, "nope")):
        model = randomized(tiny("p-rope", prope_fraction=kept))
        twin = Decoder(tiny(other)).eval()
        twin.load_state_dict(model.state_dict())
        with torch.no_grad():
            assert torch.equal(model(ids)[0], twin(ids)[0]), other
    assert isinstance(twin.positions, NoPositions)


def test_prope_registry_entry_and_problems() -> None:
    assert SCHEMES.choose("p-rope") is PartialRotaryPositions and family_of("p-rope") == "rope"
    assert table_order(["nope", "p-rope", "learned", "rope"]) == ["learned", "rope", "p-rope", "nope"]
    assert PartialRotaryPositions.options == ("rope_base", "rope_layout", "prope_fraction")
    assert PartialRotaryPositions.shows == ("frequencies",)
    assert ModelConfig(d_model=66, n_heads=2, position="p-rope").problems() == [
        "model.position = 'p-rope' needs an even head size, but d_model / n_heads = 33; change d_model or n_heads"
    ]
    assert (
        ModelConfig(position="p-rope", prope_fraction=1.5)
        .problems()[0]
        .startswith("model.prope_fraction = 1.5")
    )


# ------------------------------------------------------------------------------------------------------------
# Both, in whole models


VARIANTS = [
    ("fraction-half", "rope", {"rope_fraction": 0.5}),
    ("fraction-interleaved", "rope", {"rope_fraction": 0.3, "rope_layout": "interleaved"}),
    ("p-rope", "p-rope", {"prope_fraction": 0.5}),
    ("p-rope-interleaved", "p-rope", {"prope_fraction": 0.75, "rope_layout": "interleaved"}),
]


@pytest.mark.parametrize("kv_heads", [0, 1], ids=["mha", "gqa"])
@pytest.mark.parametrize(("name", "position", "extra"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_cached_decoding_equals_a_full_pass(name: str, position: str, extra: dict, kv_heads: int) -> None:
    model = randomized(tiny(position, n_kv_heads=kv_heads, **extra))
    ids = torch.randint(0, 64, (2, 21), generator=torch.Generator().manual_seed(9))  # past the context (8)
    with torch.no_grad():
        full, _ = model(ids)
        for step, capacity in ((1, None), (3, 2)):  # a small capacity forces the cache to grow
            cache = model.new_cache(2, capacity)
            parts = [model(ids[:, :5], cache=cache)[0]]
            parts += [model(ids[:, s : s + step], cache=cache)[0] for s in range(5, 21, step)]
            # float32, O(1) logits, different matmul shapes: measured 1.8e-6.
            torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("name", "position", "extra"), VARIANTS[::2], ids=[v[0] for v in VARIANTS[::2]])
def test_a_tiny_model_learns(name: str, position: str, extra: dict) -> None:
    torch.manual_seed(0)
    model = Decoder(tiny(position, vocab_size=32, context_length=16, **extra))
    ids = torch.randint(0, 32, (8, 17), generator=torch.Generator().manual_seed(1))
    losses = memorise(model, ids)
    # Starts at ln 32 = 3.47; measured 3.48 -> 1.25 (fraction) and 1.23 (p-rope) after 40 steps.
    assert losses[0] == pytest.approx(math.log(32), abs=0.05) and losses[-1] < losses[0] - 1.5


def test_fused_rotation_runs_for_a_rotated_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The half layout's rotated slice goes through _HalfRotation (not the plain formula)."""
    calls = []
    apply = _HalfRotation.apply
    monkeypatch.setattr(_HalfRotation, "apply", lambda *a: calls.append(a[0].shape) or apply(*a))
    RotaryPositions(16, 10000.0, "half", initial_length=4, rotary_dims=8).rotate(*qk(16), torch.arange(6))
    assert calls == [torch.Size([2, 4, 6, 8]), torch.Size([2, 2, 6, 8])]


@pytest.mark.parametrize("dims", [16, 8])
def test_plain_turn_equals_the_fused_one(dims: int) -> None:
    """`turn(fused=False)` (the formula an exporter can trace) gives the hot path's numbers."""
    rope = RotaryPositions(16, 10000.0, "half", initial_length=64, rotary_dims=dims)
    q, _ = qk(16)
    cos, sin = rope.cos[40:46], rope.sin[40:46]
    # the same products in another order: measured 4.8e-7
    torch.testing.assert_close(rope.turn(q, cos, sin, fused=False), rope.turn(q, cos, sin), rtol=0, atol=1e-6)
