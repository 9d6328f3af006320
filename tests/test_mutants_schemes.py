"""Tests that kill the mutants `mutmut` left alive in the position-scheme code (docs/MUTANTS.md, "position
schemes"): the registry's edges, the defaults of every scheme's constructor, the config problems at their
boundaries, the dtype and device each chunked bias is built in, and xPos's table growth. Exact values where they
are known; the rest at tolerances a comment gives, measured.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny import forget_scheme
from torch import Tensor

import octlm.model.decoder
import octlm.positions.rotary
from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.model.decoder import ChunkedBias, ContextualBias, Decoder, chunked_attention
from octlm.positions import PositionScheme, family_of, register, table_order
from octlm.positions import scheme as positions
from octlm.positions.absolute import LearnedPositions, SinusoidalPositions
from octlm.positions.bias import AlibiPositions, T5Positions
from octlm.positions.cope import CopePositions, interpolated_bias
from octlm.positions.fire import FirePositions
from octlm.positions.rotary import (
    PartialRotaryPositions,
    RotaryPositions,
    _fraction_problems,
    prope_frequencies,
    rotary_dims,
)
from octlm.positions.xpos import XPosPositions


def decay_by_distance(scheme: object, length: int) -> torch.Tensor:
    """The factor ζ_i^(d / scale_base) a score's pair i carries at distance d = 0 .. length - 1, `[D/2, length]`
    float64 (1 at distance 0, falling fastest for pair 0), from the scheme's own ζ and scale base."""
    distance = torch.arange(length, dtype=torch.float64)
    return scheme.zeta.unsqueeze(1) ** (distance / scheme.scale_base)


def small(position: str, **fields) -> ModelConfig:
    return ModelConfig(**dict(vocab_size=64, d_model=32, context_length=8, n_layers=2, n_heads=4, d_ff=64,
                              position=position) | fields)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# The registry and the interface's defaults (octlm/positions/scheme.py)


@pytest.mark.parametrize("thing, shown", [(int, "<class 'int'>"), (3, "3")])
def test_register_refuses_what_is_not_a_scheme_class(thing: object, shown: str) -> None:
    with pytest.raises(TypeError, match=rf"^register\(\) takes a PositionScheme subclass, got {shown}$"):
        register(thing)  # type: ignore[arg-type]
    assert "int" not in positions.SCHEMES


def test_family_of_an_unknown_name_is_the_name() -> None:
    assert family_of("no-such-scheme") == "no-such-scheme"
    assert family_of("xpos") == "rope"
    assert family_of("alibi") == "alibi"


class _Orphan(PositionScheme):
    """A variant of a family that is not registered: tables list it in its own registration place."""

    name = "orphan-test"
    family = "no-such-family"


def test_table_order_places_a_variant_of_an_unregistered_family_by_its_own_rank() -> None:
    register(_Orphan)
    try:
        names = list(positions.SCHEMES)
        assert names[-1] == "orphan-test"
        assert table_order(["orphan-test", "xpos", "nope", "rope", "unknown"]) == ["rope", "xpos", "nope",
                                                                                  "orphan-test"]  # fmt: skip
    finally:
        forget_scheme("orphan-test")


class _Spy(PositionScheme):
    """Records what the interface's defaults hand to its hooks; its one buffer says where it lives."""

    name = "spy-test"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.register_buffer("anchor", torch.zeros(1, device=device), persistent=False)
        self.vector_width, self.seen = 3, []

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        self.seen.append((tuple(x.shape), x.device.type, positions.device.type))
        return x + 1.0

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        self.seen.append((q_positions.device.type, k_positions.device.type, k_positions.shape[0]))
        return torch.zeros(2, q_positions.shape[0], k_positions.shape[0], device=q_positions.device)

    def contextual_bias(self, q, k, q_positions, k_positions, layer):  # noqa: ANN001, ANN201
        self.seen.append((tuple(q.shape), tuple(k.shape), q_positions.device.type, k_positions.device.type,
                          layer))  # fmt: skip
        return torch.zeros(
            q.shape[0], q.shape[1], q.shape[2], k.shape[2], dtype=torch.float32, device=q.device
        )


