"""The context-extension frequencies against Hugging Face transformers' own RoPE initialisation functions."""

from __future__ import annotations

import math

import pytest
import torch

from octlm.errors import UserError
from octlm.positions.formulas import rope_frequencies
from octlm.positions.rope_scaling import (
    METHODS,
    dynamic_ntk_frequencies,
    linear_frequencies,
    ntk_base,
    ntk_frequencies,
    scaled_frequencies,
    yarn_frequencies,
)

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

RTOL = 1e-6  # Hugging Face computes in float32; ours is float64
# (head_dim, base, factor, original length): octlm's day1 shape, a Llama-sized head, odd factors and bases.
SETTINGS = [
    (32, 10000.0, 16.0, 64),
    (32, 10000.0, 2.0, 64),
    (128, 10000.0, 4.0, 4096),
    (64, 500000.0, 8.0, 8192),
    (16, 10000.0, 3.5, 100),
    (64, 1e6, 1.0, 2048),
]


def hf(
    rope_type: str,
    head_dim: int,
    base: float,
    factor: float,
    original: int,
    seq_len: int | None = None,
    **extra: float,
) -> tuple[torch.Tensor, float]:
    """Call transformers' init function for `rope_type` on a LlamaConfig with these settings."""
    params = {"rope_type": rope_type, "rope_theta": base, "factor": factor, **extra}
    if rope_type == "yarn":
        params["original_max_position_embeddings"] = original
    config = LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=original,
        rope_parameters=params,
    )
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return inv_freq.to(torch.float64), float(scaling)


def close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.dtype == torch.float64
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=0.0)


@pytest.mark.parametrize("head_dim, base, factor, original", SETTINGS)
def test_linear_matches_transformers(head_dim: int, base: float, factor: float, original: int) -> None:
    inv_freq, scaling = linear_frequencies(head_dim, base, factor, original)
    theirs, their_scaling = hf("linear", head_dim, base, factor, original)
    close(inv_freq, theirs)
    assert scaling == their_scaling == 1.0


@pytest.mark.parametrize("head_dim, base, factor, original", SETTINGS)
@pytest.mark.parametrize("multiple", [0.5, 1.0, 1.5, 4.0, 16.0])
def test_dynamic_matches_transformers(
    head_dim: int, base: float, factor: float, original: int, multiple: float
) -> None:
    seq_len = int(original * multiple)
    inv_freq, scaling = dynamic_ntk_frequencies(head_dim, base, factor, original, seq_len)
    theirs, their_scaling = hf("dynamic", head_dim, base, factor, original, seq_len=seq_len)
    close(inv_freq, theirs)
    assert scaling == their_scaling == 1.0


@pytest.mark.parametrize("head_dim, base, factor, original", SETTINGS)
def test_dynamic_is_plain_rope_up_to_the_training_length(
    head_dim: int, base: float, factor: float, original: int
) -> None:
    for seq_len in (1, original // 2, original):
        inv_freq, _ = dynamic_ntk_frequencies(head_dim, base, factor, original, seq_len)
        close(inv_freq, rope_frequencies(head_dim, base))


@pytest.mark.parametrize("head_dim, base, factor, original", SETTINGS)
def test_ntk_matches_the_formula(head_dim: int, base: float, factor: float, original: int) -> None:
    inv_freq, scaling = ntk_frequencies(head_dim, base, factor, original)
    new_base = base * factor ** (head_dim / (head_dim - 2))
    assert ntk_base(head_dim, base, factor) == pytest.approx(new_base, rel=1e-12)
    expected = torch.tensor(
        [new_base ** (-2 * i / head_dim) for i in range(head_dim // 2)], dtype=torch.float64
    )
    close(inv_freq, expected)
    assert scaling == 1.0
    # The fastest pair is untouched, the slowest is slowed by exactly the factor.
    plain = rope_frequencies(head_dim, base)
    assert inv_freq[0].item() == pytest.approx(1.0, rel=1e-12)
    assert (plain[-1] / inv_freq[-1]).item() == pytest.approx(factor, rel=1e-9)


@pytest.mark.parametrize("head_dim, base, factor, original", SETTINGS)
def test_ntk_matches_transformers_dynamic_where_they_coincide(
    head_dim: int, base: float, factor: float, original: int
) -> None:
    # Dynamic's scale s·L/L0 − (s − 1) equals s when L = L0 (2s − 1) / s ...
    seq_len = original * (2 * factor - 1) / factor
    theirs, _ = hf("dynamic", head_dim, base, factor, original, seq_len=seq_len)
    close(ntk_frequencies(head_dim, base, factor, original)[0], theirs)
    # ... and, with a dynamic factor of 1, when L = s · L0.
    theirs, _ = hf("dynamic", head_dim, base, 1.0, original, seq_len=factor * original)
    close(ntk_frequencies(head_dim, base, factor, original)[0], theirs)


@pytest.mark.parametrize("head_dim, base, factor, original", SETTINGS)
@pytest.mark.parametrize("betas", [(32.0, 1.0), (16.0, 2.0)])
@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_matches_transformers(
    head_dim: int, base: float, factor: float, original: int, betas: tuple[float, float], truncate: bool
) -> None:
    beta_fast, beta_slow = betas
    inv_freq, scaling = yarn_frequencies(head_dim, base, factor, original, beta_fast, beta_slow, truncate)
    theirs, their_scaling = hf(
        "yarn", head_dim, base, factor, original, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate
    )
    close(inv_freq, theirs)
    assert scaling == pytest.approx(their_scaling, rel=RTOL)
    assert scaling == pytest.approx(0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0, rel=1e-12)


def test_dispatch_and_errors() -> None:
    for method in METHODS:
        inv_freq, scaling = scaled_frequencies(method, 32, 10000.0, 4.0, 64, seq_len=256)
        assert inv_freq.shape == (16,) and inv_freq.dtype == torch.float64
        assert scaling >= 1.0
    for method in METHODS:  # a factor of 1 is plain RoPE for every method
        close(scaled_frequencies(method, 32, 10000.0, 1.0, 64)[0], rope_frequencies(32, 10000.0))
    with pytest.raises(UserError, match="unknown RoPE scaling"):
        scaled_frequencies("longrope", 32, 10000.0, 4.0, 64)
    with pytest.raises(UserError, match="at least 1"):
        linear_frequencies(32, 10000.0, 0.5, 64)
    with pytest.raises(UserError, match="even head size"):
        ntk_frequencies(31, 10000.0, 2.0, 64)
