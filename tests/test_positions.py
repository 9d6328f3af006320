"""The position formulas of octlm/positions/scheme.py, each against something that does not share its code: a NumPy
float64 re-derivation from the papers' formulas, a pure-Python transcription (ALiBi's reference slopes, T5's
bucket rule), or a mathematical property (shift invariance, norm preservation, distance-only similarity).

Tolerances: float32 outputs are compared at 1e-5 unless a comment says otherwise; float64 computations at 1e-9
(relative), since they only carry float64 rounding of angles up to ~2e4 rad (2e4 * 2^-52 ~ 4e-12).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from octlm.errors import UserError
from octlm.positions.absolute import SinusoidalPositions
from octlm.positions.bias import T5Positions
from octlm.positions.formulas import (
    add_positions,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_frequencies,
    rope_rotate,
    sinusoidal_table,
    t5_bucket,
)
from octlm.positions.rotary import RotaryPositions, _HalfRotation

# ------------------------------------------------------------------------------------------------------------
# Independent references


def np_sinusoidal(length: int, width: int, base: float) -> np.ndarray:
    """Vaswani et al.: P[t, 2i] = sin(t / base^(2i/C)), P[t, 2i+1] = cos(t / base^(2i/C)), in float64."""
    table = np.zeros((length, width), dtype=np.float64)
    for i in range(width // 2):
        angle = np.arange(length, dtype=np.float64) / base ** (2 * i / width)
        table[:, 2 * i] = np.sin(angle)
        table[:, 2 * i + 1] = np.cos(angle)
    return table


def np_rope(x: np.ndarray, positions: np.ndarray, base: float, layout: str) -> np.ndarray:
    """Rotate pairs of the last axis of `x` [..., T, D] by position * base^(-2i/D), one pair at a time."""
    d = x.shape[-1]
    out = np.array(x, dtype=np.float64, copy=True)
    for i in range(d // 2):
        phi = positions.astype(np.float64) * base ** (-2.0 * i / d)  # [T]
        a_idx, b_idx = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
        a, b = x[..., a_idx].astype(np.float64), x[..., b_idx].astype(np.float64)
        out[..., a_idx] = a * np.cos(phi) - b * np.sin(phi)
        out[..., b_idx] = a * np.sin(phi) + b * np.cos(phi)
    return out


def paper_alibi_slopes(n: int) -> list[float]:
    """Press et al.'s reference `get_slopes`, transcribed from the paper's code (recursive)."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_alibi_slopes(2 * closest)[0::2][: n - closest]


