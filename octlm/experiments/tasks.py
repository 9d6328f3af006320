"""Tasks whose answer depends on where things are, generated from a seed: the task battery's examples.

Each task is one registered class with its own small vocabulary (`SPECIALS`, then its symbols), a range of
sizes it trains on (its test sizes are multiples of the largest: 1x, 2x, 4x, 8x by default), and
`example(rng, size)`: one token sequence, `<bos>` first and `<eos>` last, with the tokens that answer marked.
The loss and the score read the marked tokens only: the answer and the `<eos>` that ends it, each predicted
from the tokens before it. The size counts what the task says (items, digits, pairs, statements, filler
characters), so that "2x" means twice the task, whatever that does to the token count.

- `copy`, `reverse` (Kazemnejad et al., 2023): `x1 .. xn <sep>` then the items again, or backwards.
- `addition`, `addition-reversed`, `addition-hints` (Zhou et al., 2024): two n-digit numbers and their sum,
  most significant digit first, or every number least significant first (the order the carries run in), or
  reversed with an index hint before every digit (the paper's whole format).
- `mqar` (Arora et al., 2023, Zoology): n key-value pairs (distinct keys, distinct values), then n queries
  drawn with repeats, each answered by its value, which the model never reads back (`Example.withheld`).
- `counting` (Golovneva et al., 2024, CoPE): n statements that set (`a = 0 ;`), increment (`a ++ ;`) or skip
  (`pass ;`) three variables, then `print a`: the value is how many increments of `a` followed its last set,
  drawn uniformly first so that every size asks for every value.
- `selective-copy`: four letters scattered among n positions of noise (`.`), copied in order.
- `passkey` (Mohtashami & Jaggi, 2023): "The pass key is N. Remember it. N is the pass key." with a
  five-digit N, at a chosen depth in n characters of their digit-free filler ("The grass is green. ..."
  repeated), then asked for; `example_at` places it.

`DEFAULT_TASKS` is the battery's default: addition, in its three formats, MQAR and counting stay registered
but out of it until a battery model learns them at their training sizes within the default cap (MQAR: no row
of width 64 did in 3,000 steps of 32 examples, about 1.5 % of the examples Zoology trains on; counting: every
row stopped at 85-90 % exact match, under the 95 % the claims need, so its cells only cost time; docs/LOG.md).
A task of your own is a `Task` subclass decorated with `@register`, imported before the battery runs.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from octlm.config.registry import Registry
from octlm.errors import UserError
from octlm.experiments.passkey import FILLER, NEEDLE

SPECIALS = ("<pad>", "<bos>", "<sep>", "<eos>")
PAD, BOS, SEP, EOS = range(len(SPECIALS))
TASKS = Registry("task", __name__)  # this module registers the built-in tasks as it is imported
DEFAULT_TASKS = ("copy", "reverse", "selective-copy", "passkey")


@dataclass(frozen=True)
class Example:
    """One sequence of a task: token ids (`<bos>` first, `<eos>` last) and which of them answer."""

    tokens: tuple[int, ...]
    answer: tuple[bool, ...]  # True where the token is predicted and scored: the answer and its <eos>
    withheld: tuple[int, ...] = ()  # positions of answer tokens the model predicts but never reads back

    @property
    def inputs(self) -> tuple[int, ...]:
        """What the model reads at each position: the tokens, a withheld one read as `<pad>` (Zoology's
        blank 0), so that a later answer cannot be read off an earlier one (MQAR); targets are `tokens`."""
        if not self.withheld:
            return self.tokens
        hidden = set(self.withheld)
        return tuple(PAD if i in hidden else t for i, t in enumerate(self.tokens))

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
    def answer_symbols(cls) -> tuple[str, ...]:
        """The symbols an answer token is drawn from: what the chance baseline guesses among, uniformly."""
        return cls.symbols

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


LETTERS = tuple("abcdefghijklmnop")  # copy's and selective copy's 16 symbols


# ------------------------------------------------------------------------------------------------------------
# Sequences: copy and reverse


@register
class Copy(Task):
    """Copy a string: `x1 .. xn <sep> x1 .. xn`."""

    name, counts = "copy", "items"
    symbols = LETTERS
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
    def answer_symbols(cls) -> tuple[str, ...]:
        return tuple("0123456789")

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
    same hint for the same place in both numbers and the sum (`h3 7 h4 2 + h3 5 h4 9 = h3 2 h4 2 h5 1`).
    The hints of an example are a run of consecutive symbols from a random start among `HINTS`, as in the
    paper, so training on short numbers still teaches every hint that a long one needs."""

    name = "addition-hints"
    HINTS: ClassVar[int] = 128
    symbols = (*Addition.symbols, *(f"h{i}" for i in range(HINTS)))
    max_size = HINTS - 1  # a sum of n digits can have n + 1, each with its hint

    @classmethod
    def answer_symbols(cls) -> tuple[str, ...]:
        return (*"0123456789", *cls.symbols[len(Addition.symbols) :])

    @classmethod
    def max_tokens(cls, size: int) -> int:
        """Addition's, every digit with its hint."""
        return 6 * size + 6

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        a, b = (cls.number(rng, size) for _ in range(2))
        start = int(rng.integers(cls.HINTS - size))  # as integers(0, high): the same draws

        def hinted(n: int) -> list[str]:
            return [s for i, d in enumerate(cls.digits(n)) for s in (f"h{start + i}", d)]

        return Example.of(cls.ids([*hinted(a), "+", *hinted(b), "="]), cls.ids(hinted(a + b)))