def test_vectors_embed_one_row_of_zeros_on_the_schemes_device() -> None:
    spy = _Spy("meta")
    rows = spy.vectors(5)
    assert rows.shape == (5, 3) and rows.device.type == "meta"
    assert spy.seen == [((1, 5, 3), "meta", "meta")]  # one [1, T, C] batch of zeros, positions beside it


def test_vectors_of_a_learned_table_on_meta_stay_on_meta() -> None:
    assert LearnedPositions(8, 6).to("meta").vectors(4).device.type == "meta"


def test_bias_by_distance_builds_positions_on_the_schemes_device() -> None:
    # ALiBi's slopes on "meta" meet the distances: CPU positions there fail ("not on the expected device").
    row = AlibiPositions(4).to("meta").bias_by_distance(5)
    assert row.shape == (4, 5) and row.device.type == "meta"


def test_chunked_bias_rows_are_in_its_dtype_and_on_the_queries_device() -> None:
    spy = _Spy("meta")
    bias, end = ChunkedBias(spy, torch.arange(3, 6, device="meta"), 6, torch.float64).rows(1, 2)
    assert (bias.dtype, bias.device.type, bias.shape, end) == (torch.float64, "meta", (2, 1, 5), 5)
    assert spy.seen == [("meta", "meta", 5)]  # keys 0 .. 4: the query at position 4 and those before it


def test_contextual_bias_rows_are_in_the_query_dtype_and_device() -> None:
    spy = _Spy()
    q, k = torch.zeros(2, 4, 3, 8, dtype=torch.float64), torch.zeros(2, 2, 5, 8, dtype=torch.float64)
    bias, end = ContextualBias(spy, q, k, torch.arange(2, 5), layer=1).rows(1, 3)
    assert (bias.dtype, bias.shape, end) == (torch.float64, (2, 4, 2, 5), 5)  # the spy returned float32
    assert spy.seen == [((2, 4, 2, 8), (2, 2, 5, 8), "cpu", "cpu", 1)]
    meta = _Spy("meta")
    q, k = q.to("meta"), k.to("meta")
    bias, end = ContextualBias(meta, q, k, torch.arange(2, 5, device="meta"), layer=0).rows(0, 1)
    assert (bias.device.type, end) == ("meta", 3)
    assert meta.seen == [((2, 4, 1, 8), (2, 2, 3, 8), "meta", "meta", 0)]


def test_the_sinusoidal_table_grows_for_the_first_position_past_it() -> None:
    scheme = SinusoidalPositions(4, initial_length=4, scale=0.5)
    out = scheme.embed(torch.zeros(1, 1, 4), torch.tensor([4]))  # row 4 of a 4-row table: grown to 8 rows
    assert scheme.table.shape == (8, 4)
    # width 4: frequencies 1 and 10000^(-1/2) = 0.01; sin and cos interleaved, times the scale
    expected = 0.5 * torch.tensor([math.sin(4), math.cos(4), math.sin(0.04), math.cos(0.04)])
    torch.testing.assert_close(out[0, 0], expected, atol=0, rtol=1.2e-7)  # one float32 ulp (measured 0)


# ---------------------------------------------------------------------------------------------------------------
# The decoder's chunked bias and its layers' schemes (octlm/model/decoder.py)


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
    out = chunked_attention(q, k, v, ChunkedBias(alibi, torch.arange(4), 4, torch.float32), 0.0)
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
    bias = ChunkedBias(AlibiPositions(4), torch.arange(6), 6, torch.float32)
    plain = chunked_attention(q, k, v, bias, 0.0)
    dropped = chunked_attention(q, k, v, bias, 0.5)
    # the CPU flash kernel takes 4-D masks only (a 3-D one runs the 4-6x slower math backend)
    assert seen == [(4, 0.0)] * 3 + [(4, 0.5)] * 3
    assert not torch.allclose(plain, dropped)


def test_attention_mask_is_in_the_models_dtype_and_chunked_only_past_the_limit(monkeypatch) -> None:  # noqa: ANN001
    # FIRE computes its bias in float32 whatever the model's dtype: the mask must be cast to it.
    model = Decoder(small("fire")).double()
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", 64)
    mask, causal = model._attention_mask(torch.arange(8), 8)  # 64 pairs: still whole
    assert isinstance(mask, Tensor) and (mask.dtype, mask.shape, causal) == (torch.float64, (4, 8, 8), True)
    mask, causal = model._attention_mask(torch.arange(8), 9)  # 72 pairs: per chunk
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


