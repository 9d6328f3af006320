"""Tasks whose answer depends on where things are, generated from a seed: the task battery's examples.

Each task is one registered class with its own small vocabulary (`SPECIALS`, then its symbols), a range of sizes
it trains on (its test sizes are multiples of the largest: 1x, 2x, 4x, 8x by default), and `example(rng, size)`: one token sequence, `<bos>` first and `<eos>` last, with the tokens that answer marked.
The loss and the score read the marked tokens only: the answer and the `<eos>` that ends it, each predicted from
the tokens before it. The size counts what the task says (items, digits, pairs, statements, filler characters),
so that "2x" means twice the task, whatever that does to the token count.

- `copy`, `reverse` (Kazemnejad et al., 2023): `x1 .. xn <sep>` then the items again, or backwards.
- `addition`, `addition-reversed`, `addition-hints` (Zhou et al., 2024): two n-digit numbers and their sum, most
  significant digit first, or every number least significant first (the order the carries run in), or reversed
  with an index hint before every digit (the paper's whole format).
- `mqar` (Arora et al., 2023, Zoology): n key-value pairs, then every key again, each answered by its value.
- `counting` (Golovneva et al., 2024, CoPE): n statements that set (`a = 0 ;`), increment (`a ++ ;`) or skip
  (`pass ;`) three variables, then `print a`: the value is how many increments of `a` followed its last set.
- `selective-copy`: four letters scattered among n positions of noise (`.`), copied in order.
- `passkey` (Mohtashami & Jaggi, 2023): a five-digit key in n characters of filler drawn from the built-in corpus
  (the standard library's sources) at a chosen depth, then asked for; `example_at` places it.

A task of your own is a `Task` subclass decorated with `@register`, imported before the battery runs.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from octlm.config.registry import Registry
from octlm.errors import UserError

SPECIALS = ("<pad>", "<bos>", "<sep>", "<eos>")
PAD, BOS, SEP, EOS = range(len(SPECIALS))
TASKS = Registry("task", __name__)  # this module registers the built-in tasks as it is imported


@dataclass(frozen=True)
class Example:
    """One sequence of a task: token ids (`<bos>` first, `<eos>` last) and which of them answer."""

    tokens: tuple[int, ...]
    answer: tuple[bool, ...]  # True where the token is predicted and scored: the answer and its <eos>

    @classmethod
    def of(cls, prompt: list[int], answer: list[int]) -> Example:
        """`<bos>` prompt, then the answer and `<eos>`, which are marked."""
        tokens = [BOS, *prompt, *answer, EOS]
        return cls(tuple(tokens), tuple([False] * (len(prompt) + 1) + [True] * (len(answer) + 1)))

    @property
    def answer_tokens(self) -> tuple[int, ...]:
        return tuple(t for t, marked in zip(self.tokens, self.answer, strict=True) if marked)


class Task:
    """A task: its symbols, the sizes it trains on and is tested at, and how an example is drawn: a subclass
    defines the classmethod `example(rng, size) -> Example`, and one scored by depth as well (a depth x size
    grid) lists its `depths` and defines `example_at(rng, size, depth) -> Example`."""

    name: ClassVar[str]
    symbols: ClassVar[tuple[str, ...]]
    train_sizes: ClassVar[tuple[int, int]]  # the sizes training draws from, both ends included
    max_size: ClassVar[int | None] = None  # the largest size the task can draw (None: no limit)
    counts: ClassVar[str]  # what a size counts, for tables ("items", "digits", ...)
    depths: ClassVar[tuple[float, ...]] = ()  # where `example_at(rng, size, depth)` can place the answer

    @classmethod
    def test_sizes(cls, factors: tuple[int, ...] = (1, 2, 4, 8)) -> list[int]:
        """The sizes scored: the largest training size times each factor (1: the largest trained on)."""
        return [cls.train_sizes[1] * f for f in factors]

    @classmethod
    def vocabulary(cls) -> tuple[str, ...]:
        return SPECIALS + cls.symbols

    @classmethod
    def ids(cls, symbols: str | list[str]) -> list[int]:
        """The token ids of `symbols` (a string: one symbol per character)."""
        index = {s: i for i, s in enumerate(cls.vocabulary())}
        return [index[s] for s in symbols]

    @classmethod
    def text(cls, tokens: tuple[int, ...] | list[int]) -> str:
        """A sequence spelled out, symbols joined by spaces (single characters by nothing)."""
        words = [cls.vocabulary()[t] for t in tokens]
        return ("" if all(len(w) == 1 for w in cls.symbols) else " ").join(words)

    @classmethod
    def max_tokens(cls, size: int) -> int:
        """The most tokens an example of `size` can have (what a model must hold to see it whole): here the
        length of one example, so a task whose examples of one size differ in length overrides it."""
        return len(cls.example(np.random.default_rng(0), size).tokens)


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: file a `Task` subclass under its `name` in `TASKS`."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"register() takes a Task subclass, got {cls!r}")
    return TASKS.register(cls)


def _letters(count: int) -> tuple[str, ...]:
    return tuple(chr(ord("a") + i) for i in range(count))


# ------------------------------------------------------------------------------------------------------------
# Sequences: copy and reverse


@register
class Copy(Task):
    """Copy a string: `x1 .. xn <sep> x1 .. xn`."""

    name, counts = "copy", "items"
    symbols = _letters(16)
    train_sizes = (1, 8)

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        items = [int(i) for i in rng.integers(len(SPECIALS), len(SPECIALS) + len(cls.symbols), size)]
        return Example.of([*items, SEP], cls.answer_of(items))

    @staticmethod
    def answer_of(items: list[int]) -> list[int]:
        return list(items)


@register
class Reverse(Copy):
    """Reverse a string: `x1 .. xn <sep> xn .. x1`."""

    name = "reverse"

    @staticmethod
    def answer_of(items: list[int]) -> list[int]:
        return items[::-1]


# ------------------------------------------------------------------------------------------------------------
# Arithmetic


@register
class Addition(Task):
    """Add two n-digit numbers: `a + b = c`, every number most significant digit first."""

    name, counts = "addition", "digits"
    symbols = (*"0123456789", "+", "=")
    train_sizes = (1, 8)
    reversed_digits: ClassVar[bool] = False

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        a, b = (cls.number(rng, size) for _ in range(2))
        return Example.of(cls.ids([*cls.digits(a), "+", *cls.digits(b), "="]), cls.ids(cls.digits(a + b)))

    @classmethod
    def max_tokens(cls, size: int) -> int:
        """`<bos>`, two numbers of n digits, `+`, `=`, a sum of up to n + 1 digits, `<eos>`."""
        return 3 * size + 5

    @staticmethod
    def number(rng: np.random.Generator, size: int) -> int:
        """A number of exactly `size` digits (the first not 0, unless it is the only one)."""
        first = int(rng.integers(1 if size > 1 else 0, 10))
        rest = rng.integers(0, 10, size - 1)
        return int("".join(map(str, [first, *rest])))

    @classmethod
    def digits(cls, n: int) -> str:
        return str(n)[::-1] if cls.reversed_digits else str(n)


@register
class ReversedAddition(Addition):
    """Add two n-digit numbers written least significant digit first, the sum too (Zhou et al.'s order)."""

    name = "addition-reversed"
    reversed_digits = True


@register
class HintedAddition(ReversedAddition):
    """Zhou et al.'s whole format: reversed digits, each digit after an index hint that names its place, the
    same hint for the same place in both numbers and the sum (`h3 7 h4 2 + h3 5 h4 9 = h3 2 h4 2 h5 1`). The
    hints of an example are a run of consecutive symbols from a random start among `HINTS`, as in the paper, so
    training on short numbers still teaches every hint that a long one needs."""

    name = "addition-hints"
    HINTS: ClassVar[int] = 128
    symbols = (*Addition.symbols, *(f"h{i}" for i in range(HINTS)))
    max_size = HINTS - 1  # a sum of n digits can have n + 1, each with its hint

    @classmethod
    def max_tokens(cls, size: int) -> int:
        """Addition's, every digit with its hint."""
        return 6 * size + 6

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        a, b = (cls.number(rng, size) for _ in range(2))
        start = int(rng.integers(0, cls.HINTS - size))
        hinted = lambda n: [s for i, d in enumerate(cls.digits(n)) for s in (f"h{start + i}", d)]  # noqa: E731
        return Example.of(cls.ids([*hinted(a), "+", *hinted(b), "="]), cls.ids(hinted(a + b)))


# ------------------------------------------------------------------------------------------------------------
# Recall


@register
class MultiQueryRecall(Task):
    """Multi-query associative recall: n key-value pairs, then every key again, each followed by its value."""

    name, counts = "mqar", "pairs"
    keys, values = tuple(f"k{i}" for i in range(64)), tuple(f"v{i}" for i in range(16))
    symbols = keys + values
    train_sizes, max_size = (1, 8), len(keys)

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        keys = [int(k) for k in rng.choice(len(cls.keys), size, replace=False)]
        values = {k: int(v) for k, v in zip(keys, rng.integers(0, len(cls.values), size), strict=True)}
        key_id = lambda k: len(SPECIALS) + k  # noqa: E731
        value_id = lambda v: len(SPECIALS) + len(cls.keys) + v  # noqa: E731
        prompt = [t for k in keys for t in (key_id(k), value_id(values[k]))] + [SEP]
        tokens, answer = [BOS, *prompt], [False] * (len(prompt) + 1)
        for k in rng.permutation(keys):  # each query key, then its value (marked)
            tokens += [key_id(int(k)), value_id(values[int(k)])]
            answer += [False, True]
        return Example((*tokens, EOS), (*answer, True))


# ------------------------------------------------------------------------------------------------------------
# Counting


@register
class Counting(Task):
    """CoPE's counting: statements that set, increment or skip three variables, then `print` one: its value is
    the number of increments since it was last set (at most 10)."""

    name, counts = "counting", "statements"
    variables = ("a", "b", "c")
    symbols = (*variables, "=", "++", "pass", ";", "print", *(str(v) for v in range(11)))
    train_sizes = (4, 16)
    WEIGHTS: ClassVar[dict[str, int]] = {"set": 1, "pass": 50, "increment": 7}  # as in the paper's generator
    MAX_VALUE: ClassVar[int] = 10

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        while True:  # a draw in which no variable was ever set has nothing to print: draw again
            words, values = cls._statements(rng, size)
            if values:
                break
        var = sorted(values)[int(rng.integers(len(values)))]
        return Example.of(cls.ids([*words, "print", var]), cls.ids([str(values[var])]))

    @classmethod
    def max_tokens(cls, size: int) -> int:
        """`<bos>`, n statements of at most 4 tokens (`a = 0 ;`), `print`, the variable, its value, `<eos>`."""
        return 4 * size + 5

    @classmethod
    def _statements(cls, rng: np.random.Generator, size: int) -> tuple[list[str], dict[str, int]]:
        """`size` statements and the values they leave; an increment with no variable below MAX_VALUE to
        increment is drawn again, as the paper's generator does."""
        ops = list(cls.WEIGHTS)
        # one uniform draw per op against the cumulative weights: rng.choice(p=...) costs more than the model
        bounds = list(itertools.accumulate(cls.WEIGHTS.values()))
        words: list[str] = []
        values: dict[str, int] = {}

        def draw() -> str:
            return ops[bisect.bisect_right(bounds, rng.random() * bounds[-1])]

        for _ in range(size):
            op = draw()
            while op == "increment" and not any(v < cls.MAX_VALUE for v in values.values()):
                op = draw()
            if op == "set":
                var = cls.variables[int(rng.integers(len(cls.variables)))]
                values[var] = 0
                words += [var, "=", "0", ";"]
            elif op == "increment":
                can_grow = [v for v in sorted(values) if values[v] < cls.MAX_VALUE]
                var = can_grow[int(rng.integers(len(can_grow)))]
                values[var] += 1
                words += [var, "++", ";"]
            else:
                words += ["pass", ";"]
        return words, values


# ------------------------------------------------------------------------------------------------------------
# Selective copy


@register
class SelectiveCopy(Task):
    """Copy the four letters scattered among n positions of noise (`.`), in order, leaving the noise out."""

    name, counts = "selective-copy", "positions"
    symbols = (*_letters(16), ".")
    train_sizes = (4, 16)
    LETTERS: ClassVar[int] = 4

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        if size < cls.LETTERS:
            raise UserError(
                f"selective-copy scatters {cls.LETTERS} letters, so a size below {cls.LETTERS} holds none"
            )
        noise = cls.ids(["."])[0]
        letters = [int(i) for i in rng.integers(len(SPECIALS), len(SPECIALS) + 16, cls.LETTERS)]
        where = sorted(int(p) for p in rng.choice(size, cls.LETTERS, replace=False))
        segment = [noise] * size
        for place, letter in zip(where, letters, strict=True):
            segment[place] = letter
        return Example.of([*segment, SEP], letters)


# ------------------------------------------------------------------------------------------------------------
# Passkey retrieval


@functools.cache
def filler_text() -> str:
    """The built-in corpus (the standard library's sources, `octlm.data.sources`) as one string of printable
    ASCII, every run of other characters and spaces one space (indentation would fill a window with blanks):
    what passkey examples hide their key in."""
    from octlm.data.sources import stdlib_documents

    text = " ".join(d.text for d in stdlib_documents())
    return " ".join("".join(c if " " <= c <= "~" else " " for c in text).split())


@register
class Passkey(Task):
    """A five-digit key hidden in filler text at a chosen depth, asked for at the end."""

    name, counts = "passkey", "filler characters"
    symbols = tuple(chr(c) for c in range(ord(" "), ord("~") + 1))
    train_sizes = (8, 32)
    depths: ClassVar[tuple[float, ...]] = (0.0, 0.25, 0.5, 0.75, 1.0)
    KEY_DIGITS: ClassVar[int] = 5

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        return cls.example_at(rng, size, float(rng.random()))

    @staticmethod
    def needle(key: str) -> str:
        """The sentence that hides `key` in the filler, its spaces included."""
        return f" The pass key is {key}. "

    @classmethod
    def example_at(
        cls, rng: np.random.Generator, size: int, depth: float, text: str | None = None
    ) -> Example:
        """The key after `round(depth x size)` characters of filler (0: first, 1: last), the filler cut from
        `text` (default: `filler_text()`, the built-in corpus)."""
        text = filler_text() if text is None else text
        start = int(rng.integers(0, len(text) - size))
        filler = text[start : start + size]
        key = "".join(str(int(d)) for d in rng.integers(0, 10, cls.KEY_DIGITS))
        cut = math.floor(depth * size + 0.5)
        prompt = filler[:cut] + cls.needle(key) + filler[cut:]
        return Example.of([*cls.ids(prompt), SEP], cls.ids(key))
