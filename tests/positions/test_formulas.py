"""The position formulas of octlm/positions/formulas.py, each against something that does not share its code: a
NumPy float64 re-derivation from the papers' formulas, a pure-Python transcription (ALiBi's reference slopes, T5's
bucket rule), a mathematical property (shift invariance, norm preservation, distance-only similarity), or exact
values worked out by hand (closed forms, small tables written out).

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
from references import np_rope, np_sinusoidal, paper_alibi_slopes, t5_bucket_reference

from octlm.errors import UserError
from octlm.positions.formulas import (
    add_positions,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    cosine_similarity_matrix,
    rope_frequencies,
    rope_rotate,
    sinusoidal_table,
    t5_bucket,
)

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
# degenerate settings are covered in tests/config/test_schema.py::test_t5_max_distance_not_above_exact_range.
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


F64 = torch.float64


def rotation_by_hand(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Half layout: channel i pairs with i + D/2 and turns by angles[t, i] (x `[T, D]`, angles `[T, D/2]`)."""
    out = x.clone()
    half = x.shape[-1] // 2
    for t in range(x.shape[0]):
        for i in range(half):
            a, b, c, s = x[t, i], x[t, i + half], math.cos(angles[t, i]), math.sin(angles[t, i])
            out[t, i], out[t, i + half] = a * c - b * s, a * s + b * c
    return out


def test_apply_rope_defaults_to_the_half_layout():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=F64)
    angles = torch.tensor([[0.5, 1.5]], dtype=F64)
    got = apply_rope(x, angles.cos(), angles.sin())
    torch.testing.assert_close(got, rotation_by_hand(x, angles), rtol=0, atol=1e-15)


@pytest.mark.parametrize("base", [None, 500.0])
def test_rope_rotate_uses_base_10000_unless_told(base):
    # head size 4: θ = (1, base^-1/2); at position 1000 a base of 10001 would move the angle by 5e-4.
    x = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=F64)
    b = 10000.0 if base is None else base
    angles = torch.tensor([[1000.0, 1000.0 / math.sqrt(b)]], dtype=F64)
    got = rope_rotate(x, torch.tensor([1000])) if base is None else rope_rotate(x, torch.tensor([1000]), base)
    torch.testing.assert_close(got, rotation_by_hand(x, angles), rtol=0, atol=1e-12)


# distance -> T5 bucket for 32 buckets and maximum distance 128: 16 exact ones, then 16 + ⌊16 log(d/16)/log 8⌋
T5_BUCKETS = {0: 0, 1: 1, 15: 15, 16: 16, 31: 21, 32: 21, 64: 26, 100: 30, 113: 31, 127: 31, 128: 31, 500: 31}


def test_t5_bucket_defaults_by_hand():
    distances = torch.tensor(list(T5_BUCKETS))
    assert t5_bucket(-distances).tolist() == list(T5_BUCKETS.values())
    assert t5_bucket(torch.tensor([3, 40])).tolist() == [0, 0]  # keys after the query: distance 0


def test_cosine_similarity_of_short_rows_and_a_zero_row():
    x = torch.tensor([[0.3, 0.4], [0.0, 0.0], [-0.03, -0.04], [0.4, -0.3]])  # norms 0.5, 0, 0.05, 0.5
    want = torch.tensor(
        [[1.0, 0.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    )
    torch.testing.assert_close(cosine_similarity_matrix(x), want, rtol=0, atol=1e-6)


def test_a_shape_mismatch_names_both_shapes_and_the_one_wanted() -> None:
    """The wanted [T, C] is the token vectors' last two sizes: not from the batch size on, not only C."""
    with pytest.raises(UserError) as raised:
        add_positions(torch.zeros(2, 5, 4), torch.zeros(6, 4))
    assert str(raised.value) == (
        "cannot add position table of shape [6, 4] to token vectors of shape [2, 5, 4]: the position table "
        "must be [T, C] = [5, 4]"
    )


def test_alibi_slopes_are_float32_whatever_the_default_dtype_and_refuse_no_heads() -> None:
    """`[H]` float32 as documented, also where a user has made float64 the default (a bare `torch.tensor` of
    Python floats would follow it); zero heads is one line naming the value."""
    torch.set_default_dtype(torch.float64)
    try:
        slopes = alibi_slopes(8)
    finally:
        torch.set_default_dtype(torch.float32)
    assert slopes.dtype == torch.float32 and slopes.tolist() == [2.0**-i for i in range(1, 9)]
    with pytest.raises(UserError) as raised:
        alibi_slopes(0)
    assert str(raised.value) == "ALiBi needs at least one head, got 0"
