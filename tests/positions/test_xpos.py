"""xPos (Sun et al., 2022) against independent references: a NumPy float64 re-derivation of the paper's formula,
x-transformers' `RotaryEmbedding(use_xpos=True)` + `apply_rotary_pos_emb`, the property that a score depends on
the distance alone and decays with it, a gradient check, KV-cache equality, the float32 range at 16,384 tokens
and the refusal past it, and a tiny training run. Tolerances are float32 at the figure a comment gives, measured.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from decoders import small
from hypothesis import given, settings
from hypothesis import strategies as st
from references import np_xpos
from tiny import memorise

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.positions import SCHEMES, family_of, table_order
from octlm.positions.formulas import apply_rope
from octlm.positions.rotary import RotaryPositions
from octlm.positions.xpos import XPosPositions, xpos_safe_length, xpos_scales


def decay_by_distance(scheme: object, length: int) -> torch.Tensor:
    """The factor ζ_i^(d / scale_base) a score's pair i carries at distance d = 0 .. length - 1, `[D/2, length]`
    float64 (1 at distance 0, falling fastest for pair 0), from the scheme's own ζ and scale base."""
    distance = torch.arange(length, dtype=torch.float64)
    return scheme.zeta.unsqueeze(1) ** (distance / scheme.scale_base)


TO_HALF = lambda d: torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # noqa: E731 interleaved -> half


def qk(d: int, t: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 4, t, d, generator=g), torch.randn(2, 2, t, d, generator=g)


