"""Passkey retrieval by a language model, with no training for it, in Mohtashami & Jaggi's format (2023; the
test Chen et al. and Peng et al. report after extending a context).

A window of exactly L tokens: their filler (`FILLER`, five sentences repeated, no digit anywhere), the needle
at a chosen depth ("The pass key is 48213. Remember it. 48213 is the pass key.", a 5-digit key), more filler,
then the question ("What is the pass key? The pass key is") and the key's tokens, all in the run's own
tokenizer. The model retrieves the key when its greedy choice at every key token is that token (teacher-forced
argmax: the same as decoding greedily, one pass for all windows). A model that copies from context (induction
heads) can do this at its training length; past it, only if its positions still let the question's tokens
find the needle's. The effective context window (Chen et al.'s use) is the longest length at which retrieval
stays at or above `WINDOW_ACCURACY` (`effective_window`).

The model's bits on the key, against its bits when the needle holds another key (`Retrieval.retrieval_bits`),
tell a model that reads the needle a little from one that ignores it, where accuracy is 0 for both.

The pieces are encoded separately and concatenated, so the key's tokens are the same in the needle and in the
answer whatever the tokenizer merges across a boundary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from octlm.errors import UserError

# Where the needle sits in the filler: 0 first, 1 just before the question.
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
KEY_DIGITS = 5
# The format's name, recorded in every extension cell's grid: cells scored on another passkey (the earlier
# one, hidden in corpus text) are refused, not collected beside these.
FORMAT = "mohtashami-jaggi"
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = (" The pass key is", ". Remember it.", " is the pass key.")  # around the key, twice
QUESTION = " What is the pass key? The pass key is"
WINDOW_ACCURACY = 0.9  # the effective window ends before the first length retrieved less often than this


@dataclass
class PasskeyWindows:
    """Windows `[n, L]` int64 whose last `answer` tokens are the key, and each window's needle depth `[n]`."""

    tokens: np.ndarray
    answer: int
    depths: np.ndarray


