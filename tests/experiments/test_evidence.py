"""Estimates and comparisons (octlm/experiments/evidence.py): the t quantiles against Student's t CDF in 30
digits (mpmath: scipy is not in the environment), each comparison on exact interval values, and the adapters
on small hand-built records of each experiment."""

from __future__ import annotations

import math
import operator
from types import SimpleNamespace

import mpmath
import pytest

from octlm.experiments.baselines import interval
from octlm.experiments.evidence import (
    EXACT,
    NEAR_BPB,
    PER_TOKEN,
    T975,
    Battery,
    Check,
    Estimate,
    Extend,
    Inconclusive,
    Length,
    Verdict,
    across_seeds,
    all_of,
    curve_records,
    exceeds,
    higher,
    learned_models,
    lower,
    mean_of,
    negated,
    over_seeds,
    proportion,
    steps_to,
    t_interval,
    t_quantile,
)


def est(lo: float, hi: float, label: str = "x") -> Estimate:
    return Estimate(label, (lo + hi) / 2, lo, hi, 10, (0,))


@pytest.mark.parametrize("df", range(1, 31))
def test_t_quantiles_are_the_975th_percentile_of_students_t(df: int) -> None:
    mpmath.mp.dps = 30
    t = mpmath.mpf(T975[df - 1])
    # P(T <= t) = 1 - I_{df / (df + t^2)}(df / 2, 1 / 2) / 2, the regularized incomplete beta function
    cdf = 1 - mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True) / 2
    assert abs(cdf - mpmath.mpf("0.975")) < 1e-8


def test_t_quantile_known_values_and_past_the_table() -> None:
    assert t_quantile(1) == 12.7062047 and t_quantile(2) == 4.3026527 and t_quantile(30) == 2.0422725
    assert (
        t_quantile(100) == t_quantile(30) > 1.959963984540054
    )  # wider than the true quantile, never narrower
    with pytest.raises(ValueError, match="^0 degrees of freedom$"):
        t_quantile(0)


def test_t_interval_on_exact_values() -> None:
    lo, hi = t_interval([1.0, 2.0, 3.0])  # mean 2, s 1, n 3
    half = 4.3026527 / math.sqrt(3)
    assert (lo, hi) == pytest.approx((2 - half, 2 + half), abs=1e-12)
    assert t_interval([5.0]) == (-math.inf, math.inf)
    e = over_seeds("r", {3: 2.0, 1: 2.0})
    assert (e.value, e.lo, e.hi, e.n, e.seeds) == (2.0, 2.0, 2.0, 2, (1, 3))


def test_higher_lower_and_exceeds_on_exact_values() -> None:
    a, b = est(0.5, 0.6, "a"), est(0.3, 0.4999, "b")
    assert higher(a, b).verdict is Verdict.AGREE and "a above b: 0.500 > 0.500" in higher(a, b).reason
    assert higher(b, a).verdict is Verdict.DISAGREE
    assert higher(a, est(0.3, 0.5)).verdict is Verdict.INCONCLUSIVE  # touching bounds overlap
    assert "overlap" in higher(a, est(0.3, 0.5)).reason and higher(a, b).used == (a, b)
    assert higher(est(0.3, 0.5), a).verdict is Verdict.INCONCLUSIVE  # touching from below too
    assert higher(a, est(0.3, 0.5)).used == (a, est(0.3, 0.5))  # an overlap names what it compared
    assert lower(b, a).verdict is Verdict.AGREE and lower(a, b).verdict is Verdict.DISAGREE
    assert lower(a, est(0.6, 0.7)).verdict is Verdict.INCONCLUSIVE
    assert exceeds(a, 0.4999, "t").verdict is Verdict.AGREE
    assert exceeds(a, 0.6001, "t").verdict is Verdict.DISAGREE
    assert exceeds(a, 0.5, "t").verdict is Verdict.INCONCLUSIVE and "holds t" in exceeds(a, 0.5, "t").reason
    assert negated(exceeds(a, 0.4, "t")).verdict is Verdict.DISAGREE
    assert negated(exceeds(a, 0.7, "t")).verdict is Verdict.AGREE
    assert negated(exceeds(a, 0.5, "t")).verdict is Verdict.INCONCLUSIVE
    # touching bounds overlap from either side, and every verdict names the estimates it read
    assert lower(a, est(0.3, 0.5)).verdict is Verdict.INCONCLUSIVE
    assert exceeds(a, 0.6, "t").verdict is Verdict.INCONCLUSIVE
    assert lower(a, est(0.3, 0.5)).used == (a, est(0.3, 0.5))
    for threshold in (0.4, 0.55, 0.7):
        assert exceeds(a, threshold, "t").used == (a,)
        assert negated(exceeds(a, threshold, "t")).used == (a,)


