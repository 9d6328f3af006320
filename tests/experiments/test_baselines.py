"""Baselines, scores and intervals (octlm/experiments/baselines.py): chance and majority against this test's
own count over the same draws of each generator, the Wilson interval against the score test inverted in 50
digits (mpmath: scipy is not in the environment), and what `clears` decides."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from octlm.experiments.baselines import (
    Z95,
    Score,
    answers,
    baselines,
    chance,
    clears,
    interval,
    majority,
    markdown,
    score,
    token_interval,
)
from octlm.experiments.tasks import DEFAULT_TASKS, TASKS

ALPHABET = {"copy": 16, "reverse": 16, "selective-copy": 16, "passkey": 10, "mqar": 64, "counting": 11}
LENGTH = {
    "copy": lambda n: n,
    "reverse": lambda n: n,
    "selective-copy": lambda n: 4,
    "passkey": lambda n: 5,
    "mqar": lambda n: n,
    "counting": lambda n: 1,
}


def drawn_by_hand(task: str, size: int, n: int) -> np.ndarray:
    """`[n, L]`: the marked tokens before `<eos>` of n examples drawn one after another from default_rng(0)."""
    rng, rows = np.random.default_rng(0), []
    for _ in range(n):
        example = TASKS[task].example(rng, size)
        rows.append([t for t, marked in zip(example.tokens, example.answer, strict=True) if marked][:-1])
    return np.array(rows)


@pytest.mark.parametrize("task", DEFAULT_TASKS)
def test_chance_and_majority_equal_a_count_over_the_generator(task: str) -> None:
    size, n = TASKS[task].test_sizes()[1], 150
    [row] = baselines([task], n=n, factors=(2,))
    rows = drawn_by_hand(task, size, 2 * n)
    picked, scored = rows[:n], rows[n:]
    assert rows.shape[1] == LENGTH[task](size) and row.size == size and row.examples == n
    k = ALPHABET[task]
    assert row.chance.per_token == 1 / k
    assert row.chance.exact == pytest.approx(k ** -LENGTH[task](size), rel=1e-12)
    # exact: the most frequent whole answer among the first n (ties: the smallest), its share of the next n
    whole, counts = np.unique(picked, axis=0, return_counts=True)
    best = whole[np.argmax(counts)]
    assert row.majority.exact == pytest.approx(np.mean((scored == best).all(axis=1)), abs=1e-12)
    # per token: at each position the most frequent token among the first n (ties: the smallest id)
    constant = [np.argmax(np.bincount(picked[:, j])) for j in range(rows.shape[1])]
    assert row.majority.per_token == pytest.approx(np.mean(scored == np.array(constant)), abs=1e-12)


def test_majority_weighs_each_answer_by_its_length_and_scores_on_fresh_draws() -> None:
    # per token, position 0: token 1 weighs 3 x 1 = 3 against token 2's 4 x 1/2 = 2; position 1: token 2
    picked = [(1,)] * 3 + [(2, 2)] * 4
    assert majority(picked, [(1,), (2, 2)]) == Score(0.5, (1 + 0.5) / 2)
    assert majority(picked, [(1, 2), (2,), (3, 3)]) == Score(0.0, (1 + 0 + 0) / 3)


def test_majority_breaks_ties_by_the_smallest_ids_and_guesses_past_every_picked_answer() -> None:
    assert majority([(2,), (1,)], [(1,), (2,)]) == Score(0.5, 0.5)  # a tie: (1,) and token 1
    assert majority([(2,), (2,), (1,)], [(2,), (1,)]) == Score(0.5, 0.5)  # the most common, not the smallest
    assert majority([(1, 5), (2, 3), (2, 3)], [(2, 3)]) == Score(1.0, 1.0)
    # position 1 is past every picked answer: guessed as the first answer's first token (3)
    assert majority([(3,)], [(3, 3), (3, 4)]) == Score(0.0, (1.0 + 0.5) / 2)


def test_baselines_draw_what_the_generator_draws() -> None:
    first = answers(TASKS["counting"], 16, 50)
    assert first == answers(TASKS["counting"], 16, 50) and first[:10] == answers(TASKS["counting"], 16, 10)
    assert chance(TASKS["copy"], [(4,) * 2, (4,) * 3]) == Score((16**-2 + 16**-3) / 2, 1 / 16)
    assert (
        answers(TASKS["copy"], 4, 5)
        == answers(TASKS["copy"], 4, 5, seed=0)
        != answers(TASKS["copy"], 4, 5, 1)
    )
    rows = baselines(["counting"], n=20, seed=3, factors=(1, 2))
    drawn = answers(TASKS["counting"], 16, 40, seed=3)
    assert rows[0].majority == majority(drawn[:20], drawn[20:]) and rows[0].examples == 20
    assert [r.examples for r in baselines(["counting"], factors=(1,))] == [2000]  # the default n
    table = markdown([rows[0]])
    assert table == (
        "| task | size | chance, exact | chance, per token | majority, exact | majority, per token |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        f"| counting | 16 | {100 * rows[0].chance.exact:.3g} % | {100 * rows[0].chance.per_token:.3g} % | "
        f"{100 * rows[0].majority.exact:.3g} % | {100 * rows[0].majority.per_token:.3g} % |\n"
    )
    table = markdown(baselines(["counting"], n=20, factors=(1, 2)))
    assert table.count("\n") == 4 and "| counting | 32 |" in table


def test_score_in_both_metrics() -> None:
    assert score([1, 2, 3], [1, 2, 3]) == Score(1.0, 1.0)
    assert score([1, 0, 3, 0], [1, 2, 3, 4]) == Score(0.0, 0.5)
    with pytest.raises(ValueError, match="a prediction of 2 tokens for an answer of 3"):
        score([1, 2], [1, 2, 3])


def wilson_by_mpmath(hits: float, n: int) -> tuple[float, float]:
    """The proportions p whose score test does not reject at 95 %: the roots of (h/n - p)^2 = z^2 p(1-p)/n,
    with z the normal quantile, all in 50 digits."""
    with mpmath.workdps(50):
        z = mpmath.sqrt(2) * mpmath.erfinv(mpmath.mpf("0.95"))
        p_hat, z2n = mpmath.mpf(hits) / n, z * z / n
        roots = mpmath.polyroots([1 + z2n, -(2 * p_hat + z2n), p_hat * p_hat], maxsteps=200, extraprec=100)
        low, high = sorted(mpmath.re(r) for r in roots)
        return float(low), float(high)


@pytest.mark.parametrize(
    ("hits", "n"),
    [
        (0, 1),
        (1, 1),
        (0, 10),
        (3, 10),
        (10, 10),
        (57, 100),
        (1, 1000),
        (999, 1000),
        (4321, 10000),
        (123456, 1000000),
    ],
)
def test_wilson_interval_inverts_the_score_test(hits: int, n: int) -> None:
    low, high = interval(hits, n)
    want = wilson_by_mpmath(hits, n)
    assert low == pytest.approx(want[0], abs=1e-12) and high == pytest.approx(want[1], abs=1e-12)
    with mpmath.workdps(30):
        z = float(mpmath.sqrt(2) * mpmath.erfinv(mpmath.mpf("0.95")))
    assert abs(Z95 - z) < 1e-15


def test_interval_edges_and_what_clears() -> None:
    assert interval(0, 0) == (0.0, 1.0) and interval(0, 10)[0] == 0.0 and interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError, match="^11 hits in 10 trials$"):
        interval(11, 10)
    assert interval(0, 10)[1] == pytest.approx(0.2775328, abs=1e-7)  # the textbook value
    assert clears(interval(60, 100), 0.45) and not clears(interval(60, 100), 0.55)  # (0.502, 0.691)
    assert not clears(interval(5, 50), 0.1) and not clears(interval(0, 1000), 0.0)
    assert not clears(token_interval(30, 40, 10), 0.45) and clears(interval(30, 40), 0.45)


def test_a_per_token_interval_counts_examples_not_tokens() -> None:
    """Wilson's interval of the per-token proportion with n the examples: 30 of 40 tokens in 10 examples is
    0.75 in 10 trials, (0.4422, 0.9191), wider than the 40 tokens' own (0.5981, 0.8581)."""
    assert token_interval(30, 40, 10) == pytest.approx((0.4421814242785499, 0.9190521757900055), abs=1e-12)
    assert token_interval(30, 40, 10) == pytest.approx(wilson_by_mpmath(7.5, 10), abs=1e-12)
    assert interval(30, 40) == pytest.approx((0.5980603857923197, 0.858128813609037), abs=1e-12)
    assert token_interval(80, 100, 10) == interval(8, 10)  # the same proportion in the same 10 trials
    assert token_interval(0, 40, 10) == (0.0, interval(0, 10)[1]) and token_interval(40, 40, 10)[1] == 1.0
    assert token_interval(0, 0, 0) == (0.0, 1.0) == token_interval(0, 0, 5)
    with pytest.raises(ValueError, match="41 tokens right of 40"):
        token_interval(41, 40, 10)
