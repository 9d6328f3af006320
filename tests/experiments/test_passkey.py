"""Passkey retrieval by a language model (octlm/experiments/passkey.py): the windows as built, and the scoring
on two models whose answers are known (one that reads the needle, one that guesses)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from octlm.data.sources import Document
from octlm.data.tokenizer import train_tokenizer
from octlm.errors import UserError
from octlm.experiments import passkey

V = 256


class Bytes:
    """A byte tokenizer: each UTF-8 byte is a token."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


PREFIX = Bytes().encode(passkey.NEEDLE[0])


class Reader(torch.nn.Module):
    """Predicts the key the needle holds at the answer's positions (the tokens after the first " The pass key
    is"), and nothing in particular elsewhere."""

    def __init__(self, answer: int) -> None:
        super().__init__()
        self.answer = answer

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits = torch.zeros(*ids.shape, V)
        for b, row in enumerate(ids.tolist()):
            at = next(i for i in range(len(row)) if row[i : i + len(PREFIX)] == PREFIX) + len(PREFIX)
            for j, token in enumerate(row[at : at + self.answer]):
                logits[b, ids.shape[1] - self.answer + j, token] = 20.0
        return logits, None


class Guesser(torch.nn.Module):
    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, None]:
        return torch.zeros(*ids.shape, V), None


def needle_at(row: list[int]) -> int:
    return next(i for i in range(len(row)) if row[i : i + len(PREFIX)] == PREFIX)


def test_windows_hold_filler_needle_question_and_answer_at_each_depth() -> None:
    w = passkey.passkey_windows(Bytes(), 200, depths=(0.0, 0.5, 1.0), per_depth=3, seed=5)
    assert w.tokens.shape == (9, 200) and w.tokens.dtype == np.int64 and w.answer == 6  # " " + 5 digits
    assert w.depths.tolist() == [0.0] * 3 + [0.5] * 3 + [1.0] * 3
    for row, depth in zip(w.tokens.tolist(), w.depths, strict=True):
        answer = bytes(row[-6:]).decode()
        assert answer[0] == " " and answer[1:].isdigit()
        needle = f" The pass key is{answer}. Remember it.{answer} is the pass key."
        tail = needle.encode() + passkey.QUESTION.encode() + answer.encode()
        start, fill = needle_at(row), 200 - len(tail)
        assert start == math.floor(depth * fill + 0.5)  # the needle after this share of the filler
        text = bytes(row).decode()
        assert text[start : start + len(needle)] == needle
        assert text.endswith(passkey.QUESTION + answer)
        filler = text[:start] + text[start + len(needle) : -len(passkey.QUESTION + answer)]
        assert len(filler) == fill and filler in (" " + passkey.FILLER) * 4  # the sentences, some phase
    again = passkey.passkey_windows(Bytes(), 200, depths=(0.0, 0.5, 1.0), per_depth=3, seed=5)
    assert np.array_equal(again.tokens, w.tokens)
    other = passkey.passkey_windows(Bytes(), 200, depths=(0.0, 0.5, 1.0), per_depth=3, seed=6)
    assert not np.array_equal(other.tokens[:, -6:], w.tokens[:, -6:])


def test_the_filler_holds_no_digit_and_the_key_is_recovered_in_a_bpe_tokenizer() -> None:
    """In a byte-level BPE tokenizer trained on text with digits: every digit of a window is the key's."""
    line = "x = {} # the sky is blue and the grass is green\n"
    docs = [Document(str(i), line.format(i * 7919) * 20) for i in range(30)]
    tokenizer = train_tokenizer(docs, 400)
    assert not any(c.isdigit() for c in passkey.FILLER)
    filler, per_round = passkey.filler_tokens(tokenizer, 500)
    assert len(filler) >= 500 + per_round and not any(c.isdigit() for c in tokenizer.decode(filler.tolist()))
    w = passkey.passkey_windows(tokenizer, 160, per_depth=2, seed=3)
    for row in w.tokens.tolist():
        key = tokenizer.decode(row[-w.answer :])
        assert len(key) == 6 and key[0] == " " and key[1:].isdigit()
        text = tokenizer.decode(row)
        assert "".join(c for c in text if c.isdigit()) == key[1:] * 3  # twice in the needle, once answered
        assert f"The pass key is{key}. Remember it.{key} is the pass key." in text
        assert text.endswith(passkey.QUESTION + key)


def test_a_window_too_short_is_refused() -> None:
    shortest = passkey.shortest_window(Bytes())
    assert shortest == len("".join(passkey.NEEDLE).encode()) + 2 * 6 + len(passkey.QUESTION.encode()) + 6 + 8
    passkey.passkey_windows(Bytes(), shortest, per_depth=1)
    too_short = len("".join(passkey.NEEDLE).encode()) + 3 * 6 + len(passkey.QUESTION.encode()) - 1
    with pytest.raises(UserError, match=f"a passkey window of {too_short} tokens cannot hold"):
        passkey.passkey_windows(Bytes(), too_short, per_depth=1)


def test_the_effective_window_is_the_longest_length_retrieval_stays_above_the_threshold() -> None:
    assert passkey.WINDOW_ACCURACY == 0.9
    assert passkey.effective_window({64: 1.0, 128: 0.95, 256: 0.9, 512: 0.5}) == 256
    assert passkey.effective_window({512: 1.0, 64: 1.0, 128: 0.2, 256: 1.0}) == 64  # a dip ends it
    assert passkey.effective_window({64: 0.85, 128: 1.0}) == 0
    assert passkey.effective_window({64: 0.85, 128: 1.0}, threshold=0.8) == 128
    assert passkey.effective_window({}) == 0


def test_a_model_that_reads_the_needle_retrieves_every_key() -> None:
    w = passkey.passkey_windows(Bytes(), 160, per_depth=4, seed=1)
    asked = passkey.retrieval(Reader(w.answer), w, batch_tokens=320)  # two windows per batch
    assert asked.hits.all() and asked.accuracy == 1.0
    assert passkey.accuracy_by_depth(w, asked.hits) == {d: 1.0 for d in passkey.DEPTHS}
    # A logit of 20 over 255 zeros: the key costs -log2 softmax per token; a decoy digit that differs costs 20
    # nats more (logit 0 against 20), one that happens to match the same as the key.
    per_token = -math.log2(math.exp(20) / (math.exp(20) + V - 1))
    # float32 log-softmax: log(1 - ε) for ε ≈ 1e-7 is resolved to about 1e-7 nats per token.
    assert asked.key_bits == pytest.approx(np.full(20, 6 * per_token), abs=1e-6)
    differing = (np.roll(w.tokens[:, -6:], 1, axis=0) != w.tokens[:, -6:]).sum(1)
    expected = 6 * per_token + differing * 20 / math.log(2)
    assert asked.decoy_bits == pytest.approx(expected, rel=1e-6)
    assert asked.retrieval_bits == pytest.approx(float((expected - 6 * per_token).mean()), rel=1e-6)


def test_a_model_that_ignores_the_needle_retrieves_nothing() -> None:
    w = passkey.passkey_windows(Bytes(), 160, per_depth=2, seed=2)
    asked = passkey.retrieval(Guesser(), w)
    assert not asked.hits.any() and asked.accuracy == 0.0
    assert asked.key_bits == pytest.approx(np.full(10, 6 * math.log2(V)), abs=1e-9)
    assert asked.retrieval_bits == 0.0