def test_all_of_any_disagreement_disagrees_and_only_agreement_agrees() -> None:
    yes, no, maybe = higher(est(2, 3), est(0, 1)), higher(est(0, 1), est(2, 3)), higher(est(0, 2), est(1, 3))
    assert all_of([yes, yes]).verdict is Verdict.AGREE
    assert all_of([yes, maybe, no]).verdict is Verdict.DISAGREE
    assert all_of([yes, maybe]).verdict is Verdict.INCONCLUSIVE
    assert all_of([maybe, maybe]).reason == maybe.reason  # the same reason once
    assert len(all_of([yes, no]).used) == 4


def test_mean_of_and_proportion() -> None:
    m = mean_of("m", [Estimate("a", 0.2, 0.1, 0.3, 5, (0,)), Estimate("b", 0.4, 0.2, 0.8, 7, (1,))])
    assert (m.label, m.n, m.seeds) == ("m", 12, (0, 1))
    assert (m.value, m.lo, m.hi) == pytest.approx((0.3, 0.15, 0.55))
    one = Estimate("a", 0.2, 0.1, 0.3, 5, (0,))
    assert mean_of("m", [one]) is one
    p = proportion("p", 30, 40, [2, 1, 2])
    assert (p.value, (p.lo, p.hi), p.seeds) == (0.75, interval(30, 40), (1, 2))
    assert proportion("p", 0, 0, []).value == 0.0  # no trials: nothing right


def test_steps_to_counts_a_curve_that_never_reaches_one_interval_past_its_end() -> None:
    """Seed 1 (one point) never reaches: its step + 1; seed 2, every 10 steps: 10 past its end; seed 3, whose
    last interval is 20: 20 past; seed 5 reaches at 10; seed 4 has no target and is left out."""
    curves = {
        1: [(5, 2.0)],
        2: [(0, 2.0), (10, 2.0)],
        3: [(0, 2.0), (10, 2.0), (30, 2.0)],
        4: [(0, 1.0)],
        5: [(0, 2.0), (10, 1.0), (20, 0.5)],
    }
    steps, short = steps_to(curves, {1: 1.5, 2: 1.5, 3: 1.5, 5: 1.5, 9: 1.5}, operator.le)
    assert steps == {1: 6, 2: 20, 3: 50, 5: 10} and short == ["1", "2", "3"]


def battery_record(task: str, row: str, seed: int, size: int, hits: int | None, **more: int) -> dict:
    base = {"task": task, "scheme": row, "seed": seed, "size": size, "depth": None, "examples": 10}
    return base | {"hits": hits} | more


