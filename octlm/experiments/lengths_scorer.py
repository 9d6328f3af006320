"""Scoring a model at any length on one held-out text: the length experiment's scorer, also used by `extend`
and `octlm score`.

The held-out text is a context prefix of S validation tokens, then N scored targets (`EvalText`); a length L
is cut into windows in one of two modes (`windows_for`): `windows` (non-overlapping, every token scored) or
`sliding` (every L // 2 tokens, only the last L // 2 targets scored). `score` sums the next-token loss of
every window in bits per byte (nats / ln 2 / UTF-8 bytes of the scored tokens, EOT 0 bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from octlm.errors import UserError
from octlm.hashing import eval_text_sha256
from octlm.training.scoring import Score, summed_loss

MODES = ("windows", "sliding")


@dataclass
class EvalText:
    """The held-out slice every length is scored on.

    `tokens[start + 1 : start + count + 1]` are the scored targets; the `start` tokens before them are context
    for the sliding windows. `token_bytes[id]` is the UTF-8 length of token `id` (EOT: 0).
    """

    tokens: np.ndarray  # [start + count + 1] int64
    start: int
    count: int
    token_bytes: np.ndarray  # [V] int64

    def bytes_of(self, targets: np.ndarray) -> int:
        return int(self.token_bytes[targets].sum())

    @property
    def sha256(self) -> str:
        """What a grid records of the text its cells are scored on (`octlm.hashing.eval_text_sha256`)."""
        return eval_text_sha256(self.tokens, self.token_bytes)


def sliding_part(length: int) -> int:
    """How many final targets of a sliding window of `length` tokens are scored (also the stride): L // 2."""
    return max(1, length // 2)


def make_eval_text(val: np.ndarray, tokenizer: Any, lengths: Sequence[int], windows: int) -> EvalText:
    """The first `S + N + 1` validation tokens; S: the longest sliding context, N: windows × max(lengths)."""
    start = max(length - sliding_part(length) for length in lengths)
    count = windows * max(lengths)
    if len(val) < start + count + 1:
        raise UserError(
            f"the validation split has {len(val):,} tokens, fewer than the {start + count + 1:,} the "
            f"evaluation needs ({windows} windows of {max(lengths)} plus {start} of context); use fewer "
            "--eval-windows, shorter --eval-lengths or a bigger corpus"
        )
    sizes = np.array(
        [0 if i == tokenizer.eot_id else len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)]
    )
    return EvalText(
        np.asarray(val[: start + count + 1]).astype(np.int64), start, count, sizes.astype(np.int64)
    )


def windows_for(text: EvalText, length: int, mode: str) -> tuple[np.ndarray, int]:
    """Window start offsets `[n]` into `text.tokens`, and how many final targets of each window are scored.

    windows: non-overlapping, covering the N targets (a remainder shorter than `length` is dropped).
    sliding: every h = L // 2 tokens, window ends at start + h, start + 2h, ...; the last h targets scored.
    """
    if mode == "windows":
        return text.start + length * np.arange(text.count // length), length
    if mode == "sliding":
        h = sliding_part(length)
        ends = text.start + h * np.arange(1, text.count // h + 1)
        return ends - length, h
    raise UserError(f"unknown evaluation mode {mode!r}; choose one of {', '.join(MODES)}")


@torch.inference_mode()
def score(model: torch.nn.Module, text: EvalText, length: int, mode: str, batch_tokens: int = 8192) -> Score:
    """Summed next-token loss over the scored targets of every window of `length` tokens.

    Batches of `[batch_tokens // length, length]` windows go through `octlm.training.scoring.summed_loss`; the
    Score holds the nats (float64), the scored targets and their UTF-8 bytes.
    """
    starts, scored = windows_for(text, length, mode)
    rows = max(1, batch_tokens // length)
    offsets = np.arange(length + 1)
    nats, tokens, nbytes = 0.0, 0, 0
    for first in range(0, len(starts), rows):
        chunk = text.tokens[starts[first : first + rows, None] + offsets]  # [b, L + 1]
        x, y = torch.from_numpy(chunk[:, :-1]), torch.from_numpy(chunk[:, 1:])
        nats += float(summed_loss(model, x, y, last=scored))
        tokens += chunk.shape[0] * scored
        nbytes += text.bytes_of(chunk[:, -scored:])
    return Score(nats=nats, tokens=tokens, bytes=nbytes)