def tiny(**overrides) -> ModelConfig:
    fields = dict(
        vocab_size=64, d_model=32, context_length=8, n_layers=2, n_heads=2, d_ff=64, position="xpos"
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


def test_scales_and_decay_exact_values() -> None:
    assert xpos_scales(4).tolist() == pytest.approx(
        [2 / 7, 9 / 14], rel=1e-15
    )  # (0 + 0.4) / 1.4, (0.5 + 0.4) / 1.4
    scheme = XPosPositions(4, scale_base=8.0, initial_length=4)
    decay = decay_by_distance(scheme, 17)  # [D/2, 17]
    assert decay[:, 0].tolist() == [1.0, 1.0]
    assert decay[:, 8].tolist() == pytest.approx([2 / 7, 9 / 14], rel=1e-14)  # one scale_base: ζ itself
    assert decay[0, 16] == pytest.approx(4 / 49, rel=1e-14)
    assert scheme.frequencies().tolist() == [1.0, 0.01]  # RoPE's θ_i = 10000^(-2i / 4)
    # The tables: query cos at position 8 is cos(8 θ_i) ζ_i, the key's cos(8 θ_i) / ζ_i.
    assert scheme.cos[3].tolist() == pytest.approx(
        [math.cos(3) * (2 / 7) ** (3 / 8), math.cos(0.03) * (9 / 14) ** (3 / 8)]
    )
    assert scheme.key_sin[3].tolist() == pytest.approx(
        [math.sin(3) / (2 / 7) ** (3 / 8), math.sin(0.03) / (9 / 14) ** (3 / 8)]
    )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotation_matches_the_paper_in_numpy(layout: str) -> None:
    d, scale_base = 16, 64.0
    scheme = XPosPositions(d, 10000.0, layout, scale_base, initial_length=4)
    q, k = qk(d, 6)
    positions = np.array(
        [0, 1, 50, 64, 255, 300]
    )  # scales from 1 down to ζ_0^(300 / 64) = 0.0028 (keys: 360)
    rq, rk = scheme.rotate(q, k, torch.tensor(positions))
    order = TO_HALF(d) if layout == "interleaved" else torch.arange(d)  # compare in the half layout
    zeta = np.tile((np.arange(d // 2) * 2 / d + 0.4) / 1.4, 2)  # per channel, half layout
    for got, x, key in ((rq, q, False), (rk, k, True)):
        want = np_xpos(x[..., order].numpy(), positions, 10000.0, scale_base, key)
        # float32 error is relative to each element's scale: measured 3.4e-7 after dividing it out.
        scale = zeta ** ((-1 if key else 1) * positions[:, None] / scale_base)  # [T, D]
        np.testing.assert_allclose((got[..., order].numpy() - want) / scale, 0, rtol=0, atol=1e-6)


def test_equals_x_transformers_up_to_its_centre() -> None:
    """x-transformers (interleaved pairs, the same ζ_i = (2i + 0.4 D) / (1.4 D)) measures positions from
    T // 2: its q and k are ours times ζ^(∓(T // 2) / scale_base), and the scores q·k are identical."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    d, t, scale_base = 16, 40, 32.0
    rotary = xt.RotaryEmbedding(d, use_xpos=True, scale_base=scale_base)
    positions = torch.arange(t)
    freqs, scale = rotary(positions)  # [1, T, D] each, interleaved (each value twice)
    q, k = qk(d, t)
    xq, xk = xt.apply_rotary_pos_emb(q, freqs, scale), xt.apply_rotary_pos_emb(k, freqs, scale**-1)
    ours = XPosPositions(d, 10000.0, "interleaved", scale_base, initial_length=8)
    rq, rk = ours.rotate(q, k, positions)
    centre = xpos_scales(d).repeat_interleave(2).float() ** ((t // 2) / scale_base)  # [D]
    # x-transformers works in float32 throughout (angles, scale ** power). Relative to the largest entry,
    # measured 1.3e-7 (q), 3.0e-7 (k) and 3.0e-7 (scores); 1e-5 would still catch a scale off by one position.
    relative = lambda got, want: float((got - want).abs().max() / want.abs().max())  # noqa: E731
    assert relative(rq, xq * centre) < 1e-5 and relative(rk, xk / centre) < 1e-5
    ours_scores = rq @ rk.repeat_interleave(2, dim=1).transpose(-1, -2)
    their_scores = xq @ xk.repeat_interleave(2, dim=1).transpose(-1, -2)
    assert relative(ours_scores, their_scores) < 1e-5
    # The half layout is the same thing on permuted channels.
    half = XPosPositions(d, 10000.0, "half", scale_base, initial_length=8)
    hq, _ = half.rotate(q[..., TO_HALF(d)], k[..., TO_HALF(d)], positions)
    torch.testing.assert_close(
        hq, rq[..., TO_HALF(d)], rtol=0, atol=1e-6
    )  # fused vs plain kernel: measured 2.4e-7


SCHEME = XPosPositions(16, 10000.0, "half", 64.0, initial_length=4)
Q, K = (
    torch.tensor(np.random.default_rng(2).standard_normal((1, 1, 1, 16)), dtype=torch.float32)
    for _ in range(2)
)


def score(n: int, m: int) -> float:
    """q at position n against k at m, through the float32 module."""
    rq = SCHEME.rotate(Q, Q, torch.tensor([n]))[0]
    rk = SCHEME.rotate(K, K, torch.tensor([m]))[1]
    return float((rq * rk).sum())


@settings(max_examples=60, deadline=None)
@given(m=st.integers(0, 800), distance=st.integers(0, 600), shift=st.integers(0, 800))  # within 2,267
def test_a_score_depends_on_the_distance_alone(m: int, distance: int, shift: int) -> None:
    """Shifting both positions leaves the score as it was (the scales' ζ^(n / s) ζ^(-m / s) and the rotations'
    angles both depend on n - m only)."""
    n = m + distance
    bound = float((Q.abs() * K.abs()).sum())  # each term's product is at most this, times ζ^(d / s) <= 1
    # float32 tables (1 ulp each) and products: measured 1.4e-7 of the bound at most.
    assert abs(score(n, m) - score(n + shift, m + shift)) <= 2e-6 * bound


def test_a_score_decays_with_the_distance_exactly_as_zeta() -> None:
    """One pair at a time: q = k = a unit vector in pair i's first channel scores cos(d θ_i) ζ_i^(d / s)."""
    for i, d in ((0, 0), (0, 64), (0, 200), (3, 300), (7, 1000)):
        unit = torch.zeros(1, 1, 1, 16)
        unit[..., i] = 1.0
        rq = SCHEME.rotate(unit, unit, torch.tensor([d + 5]))[0]
        rk = SCHEME.rotate(unit, unit, torch.tensor([5]))[1]
        theta, zeta = 10000.0 ** (-2 * i / 16), (2 * i / 16 + 0.4) / 1.4
        want = math.cos(d * theta) * zeta ** (d / 64)
        assert float((rq * rk).sum()) == pytest.approx(want, rel=1e-5, abs=1e-7), (i, d)
    # ... and its magnitude falls: pair 0 at distance 0, 64, 128 carries 1, 2/7, 4/49 of the score
    assert decay_by_distance(SCHEME, 129)[0, ::64].tolist() == pytest.approx([1, 2 / 7, 4 / 49], rel=1e-14)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradient_through_the_scaled_rotation(layout: str) -> None:
    """float64 finite differences through the fused backward (half) with the scales folded into cos and sin."""
    torch.manual_seed(1)
    scheme = XPosPositions(8, 10000.0, layout, 4.0, initial_length=4)
    x = torch.randn(1, 2, 8, 5, dtype=torch.float64).transpose(-1, -2).requires_grad_()
    positions = torch.arange(3, 8)
    assert torch.autograd.gradcheck(lambda x: scheme.rotate(x, x, positions), (x,), eps=1e-6, atol=1e-8)
    g = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    (ours,) = torch.autograd.grad(scheme.rotate(x, x, positions)[1], x, g)
    kc, ks = scheme.key_cos[positions].double(), scheme.key_sin[positions].double()
    (want,) = torch.autograd.grad(apply_rope(x, kc, ks, layout), x, g)
    torch.testing.assert_close(ours, want, rtol=0, atol=1e-12)
    # and the plain formula (`turn(fused=False)`, for exporters) reads the same key tables
    torch.testing.assert_close(
        scheme.turn(x, kc, ks, fused=False), scheme.rotate(x, x, positions)[1], rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("kv_heads", [0, 1], ids=["mha", "gqa"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cached_decoding_equals_a_full_pass(layout: str, kv_heads: int) -> None:
    # scale_base 8: across 21 positions the keys' scales reach ζ_0^(-20 / 8) = 23, so a wrong origin shows.
    model = randomized(tiny(rope_layout=layout, xpos_scale_base=8.0, n_kv_heads=kv_heads))
    ids = torch.randint(0, 64, (2, 21), generator=torch.Generator().manual_seed(9))  # past the context (8)
    with torch.no_grad():
        full, _ = model(ids)
        for step, capacity in ((1, None), (3, 2)):  # a small capacity forces the cache to grow
            cache = model.new_cache(2, capacity)
            parts = [model(ids[:, :5], cache=cache)[0]]
            parts += [model(ids[:, s : s + step], cache=cache)[0] for s in range(5, 21, step)]
            # float32, O(1) logits, different matmul shapes: measured 1.8e-6.
            torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-5)


def test_xpos_is_not_rope() -> None:
    """Sanity for the tests above: the scales change the logits (measured 0.55) far past their tolerances."""
    ids = torch.randint(0, 64, (1, 21), generator=torch.Generator().manual_seed(9))
    model = randomized(tiny(xpos_scale_base=8.0))
    rope = Decoder(tiny(position="rope")).eval()
    rope.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert (model(ids)[0] - rope(ids)[0]).abs().max() > 0.1


def test_a_tiny_model_learns() -> None:
    torch.manual_seed(0)
    model = Decoder(tiny(vocab_size=32, context_length=16, xpos_scale_base=32.0))
    ids = torch.randint(0, 32, (8, 17), generator=torch.Generator().manual_seed(1))
    losses = memorise(model, ids)
    # Starts at ln 32 = 3.47; measured 3.48 -> 1.23 after 40 steps.
    assert losses[0] == pytest.approx(math.log(32), abs=0.05) and losses[-1] < losses[0] - 1.5


def test_the_float32_range_and_its_limit() -> None:
    """18,131 positions keep every scale within 2^±64 at scale_base 512; one more is refused in one line."""
    assert (
        xpos_safe_length(64, 512.0) == 18131 and xpos_safe_length(8, 512.0) == 18131
    )  # ζ_0 is 2/7 for any D
    assert xpos_safe_length(64, 1024.0) == 36261
    scheme = XPosPositions(8, scale_base=512.0, initial_length=4)
    x = torch.ones(1, 1, 1, 8)
    rq, rk = scheme.rotate(x, x, torch.tensor([18130]))
    assert scheme.cos.shape[0] == 18131  # grown to the limit, not to the next power of two
    assert torch.isfinite(rq).all() and torch.isfinite(rk).all()
    key_scale, query_scale = (
        torch.hypot(scheme.key_cos, scheme.key_sin),
        torch.hypot(scheme.cos, scheme.sin),
    )
    assert float(key_scale.max()) <= 2.0**64 and float(query_scale.min()) >= 2.0**-64 * (1 - 1e-6)
    with pytest.raises(UserError) as refused:
        scheme.rotate(x, x, torch.tensor([18129, 18130, 18131]))
    assert str(refused.value) == (
        "xpos scales keys by ζ^(-position / xpos_scale_base), which leaves float32's range past 18131 positions "
        "at model.xpos_scale_base = 512; use at most 18131 tokens, or train with model.xpos_scale_base of at "
        "least 513 for 18132"
    )


@pytest.mark.slow
def test_a_16384_token_forward_at_config_b_width_is_finite() -> None:
    """Config b's width and heads (d_model 256, 4 heads of 64), one layer: measured 6.4 s on one thread."""
    torch.manual_seed(0)
    model = Decoder(
        ModelConfig(
            vocab_size=1024,
            d_model=256,
            n_layers=1,
            n_heads=4,
            d_ff=1024,
            context_length=256,
            position="xpos",
        )
    ).eval()
    ids = torch.randint(0, 1024, (1, 16384), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, _ = model(ids)
    assert torch.isfinite(logits).all()


def test_registry_entry_and_problems() -> None:
    assert SCHEMES.choose("xpos") is XPosPositions and family_of("xpos") == "rope"
    assert issubclass(XPosPositions, RotaryPositions)
    assert table_order(["xpos", "alibi", "rope"]) == ["rope", "xpos", "alibi"]
    assert XPosPositions.options == ("rope_base", "rope_layout", "xpos_scale_base")
    assert XPosPositions.shows == ("frequencies",) and not XPosPositions.bounded
    scheme = XPosPositions.from_config(tiny(xpos_scale_base=100.0, rope_base=500.0))
    assert scheme.scale_base == 100.0 and scheme.frequencies().tolist() == [
        500.0 ** (-2 * i / 16) for i in range(8)
    ]
    assert tiny(d_model=66).problems() == [
        "model.position = 'xpos' needs an even head size, but d_model / n_heads = 33; change d_model or n_heads"
    ]
    assert tiny(xpos_scale_base=0.0).problems()[0].startswith("model.xpos_scale_base = 0.0")


# ------------------------------------------------------------------------------------------------------------
# The constructor's defaults, tables at any scale base, their dtype and growth, the refusal


def test_xpos_defaults_and_the_config_length() -> None:
    scheme = XPosPositions(8)
    assert scheme.scale_base == 512.0 and scheme.cos.shape == (128, 4)
    assert XPosPositions.from_config(small("xpos", context_length=40)).cos.shape == (40, 4)
    assert XPosPositions(8, initial_length=64).cos.shape == (64, 4)
    # scale_base 1 keeps 36 positions: the first tables stop there, whatever the initial length asks
    assert XPosPositions(8, scale_base=1.0).key_cos.shape == (36, 4)


def test_xpos_tables_at_a_scale_base_that_is_not_a_power_of_two() -> None:
    scheme = XPosPositions(8, scale_base=3.0, initial_length=100)
    n = np.arange(100, dtype=np.float64)[:, None]
    i = np.arange(4, dtype=np.float64)[None, :]
    phi, zeta = n * 10000.0 ** (-2 * i / 8), (2 * i / 8 + 0.4) / 1.4
    scale = zeta ** (n / 3.0)
    # the float64 formula cast once: measured equal (one float32 ulp, 1.2e-7, allowed for another libm); a
    # float32 position / scale_base would move the scales by 1.6e-6
    for table, values in [
        ("cos", np.cos(phi) * scale),
        ("sin", np.sin(phi) * scale),
        ("key_cos", np.cos(phi) / scale),
        ("key_sin", np.sin(phi) / scale),
    ]:
        torch.testing.assert_close(
            getattr(scheme, table), torch.from_numpy(values).float(), atol=0, rtol=1.2e-7
        )
    decay = decay_by_distance(scheme, 100)  # [4, 100] float64
    torch.testing.assert_close(decay, torch.from_numpy(scale.T), atol=0, rtol=1e-13)


def test_xpos_rows_are_in_the_asked_dtype() -> None:
    scheme = XPosPositions(8, initial_length=16)
    rows = scheme._rows(torch.tensor([0, 3, 15]), torch.bfloat16)
    assert [r.dtype for r in rows] == [torch.bfloat16] * 4
    for row, table in zip(rows, scheme.tables, strict=True):
        assert torch.equal(row, getattr(scheme, table)[[0, 3, 15]].to(torch.bfloat16))


def test_xpos_grows_to_a_power_of_two_within_the_safe_length() -> None:
    scheme = XPosPositions(8, initial_length=100)
    scheme._grow(100)
    assert scheme.cos.shape[0] == 100  # enough already: not rebuilt
    scheme._grow(200)
    assert scheme.cos.shape[0] == 256 == scheme.key_sin.shape[0]
    short = XPosPositions(8, scale_base=3.0, initial_length=16)
    short._grow(20)
    assert short.cos.shape[0] == 32
    short._grow(100)
    assert short.cos.shape[0] == 107 == short.safe_length  # 128 capped at the safe length


def test_xpos_refusal_names_the_scale_base_that_fits() -> None:
    scheme = XPosPositions(8, scale_base=1.0, initial_length=16)
    with pytest.raises(UserError) as caught:
        scheme._grow(70)
    assert str(caught.value) == (
        "xpos scales keys by ζ^(-position / xpos_scale_base), which leaves float32's range past 36 positions at "
        "model.xpos_scale_base = 1; use at most 36 tokens, or train with model.xpos_scale_base of at least 2 "
        "for 70"
    )
    assert XPosPositions(8, scale_base=2.0).safe_length == 71  # and 2 does fit 70
