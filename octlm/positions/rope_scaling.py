"""RoPE context extension at inference: new frequencies (and an attention scale) for a model trained short.

A RoPE model trained on sequences of `original_length` tokens has only ever seen rotation angles `t · θ_i`
with `t < original_length`. Run it on longer text and the slow channel pairs reach angles they never saw.
Each method below changes the frequencies θ_i (and YaRN also the attention temperature) so that longer text
maps back onto angles the model knows, with no training:

- `linear`: position interpolation (Chen et al., 2023): every frequency divided by the factor s, so position
  `t` looks like position `t / s`. Fast pairs get squeezed too, which blurs neighbouring tokens.
- `ntk`: NTK-aware base scaling (bloc97, 2023): raise the base to `base · s^(D / (D - 2))`, which leaves the
  fastest pair untouched and divides the slowest one by exactly s, with a smooth change in between.
- `dynamic`: dynamic NTK (emozilla, 2023; Hugging Face's `"dynamic"`): NTK scaling whose factor follows the
  current sequence length, so text no longer than the training length runs with the original frequencies.
- `yarn`: YaRN (Peng et al., 2023): leave pairs that turn many times within the original length alone,
  interpolate those that turn less than once, ramp linearly in between, and sharpen attention by
  `mscale = 0.1 · ln(s) + 1` applied to both cos and sin (attention logits grow by mscale²).

Every function returns `(inv_freq, attention_scaling)`: θ_i as float64 `[head_dim // 2]`, and the factor
that multiplies cos and sin, exactly what `octlm.positions.scheme.RotaryPositions.set_frequencies` takes. The
formulas match `transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS` ("linear", "dynamic", "yarn");
tests/positions/test_rope_scaling_hf.py checks each against it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from octlm.errors import UserError
from octlm.positions.formulas import rope_frequencies

METHODS = ("linear", "ntk", "dynamic", "yarn")
# The length experiment's RoPE rows, by web/DATA.md's variant names -> method ("plain": the model as trained).
VARIANTS = {"plain": None, "pi": "linear", "ntk": "ntk", "dynamic": "dynamic", "yarn": "yarn"}
# Short names for tables and figure legends.
LABELS = {"linear": "PI", "ntk": "NTK-aware", "dynamic": "dynamic NTK", "yarn": "YaRN"}


def _check(head_dim: int, base: float, factor: float, original_length: int) -> None:
    if head_dim < 2 or head_dim % 2:
        raise UserError(f"RoPE scaling needs an even head size of at least 2, got {head_dim}")
    if base <= 1:
        raise UserError(f"the RoPE base must be greater than 1, got {base}")
    if factor < 1:
        raise UserError(f"a context-extension factor must be at least 1, got {factor}")
    if original_length < 1:
        raise UserError(f"the original (training) length must be at least 1, got {original_length}")


def linear_frequencies(
    head_dim: int, base: float, factor: float, original_length: int
) -> tuple[Tensor, float]:
    """Position interpolation (Chen et al., 2023, "Extending Context Window of Large Language Models via
    Positional Interpolation"): θ_i / s for every pair, so positions `0 .. s·L` land on the trained `0 .. L`.

    Returns (inv_freq float64 `[head_dim // 2]`, attention_scaling 1.0). `original_length` is unused (the same
    signature as the other methods).
    """
    _check(head_dim, base, factor, original_length)
    return rope_frequencies(head_dim, base) / factor, 1.0


def ntk_base(head_dim: int, base: float, factor: float) -> float:
    """bloc97's NTK-aware base, `base · s^(D / (D - 2))`: the slowest pair turns exactly s times slower."""
    return base * factor ** (head_dim / (head_dim - 2))


def ntk_frequencies(head_dim: int, base: float, factor: float, original_length: int) -> tuple[Tensor, float]:
    """NTK-aware scaling (bloc97, 2023, "NTK-Aware Scaled RoPE allows LLaMA models to have extended (8k+)
    context size without any fine-tuning", r/LocalLLaMA): the RoPE frequencies of a larger base, `ntk_base`.

    The fastest pair (θ_0 = 1) is unchanged, so neighbouring tokens stay as sharp as in training
    ("extrapolate" the high frequencies), while the slowest is divided by s ("interpolate" the low ones).
    Returns (inv_freq float64 `[head_dim // 2]`, 1.0). `original_length` is unused.
    """
    _check(head_dim, base, factor, original_length)
    return rope_frequencies(head_dim, ntk_base(head_dim, base, factor)), 1.0


def dynamic_ntk_frequencies(
    head_dim: int, base: float, factor: float, original_length: int, seq_len: int
) -> tuple[Tensor, float]:
    """Dynamic NTK (emozilla, 2023, "Dynamically Scaled RoPE further increases performance of long context
    LLaMA with zero fine-tuning", r/LocalLLaMA; Hugging Face's rope_type "dynamic"): NTK base scaling
    recomputed for the current sequence length `seq_len`.

    base' = base · (s · L / L0 − (s − 1))^(D / (D − 2)) with L = max(seq_len, L0), so up to the training
    length L0 the frequencies are the original ones. With s = 1 the NTK factor is exactly L / L0.
    Returns (inv_freq float64 `[head_dim // 2]`, 1.0).
    """
    _check(head_dim, base, factor, original_length)
    length = max(seq_len, original_length)
    scale = factor * length / original_length - (factor - 1)
    return rope_frequencies(head_dim, base * scale ** (head_dim / (head_dim - 2))), 1.0


def yarn_mscale(factor: float) -> float:
    """YaRN's attention scale `0.1 · ln(s) + 1` (1 for s ≤ 1); multiplies cos and sin (logits: its square)."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def yarn_frequencies(
    head_dim: int,
    base: float,
    factor: float,
    original_length: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> tuple[Tensor, float]:
    """YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large Language Models"):
    "NTK-by-parts" interpolation plus an attention temperature.

    Pair i turns r_i = L0 · θ_i / 2π times over the original length L0. Pairs with r_i > beta_fast keep θ_i
    (extrapolate), pairs with r_i < beta_slow get θ_i / s (interpolate), and a linear ramp over the pair index
    blends the two in between. The pair index where r = β is D · ln(L0 / (2π β)) / (2 ln base); with
    `truncate` the ramp's ends are rounded outwards to whole pairs (floor, ceil), as in the reference code.
    Returns (inv_freq float64 `[head_dim // 2]`, `yarn_mscale(factor)`).
    """
    _check(head_dim, base, factor, original_length)
    half = head_dim // 2

    def pair_with_rotations(rotations: float) -> float:
        return head_dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_with_rotations(beta_fast), pair_with_rotations(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # the reference's guard against dividing by zero
    # 0 for pairs before `low` (keep θ_i), 1 after `high` (θ_i / s), linear in between.
    interpolate = ((torch.arange(half, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    theta = rope_frequencies(head_dim, base)
    inv_freq = theta / factor * interpolate + theta * (1 - interpolate)
    return inv_freq, yarn_mscale(factor)


def scaled_frequencies(
    method: str, head_dim: int, base: float, factor: float, original_length: int, seq_len: int | None = None
) -> tuple[Tensor, float]:
    """Dispatch on `method` (one of METHODS); only "dynamic" uses `seq_len` (default: the original length)."""
    functions: dict[str, Callable[..., tuple[Tensor, float]]] = {
        "linear": linear_frequencies,
        "ntk": ntk_frequencies,
        "yarn": yarn_frequencies,
    }
    if method == "dynamic":
        length = original_length if seq_len is None else seq_len
        return dynamic_ntk_frequencies(head_dim, base, factor, original_length, length)
    if method not in functions:
        raise UserError(f"unknown RoPE scaling {method!r}; choose one of {', '.join(METHODS)}")
    return functions[method](head_dim, base, factor, original_length)