def t5_bucket_reference(relative_position: int, num_buckets: int, max_distance: int) -> int:
    """T5's `_relative_position_bucket` with bidirectional=False, one integer at a time, from the formula."""
    n = max(-relative_position, 0)  # how far back the key is; future keys count as 0
    max_exact = num_buckets // 2
    if n < max_exact:
        return n
    large = max_exact + int(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return min(large, num_buckets - 1)


# ------------------------------------------------------------------------------------------------------------
# Learned-style addition (the "Input Embeddings" seed)


def test_add_positions_broadcasts_one_table_over_the_batch() -> None:
    torch.manual_seed(0)
    tokens = torch.randn(8, 4, 256)
    table = torch.randn(4, 256)
    out = add_positions(tokens, table)
    assert out.shape == (8, 4, 256)
    for b in range(8):  # every batch entry receives the same position rows; exact (one float add)
        assert torch.equal(out[b], tokens[b] + table)


@pytest.mark.parametrize("bad", [(4, 128), (5, 256), (3, 256), (256,)])
def test_add_positions_mismatch_names_both_shapes(bad: tuple[int, ...]) -> None:
    with pytest.raises(UserError) as info:
        add_positions(torch.zeros(8, 4, 256), torch.zeros(bad))
    message = str(info.value)
    assert str(list(bad)) in message
    assert "[8, 4, 256]" in message


# ------------------------------------------------------------------------------------------------------------
# Sinusoidal


@pytest.mark.parametrize("width", [2, 8, 64, 128, 256])
@pytest.mark.parametrize("base", [10000.0, 500.0, 1e6])
def test_sinusoidal_table_matches_numpy_float64(width: int, base: float) -> None:
    ours = sinusoidal_table(4096, width, base)
    assert ours.dtype == torch.float32 and ours.shape == (4096, width)
    # 1e-6: the reference is float64 and the values lie in [-1, 1], so a float64-computed table cast once to
    # float32 is within 2^-24 ~ 6e-8; a table computed in float32 would be off by ~1e-4 at position 4,095.
    np.testing.assert_allclose(ours.numpy(), np_sinusoidal(4096, width, base), rtol=0, atol=1e-6)


@pytest.mark.parametrize("width", [1, 3, 127])
def test_sinusoidal_table_odd_width_is_a_user_error(width: int) -> None:
    with pytest.raises(UserError, match=str(width)):
        sinusoidal_table(10, width)


@pytest.mark.parametrize("width", [16, 64])
def test_sinusoidal_similarity_depends_only_on_distance(width: int) -> None:
    table = sinusoidal_table(600, width).numpy().astype(np.float64)
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    omega = 10000.0 ** (-np.arange(0, width, 2) / width)
    for d in (0, 1, 2, 5, 17, 64, 200):
        sims = np.array([unit[t] @ unit[t + d] for t in range(0, 600 - d)])
        # Constant over t (1e-5: float32 table entries, each within 6e-8), and equal to mean_i cos(omega_i d).
        assert np.ptp(sims) <= 1e-5, (d, np.ptp(sims))
        np.testing.assert_allclose(sims, np.mean(np.cos(omega * d)), rtol=0, atol=1e-5)


def test_sinusoidal_module_grows_on_demand_and_is_not_rebuilt() -> None:
    scheme = SinusoidalPositions(16, initial_length=8)
    x = torch.zeros(2, 8, 16)
    out = scheme.embed(x, torch.arange(8))
    first = scheme.table
    scheme.embed(x, torch.arange(8))
    assert scheme.table is first  # the same buffer object: not rebuilt by a second forward
    np.testing.assert_allclose(out[1].numpy(), np_sinusoidal(8, 16, 10000.0), rtol=0, atol=1e-6)

    # Past the initial length: grows once, then stays.
    out = scheme.embed(torch.zeros(1, 20, 16), torch.arange(20))
    grown = scheme.table
    assert grown.shape[0] >= 20
    np.testing.assert_allclose(out[0].numpy(), np_sinusoidal(20, 16, 10000.0), rtol=0, atol=1e-6)
    scheme.embed(torch.zeros(1, 20, 16), torch.arange(20))
    scheme.embed(torch.zeros(1, 1, 16), torch.tensor([19]))  # one cached decoding step inside the table
    assert scheme.table is grown
    # Offset positions (the KV cache case) read the right rows.
    out = scheme.embed(torch.zeros(1, 3, 16), torch.arange(37, 40))
    np.testing.assert_allclose(out[0].numpy(), np_sinusoidal(40, 16, 10000.0)[37:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("scale", [0.02, 1.0, 3.5])
def test_sinusoidal_growth_past_the_context_keeps_the_scale(scale: float) -> None:
    """Rows read after the table grows on demand (decoding past the context) carry `scale` like the first ones."""
    scheme = SinusoidalPositions(16, initial_length=8, scale=scale)
    reference = scale * np_sinusoidal(64, 16, 10000.0)
    before = scheme.embed(torch.zeros(1, 8, 16), torch.arange(8))
    np.testing.assert_allclose(before[0].numpy(), reference[:8], rtol=0, atol=1e-6 * scale)
    # Past the initial 8 rows: one cached step at position 40, then a full pass over 0 .. 63.
    step = scheme.embed(torch.zeros(1, 1, 16), torch.tensor([40]))
    assert scheme.table.shape[0] == 64  # grown to the next power of two
    np.testing.assert_allclose(step[0].numpy(), reference[40:41], rtol=0, atol=1e-6 * scale)
    full = scheme.embed(torch.zeros(1, 64, 16), torch.arange(64))
    np.testing.assert_allclose(full[0].numpy(), reference, rtol=0, atol=1e-6 * scale)


# ------------------------------------------------------------------------------------------------------------
# RoPE


@pytest.mark.parametrize("head_dim", [2, 8, 64, 128])
@pytest.mark.parametrize("base", [10000.0, 500000.0, 10.0])
def test_rope_frequencies_match_numpy(head_dim: int, base: float) -> None:
    ours = rope_frequencies(head_dim, base)
    assert ours.dtype == torch.float64 and ours.shape == (head_dim // 2,)
    expected = np.array([base ** (-2.0 * i / head_dim) for i in range(head_dim // 2)])
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-12, atol=0)


def test_rope_odd_head_dim_is_a_user_error() -> None:
    with pytest.raises(UserError, match="7"):
        rope_frequencies(7)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rope_rotate_matches_numpy(layout: str, dtype: torch.dtype) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 40, 16))
    positions = np.concatenate([np.arange(20), np.arange(5000, 5020)])
    ours = rope_rotate(torch.tensor(x, dtype=dtype), torch.tensor(positions), 10000.0, layout)
    # float32: cos/sin rounded once to float32 (angles computed in float64), |x| ~ 3, so 1e-5 absolute.
    atol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(
        ours.double().numpy(), np_rope(x, positions, 10000.0, layout), rtol=0, atol=atol
    )


@settings(max_examples=200, deadline=None)
@given(
    m=st.integers(0, 10000),
    n=st.integers(0, 10000),
    shift=st.integers(0, 10000),
    head_dim=st.sampled_from([2, 4, 16, 64]),
    layout=st.sampled_from(["half", "interleaved"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_rope_score_depends_only_on_relative_position(
    m: int, n: int, shift: int, head_dim: int, layout: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    q = torch.tensor(rng.standard_normal((1, head_dim)))  # float64
    k = torch.tensor(rng.standard_normal((1, head_dim)))

    def score(qp: int, kp: int) -> float:
        rq = rope_rotate(q, torch.tensor([qp]), 10000.0, layout)
        rk = rope_rotate(k, torch.tensor([kp]), 10000.0, layout)
        return float((rq * rk).sum())

    scale = float(q.norm() * k.norm())
    # float64 angles up to 2e4 rad carry ~4e-12 absolute error; 1e-9 relative to |q||k| leaves a wide margin.
    assert abs(score(m, n) - score(m + shift, n + shift)) <= 1e-9 * scale


def test_rope_score_shift_invariance_through_the_float32_module() -> None:
    rng = np.random.default_rng(2)
    rope = RotaryPositions(16, 10000.0, "half", initial_length=8)
    q = torch.tensor(rng.standard_normal((1, 1, 1, 16)), dtype=torch.float32)
    k = torch.tensor(rng.standard_normal((1, 1, 1, 16)), dtype=torch.float32)
    scale = float(q.norm() * k.norm())

    def score(qp: int, kp: int) -> float:
        rq = rope.rotate(q, q, torch.tensor([qp]))[0]
        rk = rope.rotate(k, k, torch.tensor([kp]))[1]
        return float((rq * rk).sum())

    for qp, kp, shift in [(5, 2, 100), (0, 0, 3000), (7, 7, 1), (900, 10, 2047)]:
        # float32 cos/sin (each within 6e-8) and float32 products: 1e-5 relative to |q||k|.
        diff = score(qp, kp) - score(qp + shift, kp + shift)
        assert abs(diff) <= 1e-5 * scale, (qp, kp, shift, diff)


@pytest.mark.parametrize("head_dim", [2, 8, 32])
def test_rope_half_and_interleaved_agree_after_channel_permutation(head_dim: int) -> None:
    torch.manual_seed(3)
    x_interleaved = torch.randn(2, 3, 50, head_dim)
    positions = torch.arange(100, 150)
    # interleaved channel 2i <-> half channel i, interleaved 2i+1 <-> half i + D/2
    to_half = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    x_half = x_interleaved[..., to_half]
    rotated_half = rope_rotate(x_half, positions, layout="half")
    rotated_interleaved = rope_rotate(x_interleaved, positions, layout="interleaved")
    # Same float32 operations on the same numbers, only stored in different channels: 1e-6 is generous.
    torch.testing.assert_close(rotated_half, rotated_interleaved[..., to_half], rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_preserves_norms(layout: str) -> None:
    torch.manual_seed(4)
    x = torch.randn(2, 4, 64, 32)
    rotated = rope_rotate(x, torch.arange(1000, 1064), layout=layout)
    # float32 rotation: each norm within 1e-5 relative.
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=0)
    # And each rotated pair keeps its own length (a rotation, not just a norm-preserving mix).
    if layout == "half":
        pair_norm = lambda t: t[..., :16] ** 2 + t[..., 16:] ** 2
    else:
        pair_norm = lambda t: t[..., 0::2] ** 2 + t[..., 1::2] ** 2
    torch.testing.assert_close(pair_norm(rotated), pair_norm(x), rtol=1e-5, atol=1e-6)


def test_rope_position_zero_is_identity_and_unknown_layout_errors() -> None:
    x = torch.randn(3, 5, 8)
    assert torch.equal(rope_rotate(x, torch.zeros(5, dtype=torch.long)), x)  # cos 0 = 1, sin 0 = 0: exact
    with pytest.raises(UserError, match="diagonal"):
        apply_rope(x, torch.ones(5, 4), torch.zeros(5, 4), "diagonal")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotary_module_grows_and_matches_numpy(layout: str) -> None:
    rope = RotaryPositions(8, 10000.0, layout, initial_length=4)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 4, 3, 8))
    k = rng.standard_normal((1, 2, 3, 8))  # fewer kv heads (GQA) broadcast the same way
    positions = np.array([40, 41, 42])
    rq, rk = rope.rotate(torch.tensor(q, dtype=torch.float32), torch.tensor(k, dtype=torch.float32),
                         torch.tensor(positions))  # fmt: skip
    assert rope.cos.shape[0] >= 43
    grown = rope.cos
    rope.rotate(torch.zeros(1, 1, 1, 8), torch.zeros(1, 1, 1, 8), torch.tensor([42]))
    assert rope.cos is grown  # not rebuilt for a position it already covers
    np.testing.assert_allclose(rq.numpy(), np_rope(q, positions, 10000.0, layout), rtol=0, atol=1e-5)
    np.testing.assert_allclose(rk.numpy(), np_rope(k, positions, 10000.0, layout), rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1, 3, 2), (2, 3, 5, 8)])
def test_half_rotation_backward_passes_gradcheck(shape: tuple[int, ...]) -> None:
    """The hand-written backward of the hot-path rotation against float64 finite differences.

    The other RoPE gradient tests run through the same backward, so only this catches a wrong sign in it.
    Angles up to 20 rad make every sin and cos entry matter; non-contiguous input like the attention's.
    Not twice differentiable (the forward writes with `out=`), so no gradgradcheck; nothing trains through a
    second derivative of RoPE.
    """
    torch.manual_seed(9)
    *lead, t, d = shape
    x = torch.randn(*lead, d, t, dtype=torch.float64).transpose(-1, -2).requires_grad_()  # [.., T, D]
    angle = torch.rand(t, d // 2, dtype=torch.float64) * 20
    cos, sin = angle.cos(), angle.sin()
    assert torch.autograd.gradcheck(lambda x: _HalfRotation.apply(x, cos, sin), (x,), eps=1e-6, atol=1e-8)
    # And the module's gradient equals autograd's through the plain formula (exact up to float64 rounding).
    rope = RotaryPositions(d, 10000.0, "half", initial_length=4)
    positions = torch.arange(100, 100 + t)
    g = torch.randn(*lead, t, d, dtype=torch.float64)
    (ours,) = torch.autograd.grad(rope.rotate(x, x, positions)[0], x, g)
    (plain,) = torch.autograd.grad(apply_rope(x, rope.cos[positions], rope.sin[positions]), x, g)
    torch.testing.assert_close(ours, plain, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------------------
# ALiBi


def test_alibi_slopes_for_8_heads_are_exact_powers_of_two() -> None:
    assert alibi_slopes(8).tolist() == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]


def test_alibi_slopes_for_12_heads_follow_the_paper() -> None:
    expected = [2.0**-k for k in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    # float32 storage of float64 slopes: relative 2^-24 ~ 6e-8, so 1e-7 relative.
    np.testing.assert_allclose(alibi_slopes(12).numpy(), expected, rtol=1e-7, atol=0)


@pytest.mark.parametrize("n_heads", list(range(1, 33)) + [48, 64, 96])
def test_alibi_slopes_match_the_papers_reference_code(n_heads: int) -> None:
    ours = alibi_slopes(n_heads)
    assert ours.shape == (n_heads,) and ours.dtype == torch.float32
    np.testing.assert_allclose(ours.numpy(), paper_alibi_slopes(n_heads), rtol=1e-7, atol=0)


@pytest.mark.parametrize("offset", [0, 1, 7, 50])
def test_alibi_bias_matches_numpy(offset: int) -> None:
    slopes = alibi_slopes(6)
    tq, tk = 5, offset + 5
    q_pos, k_pos = np.arange(offset, offset + tq), np.arange(tk)
    ours = alibi_bias(slopes, torch.tensor(q_pos), torch.tensor(k_pos)).numpy()
    assert ours.shape == (6, tq, tk)
    s = np.array(paper_alibi_slopes(6))[:, None, None]
    distance = (q_pos[:, None] - k_pos[None, :])[None]
    expected = np.where(distance < 0, -np.inf, -s * distance)
    assert np.array_equal(np.isneginf(ours), np.isneginf(expected))  # -inf exactly above the diagonal
    assert not np.isnan(ours).any() and not np.isposinf(ours).any()
    finite = np.isfinite(expected)
    # float32 slope x integer distance up to 54: relative 1e-6.
    np.testing.assert_allclose(ours[finite], expected[finite], rtol=1e-6, atol=0)
    assert (ours[finite] <= 0).all() and (ours[:, np.arange(tq), offset + np.arange(tq)] == 0).all()


# ------------------------------------------------------------------------------------------------------------
# T5 buckets


@pytest.mark.parametrize(
    ("num_buckets", "max_distance"), [(32, 128), (16, 64), (64, 256), (8, 20), (32, 1000)]
)
def test_t5_buckets_match_the_formula(num_buckets: int, max_distance: int) -> None:
    distances = torch.arange(0, 1001)
    ours = t5_bucket(-distances, num_buckets, max_distance).tolist()  # relative = key - query = -distance
    expected = [t5_bucket_reference(-d, num_buckets, max_distance) for d in range(1001)]
    mismatches = [(d, o, e) for d, (o, e) in enumerate(zip(ours, expected, strict=True)) if o != e]
    assert not mismatches, mismatches[:10]


# Only max_distance > num_buckets // 2 is meaningful (the log-spaced range must have positive width); the
# degenerate settings are covered in tests/test_config.py::test_t5_max_distance_not_above_exact_range.
@pytest.mark.parametrize(
    ("num_buckets", "max_distance"), [(32, 128), (16, 64), (8, 20), (2, 2), (4, 3), (32, 17)]
)
def test_t5_bucket_properties(num_buckets: int, max_distance: int) -> None:
    buckets = t5_bucket(-torch.arange(0, 1001), num_buckets, max_distance)
    assert buckets.dtype == torch.long
    assert (buckets[1:] >= buckets[:-1]).all(), "buckets must not decrease with distance"
    assert ((buckets >= 0) & (buckets < num_buckets)).all()
    half = num_buckets // 2
    assert buckets[:half].tolist() == list(range(half))  # short distances get a bucket each
    assert (buckets[max_distance:] == num_buckets - 1).all()  # everything that far back shares the last
    # Future keys (positive relative position) count as distance 0.
    assert t5_bucket(torch.arange(1, 50), num_buckets, max_distance).eq(0).all()


def test_t5_module_bias_reads_the_table_by_bucket() -> None:
    torch.manual_seed(6)
    scheme = T5Positions(3, num_buckets=8, max_distance=16)
    q_pos, k_pos = torch.arange(20, 25), torch.arange(25)
    bias = scheme.bias(q_pos, k_pos)
    table = scheme.table.weight.detach().numpy()
    for h in range(3):
        for i, qp in enumerate(q_pos.tolist()):
            for kp in range(25):
                if kp > qp:
                    assert bias[h, i, kp] == float("-inf")
                else:
                    assert bias[h, i, kp].item() == table[t5_bucket_reference(kp - qp, 8, 16), h]
