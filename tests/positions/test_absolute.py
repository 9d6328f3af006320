"""The absolute schemes of octlm/positions/absolute.py: the sinusoidal table as a module (against NumPy, its
defaults worked out by hand, growth on demand past its length, the token dtype kept)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from references import np_sinusoidal

from octlm.positions.absolute import SinusoidalPositions

# ------------------------------------------------------------------------------------------------------------
# The sinusoidal module against NumPy


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
# Exact values, worked out by hand


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


def test_the_sinusoidal_table_grows_for_the_first_position_past_it() -> None:
    scheme = SinusoidalPositions(4, initial_length=4, scale=0.5)
    out = scheme.embed(torch.zeros(1, 1, 4), torch.tensor([4]))  # row 4 of a 4-row table: grown to 8 rows
    assert scheme.table.shape == (8, 4)
    # width 4: frequencies 1 and 10000^(-1/2) = 0.01; sin and cos interleaved, times the scale
    expected = 0.5 * torch.tensor([math.sin(4), math.cos(4), math.sin(0.04), math.cos(0.04)])
    torch.testing.assert_close(out[0, 0], expected, atol=0, rtol=1.2e-7)  # one float32 ulp (measured 0)