def filler_tokens(tokenizer, count: int) -> tuple[np.ndarray, int]:
    """The filler's sentences repeated, as tokens `[m]`, m ≥ `count` + one round; and a round's token count (a
    cut of `count` tokens from a start below it is a phase of the round)."""
    unit = " " + FILLER  # every round starts as a word after a space, so rounds encode alike
    per_round = len(tokenizer.encode(unit))
    tokens = np.asarray(tokenizer.encode(unit * (count // per_round + 2)), dtype=np.int64)
    return tokens, per_round


def passkey_windows(
    tokenizer, length: int, depths: Sequence[float] = DEPTHS, per_depth: int = 8, seed: int = 0
) -> PasskeyWindows:
    """`per_depth` windows of `length` tokens at each depth: the needle after `round(depth × f)` of the f
    filler tokens, the filler from a random phase of its round.

    The same `seed` gives the same keys and phases, so every model is asked the same questions. Every key has
    the same token count (the tokenizer's for a 5-digit number may differ; keys are drawn until one has the
    first key's count), so the windows stack.
    """
    rng = np.random.default_rng(seed)
    around = [tokenizer.encode(part) for part in NEEDLE]
    question = tokenizer.encode(QUESTION)
    rows, answer_len, row_depths, filler, per_round = [], None, [], None, 1
    for depth in depths:
        for _ in range(per_depth):
            answer = _key(tokenizer, rng, answer_len)
            answer_len = len(answer)
            needle = [*around[0], *answer, *around[1], *answer, *around[2]]
            fill = length - len(needle) - len(question) - len(answer)
            if fill < 0:
                raise UserError(
                    f"a passkey window of {length} tokens cannot hold the needle and the question "
                    f"({length - fill} tokens); use longer lengths"
                )
            if filler is None:
                filler, per_round = filler_tokens(tokenizer, fill)
            start = int(rng.integers(0, min(per_round, len(filler) - fill + 1)))
            text = filler[start : start + fill].tolist()
            cut = math.floor(depth * fill + 0.5)
            rows.append([*text[:cut], *needle, *text[cut:], *question, *answer])
            row_depths.append(depth)
    return PasskeyWindows(np.asarray(rows, dtype=np.int64), int(answer_len or 0), np.asarray(row_depths))


def shortest_window(tokenizer) -> int:
    """The fewest tokens a window needs for the needle, the question and the answer (no filler), plus 8."""
    answer = len(tokenizer.encode(" 48213"))
    needle = sum(len(tokenizer.encode(part)) for part in NEEDLE) + 2 * answer
    return needle + len(tokenizer.encode(QUESTION)) + answer + 8


def _key(tokenizer, rng: np.random.Generator, answer_len: int | None) -> list[int]:
    """A random 5-digit key's tokens (with the space before it), `answer_len` of them when given."""
    for _ in range(1000):
        answer = tokenizer.encode(" " + "".join(str(int(d)) for d in rng.integers(0, 10, KEY_DIGITS)))
        if answer_len is None or len(answer) == answer_len:
            return answer
    raise UserError(f"the tokenizer splits 5-digit keys into too many different token counts ({answer_len})")


def effective_window(accuracy: Mapping[int, float], threshold: float = WINDOW_ACCURACY) -> int:
    """The longest length (of those in `accuracy`, length -> share of keys retrieved) up to which retrieval
    stays at or above `threshold` at every length asked: Chen et al.'s effective context window; 0 when the
    shortest is already below it."""
    window = 0
    for n in sorted(accuracy):
        if accuracy[n] < threshold:
            break
        window = n
    return window


@dataclass
class Retrieval:
    """How a model answered each window `[n]`: retrieved (every key token its argmax), and the key's bits
    given the window, and given the same window whose needle holds another window's key (`decoy_bits`): a
    model that reads the needle pays more for a key the needle does not hold, one that guesses digits pays the
    same."""

    hits: np.ndarray
    key_bits: np.ndarray
    decoy_bits: np.ndarray

    @property
    def accuracy(self) -> float:
        return float(self.hits.mean())

    @property
    def retrieval_bits(self) -> float:
        """Mean bits the needle saves on the key (0 when the model ignores it; up to ~17 for 5 digits)."""
        return float((self.decoy_bits - self.key_bits).mean())


@torch.inference_mode()
def _answer_bits(
    model: torch.nn.Module, tokens: np.ndarray, a: int, batch_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per window: whether the argmax is right at each of the last `a` tokens, and their summed bits."""
    n, length = tokens.shape
    rows = max(1, batch_tokens // length)
    hits, bits = [], []
    for first in range(0, n, rows):
        x = torch.from_numpy(tokens[first : first + rows])
        logits, _ = model(x[:, :-1])  # [b, L - 1, V]: position t predicts token t + 1
        answer = logits[:, -a:].float()
        hits.append((answer.argmax(-1) == x[:, -a:]).all(-1).numpy())
        nats = -torch.log_softmax(answer, -1).gather(-1, x[:, -a:, None])[..., 0].sum(-1)
        bits.append((nats / math.log(2)).double().numpy())
    return np.concatenate(hits), np.concatenate(bits)


def retrieval(model: torch.nn.Module, windows: PasskeyWindows, batch_tokens: int = 8192) -> Retrieval:
    """Ask every window, and every window with its answer swapped for the next window's key (the decoy)."""
    a = windows.answer
    hits, key_bits = _answer_bits(model, windows.tokens, a, batch_tokens)
    decoys = windows.tokens.copy()
    decoys[:, -a:] = np.roll(windows.tokens[:, -a:], 1, axis=0)
    _, decoy_bits = _answer_bits(model, decoys, a, batch_tokens)
    return Retrieval(hits, key_bits, decoy_bits)


def accuracy_by_depth(windows: PasskeyWindows, hits: np.ndarray) -> dict[float, float]:
    """Share of windows retrieved at each depth."""
    return {float(d): float(hits[windows.depths == d].mean()) for d in np.unique(windows.depths)}
