"""What the battery's generators draw (octlm/experiments/tasks.py), beside test_tasks.py's check of every answer
against its prompt: every symbol a draw may take is reached, each range's ends are hit and nothing past them,
and the draws that should be uniform are (counted on a few thousand examples, bounds at about 5 standard
deviations, so a correct generator fails about once in a million runs)."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest

from octlm.experiments import tasks
from octlm.experiments.passkey import FILLER
from octlm.experiments.tasks import (
    SPECIALS,
    TASKS,
    Addition,
    Copy,
    Counting,
    HintedAddition,
    MultiQueryRecall,
    Passkey,
    Reverse,
    SelectiveCopy,
    Task,
    filler_text,
    register,
)


def near(count: int, n: int, p: float) -> bool:
    """`count` of `n` draws is within 5 standard deviations of n p."""
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_letters_are_the_first_sixteen_lowercase() -> None:
    assert (
        Copy.symbols == tuple("abcdefghijklmnop") == tasks.LETTERS
        and SelectiveCopy.symbols[:16] == Copy.symbols
    )
    assert SelectiveCopy.symbols[-1] == "."


@pytest.mark.parametrize("task", [Copy, Reverse])
def test_copy_draws_every_letter_uniformly_and_nothing_else(task: type[Task]) -> None:
    rng, n = np.random.default_rng(0), 2000
    items = Counter(t for _ in range(n) for t in task.example(rng, 8).tokens[1:9])
    assert set(items) == set(range(len(SPECIALS), len(SPECIALS) + 16))
    assert all(near(c, 8 * n, 1 / 16) for c in items.values())


def test_a_number_has_exactly_its_digits_and_a_one_digit_number_may_be_0() -> None:
    rng = np.random.default_rng(0)
    ones = Counter(Addition.number(rng, 1) for _ in range(2000))
    assert set(ones) == set(range(10)) and all(near(c, 2000, 0.1) for c in ones.values())
    threes = [Addition.number(rng, 3) for _ in range(5000)]
    assert min(threes) >= 100 and max(threes) <= 999
    firsts, lasts = Counter(x // 100 for x in threes), Counter(x % 10 for x in threes)
    assert set(firsts) == set(range(1, 10)) and all(near(c, 5000, 1 / 9) for c in firsts.values())
    assert set(lasts) == set(range(10)) and all(near(c, 5000, 0.1) for c in lasts.values())
    assert Counter(len(str(Addition.number(rng, 12))) for _ in range(200)) == {12: 200}


def test_hints_start_anywhere_that_leaves_room_and_run_consecutively() -> None:
    rng, size = np.random.default_rng(0), 3
    starts = Counter()
    for _ in range(20000):
        words = HintedAddition.text(HintedAddition.example(rng, size).tokens[1:-1]).split()
        hints = [int(w[1:]) for w in words if re.fullmatch(r"h\d+", w)]
        first = hints[0]
        assert hints[:size] == list(range(first, first + size))  # the first number's, one per place
        assert hints[-1] < HintedAddition.HINTS  # the sum's extra digit keeps a hint of its own
        starts[first] += 1
    assert min(starts) == 0 and max(starts) == HintedAddition.HINTS - size - 1
    assert len(starts) == HintedAddition.HINTS - size


def test_hinted_answers_draw_from_digits_and_hints() -> None:
    assert HintedAddition.answer_symbols() == (*"0123456789", *(f"h{i}" for i in range(128)))
    assert HintedAddition.max_size == 127 and HintedAddition.max_tokens(5) == 36


def test_mqar_draws_every_key_and_value_and_every_pair_as_a_query() -> None:
    rng, size = np.random.default_rng(0), 8
    keys, values, queried, repeats = Counter(), Counter(), Counter(), 0
    first_value = len(SPECIALS) + 64
    for _ in range(2000):
        tokens = MultiQueryRecall.example(rng, size).tokens
        context, asked = tokens[1 : 1 + 2 * size], tokens[2 + 2 * size : -1]
        keys.update(context[0::2])
        values.update(context[1::2])
        pairs = context[0::2]
        order = [pairs.index(k) for k in asked[0::2]]
        queried.update(order)
        repeats += len(set(order)) < size
    assert set(keys) == set(range(len(SPECIALS), first_value))
    assert set(values) == set(range(first_value, first_value + 64))
    assert set(queried) == set(range(size)) and all(near(c, 2000 * size, 1 / size) for c in queried.values())
    assert repeats > 1900  # 8 queries of 8 pairs repeat one with probability 1 - 8!/8^8


def test_counting_draws_every_value_variable_and_place_the_size_allows() -> None:
    rng, size, n = np.random.default_rng(0), 12, 11000
    values, printed, sets = Counter(), Counter(), Counter()
    for _ in range(n):
        words = Counting.text(Counting.example(rng, size).tokens[1:-1]).split()
        value, var = int(words[-1]), words[-2]
        values[value] += 1
        printed[var] += 1
        statements = [x.strip() for x in " ".join(words[:-3]).split(";")][:-1]
        assert len(statements) == size
        last = max(i for i, s in enumerate(statements) if s == f"{var} = 0")
        sets[(value, last)] += 1
    assert set(values) == set(range(11)) and all(near(c, n, 1 / 11) for c in values.values())
    assert set(printed) == {"a", "b", "c"} and all(near(c, n, 1 / 3) for c in printed.values())
    # the printed variable's last set lies anywhere that leaves room for its increments: 0 .. size - value - 1
    for value in (0, 5, 10):
        places = {last for (v, last) in sets if v == value}
        assert places == set(range(size - value)), value
    small = Counter(int(Counting.text(Counting.example(rng, 3).tokens[1:-1]).split()[-1]) for _ in range(600))
    assert set(small) == {0, 1, 2}  # up to n - 1 increments fit after the set


def test_counting_distractors_follow_the_papers_weights_and_spare_the_fixed() -> None:
    rng, n = np.random.default_rng(0), 20000
    values = {"a": 3, "b": 10}  # b at the cap: never incremented
    drawn = Counter(Counting._distractor(rng, values, ("c",)) for _ in range(n))
    ops = Counter()
    for (op, _), count in drawn.items():
        ops[op] += count
    assert near(ops["set"], n, 1 / 58) and near(ops["increment"], n, 7 / 58) and near(ops["pass"], n, 50 / 58)
    assert {v for (op, v) in drawn if op == "set"} == {"a", "b"}
    assert {v for (op, v) in drawn if op == "increment"} == {"a"}
    assert drawn[("pass", None)] == ops["pass"]
    sets = [c for (op, v), c in drawn.items() if op == "set"]
    assert all(near(c, ops["set"], 1 / 2) for c in sets)
    # nothing to increment: an increment is drawn again, so only sets and passes come out
    only = Counter(Counting._distractor(rng, {}, ("a",))[0] for _ in range(5000))
    assert set(only) == {"set", "pass"} and near(only["set"], 5000, 1 / 51)


def test_counting_answers_are_its_values() -> None:
    assert Counting.answer_symbols() == tuple(str(v) for v in range(11))


def test_selective_copy_draws_every_letter_and_every_place() -> None:
    rng, size, n = np.random.default_rng(0), 16, 3000
    letters, places = Counter(), Counter()
    noise = SelectiveCopy.ids(["."])[0]
    for _ in range(n):
        segment = SelectiveCopy.example(rng, size).tokens[1 : 1 + size]
        marked = [i for i, t in enumerate(segment) if t != noise]
        assert len(marked) == 4
        places.update(marked)
        letters.update(segment[i] for i in marked)
    assert set(letters) == set(range(len(SPECIALS), len(SPECIALS) + 16))
    assert all(near(c, 4 * n, 1 / 16) for c in letters.values())
    assert set(places) == set(range(size)) and all(near(c, 4 * n, 1 / size) for c in places.values())
    assert SelectiveCopy.answer_symbols() == tuple("abcdefghijklmnop")
    four = SelectiveCopy.example(rng, 4).tokens[1:5]
    assert noise not in four  # four letters fill four places


def test_the_filler_is_one_round_longer_than_asked_and_starts_a_round() -> None:
    unit = FILLER + " "
    for size in (0, 1, 8, len(unit) - 1, len(unit), 5 * len(unit) + 3):
        text = filler_text(size)
        assert len(text) == size + len(unit) and text.startswith(unit[: len(text)])
        assert text == (unit * (size // len(unit) + 2))[: len(text)]


def test_the_passkey_is_cut_from_every_phase_and_draws_every_digit_in_every_place() -> None:
    rng, size, n = np.random.default_rng(0), 32, 4000
    unit = FILLER + " "
    phases, digits = Counter(), [Counter() for _ in range(Passkey.KEY_DIGITS)]
    for _ in range(n):
        text = Passkey.text(Passkey.example_at(rng, size, 1.0).tokens[1:-1])
        filler, key = text[:size], text[size:]
        phases[(unit * 3).index(filler)] += 1
        found = re.search(r"pass key is (\d{5})\.", key)
        assert found is not None
        for place, d in enumerate(found.group(1)):
            digits[place][d] += 1
    assert set(phases) == set(range(len(unit)))  # every start in the round
    assert all(near(c, n, 1 / len(unit)) for c in phases.values())
    for place in digits:
        assert set(place) == set("0123456789") and all(near(c, n, 0.1) for c in place.values())


@pytest.mark.parametrize(
    ("depth", "cut"), [(0.0, 0), (0.25, 8), (0.5, 16), (0.49, 16), (0.47, 15), (1.0, 32)]
)
def test_the_needle_sits_after_the_rounded_share_of_the_filler(depth: float, cut: int) -> None:
    text = "x" * 200
    example = Passkey.example_at(np.random.default_rng(0), 32, depth, text)
    spelled = Passkey.text(example.tokens[1:-1])
    assert spelled.index(" The pass key is") == cut and spelled.startswith("x" * cut)
    assert spelled.count("x") == 32


def test_a_task_spells_its_tokens_joined_by_nothing_or_by_spaces() -> None:
    assert Copy.text(Copy.ids("abc")) == "abc"
    assert Counting.text(Counting.ids(["a", "++", ";"])) == "a ++ ;"
    assert MultiQueryRecall.text([1, 4, 68, 2]) == "<bos> k0 v0 <sep>"


def test_register_files_a_task_and_refuses_anything_else() -> None:
    with pytest.raises(TypeError, match=r"register\(\) takes a Task subclass, got 3"):
        register(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got <class 'int'>"):
        register(int)  # type: ignore[arg-type]

    class Echo(Copy):
        name = "echo-draws"

    try:
        assert register(Echo) is Echo and TASKS["echo-draws"] is Echo
    finally:
        TASKS._classes.pop("echo-draws")
    assert "echo-draws" not in tasks.TASKS


def test_addition_answers_in_digits_and_two_digit_numbers_start_at_10() -> None:
    assert Addition.answer_symbols() == tuple("0123456789")
    rng = np.random.default_rng(0)
    twos = [Addition.number(rng, 2) for _ in range(3000)]
    assert min(twos) >= 10 and max(twos) <= 99 and {x // 10 for x in twos} == set(range(1, 10))


def replay(words: list[str]) -> tuple[str, list[str], dict[str, int]]:
    """A counting prompt read back: the printed variable, the statements, and the largest value each variable
    held, by the task's own rules (`a = 0` sets, `a ++` adds one)."""
    statements = [x.strip() for x in " ".join(words[:-3]).split(";")][:-1]
    values: dict[str, int] = {}
    highest: dict[str, int] = {}
    for s in statements:
        var, op = s.split()[0], s.split()[-1]
        if op == "0":
            values[var] = 0
        elif op == "++":
            values[var] += 1
        if var in values:
            highest[var] = max(highest.get(var, 0), values[var])
    return words[-2], statements, highest


def test_counting_distractors_count_up_to_the_cap_and_may_touch_the_printed_variable_before_its_last_set() -> (
    None
):
    """Every variable's value stays within MAX_VALUE (an increment at the cap is drawn again), the cap is
    reached, and before the printed variable's last set the distractors may set or increment it too."""
    rng, peak, touched = np.random.default_rng(0), 0, 0
    for _ in range(3000):
        printed, statements, highest = replay(Counting.text(Counting.example(rng, 64).tokens[1:-1]).split())
        peak = max([peak, *(v for var, v in highest.items() if var != printed)])  # the distractors' own
        last = max(i for i, s in enumerate(statements) if s == f"{printed} = 0")
        touched += any(s.split()[0] == printed for s in statements[:last])
    assert peak == Counting.MAX_VALUE
    assert touched > 300  # 488 of 3,000 here: about one example in six (none if they spared it)


def test_selective_copy_refuses_a_size_with_no_room_for_its_letters() -> None:
    from octlm.errors import UserError

    with pytest.raises(UserError, match="selective-copy scatters 4 letters, so a size below 4 holds none"):
        SelectiveCopy.example(np.random.default_rng(0), 3)
