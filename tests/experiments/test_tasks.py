"""The task battery's generators (octlm/experiments/tasks.py): every example's answer recomputed here from its
prompt, independently of the generator; the answer mask covers exactly the answer and its <eos>; examples are
deterministic by seed; sizes mean what each task says."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest

from octlm.experiments import passkey, tasks
from octlm.experiments.tasks import (
    BOS,
    DEFAULT_TASKS,
    EOS,
    PAD,
    SEP,
    SPECIALS,
    TASKS,
    Example,
    Passkey,
    filler_text,
)

SIZES = {
    "copy": [1, 5, 16, 40],
    "reverse": [1, 7, 16],
    "addition": [1, 3, 8, 20],
    "addition-reversed": [1, 4, 8],
    "addition-hints": [1, 2, 8, 40],
    "mqar": [1, 5, 8, 30],
    "counting": [4, 20, 32, 90],
    "selective-copy": [4, 9, 32, 70],
    "passkey": [16, 50, 300],
}


def words(task: str, tokens: tuple[int, ...]) -> list[str]:
    return [TASKS[task].vocabulary()[t] for t in tokens]


def split(task: str, example: Example) -> tuple[list[str], list[str]]:
    """(prompt symbols after <bos>, answer symbols before <eos>), by the mask; the mask is checked on the way:
    one unbroken run of marked tokens that ends with the final <eos> (MQAR's answers alternate with queries)."""
    marked = [i for i, m in enumerate(example.answer) if m]
    assert example.tokens[0] == BOS and example.tokens[-1] == EOS and marked[-1] == len(example.tokens) - 1
    assert EOS not in example.tokens[:-1] and example.answer[0] is False
    all_words = words(task, example.tokens)
    first = marked[0]
    return all_words[1:first], [all_words[i] for i in marked[:-1]]


def recompute(task: str, prompt: list[str]) -> list[str]:
    """The answer, from the prompt alone, by this test's own reading of each task."""
    if task in ("copy", "reverse"):
        assert prompt[-1] == "<sep>"
        items = prompt[:-1]
        return items if task == "copy" else items[::-1]
    if task == "addition-hints":
        return hinted_sum(prompt)
    if task.startswith("addition"):
        text = "".join(prompt)
        a, b = text.rstrip("=").split("+")
        if task == "addition-reversed":
            return list(str(int(a[::-1]) + int(b[::-1]))[::-1])
        return list(str(int(a) + int(b)))
    if task == "counting":
        values: dict[str, int] = {}
        statements = " ".join(prompt[:-2]).split(" ; ")
        for statement in (s.strip(" ;") for s in statements if s.strip(" ;")):
            var, *rest = statement.split()
            if rest == ["=", "0"]:
                values[var] = 0
            elif rest == ["++"]:
                values[var] += 1
            else:
                assert statement == "pass", statement
        assert prompt[-2] == "print"
        return [str(values[prompt[-1]])]
    if task == "selective-copy":
        return [w for w in prompt[:-1] if w != "."]
    if task == "passkey":
        text = "".join(prompt[:-1])
        found = re.findall(r"The pass key is (\d{5})\. Remember it\. (\d{5}) is the pass key\.", text)
        assert len(found) == 1 and found[0][0] == found[0][1] and len(re.findall(r"\d", text)) == 10, text
        return list(found[0][0])
    raise AssertionError(task)


def hinted_sum(prompt: list[str]) -> list[str]:
    """Zhou et al.'s format read back: every digit after its hint, hints consecutive from the same start in both
    numbers; the answer is the reversed sum hinted from that start."""
    a, b = " ".join(prompt).rstrip(" =").split(" + ")
    numbers, starts = [], set()
    for number in (a.split(), b.split()):
        hints, digits = number[::2], number[1::2]
        start = int(hints[0][1:])
        assert hints == [f"h{start + i}" for i in range(len(hints))] and all(d.isdigit() for d in digits)
        numbers.append(int("".join(digits)[::-1]))
        starts.add(start)
    assert starts == {start}
    return [s for i, d in enumerate(str(sum(numbers))[::-1]) for s in (f"h{start + i}", d)]


@pytest.mark.parametrize("task", list(SIZES))
def test_every_answer_is_the_right_one(task: str) -> None:
    cls, checked = TASKS[task], 0
    for seed in range(5):
        rng = np.random.default_rng(seed)
        for size in SIZES[task]:
            example = cls.example(rng, size)
            if task == "mqar":
                continue  # its answers interleave with the queries: see the test of its own below
            prompt, answer = split(task, example)
            assert answer == recompute(task, prompt), (task, size, cls.text(example.tokens))
            checked += 1
    assert checked >= 10 or task == "mqar"


def mqar_parts(example: Example) -> tuple[dict[str, str], list[str], list[str]]:
    """MQAR read back: the pairs before `<sep>`, the queries after it (every other token) and the marked
    answers (their <eos> left off); the layout is checked on the way."""
    all_words = words("mqar", example.tokens)
    sep = all_words.index("<sep>")
    pairs = dict(zip(all_words[1:sep:2], all_words[2:sep:2], strict=True))
    assert all(k.startswith("k") for k in pairs) and all(v.startswith("v") for v in pairs.values())
    marked = [w for w, m in zip(all_words, example.answer, strict=True) if m]
    assert marked[-1] == "<eos>"
    return pairs, all_words[sep + 1 : -1 : 2], marked[:-1]


def test_mqar_answers_each_query_with_its_value_and_never_reads_an_answer_back() -> None:
    repeats = 0
    for seed in range(5):
        for size in SIZES["mqar"]:
            example = TASKS["mqar"].example(np.random.default_rng(seed), size)
            pairs, queries, answers = mqar_parts(example)
            assert len(pairs) == size and len(set(pairs.values())) == size  # distinct keys, distinct values
            assert len(queries) == size and set(queries) <= set(pairs)
            assert answers == [pairs[q] for q in queries]
            repeats += len(queries) - len(set(queries))
            # the model reads a blank wherever an answer stands, and the tokens everywhere else
            answer_at = [i for i, m in enumerate(example.answer) if m][:-1]
            assert list(example.withheld) == answer_at
            assert [t for i, t in enumerate(example.inputs) if i in answer_at] == [PAD] * size
            assert [t for i, t in enumerate(example.inputs) if i not in answer_at] == [
                t for i, t in enumerate(example.tokens) if i not in answer_at
            ]
            after = example.inputs[example.inputs.index(SEP) :]
            assert not set(after) & set(TASKS["mqar"].ids(answers))  # values are read in the pairs only
    assert repeats > 20  # queries repeat


def eliminate(inputs: list[str], rng: np.random.Generator) -> str:
    """The elimination shortcut, with no recall: the value seen most often in what the model has read, among
    those not yet read after `<sep>` (the answers given, where they are read back), ties broken at random."""
    sep = inputs.index("<sep>")
    given = set(inputs[sep:])
    seen = Counter(w for w in inputs if w.startswith("v") and w not in given)
    if not seen:
        return "v0"
    top = max(seen.values())
    tied = sorted(w for w, c in seen.items() if c == top)
    return tied[int(rng.integers(len(tied)))]


def repeat_or_eliminate(inputs: list[str], rng: np.random.Generator) -> str:
    """Answer a repeated query as the token read after its last asking, else eliminate."""
    sep, query = inputs.index("<sep>"), inputs[-1]
    earlier = [i for i in range(sep + 1, len(inputs) - 1) if inputs[i] == query]
    return (
        inputs[earlier[-1] + 1] if earlier and inputs[earlier[-1] + 1] != "<pad>" else eliminate(inputs, rng)
    )


def in_order(inputs: list[str], rng: np.random.Generator) -> str:
    """The i-th query answered by the i-th value shown (a positional guess)."""
    sep = inputs.index("<sep>")
    values = inputs[1:sep:2]
    return values[((len(inputs) - sep - 2) // 2) % len(values)]


def shortcut_hits(layout: str, shortcut, size: int, count: int) -> tuple[int, int]:  # noqa: ANN001
    """Queries the shortcut gets right over `count` examples, and queries asked: on the generator's own
    inputs, or on the old layout built from the same pairs (every key asked once, each answer read back)."""
    rng, hits, asked = np.random.default_rng([size, 1]), 0, 0
    for seed in range(count):
        example = TASKS["mqar"].example(np.random.default_rng([size, seed]), size)
        pairs, queries, answers = mqar_parts(example)
        if layout == "old":
            queries = list(dict.fromkeys(rng.permutation(list(pairs))))
            answers = [pairs[q] for q in queries]
            inputs = [w for k, v in pairs.items() for w in (k, v)] + ["<sep>"]
            inputs += [w for q in queries for w in (q, pairs[q])]
        else:
            inputs = words("mqar", example.inputs)[1:-1]
        sep = inputs.index("<sep>")
        for i, answer in enumerate(answers):
            hits += shortcut(inputs[: sep + 2 + 2 * i], rng) == answer
            asked += 1
    return hits, asked


@pytest.mark.parametrize("size", [2, 4, 8])
@pytest.mark.parametrize("shortcut", [eliminate, repeat_or_eliminate, in_order])
def test_mqar_shortcuts_score_at_chance(size: int, shortcut) -> None:  # noqa: ANN001
    """Without recall, a query is right 1 time in n (guessing among the n values shown): every shortcut
    scores within 4 binomial standard deviations of 1/n on the generator, while elimination on the old
    layout (every key once, answers read back) scores H_n / n (75, 52, 34 % at 2, 4, 8 pairs)."""
    hits, asked = shortcut_hits("new", shortcut, size, 600)
    p = 1 / size
    assert abs(hits / asked - p) <= 4 * math.sqrt(p * (1 - p) / asked), (hits, asked)
    if shortcut is eliminate:
        hits, asked = shortcut_hits("old", shortcut, size, 600)
        p = sum(1 / k for k in range(1, size + 1)) / size
        assert abs(hits / asked - p) <= 4 * math.sqrt(p * (1 - p) / asked), (hits, asked)


def test_the_passkey_filler_has_one_home() -> None:
    """The task's filler is the language model's passkey's (`passkey.FILLER`), not a copy of it."""
    assert tasks.FILLER is passkey.FILLER


def test_the_passkey_filler_holds_no_digit() -> None:
    assert not re.search(r"\d", filler_text(5000)) and len(filler_text(300)) > 300
    for seed in range(20):
        example = Passkey.example(np.random.default_rng(seed), 200)
        text = "".join(words("passkey", example.tokens)[1:-7])
        key = "".join(words("passkey", example.answer_tokens[:-1]))
        assert re.sub(r"\d", "", text) == text.replace(key, "")  # the key's two copies are the only digits
        assert text.count(key) == 2 and "The grass is green." in text


def test_counting_answers_every_value_the_test_sizes_ask_for() -> None:
    """Uniform over 0 .. min(10, n - 1) at every size: no value past 1/11 + 4 standard deviations at a test
    size, every value a test size gives also given in training, and 0 no longer the common answer."""
    cls = TASKS["counting"]
    draw = lambda size, seed: int(
        words("counting", cls.example(np.random.default_rng([size, seed]), size).tokens)[-2]
    )  # noqa: E731, E501
    train = Counter(draw(size, seed) for size in range(4, 17) for seed in range(150))
    assert sorted(train) == list(range(11)) and train[0] / train.total() < 0.2
    for size in cls.test_sizes():
        test = Counter(draw(size, seed) for seed in range(600))
        assert set(test) <= set(train) and sorted(test) == list(range(11))
        assert max(test.values()) / 600 <= 1 / 11 + 4 * math.sqrt(1 / 11 * 10 / 11 / 600), test


def test_default_tasks_leave_addition_and_mqar_out() -> None:
    assert DEFAULT_TASKS == ("copy", "reverse", "selective-copy", "passkey")
    assert set(DEFAULT_TASKS) < set(TASKS) and not [t for t in DEFAULT_TASKS if t.startswith("addition")]


@pytest.mark.parametrize("task", list(SIZES))
def test_examples_are_deterministic_by_seed_and_differ_across_seeds(task: str) -> None:
    cls, size = TASKS[task], SIZES[task][1]
    same = [cls.example(np.random.default_rng(7), size) for _ in range(2)]
    assert same[0] == same[1]
    assert len({cls.example(np.random.default_rng(s), size).tokens for s in range(8)}) > 1


def test_sizes_count_what_each_task_says() -> None:
    rng = np.random.default_rng(0)
    copy = TASKS["copy"].example(rng, 9)
    assert len(copy.tokens) == 2 * 9 + 3 and sum(copy.answer) == 10
    add = TASKS["addition"].example(rng, 6)
    a, b = "".join(words("addition", add.tokens)[1:14]).split("+")
    assert len(a) == len(b) == 6 and a[0] != "0" and b[0] != "0"
    counting = TASKS["counting"].example(rng, 40)
    assert words("counting", counting.tokens).count(";") == 40
    selective = TASKS["selective-copy"].example(rng, 30)
    assert words("selective-copy", selective.tokens).index("<sep>") == 31
    key = Passkey.example_at(rng, 100, 0.5)
    assert (
        len(key.tokens)
        == 100 + len(" The pass key is 12345. Remember it. 12345 is the pass key. ") + 1 + 5 + 2
    )


@pytest.mark.parametrize("depth", Passkey.depths)
def test_the_passkey_sits_at_its_depth(depth: float) -> None:
    example = Passkey.example_at(np.random.default_rng(3), 200, depth)
    text = "".join(words("passkey", example.tokens)[1:])
    assert text.index(" The pass key is ") == round(depth * 200)


def test_vocabularies_are_the_specials_then_the_task_s_own() -> None:
    for cls in TASKS.values():
        vocab = cls.vocabulary()
        assert vocab[: len(SPECIALS)] == SPECIALS and len(set(vocab)) == len(vocab) < 200
    assert SPECIALS.index("<sep>") == SEP


@pytest.mark.parametrize("task", list(SIZES))
def test_max_tokens_bounds_every_example_and_is_reached(task: str) -> None:
    """A learned table sized by `max_tokens` must hold every example: 300 draws per size stay within it, and
    the bound is tight (counting's, every statement a 4-token `a = 0 ;`, is reached by construction)."""
    cls = TASKS[task]
    for size in SIZES[task][:3]:
        longest = max(len(cls.example(np.random.default_rng(seed), size).tokens) for seed in range(300))
        expected = 4 * size + 5 if task == "counting" else longest
        assert longest <= cls.max_tokens(size) == expected, (size, longest)


def test_max_tokens_by_hand() -> None:
    assert TASKS["addition"].max_tokens(3) == 1 + 3 + 1 + 3 + 1 + 4 + 1  # <bos> 999 + 999 = 1998 <eos>
    assert TASKS["addition-hints"].max_tokens(3) == 1 + 6 + 1 + 6 + 1 + 8 + 1
    needle = " The pass key is 12345. Remember it. 12345 is the pass key. "
    assert TASKS["passkey"].max_tokens(10) == 1 + len(needle) + 10 + 1 + 5 + 1


def test_test_sizes_are_multiples_of_the_largest_training_size() -> None:
    assert TASKS["copy"].test_sizes() == [8, 16, 32, 64]
    assert TASKS["addition"].test_sizes((1, 3)) == [8, 24]


def test_a_task_of_ones_own_registers_and_runs_through_the_battery(tmp_path) -> None:  # noqa: ANN001
    """docs/ARCHITECTURE.md's recipe, as written there."""
    from octlm.experiments.tasks import Task, register

    @register
    class Sort(Task):
        """Sort n digits: `3 1 2 <sep> 1 2 3`."""

        name, counts, symbols, train_sizes = "sort", "items", tuple("0123456789"), (1, 12)

        @classmethod
        def example(cls, rng, size):  # noqa: ANN001, ANN206
            digits = cls.ids([str(d) for d in rng.integers(0, 10, size)])
            return Example.of([*digits, SEP], sorted(digits))

    try:
        assert TASKS["sort"] is Sort
        example = Sort.example(np.random.default_rng(0), 5)
        prompt = words("sort", example.tokens)[1:6]
        assert words("sort", example.answer_tokens) == [*sorted(prompt), "<eos>"]
        from octlm.cli import main

        argv = [
            "experiment",
            "tasks",
            "--quick",
            "--tasks",
            "sort",
            "copy",
            "--schemes",
            "rope",
            "--steps",
            "2",
            "--examples",
            "3",
            "--factors",
            "1",
            "2",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
        assert main(argv) == 0
        assert (
            "## sort\n\nSort n digits: `3 1 2 <sep> 1 2 3`. Trained on 1-12 items."
            in (tmp_path / "results.md").read_text()
        )
    finally:
        TASKS._classes.pop("sort", None)
