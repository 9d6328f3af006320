"""The task battery's generators (octlm/experiments/tasks.py): every example's answer recomputed here from its
prompt, independently of the generator; the answer mask covers exactly the answer and its <eos>; examples are
deterministic by seed; sizes mean what each task says."""

from __future__ import annotations

import re

import numpy as np
import pytest

from octlm.experiments.tasks import BOS, EOS, SEP, SPECIALS, TASKS, Example, Passkey

SIZES = {"copy": [1, 5, 16, 40], "reverse": [1, 7, 16], "addition": [1, 3, 8, 20], "addition-reversed": [1, 4, 8],
         "addition-hints": [1, 2, 8, 40],
         "mqar": [1, 5, 8, 30], "counting": [4, 20, 32, 90], "selective-copy": [4, 9, 32, 70], "passkey": [16, 50, 300]}  # fmt: skip


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
        return list(re.search(r"The pass key is (\d{5})\.", "".join(prompt[:-1])).group(1))
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


def test_mqar_answers_every_key_with_its_value() -> None:
    for seed in range(5):
        for size in SIZES["mqar"]:
            example = TASKS["mqar"].example(np.random.default_rng(seed), size)
            all_words = words("mqar", example.tokens)
            sep = all_words.index("<sep>")
            pairs = dict(zip(all_words[1:sep:2], all_words[2:sep:2], strict=True))
            assert len(pairs) == size  # distinct keys
            queries = all_words[sep + 1 : -1]
            assert sorted(queries[::2]) == sorted(pairs) and queries[1::2] == [pairs[k] for k in queries[::2]]
            marked = [w for w, m in zip(all_words, example.answer, strict=True) if m]
            assert marked == [*queries[1::2], "<eos>"]


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
    assert len(key.tokens) == 100 + len(" The pass key is 12345. ") + 1 + 5 + 2


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
    assert TASKS["passkey"].max_tokens(10) == 1 + len(" The pass key is 12345. ") + 10 + 1 + 5 + 1


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

        argv = ["experiment", "tasks", "--quick", "--tasks", "sort", "copy", "--schemes", "rope", "--steps", "2",
                "--examples", "3", "--factors", "1", "2", "--jobs", "1", "--out", str(tmp_path), "--no-progress"]  # fmt: skip
        assert main(argv) == 0
        assert (
            "## sort\n\nSort n digits: `3 1 2 <sep> 1 2 3`. Trained on 1-12 items."
            in (tmp_path / "results.md").read_text()
        )
    finally:
        TASKS._classes.pop("sort", None)