def test_battery_pools_seeds_counts_no_rows_wrong_and_averages_past_sizes() -> None:
    records = [
        battery_record("copy", "rope", 0, 8, 10),
        battery_record("copy", "rope", 1, 8, 9),
        {**battery_record("copy", "rope", 1, 8, 0), "depth": 0.5},  # a depth record: left out
        battery_record("copy", "rope", 0, 16, 4),
        battery_record("copy", "rope", 1, 16, 2),
        battery_record("copy", "rope", 0, 32, 0),
        battery_record("copy", "rope", 1, 32, 2),
        battery_record("copy", "learned", 0, 16, None),
    ]
    b = Battery(records)
    at8 = b.at("copy", "rope", 8, EXACT)
    # seeds 1.0 and 0.9: the t-interval, 0.95 -+ t(1) s / sqrt(2) with s = 0.1 / sqrt(2), is wider than
    # Wilson's on the 20 pooled examples, and is cut at 1
    assert (at8.value, at8.n, at8.seeds) == (0.95, 20, (0, 1))
    assert (at8.lo, at8.hi) == pytest.approx((0.95 - 12.7062047 * 0.05, 1.0), abs=1e-12)
    assert at8.lo < interval(19, 20)[0]
    # 16: seeds 0.4, 0.2; 32: 0.0, 0.2 -> t half-widths of 1.27, each size's interval [0, 1]
    past = b.past("copy", "rope", EXACT)
    assert (past.value, past.lo, past.hi) == pytest.approx((0.2, 0.0, 1.0), abs=1e-12)
    # seed 0 learned (100 % at 8), seed 1 did not (90 %): the row is learned, on seed 0 alone
    assert b.seeds_learned("copy", "rope") == (0,)
    assert b.learned("copy", "rope") == b.at("copy", "rope", 8, EXACT, (0,))
    assert (b.learned("copy", "rope").value, b.learned("copy", "rope").seeds) == (1.0, (0,))
    only = b.past("copy", "rope", EXACT, (0,))  # seed 0 past 8: 4 of 10 at 16, 0 of 10 at 32
    assert (only.value, only.seeds) == (pytest.approx(0.2), (0,))
    assert only.lo == pytest.approx((interval(4, 10)[0] + interval(0, 10)[0]) / 2)
    none = b.at("copy", "learned", 16, EXACT)
    assert none.value == 0 and none.n == 10 and none.label == "learned copy exact match at 16 (no rows)"
    assert b.at("copy", "rope", 16, EXACT).label == "rope copy exact match at 16"
    with pytest.raises(Inconclusive, match="^missing rows: copy past 8$"):
        Battery(records[:2]).past("copy", "rope", EXACT)
    with pytest.raises(Inconclusive, match="not recorded: per token accuracy of rope copy"):
        b.at("copy", "rope", 8, PER_TOKEN)
    with pytest.raises(Inconclusive, match="missing rows: nope copy at 8"):
        b.at("copy", "nope", 8, EXACT)


def test_across_seeds_widens_the_pooled_interval_to_the_seeds_spread() -> None:
    pooled = interval(150, 200)
    assert across_seeds(pooled, [0.75]) == pooled  # one seed: no spread to read
    assert across_seeds(pooled, [0.75, 0.75]) == pooled  # seeds that agree: the examples' noise is wider
    lo, hi = across_seeds(pooled, [0.5, 1.0])  # 0.75 -+ 12.7062047 * 0.25
    assert (lo, hi) == (0.0, 1.0)
    lo, hi = across_seeds(pooled, [0.7, 0.8, 0.75])  # 0.75 -+ 4.3026527 * 0.05 / sqrt(3)
    half = 4.3026527 * 0.05 / math.sqrt(3)
    assert (lo, hi) == pytest.approx((min(pooled[0], 0.75 - half), max(pooled[1], 0.75 + half)), abs=1e-12)
    assert lo == pytest.approx(0.75 - half) and hi == pytest.approx(0.75 + half)


def test_battery_per_token_and_not_learned() -> None:
    records = [
        battery_record("mqar", "rope", 0, 8, 0, tokens=80, token_hits=78),
        battery_record("copy", "path", 0, 8, 6, tokens=80, token_hits=40),
    ]
    b = Battery(records, target=0.95)
    assert b.at("mqar", "rope", 8, PER_TOKEN).value == 78 / 80
    # per token, the interval counts the 10 examples, not the 80 tokens (which are not independent)
    per_query = b.at("mqar", "rope", 8, PER_TOKEN)
    assert (per_query.lo, per_query.hi) == pytest.approx((0.6877901172181629, 0.9985537229120924), abs=1e-12)
    assert per_query.n == 10 and per_query.lo < interval(78, 80)[0] - 0.2
    assert b.learned("mqar", "rope").value == 78 / 80  # MQAR learned per query, where recorded
    with pytest.raises(
        Inconclusive, match=r"not learned: path copy, no seed at 95 % exact match at 8 \(seeds: 60 %\)"
    ):
        b.learned("copy", "path")
    assert Battery(records, target=0.5).learned("copy", "path").value == 0.6
    learned = b.learned("mqar", "rope")
    assert learned.label == "rope mqar per token at 8"
    # per query only where every MQAR record has its tokens; another task's records do not decide it
    no_tokens = battery_record("copy", "rope", 0, 8, 10)
    assert Battery([*records, no_tokens]).learned("mqar", "rope").label == "rope mqar per token at 8"
    assert Battery([*records, no_tokens]).learned("copy", "rope").label == "rope copy exact match at 8"
    with pytest.raises(Inconclusive, match="^missing rows: no task sorting$"):
        b.trained("sorting")
    # MQAR's reason quotes each seed per query (no tokens: 0 %)
    per_query = [
        battery_record("mqar", "rope", 0, 8, 0, tokens=80, token_hits=40),
        battery_record("mqar", "rope", 1, 8, 0, tokens=0, token_hits=0),
    ]
    with pytest.raises(Inconclusive, match=r"no seed at 95 % per token at 8 \(seeds: 50 %, 0 %\)$"):
        Battery(per_query).learned("mqar", "rope")
    # a record without rows counts its tokens wrong, and no tokens at all score 0
    empty = battery_record("copy", "nope", 0, 16, None, tokens=40) | {"token_hits": None}
    half = battery_record("copy", "nope", 1, 16, 5, tokens=40, token_hits=20)
    assert Battery([empty, half]).at("copy", "nope", 16, PER_TOKEN).value == 20 / 80
    nothing = empty | {"examples": 0, "tokens": 0}
    assert Battery([nothing]).at("copy", "nope", 16, PER_TOKEN).value == 0.0
    assert Battery([nothing]).at("copy", "nope", 16, EXACT).value == 0.0