# ------------------------------------------------------------------------------------------------------------
# Recall


@register
class MultiQueryRecall(Task):
    """Multi-query associative recall as Zoology's: n pairs `k v` (distinct keys, distinct values),
    `<sep>`, then n queries, keys drawn with repeats, each answered by its value. An answer is predicted but
    never read back (withheld: the model reads a blank there, as Zoology's inputs hold 0 after a query), and
    queries repeat, so neither the answers already given nor the keys not yet asked narrow the next answer:
    without recalling the pair, a query is right 1 time in n. Scored per query: the answer is the values of
    the queries in order."""

    name, counts = "mqar", "pairs"
    keys, values = tuple(f"k{i}" for i in range(64)), tuple(f"v{i}" for i in range(64))
    symbols = keys + values
    train_sizes, max_size = (1, 8), len(keys)

    @classmethod
    def answer_symbols(cls) -> tuple[str, ...]:
        return cls.values

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        key_ids = [len(SPECIALS) + int(k) for k in rng.choice(len(cls.keys), size, replace=False)]
        first_value = len(SPECIALS) + len(cls.keys)
        value_ids = [first_value + int(v) for v in rng.choice(len(cls.values), size, replace=False)]
        queries = [int(q) for q in rng.integers(0, size, size)]  # indices into the pairs, repeats allowed
        context = [t for i in range(size) for t in (key_ids[i], value_ids[i])]
        asked = [t for q in queries for t in (key_ids[q], value_ids[q])]
        tokens = (BOS, *context, SEP, *asked, EOS)
        values_at = {
            len(context) + 3 + 2 * q for q in range(size)
        }  # <bos>, the pairs, <sep>, then k v k v ...
        answer = tuple(i in values_at for i in range(len(tokens) - 1))
        withheld = tuple(i for i, marked in enumerate(answer) if marked)
        return Example(tokens, (*answer, True), withheld)


# ------------------------------------------------------------------------------------------------------------
# Counting


@register
class Counting(Task):
    """CoPE's counting: statements that set, increment or skip three variables, then `print` one: its value is
    the number of increments since it was last set (at most 10).

    The answer is drawn first, uniformly over 0 .. min(10, n - 1), and the statements are built around it:
    the printed variable's last set at a uniform place that leaves room, its increments at uniform places
    after it, every other statement drawn as the paper's generator draws them (weights 1 : 50 : 7 for set,
    pass, increment) on the variables still free to change. The paper's own draw, printing whatever the
    statements left, answers 0 in 62 % of training examples and never 6 or more, while the test sizes (up to
    8x) ask for larger values: a model could score by always answering 0 and could not be tested on values it
    never saw. Drawn this way, every training size from 11 statements on asks for every value 0 .. 10, each
    test size asks for the same values with the same weights, and the best constant answer scores 1 in 11."""

    name, counts = "counting", "statements"
    variables = ("a", "b", "c")
    symbols = (*variables, "=", "++", "pass", ";", "print", *(str(v) for v in range(11)))
    train_sizes = (4, 16)
    WEIGHTS: ClassVar[dict[str, int]] = {"set": 1, "pass": 50, "increment": 7}  # as in the paper's generator
    MAX_VALUE: ClassVar[int] = 10

    @classmethod
    def answer_symbols(cls) -> tuple[str, ...]:
        return tuple(str(v) for v in range(cls.MAX_VALUE + 1))

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        value = int(rng.integers(min(cls.MAX_VALUE, size - 1) + 1))
        printed = cls.variables[int(rng.integers(len(cls.variables)))]
        last_set = int(rng.integers(size - value))
        increments = {last_set + 1 + int(i) for i in rng.choice(size - 1 - last_set, value, replace=False)}
        words, values = [], {}
        for place in range(size):
            if place == last_set:
                op, var = "set", printed
            elif place in increments:
                op, var = "increment", printed
            else:  # after the last set, the printed variable is left alone
                op, var = cls._distractor(rng, values, () if place < last_set else (printed,))
            if op == "set":
                values[var] = 0
                words += [var, "=", "0", ";"]
            elif op == "increment":
                values[var] += 1
                words += [var, "++", ";"]
            else:
                words += ["pass", ";"]
        return Example.of(cls.ids([*words, "print", printed]), cls.ids([str(value)]))

    @classmethod
    def max_tokens(cls, size: int) -> int:
        """`<bos>`, n statements of at most 4 tokens (`a = 0 ;`), `print`, the variable, its value,
        `<eos>`."""
        return 4 * size + 5

    @classmethod
    def _distractor(
        cls, rng: np.random.Generator, values: dict[str, int], fixed: tuple[str, ...]
    ) -> tuple[str, str | None]:
        """An op drawn with the paper's weights and the variable it acts on, none of `fixed`: an increment
        with no set variable below MAX_VALUE to increment is drawn again, as the paper's generator does."""
        ops = list(cls.WEIGHTS)
        # one uniform draw per op against the cumulative weights: rng.choice(p=...) costs more than the model
        bounds = list(itertools.accumulate(cls.WEIGHTS.values()))
        free = [v for v in cls.variables if v not in fixed]
        while True:
            op = ops[bisect.bisect_right(bounds, rng.random() * bounds[-1])]
            if op == "set":
                return op, free[int(rng.integers(len(free)))]
            if op == "pass":
                return op, None
            can_grow = [v for v in sorted(values) if v in free and values[v] < cls.MAX_VALUE]
            if can_grow:
                return op, can_grow[int(rng.integers(len(can_grow)))]


