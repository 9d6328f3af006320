"""Batches from a token stream (`octlm.data.cache`'s memmaps, or any sequence of ids).

`random_blocks` samples packed blocks at random offsets (training: every position of the context sees text);
`eval_blocks` gives a fixed set of non-overlapping blocks (evaluation, identical every call).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from octlm.errors import UserError


def _check_length(tokens: Sequence[int] | np.ndarray, block: int, what: str) -> None:
    if block < 1:
        raise UserError(f"{what} length must be at least 1, got {block}")
    if len(tokens) < block + 1:
        raise UserError(
            f"the token stream has {len(tokens):,} tokens, too few for one {what} of {block} "
            f"(needs {block + 1}); "
            "use a bigger corpus or a shorter context_length"
        )


def random_blocks(
    tokens: np.ndarray, block: int, batch_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Blocks at random offsets: int64 inputs `[B, T]` and targets `[B, T]` (inputs shifted by one).

    Every start from 0 to len - T - 1 is equally likely, so any token can land at any position of the context.
    """
    _check_length(tokens, block, "block")
    starts = torch.randint(0, len(tokens) - block, (batch_size,), generator=generator).numpy()
    rows = np.asarray(tokens)[starts[:, None] + np.arange(block + 1)].astype(np.int64)  # [B, T + 1]
    chunk = torch.from_numpy(rows)
    return chunk[:, :-1], chunk[:, 1:]


def eval_blocks(
    tokens: np.ndarray, block: int, max_blocks: int, batch_size: int = 16
) -> Iterator[tuple[Tensor, Tensor]]:
    """Fixed non-overlapping blocks in batches of int64 inputs `[b, T]` and targets `[b, T]`, b <= batch_size.

    When the stream holds more than `max_blocks` blocks, the chosen ones are spread evenly over it, so the
    estimate covers the whole validation set rather than its first documents. Same blocks on every call.
    """
    _check_length(tokens, block, "block")
    available = (len(tokens) - 1) // block
    count = min(max_blocks, available)
    chosen = np.unique(np.linspace(0, available - 1, count).round().astype(np.int64)) if count > 0 else []
    array = np.asarray(tokens)
    for first in range(0, len(chosen), batch_size):
        starts = np.asarray(chosen[first : first + batch_size]) * block
        rows = torch.from_numpy(array[starts[:, None] + np.arange(block + 1)].astype(np.int64))
        yield rows[:, :-1], rows[:, 1:]
