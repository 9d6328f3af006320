"""Sampling (octlm/generation/sampling.py): the settings and their checks, and `choose_tokens` (greedy,
temperature, top-k, top-p, the generator), each against a distribution worked out by hand; a batch's rows are
chosen each on its own."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from octlm.errors import UserError
from octlm.generation.sampling import Sampling, check_sampling, choose_tokens


def pick_token(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float,
    generator: torch.Generator | None,
) -> int:
    """One token id from `logits` `[V]`: `choose_tokens` on one row, read as an int."""
    return int(choose_tokens(logits, temperature, top_k, top_p, generator))


INF = float("inf")


def multinomial_input(sample: Callable[[], object]) -> torch.Tensor:
    """The probabilities `sample()` hands to its one `torch.multinomial` call (a spy records them)."""
    seen: list[torch.Tensor] = []
    real = torch.multinomial

    def spy(probs: torch.Tensor, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        seen.append(probs.clone())
        return real(probs, n, generator=generator)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "multinomial", spy)
        sample()
    assert len(seen) == 1
    return seen[0]


def drawn_from(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float) -> torch.Tensor:
    """The distribution `pick_token` hands to `torch.multinomial`."""
    g = torch.Generator().manual_seed(0)
    return multinomial_input(lambda: pick_token(logits, temperature, top_k, top_p, g))


def softmax_by_hand(values: list[float]) -> torch.Tensor:
    weights = [0.0 if v == -INF else math.exp(v) for v in values]
    return torch.tensor([w / sum(weights) for w in weights], dtype=torch.float64)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.5}, r"^temperature = -0.5 must be 0 \(greedy\) or a finite positive number$"),
        ({"temperature": INF}, r"^temperature = inf must be 0 \(greedy\) or a finite positive number$"),
        ({"top_k": 0}, r"^top-k = 0 must be at least 1 \(or left unset for no limit\)$"),
        ({"top_p": 0.0}, r"^top-p = 0.0 must be in \(0, 1\]; 1 keeps every token$"),
        ({"top_p": 1.0000001}, r"^top-p = 1.0000001 must be in \(0, 1\]; 1 keeps every token$"),
    ],
    # ------------------------------------------------------------------------------------------------------------
    # Sampling and the option checks
)
def test_sampling_refuses_out_of_range_settings_by_name(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        Sampling(**kwargs)


def test_sampling_accepts_the_edges_and_has_greedy_defaults() -> None:
    edges = Sampling(temperature=0.0, top_k=1, top_p=1.0, seed=5)
    assert (edges.temperature, edges.top_k, edges.top_p, edges.seed) == (0.0, 1, 1.0, 5)
    default = Sampling()
    assert (default.temperature, default.top_k, default.top_p, default.seed) == (0.0, None, 1.0, 0)
    Sampling(temperature=1e-300, top_p=1e-300)


def test_check_sampling_checks_each_setting() -> None:
    check_sampling(0.0, 1, 1.0, 0)  # every edge in range
    with pytest.raises(UserError, match="^temperature = -1 "):
        check_sampling(-1, None, 1.0, 0)
    with pytest.raises(UserError, match="^top-k = 0 "):
        check_sampling(0.5, 0, 1.0, 0)
    with pytest.raises(UserError, match="^top-p = 2.0 "):
        check_sampling(0.5, None, 2.0, 0)
    with pytest.raises(UserError, match="^max-new-tokens = -1 must not be negative$"):
        check_sampling(0.5, None, 1.0, -1)


# -- pick_token ---------------------------------------------------------------------------------------------


def test_greedy_is_the_argmax() -> None:
    assert pick_token(torch.tensor([1.0, 3.0, -2.0, 2.5]), 0.0, None, 1.0, None) == 1
    assert pick_token(torch.tensor([-5.0, -7.0, -6.0]), 0.0, None, 1.0, None) == 0


def test_temperature_one_is_plain_softmax() -> None:
    logits = [0.5, -1.0, 2.0]
    torch.testing.assert_close(
        drawn_from(torch.tensor(logits), 1.0, None, 1.0), softmax_by_hand(logits), rtol=0, atol=1e-15
    )


def test_the_smallest_normal_temperature_does_not_overflow() -> None:
    """At T = 1e-308 the largest logit must be moved to 0 before dividing: 6 / 1e-308 overflows to inf."""
    logits = torch.tensor([3.0, 2.95, 1.0], dtype=torch.float64)
    assert [pick_token(logits, 1e-308, None, 1.0, torch.Generator().manual_seed(s)) for s in range(5)] == [
        0
    ] * 5


def test_top_k_keeps_exactly_the_k_largest() -> None:
    logits = [0.0, 3.0, 1.0, 2.0, -1.0]
    got = drawn_from(torch.tensor(logits), 1.0, 3, 1.0)
    torch.testing.assert_close(got, softmax_by_hand([-INF, 3.0, 1.0, 2.0, -INF]), rtol=0, atol=1e-15)
    got = drawn_from(torch.tensor(logits), 1.0, 1, 1.0)
    assert got.tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    # top_k past the vocabulary keeps everything
    torch.testing.assert_close(
        drawn_from(torch.tensor(logits), 1.0, 9, 1.0), softmax_by_hand(logits), rtol=0, atol=1e-15
    )


def test_top_p_drops_a_token_once_the_ones_before_reach_p() -> None:
    """Probabilities 1/4, 1/2, 1/8, 1/8 (exact in binary): at p = 1/2 the largest alone reaches p, so only it
    stays; at p = 3/4 the first two reach it exactly, so the last two go."""
    logits = torch.tensor([math.log(2), math.log(4), 0.0, 0.0], dtype=torch.float64)
    assert drawn_from(logits, 1.0, None, 0.5).tolist() == [0.0, 1.0, 0.0, 0.0]
    two = torch.tensor([1 / 3, 2 / 3, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(drawn_from(logits, 1.0, None, 0.5000001), two, rtol=0, atol=1e-15)
    torch.testing.assert_close(drawn_from(logits, 1.0, None, 0.75), two, rtol=0, atol=1e-15)
    three = drawn_from(logits, 1.0, None, 0.7500001)
    assert (three > 0).sum() == 3 and three[:2].sum().item() == pytest.approx(6 / 7, abs=1e-15)
    # p = 1 keeps even a token of probability e^-50 (a cut at p < 1 would round it away)
    tiny = drawn_from(torch.tensor([0.0, -50.0], dtype=torch.float64), 1.0, None, 1.0)
    assert tiny[1].item() == pytest.approx(math.exp(-50) / (1 + math.exp(-50)), rel=1e-12, abs=0)


def test_a_tiny_top_p_on_float32_logits_keeps_the_argmax() -> None:
    """top_p = 1e-50 is 0 in float32: the cut is made in float64, where it is not."""
    logits = torch.tensor([0.1, 0.3, 0.2])  # float32
    assert [pick_token(logits, 1.0, None, 1e-50, torch.Generator().manual_seed(s)) for s in range(5)] == [
        1
    ] * 5


def test_the_draw_uses_the_given_generator() -> None:
    logits = [0.0, 0.1, -0.2, 0.3, 0.05, -0.1, 0.2, 0.0]
    probs = softmax_by_hand(logits)
    want = [int(torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(s))) for s in range(20)]
    torch.manual_seed(123)  # the global generator must play no part
    got = [
        pick_token(torch.tensor(logits), 1.0, None, 1.0, torch.Generator().manual_seed(s)) for s in range(20)
    ]
    assert got == want and len(set(want)) > 3


# ------------------------------------------------------------------------------------------------------------
# A batch's rows, each on its own


def drawn_rows(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The distributions `[B, V]` `choose_tokens` hands to `torch.multinomial` for a batch."""
    g = torch.Generator().manual_seed(0)
    return multinomial_input(lambda: choose_tokens(logits, temperature, None, 1.0, g))


