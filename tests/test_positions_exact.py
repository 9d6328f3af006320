"""Exact expected values for octlm/positions/scheme.py, written to kill its mutants (scripts/mutation, docs/MUTANTS.md).

Expected numbers are worked out by hand (closed forms, small tables written out) or by a float64 formula
written here independently; the defaults and table sizes the docstrings promise are checked as such.
"""

from __future__ import annotations

import math

import pytest
import torch

from octlm.config import ModelConfig
from octlm.positions import NoPositions, build_positions
from octlm.positions.absolute import LearnedPositions, SinusoidalPositions
from octlm.positions.bias import AlibiPositions, T5Positions
from octlm.positions.formulas import apply_rope, cosine_similarity_matrix, rope_rotate, t5_bucket
from octlm.positions.rotary import RotaryPositions, _HalfRotation

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


def test_t5_positions_defaults_and_bias_by_hand():
    t5 = T5Positions(2)
    assert (t5.num_buckets, t5.max_distance, tuple(t5.table.weight.shape)) == (32, 128, (32, 2))
    with torch.no_grad():
        t5.table.weight.copy_(torch.arange(64, dtype=torch.float32).view(32, 2))
    bias = t5.bias(torch.tensor([113]), torch.tensor([0, 100, 113, 114]))  # distances 113, 13, 0, -1
    inf = float("-inf")
    assert bias.tolist() == [
        [[62.0, 26.0, 0.0, inf]],
        [[63.0, 27.0, 1.0, inf]],
    ]  # row = bucket, column = head


def test_cosine_similarity_of_short_rows_and_a_zero_row():
    x = torch.tensor([[0.3, 0.4], [0.0, 0.0], [-0.03, -0.04], [0.4, -0.3]])  # norms 0.5, 0, 0.05, 0.5
    want = torch.tensor(
        [[1.0, 0.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    )
    torch.testing.assert_close(cosine_similarity_matrix(x), want, rtol=0, atol=1e-6)


def test_sinusoidal_scheme_defaults_grows_by_powers_of_two_and_keeps_its_table_out_of_checkpoints():
    s = SinusoidalPositions(4, base=100.0, scale=0.5)
    assert s.table.shape == (128, 4) and "table" not in s.state_dict() and "table" in dict(s.named_buffers())
    # position 3, width 4, base 100: angles 3 and 3/10; columns sin, cos, sin, cos; times the scale 0.5
    want = 0.5 * torch.tensor([math.sin(3), math.cos(3), math.sin(0.3), math.cos(0.3)])
    torch.testing.assert_close(s.table[3], want, rtol=0, atol=1e-7)
    x = torch.zeros(1, 1, 4)
    s.embed(x, torch.tensor([127]))
    assert s.table.shape[0] == 128  # the last row is there: no growth
    out = s.embed(x, torch.tensor([200]))
    assert s.table.shape[0] == 256  # grown to the next power of two, still scaled and with its base
    want = 0.5 * torch.tensor([math.sin(200), math.cos(200), math.sin(20), math.cos(20)])
    torch.testing.assert_close(out[0, 0], want, rtol=0, atol=1e-6)


def test_sinusoidal_embed_keeps_the_token_dtype():
    out = SinusoidalPositions(4).embed(torch.zeros(1, 2, 4, dtype=torch.bfloat16), torch.tensor([0, 1]))
    assert out.dtype == torch.bfloat16


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


def test_alibi_scheme_bias_by_hand():
    bias = AlibiPositions(2).bias(torch.tensor([2]), torch.tensor([0, 2, 3]))  # slopes 1/16, 1/256
    assert bias.tolist() == [[[-2 / 16, 0.0, float("-inf")]], [[-2 / 256, 0.0, float("-inf")]]]


@pytest.mark.parametrize(
    ("position", "cls"),
    [
        ("learned", LearnedPositions),
        ("sinusoidal", SinusoidalPositions),
        ("rope", RotaryPositions),
        ("alibi", AlibiPositions),
        ("t5", T5Positions),
        ("nope", NoPositions),
    ],  # fmt: skip
)
def test_build_positions_passes_every_setting_through(position, cls):
    config = ModelConfig(
        d_model=12, n_heads=3, context_length=20, position=position, rope_base=50.0, rope_layout="interleaved",
        sinusoidal_base=30.0, sinusoidal_scale=0.25, t5_buckets=8, t5_max_distance=40,
    )  # fmt: skip
    scheme = build_positions(config)
    assert type(scheme) is cls and scheme.name == position
    if position == "learned":
        assert scheme.max_length == 20 and tuple(scheme.table.weight.shape) == (20, 12)
    if position == "sinusoidal":
        assert (scheme.width, scheme.base, scheme.scale, scheme.table.shape[0]) == (12, 30.0, 0.25, 20)
    if position == "rope":  # head size 4: θ = (1, 50^-1/2)
        assert scheme.layout == "interleaved" and scheme.cos.shape == (20, 2)
        torch.testing.assert_close(scheme.inv_freq, torch.tensor([1.0, 50**-0.5], dtype=F64))
    if position == "alibi":
        assert scheme.slopes.shape == (3,)
    if position == "t5":
        assert (scheme.num_buckets, scheme.max_distance, tuple(scheme.table.weight.shape)) == (8, 40, (8, 3))
    if position != "learned":
        assert scheme.max_length is None


def test_build_positions_names_an_unknown_scheme():
    from octlm.errors import UserError

    with pytest.raises(
        UserError, match="^unknown position scheme 'bogus'; choose one of learned, sinusoidal, rope, "
    ):
        build_positions(ModelConfig(position="bogus"))


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
