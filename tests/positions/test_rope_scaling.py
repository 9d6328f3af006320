"""Exact expected values for octlm/positions/rope_scaling.py (closed forms and small tables worked out by hand),
and YaRN's ramp. Against transformers' own RoPE initialisation: tests/positions/test_rope_scaling_hf.py."""

from __future__ import annotations

import math

import pytest
import torch

from octlm.errors import UserError
from octlm.positions.formulas import rope_frequencies
from octlm.positions.rope_scaling import (
    dynamic_ntk_frequencies,
    linear_frequencies,
    ntk_base,
    ntk_frequencies,
    scaled_frequencies,
    yarn_frequencies,
    yarn_mscale,
)

F64 = torch.float64


def close(got: tuple[torch.Tensor, float], freqs: list[float], scaling: float) -> None:
    assert got[0].dtype == F64
    torch.testing.assert_close(got[0], torch.tensor(freqs, dtype=F64), rtol=1e-12, atol=0)
    assert got[1] == pytest.approx(scaling, rel=1e-12)


def test_linear_divides_every_frequency():
    close(linear_frequencies(4, 100.0, 2.0, 10), [0.5, 0.05], 1.0)  # θ = (1, 1/10)


def test_ntk_base_and_frequencies():
    assert ntk_base(4, 10000.0, 4.0) == pytest.approx(160000.0, rel=1e-15)  # 10000 · 4^(4/2)
    close(ntk_frequencies(4, 100.0, 4.0, 10), [1.0, 1 / 40], 1.0)  # base 100 · 16 = 1600: θ_1 = 1/40


@pytest.mark.parametrize(("seq_len", "freqs"), [(20, [1.0, 1 / 30]), (5, [1.0, 0.1]), (10, [1.0, 0.1])])
def test_dynamic_follows_the_sequence_length(seq_len, freqs):
    # s = 2, L0 = 10: L = 20 gives scale 2·2 - 1 = 3, base 100 · 3^2 = 900 (θ_1 = 1/30); L <= L0 changes nothing.
    close(dynamic_ntk_frequencies(4, 100.0, 2.0, 10, seq_len), freqs, 1.0)


def test_yarn_mscale_by_hand():
    assert yarn_mscale(1.0) == 1.0 and yarn_mscale(0.5) == 1.0
    assert yarn_mscale(math.e) == pytest.approx(1.1, rel=1e-15)
    assert yarn_mscale(1.0 + 1e-9) == pytest.approx(1.0 + 1e-10, rel=1e-12)


def test_yarn_ramp_by_hand():
    # D = 8, base 10^4: θ = (1, 0.1, 0.01, 0.001). Pair index where a pair turns r times over L0:
    # 8 ln(L0 / 2πr) / (2 ln 10^4). L0 = 6358 (≈ 64π·10^1.5) puts r = 32 at 1.49998 (floor 1) and r = 1 at
    # 3.00505 (ceil 4): the ramp (i - 1) / 3 is 0, 0, 1/3, 2/3 over the pairs. s = 4.
    inv_freq, scaling = yarn_frequencies(8, 10000.0, 4.0, 6358)
    want = [1.0, 0.1, 0.01 * (2 / 3 + 1 / 12), 0.001 * (1 / 3 + 2 / 12)]
    close((inv_freq, scaling), want, 0.1 * math.log(4) + 1)


def test_yarn_untruncated_ramp_by_hand():
    # As above with truncate=False and custom betas: r = 10 at 8 ln(6358 / 20π) / (2 ln 10^4) = 2.00514 and
    # r = 2 at 2.70411 (both inside the pairs); the ramp is (i - low) / (high - low).
    low = 8 * math.log(6358 / (2 * math.pi * 10)) / (2 * math.log(10000.0))
    high = 8 * math.log(6358 / (2 * math.pi * 2)) / (2 * math.log(10000.0))
    assert (round(low, 5), round(high, 5)) == (2.00514, 2.70411)
    ramp = [0.0, 0.0, 0.0, (3 - low) / (high - low)]
    theta = [1.0, 0.1, 0.01, 0.001]
    want = [t / 2 * r + t * (1 - r) for t, r in zip(theta, [min(1.0, r) for r in ramp], strict=True)]
    got = yarn_frequencies(8, 10000.0, 2.0, 6358, beta_fast=10.0, beta_slow=2.0, truncate=False)
    close(got, want, 0.1 * math.log(2) + 1)