# ---------------------------------------------------------------------------------------------------------------
# ALiBi and T5 (octlm/positions/bias.py)


def test_alibi_slopes_are_not_saved() -> None:
    # Rebuilt from n_heads: a checkpoint holds no slopes, so a change of formula never meets stale ones.
    assert list(AlibiPositions(4).state_dict()) == []


@pytest.mark.parametrize(
    "buckets, max_distance, half",
    [(2, 1, 1), (32, 16, 16), (33, 16, 16), (3, 1, 1)],
)
def test_t5_problems_at_the_edge_of_the_exact_range(buckets: int, max_distance: int, half: int) -> None:
    config = small("t5", t5_buckets=buckets, t5_max_distance=max_distance)
    assert T5Positions.problems(config) == [
        f"model.t5_max_distance = {max_distance} must be larger than half of model.t5_buckets ({half}), "
        "the range of exact buckets"
    ]
    assert T5Positions.problems(small("t5", t5_buckets=buckets, t5_max_distance=max_distance + 1)) == []


def test_t5_problems_leave_one_bucket_alone() -> None:
    assert T5Positions.problems(small("t5", t5_buckets=1, t5_max_distance=0)) == []


# ---------------------------------------------------------------------------------------------------------------
# FIRE (octlm/positions/fire.py)


def test_fire_defaults_and_its_initial_draws() -> None:
    torch.manual_seed(7)
    fire = FirePositions(4)
    torch.manual_seed(7)
    bound = 1.0 / math.sqrt(32)  # PyTorch's Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan-in 1 then 32
    expected = {
        "w1": torch.empty(32).uniform_(-1.0, 1.0),
        "b1": torch.empty(32).uniform_(-1.0, 1.0),
        "w2": torch.empty(4, 32).uniform_(-bound, bound),
        "b2": torch.empty(4).uniform_(-bound, bound),
    }
    for name, value in expected.items():
        assert torch.equal(getattr(fire, name).detach(), value), name
    assert fire.initial_threshold == 512.0
    c, threshold = fire.values()
    assert (c.item(), threshold.item()) == (pytest.approx(0.1), 512.0)


# ---------------------------------------------------------------------------------------------------------------
# CoPE (octlm/positions/cope.py)


def test_cope_shows_layer_zero_by_default_and_when_every_layer_skips_it() -> None:
    assert CopePositions(2, 4, 8).shown_layer == 0
    assert CopePositions.from_config(small("cope", nope_layers=[0, 1])).shown_layer == 0
    assert CopePositions.from_config(small("cope", nope_layers=[0])).shown_layer == 1


def test_cope_bias_of_bfloat16_queries_is_float32() -> None:
    torch.manual_seed(0)
    q = torch.randn(1, 2, 3, 8).to(torch.bfloat16)
    table = torch.randn(4, 8)
    counts = torch.tensor([0.0, 0.5, 1.25, 3.0]).repeat(1, 2, 3, 1)
    bias = interpolated_bias(q, table, counts.clone())
    assert bias.dtype == torch.float32
    per_row = q.double() @ table.to(torch.bfloat16).double().T  # [1, 2, 3, 4]
    lower, frac = counts.long(), counts.frac().double()
    upper = (lower + 1).clamp(max=3)
    expected = per_row.gather(-1, lower) * (1 - frac) + per_row.gather(-1, upper) * frac
    # the bfloat16 matmul rounds its sums (bias values up to 3.2): measured 3.7e-3 from the float64 reference
    torch.testing.assert_close(bias.double(), expected, atol=8e-3, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# RoPE with a fraction, p-RoPE (octlm/positions/rotary.py)


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
        ),  # fmt: skip
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


# ---------------------------------------------------------------------------------------------------------------
# xPos (octlm/positions/xpos.py)


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
    for table, values in [("cos", np.cos(phi) * scale), ("sin", np.sin(phi) * scale),
                          ("key_cos", np.cos(phi) / scale), ("key_sin", np.sin(phi) / scale)]:  # fmt: skip
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