def test_each_rows_largest_logit_is_moved_to_0_on_its_own() -> None:
    """Kills choose_tokens 13/15 (the largest logit of the whole batch, not of each row) and 16/19 (no keepdim:
    `[B, V] - [B]`, which fails for B != V or shifts columns): bugs of dropping an argument that only several
    rows show. At T = 1e-306 row 0 moved by row 1's maximum (1000) would be -inf everywhere (softmax NaN)."""
    logits = torch.tensor([[0.0, 1.0, -1.0], [1000.0, 999.0, 0.0]], dtype=torch.float64)
    got = drawn_rows(logits, 1e-306)
    assert got.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    g = torch.Generator().manual_seed(0)
    assert [choose_tokens(logits, 1e-306, None, 1.0, g).tolist() for _ in range(3)] == [[1, 0]] * 3
    # at T = 1 each row is its own softmax (B = 2 rows, V = 3: no broadcast can stand in for keepdim)
    want = torch.stack([softmax_by_hand([0.0, 1.0, -1.0]), softmax_by_hand([0.0, -1.0, -1000.0])])
    torch.testing.assert_close(drawn_rows(logits, 1.0), want, rtol=0, atol=1e-15)


def test_choose_tokens_takes_each_row_on_its_own() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, -1.0, 4.9], [0.0, 0.0, 7.0]])
    assert choose_tokens(logits, 0.0, None, 1.0, None).tolist() == [1, 0, 2]
    g = torch.Generator().manual_seed(0)
    assert choose_tokens(logits, 1.0, 1, 1.0, g).tolist() == [1, 0, 2]  # top-1 per row is the row's argmax
    # a row's top-p cut depends on its own probabilities: row 0 keeps one token, row 1 two
    cut = torch.tensor([[10.0, 0.0, 0.0], [1.0, 1.0, -30.0]])
    draws = torch.stack([choose_tokens(cut, 1.0, None, 0.9, g) for _ in range(200)])
    assert set(draws[:, 0].tolist()) == {0} and set(draws[:, 1].tolist()) == {0, 1}