def test_yarn_with_every_pair_turning_less_than_once_takes_the_guard():
    # D = 4, base 100, L0 = 1: r = 32 sits at 4 ln(1/64π) / (2 ln 100) = -2.30 and r = 1 at -0.80; floor, ceil and
    # the clamp make low = high = 0, so high becomes 0.001: θ_0 = 1 kept, θ_1 = 0.1 interpolated to 0.05.
    close(yarn_frequencies(4, 100.0, 2.0, 1), [1.0, 0.05], 0.1 * math.log(2) + 1)


def test_scaled_frequencies_dispatch():
    close(scaled_frequencies("linear", 4, 100.0, 2.0, 10, seq_len=99), [0.5, 0.05], 1.0)
    close(scaled_frequencies("ntk", 4, 100.0, 4.0, 10), [1.0, 1 / 40], 1.0)
    close(scaled_frequencies("dynamic", 4, 100.0, 2.0, 10), [1.0, 0.1], 1.0)  # seq_len: the original length
    close(scaled_frequencies("dynamic", 4, 100.0, 2.0, 10, seq_len=20), [1.0, 1 / 30], 1.0)
    close(
        scaled_frequencies("yarn", 8, 10000.0, 4.0, 6358),
        yarn_frequencies(8, 10000.0, 4.0, 6358)[0].tolist(),
        0.1 * math.log(4) + 1,
    )
    with pytest.raises(
        UserError, match="^unknown RoPE scaling 'bogus'; choose one of linear, ntk, dynamic, yarn$"
    ):
        scaled_frequencies("bogus", 4, 100.0, 2.0, 10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 100.0, 2.0, 10), "^RoPE scaling needs an even head size of at least 2, got 0$"),
        ((3, 100.0, 2.0, 10), "^RoPE scaling needs an even head size of at least 2, got 3$"),
        ((4, 1.0, 2.0, 10), "^the RoPE base must be greater than 1, got 1.0$"),
        ((4, 100.0, 0.999, 10), "^a context-extension factor must be at least 1, got 0.999$"),
        ((4, 100.0, 2.0, 0), r"^the original \(training\) length must be at least 1, got 0$"),
    ],
)
def test_each_check_with_its_message(args, message):
    for fn in (linear_frequencies, ntk_frequencies, yarn_frequencies):
        with pytest.raises(UserError, match=message):
            fn(*args)
    with pytest.raises(UserError, match=message):
        dynamic_ntk_frequencies(*args, 10)


def test_the_smallest_valid_settings_pass():
    close(linear_frequencies(2, 1.0001, 1.0, 1), [1.0], 1.0)  # head size 2, factor 1, length 1
    close(yarn_frequencies(2, 1.0001, 1.0, 1), [1.0], 1.0)


def test_yarn_default_beta_fast_is_32():
    # D = 8, base 10^4, L0 = 20340: r = 32 sits at pair 2.00502 (floor 2; r = 33 would give 1.99166, floor 1) and
    # r = 1 at 3.51017 (ceil 4): the ramp (i - 2) / 2 is 0, 0, 0, 1/2; s = 4.
    close(
        yarn_frequencies(8, 10000.0, 4.0, 20340),
        [1.0, 0.1, 0.01, 0.001 * (1 / 2 + 1 / 8)],
        0.1 * math.log(4) + 1,
    )


def test_yarn_ramp_end_clamps_to_head_dim_minus_one():
    # beta_fast 1000 and beta_slow 1/1000 at L0 = 99582: pairs 1.20000 (floor 1) and 7.20000 (ceil 8, clamped to
    # D - 1 = 7). The ramp (i - 1) / 6 is 0, 0, 1/6, 1/3; s = 4.
    got = yarn_frequencies(8, 10000.0, 4.0, 99582, beta_fast=1000.0, beta_slow=0.001)
    close(got, [1.0, 0.1, 0.01 * (5 / 6 + 1 / 24), 0.001 * (2 / 3 + 1 / 12)], 0.1 * math.log(4) + 1)


def test_yarn_trained_very_long_keeps_every_frequency():
    # L0 = 4·10^9: r = 32 at pair 7.29873 (floor 7), r = 1 at 8.80388 (ceil 9, clamped to 7): low = high = 7, the
    # guard makes high 7.001, and every pair (index <= 3) sits before the ramp.
    close(yarn_frequencies(8, 10000.0, 4.0, 4_000_000_000), [1.0, 0.1, 0.01, 0.001], 0.1 * math.log(4) + 1)


def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones() -> None:
    plain = rope_frequencies(32, 10000.0)
    inv_freq, scaling = yarn_frequencies(32, 10000.0, 16.0, 64)
    assert inv_freq[0].item() == plain[0].item()
    torch.testing.assert_close(inv_freq[-4:], plain[-4:] / 16.0)
    assert scaling == yarn_mscale(16.0) > 1.0