def test_learned_models_read_the_training_size_and_not_the_depth_records() -> None:
    """A seed learned a task from its record at the largest training size; the passkey's per-depth records
    (which split that record) do not count, nor do other sizes or a size without rows."""
    records = [
        battery_record("copy", "rope", 0, 8, 10),
        battery_record("copy", "rope", 1, 8, 5),
        battery_record("copy", "rope", 1, 8, 10) | {"depth": 0.5},
        battery_record("copy", "rope", 2, 16, 10),
        battery_record("copy", "learned", 0, 8, None),
    ]
    assert learned_models(records) == {("copy", "rope", 0)}
    assert learned_models(records, target=0.5) == {("copy", "rope", 0), ("copy", "rope", 1)}


def test_not_learned_names_the_steps_the_seeds_trained() -> None:
    """The reason a row is "not learned" carries its budget: the steps its seeds trained, a range where they
    stopped apart, nothing where the records do not say."""

    def reason(*steps: int | None) -> str:
        records = [{**battery_record("copy", "nope", seed, 8, 9), "steps": n} for seed, n in enumerate(steps)]
        with pytest.raises(Inconclusive) as caught:
            Battery(records, target=0.95).learned("copy", "nope")
        return str(caught.value)

    assert reason(2000, 2000) == (
        "not learned: nope copy, no seed at 95 % exact match at 8 in 2,000 steps (seeds: 90 %, 90 %)"
    )
    assert reason(1800, 2000).endswith("at 8 in 1,800-2,000 steps (seeds: 90 %, 90 %)")
    assert reason(2000, None).endswith("exact match at 8 (seeds: 90 %, 90 %)")


def length_record(row: str, seed: int, length: int, bpb: float | None, **more: object) -> dict:
    status = "ok" if bpb is not None else "no rows"
    base = {"scheme": row, "variant": "", "seed": seed, "length": length, "mode": "windows", "status": status}
    return base | {"bpb": bpb, "train_length": 64} | more


def test_length_rise_is_paired_by_seed_and_only_windows_of_plain_rows_count() -> None:
    records = [
        length_record("alibi", 1, 64, 1.80),
        length_record("alibi", 2, 64, 1.90),
        length_record("alibi", 1, 1024, 1.79),
        length_record("alibi", 2, 1024, 1.88),
        length_record("alibi", 1, 1024, 9.0, mode="sliding"),
        length_record("rope", 1, 1024, 9.0, variant="pi"),
        length_record("rope", 1, 1024, 2.0, variant="plain"),
        length_record("learned", 1, 1024, None),
    ]
    n = Length(records)
    assert (n.train_length, n.longest) == (64, 1024)
    rise = n.rise("alibi")  # -0.01 and -0.02 per seed, while the levels differ by 0.1
    assert rise.value == pytest.approx(-0.015) and rise.seeds == (1, 2)
    assert (rise.lo, rise.hi) == pytest.approx(t_interval([-0.01, -0.02]))
    assert n.holds("alibi").verdict is Verdict.INCONCLUSIVE  # two seeds: t(1) = 12.7 makes it wide
    assert n.bpb("rope", 1024).value == 2.0
    assert n.lower_than("alibi", "rope").verdict is Verdict.INCONCLUSIVE  # rope has one seed: no interval
    check = n.rises("learned")
    assert check.verdict is Verdict.INCONCLUSIVE and check.reason == "missing rows: learned at 64 tokens"