# ------------------------------------------------------------------------------------------------------------
# Selective copy


@register
class SelectiveCopy(Task):
    """Copy the four letters scattered among n positions of noise (`.`), in order, leaving the noise out."""

    name, counts = "selective-copy", "positions"
    symbols = (*LETTERS, ".")
    train_sizes = (4, 16)
    LETTERS: ClassVar[int] = 4

    @classmethod
    def answer_symbols(cls) -> tuple[str, ...]:
        return cls.symbols[:-1]  # the letters, not the noise

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
        for i, place in enumerate(where):
            segment[place] = letters[i]
        return Example.of([*segment, SEP], letters)


# ------------------------------------------------------------------------------------------------------------
# Passkey retrieval


def filler_text(size: int) -> str:
    """Mohtashami & Jaggi's filler, its sentences repeated (no digit anywhere), `size` characters longer than
    one round of them: a cut of `size` characters from a uniform start is a uniform phase of the round."""
    unit = FILLER + " "
    return "".join(itertools.islice(itertools.cycle(unit), size + len(unit)))


@register
class Passkey(Task):
    """A five-digit key in Mohtashami & Jaggi's needle, hidden in their filler at a chosen depth, asked for at
    the end: `<filler> The pass key is N. Remember it. N is the pass key. <filler> <sep> N`."""

    name, counts = "passkey", "filler characters"
    symbols = tuple(chr(c) for c in range(ord(" "), ord("~") + 1))
    train_sizes = (8, 32)
    depths: ClassVar[tuple[float, ...]] = (0.0, 0.25, 0.5, 0.75, 1.0)
    KEY_DIGITS: ClassVar[int] = 5

    @classmethod
    def answer_symbols(cls) -> tuple[str, ...]:
        return tuple("0123456789")

    @classmethod
    def example(cls, rng: np.random.Generator, size: int) -> Example:
        return cls.example_at(rng, size, float(rng.random()))

    @staticmethod
    def needle(key: str) -> str:
        """The sentences that hide `key` in the filler (the language model's passkey's, `passkey.NEEDLE`),
        with a space either side."""
        return f"{NEEDLE[0]} {key}{NEEDLE[1]} {key}{NEEDLE[2]} "

    @classmethod
    def example_at(
        cls, rng: np.random.Generator, size: int, depth: float, text: str | None = None
    ) -> Example:
        """The needle after `round(depth x size)` characters of filler (0: first, 1: last), the filler cut
        from `text` (default: `filler_text(size)`, Mohtashami & Jaggi's sentences from a random phase)."""
        text = filler_text(size) if text is None else text
        start = int(rng.integers(len(text) - size))
        filler = text[start : start + size]
        key = "".join(str(int(d)) for d in rng.integers(0, 10, cls.KEY_DIGITS))
        cut = math.floor(depth * size + 0.5)
        prompt = filler[:cut] + cls.needle(key) + filler[cut:]
        return Example.of([*cls.ids(prompt), SEP], cls.ids(key))
