"""Sampling fuzzed with hypothesis (octlm/generation/sampling.py): settings that pass `check_sampling` always give
a token that was allowed. The property counts the examples it ran and checks the count (tests/fuzzing.py); the
extreme values that broke it are pinned as plain tests."""

from __future__ import annotations

import math

import pytest
import torch
from fuzzing import FUZZ, report
from hypothesis import given
from hypothesis import strategies as st

from octlm.errors import UserError
from octlm.generation.sampling import check_sampling, choose_tokens


def pick_token(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float,
    generator: torch.Generator | None,
) -> int:
    """One token id from `logits` `[V]`: `choose_tokens` on one row, read as an int."""
    return int(choose_tokens(logits, temperature, top_k, top_p, generator))


# ---------------------------------------------------------------------------------------------------------------
# Sampling: settings that pass check_sampling always give a token that was allowed


def test_pick_token_on_random_logits_and_settings() -> None:
    count = [0]
    generator = torch.Generator().manual_seed(0)

    @FUZZ
    @given(
        logits=st.lists(
            st.one_of(st.floats(-1e4, 1e4, width=32), st.just(-math.inf)), min_size=1, max_size=40
        ),
        temperature=st.one_of(st.just(0.0), st.floats(1e-3, 1e3), st.floats(-10, 0, exclude_max=True)),
        top_k=st.one_of(st.none(), st.integers(-2, 50)),
        top_p=st.one_of(
            st.just(1.0), st.floats(1e-6, 1.0), st.floats(-1, 2).filter(lambda p: not 0 < p < 1e-6)
        ),
    )
    def prop(logits: list[float], temperature: float, top_k: int | None, top_p: float) -> None:
        count[0] += 1
        if all(x == -math.inf for x in logits):
            logits[0] = 0.0  # at least one token is allowed
        try:
            check_sampling(temperature, top_k, top_p, 1)
        except UserError:
            return
        token = pick_token(torch.tensor(logits), temperature, top_k, top_p, generator)
        assert 0 <= token < len(logits) and logits[token] != -math.inf

    prop()
    report("pick_token", count[0])


@pytest.mark.parametrize(
    ("temperature", "top_p"), [(1e-40, 1.0), (5e-324, 1.0), (1.0, 1e-300), (math.inf, 1.0)]
)
def test_extreme_sampling_settings_do_not_crash(temperature: float, top_p: float) -> None:
    """`--temperature 1e-40` overflows logits / T to inf (softmax NaN); top-p below float32's range drops every
    token; T = inf turns a masked -inf logit into NaN. Each must be refused or sampled, never a RuntimeError."""
    logits = torch.tensor([1.0, 2.0, 3.0, -math.inf])  # generate masks ids the tokenizer lacks with -inf
    try:
        check_sampling(temperature, None, top_p, 1)
    except UserError:
        return
    token = pick_token(logits, temperature, None, top_p, torch.Generator().manual_seed(0))
    assert token in (0, 1, 2)