def test_length_reads_its_rows_training_length_and_mode() -> None:
    """A record without `variant` (cells from before RoPE's variants) is a plain row; a variant other than
    plain is not; the training length is the records' own, not the shortest scored; no records, no lengths."""
    old = {k: v for k, v in length_record("rope", 1, 128, 2.0).items() if k != "variant"}
    records = [old, length_record("rope", 1, 256, 2.1), length_record("rope", 1, 256, 9.0, variant="yarn")]
    n = Length(records)
    assert (n.train_length, n.longest) == (64, 256)
    assert n.bpb("rope", 128).value == 2.0 and n.bpb("rope", 256).value == 2.1
    assert n.bpb("rope", 256).label == "rope bpb at 256"
    assert Length([{k: v for k, v in r.items() if k != "train_length"} for r in records]).train_length == 128
    empty = Length([], mode="sliding")
    assert (empty.mode, empty.train_length, empty.longest) == ("sliding", 0, 0)
    with pytest.raises(Inconclusive, match="^missing rows: no sliding records$"):
        empty.by_seed("rope", 64)


def test_length_rise_pairs_only_the_seeds_scored_at_both_lengths() -> None:
    records = [length_record("rope", s, 64, 1.8) for s in (1, 2)]
    records += [length_record("rope", s, 1024, 2.0 + s / 10) for s in (2, 3)]
    rise = Length(records).rise("rope")
    assert (rise.value, rise.seeds) == (pytest.approx(0.4), (2,))
    assert rise.label == "rope rise in bpb 64 -> 1024"
    apart = [r for r in records if r["seed"] != 2]
    with pytest.raises(Inconclusive, match="^missing rows: rope has no seed at both 64 and 1024$"):
        Length(apart).rise("rope")


def test_length_holds_and_rises_against_near() -> None:
    flat = [length_record("alibi", s, 64, 1.8 + s / 100) for s in range(3)]
    flat += [length_record("alibi", s, 1024, 1.8 + s / 100 + 0.001 * s) for s in range(3)]
    n = Length(flat)
    assert n.holds("alibi").verdict is Verdict.AGREE and n.rises("alibi").verdict is Verdict.DISAGREE
    assert "below near: " in n.holds("alibi").reason and NEAR_BPB == 0.02


def extend_record(row: str, seed: int, phase: str, length: int, passkey: float | None) -> dict:
    base = {"row": row, "seed": seed, "phase": phase, "length": length, "bpb": 2.0, "passkey": passkey}
    return base | ({"passkey_windows": 40} if passkey is not None else {})


def test_extend_passkey_pools_windows_and_needs_a_base_that_retrieves() -> None:
    records = [extend_record("plain", s, "before", 64, 1.0) for s in (1, 2)]
    records += [extend_record("pi", s, "after", 256, a) for s, a in ((1, 0.9), (2, 0.95))]
    e = Extend(records, 64)
    pi = e.passkey("pi", "after", 256)
    assert (pi.value, pi.n, pi.seeds, (pi.lo, pi.hi)) == (74 / 80, 80, (1, 2), interval(74, 80))
    assert pi.label == "pi passkey after at 256"
    e.base_retrieves()  # 80 of 80 keys at 64: no exception
    with pytest.raises(Inconclusive, match="^missing rows: pi passkey before fine-tuning at 256$"):
        e.passkey("pi", "before", 256)
    half = Extend([{**r, "passkey": 0.95} if r["phase"] == "before" else r for r in records], 64)
    half.base_retrieves()  # exactly at the 95 % target: learned
    blind = Extend([{**r, "passkey": 0.9} if r["phase"] == "before" else r for r in records], 64)
    with pytest.raises(
        Inconclusive, match=r"^not learned: the base model finds 90 % of keys at 64 \(target 95 %\)$"
    ):
        blind.base_retrieves()
    Extend(blind.scores, 64, target=0.9).base_retrieves()  # the target is the caller's
    old = Extend([{k: v for k, v in r.items() if k != "passkey_windows"} for r in records], 64)
    with pytest.raises(Inconclusive, match="^not recorded: passkey windows of plain$"):
        old.base_retrieves()


