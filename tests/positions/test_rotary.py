"""RoPE as a module (octlm/positions/rotary.py): `RotaryPositions` against NumPy and by hand (defaults, buffers,
growth, the dtype kept, new frequencies), the hand-written half-layout rotation and its backward, and the config
checks of partial rotation and p-RoPE. The variants themselves, against independent references, are
tests/positions/test_rotary_partial.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from decoders import small
from references import np_rope

import octlm.model.decoder
import octlm.positions.rotary
from octlm.positions.absolute import SinusoidalPositions
from octlm.positions.formulas import apply_rope, rope_frequencies
from octlm.positions.rope_scaling import yarn_frequencies
from octlm.positions.rotary import (
    PartialRotaryPositions,
    RotaryPositions,
    _fraction_problems,
    _HalfRotation,
    prope_frequencies,
    rotary_dims,
)
from octlm.positions.xpos import XPosPositions

# ------------------------------------------------------------------------------------------------------------
# The module against NumPy, and the hand-written rotation's backward


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


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotary_module_grows_and_matches_numpy(layout: str) -> None:
    rope = RotaryPositions(8, 10000.0, layout, initial_length=4)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 4, 3, 8))
    k = rng.standard_normal((1, 2, 3, 8))  # fewer kv heads (GQA) broadcast the same way
    positions = np.array([40, 41, 42])
    rq, rk = rope.rotate(
        torch.tensor(q, dtype=torch.float32), torch.tensor(k, dtype=torch.float32), torch.tensor(positions)
    )
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
# Exact values, worked out by hand


F64 = torch.float64


def test_rotary_defaults_and_buffers():
    r = RotaryPositions(8)
    torch.testing.assert_close(
        r.inv_freq, torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=F64), rtol=0, atol=1e-18
    )
    assert r.cos.shape == r.sin.shape == (128, 4) and r.layout == "half"
    assert r.cos.dtype == r.sin.dtype == torch.float32  # computed in float64, kept in float32
    assert set(dict(r.named_buffers())) == {"cos", "sin"} and r.state_dict() == {}
    torch.testing.assert_close(RotaryPositions(4, base=100.0).inv_freq, torch.tensor([1.0, 0.1], dtype=F64))


def test_rotary_grows_to_the_next_power_of_two_only_when_needed():
    r = RotaryPositions(4)
    q = torch.zeros(1, 1, 1, 4)
    r.rotate(q, q, torch.tensor([127]))
    assert r.cos.shape[0] == 128
    r.rotate(q, q, torch.tensor([128]))
    assert r.cos.shape[0] == r.sin.shape[0] == 256
    short = RotaryPositions(4, initial_length=20)
    short.rotate(q, q, torch.tensor([19]))  # the last row exists: no rebuild (to 32 rows)
    assert short.cos.shape[0] == 20


def test_set_frequencies_keeps_the_length_rebuilds_in_float64_and_scales_by_one_unless_told():
    r = RotaryPositions(4)
    r.set_frequencies(torch.tensor([0.5, 0.25], dtype=torch.float32))
    assert r.inv_freq.dtype == F64 and r.cos.shape == (128, 2)
    torch.testing.assert_close(r.cos[10], torch.tensor([math.cos(5.0), math.cos(2.5)]), rtol=0, atol=1e-7)
    torch.testing.assert_close(r.sin[10], torch.tensor([math.sin(5.0), math.sin(2.5)]), rtol=0, atol=1e-7)
    r.set_frequencies(torch.tensor([0.5, 0.25]), attention_scaling=3.0)
    torch.testing.assert_close(r.sin[10], 3 * torch.tensor([math.sin(5.0), math.sin(2.5)]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotary_keeps_the_query_dtype(layout):
    r = RotaryPositions(4, layout=layout)
    q = torch.ones(1, 1, 2, 4, dtype=torch.bfloat16)
    rq, rk = r.rotate(q, q, torch.tensor([3, 4]))
    assert rq.dtype == rk.dtype == torch.bfloat16


def test_the_half_layout_goes_through_the_hand_written_rotation():
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    rq, rk = RotaryPositions(4).rotate(q, q, torch.arange(3))
    assert type(rq.grad_fn).__name__ == type(rk.grad_fn).__name__ == "_HalfRotationBackward"


def test_half_rotation_backward_is_the_inverse_rotation_gradcheck():
    angles = torch.tensor([[0.3, 2.0], [1.1, -0.7]], dtype=F64)
    x = torch.randn(2, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: _HalfRotation.apply(t, angles.cos(), angles.sin()), (x,))


def test_grown_tables_stay_on_the_tables_device():
    # The "meta" device stands in for a GPU (no data, only shapes and devices): a table that grows past its
    # length must be rebuilt where the old one lived, not on the CPU.
    r = RotaryPositions(4).to("meta")
    q = torch.zeros(1, 1, 1, 4, device="meta")
    rq, _ = r.rotate(q, q, torch.tensor([300]))
    assert r.cos.shape[0] == 512 and r.cos.device.type == r.sin.device.type == rq.device.type == "meta"
    s = SinusoidalPositions(4).to("meta")
    out = s.embed(torch.zeros(1, 1, 4, device="meta"), torch.tensor([300]))
    assert s.table.shape[0] == 512 and s.table.device.type == out.device.type == "meta"


# ------------------------------------------------------------------------------------------------------------
# New frequencies (RoPE scaling) against NumPy


def test_set_frequencies_scales_cos_and_sin() -> None:
    """The rotation after `set_frequencies` against NumPy: angle = position x the new θ_i, cos and sin times
    the attention scaling; inside the built table and past it (the table grows with the new frequencies)."""
    rope = RotaryPositions(32, 10000.0, initial_length=16)
    inv_freq, scaling = yarn_frequencies(32, 10000.0, 4.0, 64)
    assert scaling != 1.0 and not torch.allclose(inv_freq, rope_frequencies(32, 10000.0))
    rope.set_frequencies(inv_freq, scaling)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 8, 32))
    theta = inv_freq.numpy()
    for positions in (np.arange(8), np.arange(300, 308)):  # the second grows the table to 512 rows
        rotated, _ = rope.rotate(
            torch.tensor(q, dtype=torch.float32), torch.zeros(1, 1, 8, 32), torch.tensor(positions)
        )
        angle = positions[:, None] * theta[None, :]  # [T, 16]
        a, b = q[..., :16], q[..., 16:]
        cos, sin = np.cos(angle) * scaling, np.sin(angle) * scaling
        expected = np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
        # float32 tables and products, |q| ~ 3: measured 3.1e-7 at most.
        np.testing.assert_allclose(rotated.numpy(), expected, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------------------
# Partial rotation and p-RoPE: defaults, the kernels a rotated slice takes, config problems


def test_rotary_dims_default_to_the_whole_head() -> None:
    assert (rotary_dims(8), rotary_dims(8, 0.5), rotary_dims(10, 0.5)) == (8, 4, 4)


def test_the_plain_turn_of_a_rotated_slice_never_uses_the_fused_kernel(monkeypatch) -> None:  # noqa: ANN001
    # fused=False is for graph exporters that cannot trace a custom autograd function: not even for the slice.
    def refuse(*args):  # noqa: ANN002, ANN202
        raise AssertionError("_HalfRotation used with fused=False")

    monkeypatch.setattr(octlm.positions.rotary._HalfRotation, "apply", refuse)
    scheme = RotaryPositions(8, initial_length=4, rotary_dims=4)
    x = torch.randn(1, 1, 4, 8)
    cos, sin = scheme.cos[:4], scheme.sin[:4]
    out = scheme.turn(x, cos, sin, fused=False)
    assert torch.equal(out[..., 4:], x[..., 4:])
    with pytest.raises(AssertionError, match="fused=False"):
        scheme.turn(x, cos, sin)


def test_attention_scaling_multiplies_cos_and_sin() -> None:
    scheme = RotaryPositions(4, initial_length=8)
    scheme.set_frequencies(torch.tensor([1.0, 0.5], dtype=torch.float64), attention_scaling=2.0)
    angle = torch.arange(8, dtype=torch.float64).unsqueeze(1) * torch.tensor([1.0, 0.5], dtype=torch.float64)
    # the float64 formula cast once: equal to the last bit (measured 0)
    torch.testing.assert_close(scheme.cos, (2.0 * angle.cos()).float(), atol=0, rtol=0)
    torch.testing.assert_close(scheme.sin, (2.0 * angle.sin()).float(), atol=0, rtol=0)


def test_prope_defaults_exactly() -> None:
    # head size 8: θ = 10000^(-2i/8) = 1, 0.1, 0.01, 0.001; 0.75 of 4 pairs keeps 3
    expected = torch.tensor([1.0, 10000.0**-0.25, 10000.0**-0.5, 0.0], dtype=torch.float64)
    torch.testing.assert_close(prope_frequencies(8), expected, atol=0, rtol=1e-15)
    scheme = PartialRotaryPositions(8)
    torch.testing.assert_close(scheme.frequencies(), expected, atol=0, rtol=1e-15)
    assert scheme.kept == 0.75 and scheme.cos.shape == (128, 4)
    # another base: 100^(-2i/8) = 1, 0.316, 0.1 (and the lowest pair dropped)
    other = torch.tensor([1.0, 100.0**-0.25, 100.0**-0.5, 0.0], dtype=torch.float64)
    torch.testing.assert_close(prope_frequencies(8, base=100.0), other, atol=0, rtol=1e-15)


def test_prope_tables_cover_the_initial_length() -> None:
    scheme = PartialRotaryPositions(8, initial_length=64, kept=0.5)
    assert scheme.cos.shape == scheme.sin.shape == (64, 4)
    theta = torch.tensor([1.0, 10000.0**-0.25, 0.0, 0.0], dtype=torch.float64)  # half of 4 pairs kept
    angle = torch.arange(64, dtype=torch.float64).unsqueeze(1) * theta
    # the float64 formula cast once: equal to the last float32 bit (measured 0)
    torch.testing.assert_close(scheme.cos, angle.cos().float(), atol=0, rtol=0)
    torch.testing.assert_close(scheme.sin, angle.sin().float(), atol=0, rtol=0)


def test_fraction_problems_round_the_smallest_fraction_up_to_four_digits() -> None:
    # 2 / 24 = 0.08333..: four significant digits, rounded up, is 0.08334
    assert _fraction_problems(24, 0.04) == [
        "model.rope_fraction = 0.04 rotates int(24 × 0.04) = 0 of each head's 24 channels, not a single pair; "
        "use at least 0.08334 (2 / 24)"
    ]


@pytest.mark.parametrize(
    "fields, problems",
    [
        (dict(rope_fraction=0.0), []),  # out of range: ranges.py names it
        (dict(d_model=4, n_heads=4, rope_fraction=1.5), []),  # out of range (head size 1 rotates no pair)
        (dict(d_model=10, n_heads=4, rope_fraction=0.1), []),  # no whole head size: config names it
        (
            dict(d_model=8, n_heads=1, rope_fraction=0.1),
            [
                "model.rope_fraction = 0.1 rotates int(8 × 0.1) = 0 of each head's 8 channels, not a single pair; "
                "use at least 0.25 (2 / 8)"
            ],
        ),
    ],
)
def test_rope_problems_only_for_a_fraction_in_range_and_a_whole_head(fields: dict, problems: list) -> None:
    assert RotaryPositions.problems(small("rope", **fields)) == problems


@pytest.mark.parametrize("scheme", [RotaryPositions, PartialRotaryPositions, XPosPositions])
def test_an_odd_head_size_of_a_single_head_is_a_problem(scheme: type[RotaryPositions]) -> None:
    assert scheme.problems(small(scheme.name, d_model=7, n_heads=1)) == [
        f"model.position = {scheme.name!r} needs an even head size, but d_model / n_heads = 7; "
        "change d_model or n_heads"
    ]