# ------------------------------------------------------------------------------------------------------------
# The filters and the temperature against the logits, and the settings frozen


def test_pick_token_filters() -> None:
    logits = torch.tensor([1.0, 3.0, 2.0, float("-inf")])
    gen = torch.Generator().manual_seed(0)
    assert pick_token(logits, 0.0, None, 1.0, gen) == 1
    picks = {pick_token(logits, 1.0, 2, 1.0, gen) for _ in range(200)}
    assert picks == {1, 2}  # top-2
    # p(1) = 0.665, p(2) = 0.245: top_p 0.8 keeps both, 0.5 only the first.
    assert {pick_token(logits, 1.0, None, 0.8, gen) for _ in range(200)} == {1, 2}
    assert {pick_token(logits, 1.0, None, 0.5, gen) for _ in range(50)} == {1}


def test_temperature_divides_the_logits() -> None:
    """At temperature 2 the distribution drawn from is exactly softmax(logits / 2); at 1, softmax(logits)."""
    logits = torch.tensor([1.0, 3.0, 2.0, -0.5, float("-inf")])
    drawn: list[torch.Tensor] = []
    real = torch.multinomial

    def spy(probs: torch.Tensor, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        drawn.append(probs.clone())
        return real(probs, n, generator=generator)

    gen = torch.Generator().manual_seed(0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "multinomial", spy)
        pick_token(logits, 2.0, None, 1.0, gen)
        pick_token(logits, 1.0, None, 1.0, gen)
    # Hand-computed: exp(l / T) / sum, the -inf entry 0. float64 throughout, so 1e-15.
    for probs, temperature in zip(drawn, (2.0, 1.0), strict=True):
        weights = [math.exp(v / temperature) for v in (1.0, 3.0, 2.0, -0.5)]
        expected = torch.tensor([w / sum(weights) for w in weights] + [0.0], dtype=torch.float64)
        torch.testing.assert_close(probs, expected, rtol=0, atol=1e-15)
    assert drawn[0][1] == pytest.approx(0.4655095, abs=1e-7)  # e^1.5 / (e^.5 + e^1.5 + e + e^-.25), by hand


@pytest.mark.parametrize("temperature", [1e-3, 1e-8, 1e-300])
def test_temperature_near_zero_is_the_argmax(temperature: float) -> None:
    """The limit T -> 0 of sampling is greedy: every draw is the largest logit (a gap of 0.05 / T nats)."""
    logits = torch.tensor([1.0, 2.95, 3.0, 2.9, -1.0])
    gen = torch.Generator().manual_seed(0)
    assert [pick_token(logits, temperature, None, 1.0, gen) for _ in range(100)] == [2] * 100


def test_sampling_settings_are_checked_once_and_frozen() -> None:
    assert Sampling() == Sampling(temperature=0.0, top_k=None, top_p=1.0, seed=0)
    with pytest.raises(UserError, match="temperature"):
        Sampling(temperature=float("nan"))
    with pytest.raises(UserError, match="top-k"):
        Sampling(top_k=0)
    with pytest.raises(UserError, match="top-p"):
        Sampling(top_p=0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Sampling().temperature = 1.0  # type: ignore[misc]