def test_extend_effective_windows_are_per_seed_and_need_a_base_that_retrieves() -> None:
    records = [extend_record("plain", s, "before", 64, 1.0) for s in (1, 2, 3)]
    for row, windows in (("pi", (256, 256, 256)), ("plain", (64, 128, 64))):
        for seed, window in zip((1, 2, 3), windows, strict=True):
            at = [extend_record(row, seed, "after", n, 0.5) | {"effective_window": window} for n in (64, 256)]
            records += at  # the same window in every record of a seed and phase: counted once
    e = Extend(records, 64)
    plain = e.window("plain", "after")
    assert (plain.value, plain.seeds, (plain.lo, plain.hi)) == (256 / 3, (1, 2, 3), t_interval([64, 128, 64]))
    check = e.window_above("pi", "plain")
    assert check.verdict is Verdict.AGREE and check.reason.startswith("pi effective window after above plain")
    assert e.window_above("ntk", "plain").reason == "missing rows: ntk after fine-tuning"
    assert e.window_above("plain", "pi").verdict is Verdict.DISAGREE
    old = Extend([{k: v for k, v in r.items() if k != "effective_window"} for r in records], 64)
    assert old.window_above("pi", "plain").reason == "not recorded: effective window of pi"
    blind = Extend([{**r, "passkey": 0.0} if r["phase"] == "before" else r for r in records], 64)
    assert blind.window_above("pi", "plain").reason.startswith("not learned: the base model finds 0 %")


def test_extend_steps_count_from_each_rows_own_start_and_past_the_end_when_never_reached() -> None:
    def curve(row: str, seed: int, values: list[float]) -> list[dict]:
        return [{"row": row, "seed": seed, "step": 10 * i, "val_bpb": v} for i, v in enumerate(values)]

    records = curve("pi", 1, [2.0, 1.9, 1.8]) + curve("pi", 2, [2.0, 1.85, 1.7])
    records += curve("yarn", 1, [1.8, 1.7, 1.6]) + curve("yarn", 2, [1.9, 1.69, 1.6])
    records += curve("plain", 1, [2.0, 1.95, 1.9]) + curve("plain", 2, [2.0, 1.8, 1.7])
    e = Extend(records, 64)
    targets = {1: 1.8, 2: 1.7}
    assert e.steps("yarn", targets, "pi").value == 5.0  # seed 1 at step 0, seed 2 at step 10
    plain = e.steps("plain", targets, "pi")  # seed 1 never reaches 1.8: counted at 30
    assert (plain.value, plain.seeds) == (25.0, (1, 2)) and "not reached in seeds 1" in plain.label
    assert e.steps("plain", {1: 0.0, 2: 0.0}, "pi").label == (
        "plain steps to pi's end (not reached in seeds 1, 2: counted past the end)"
    )
    with pytest.raises(Inconclusive, match="^missing rows: no seed of yarn shared with pi's curve$"):
        e.steps("yarn", {7: 1.0}, "pi")
    assert e.fewer_steps("yarn", "pi").verdict is Verdict.INCONCLUSIVE  # two seeds: t(1) = 12.7
    quick = records[:6] + curve("yarn", 1, [1.8, 1.7, 1.6]) + curve("yarn", 2, [1.7, 1.69, 1.6])
    check = Extend(quick, 64).fewer_steps("yarn", "pi")  # 0, 0 against 20, 20: no spread
    assert (
        check.verdict is Verdict.AGREE
        and check.reason == "yarn steps to pi's end below pi steps to pi's end: 0.000 < 20.000"
    )
    assert "missing rows: no fine-tuning curve of ntk" in e.fewer_steps("ntk", "pi").reason


def test_curve_records_from_cells() -> None:
    cell = SimpleNamespace(key=("yarn", 1337), facts={"info": {"curve": [{"step": 0, "val_bpb": 1.9}]}})
    assert curve_records([cell]) == [{"row": "yarn", "seed": 1337, "step": 0, "val_bpb": 1.9}]


def test_all_of_says_each_reason_once_across_joined_parts() -> None:
    parts = [
        Check(Verdict.INCONCLUSIVE, "missing rows: a; not learned: b"),
        Check(Verdict.AGREE, "not learned: b"),
    ]
    assert all_of(parts).reason == "missing rows: a; not learned: b"
