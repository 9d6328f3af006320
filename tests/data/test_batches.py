"""Batches from token streams: random packed blocks for training, fixed non-overlapping eval blocks, and
sliding windows (octlm/data/cache.py). The token files themselves are in tests/data/test_cache.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from octlm.data.batches import eval_blocks, random_blocks
from octlm.errors import UserError

TOKENS = np.array([10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], dtype=np.uint16)  # 11 tokens


def test_random_blocks_are_shifted_pairs_from_every_offset() -> None:
    generator = torch.Generator().manual_seed(0)
    x, y = random_blocks(TOKENS, block=3, batch_size=64, generator=generator)
    assert x.shape == y.shape == (64, 3) and x.dtype == y.dtype == torch.int64
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        start = row_x[0] - 10
        assert row_x == TOKENS[start : start + 3].tolist()
        assert row_y == TOKENS[start + 1 : start + 4].tolist()
    # 11 tokens, block 3: starts 0..7, so first inputs 10..17 and last targets up to 20.
    assert set(x[:, 0].tolist()) == {10, 11, 12, 13, 14, 15, 16, 17}
    again = random_blocks(TOKENS, 3, 64, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], x) and torch.equal(again[1], y)


def test_eval_blocks_are_fixed_non_overlapping_and_hand_checked() -> None:
    batches = list(eval_blocks(TOKENS, block=3, max_blocks=10, batch_size=2))
    inputs = torch.cat([b[0] for b in batches]).tolist()
    targets = torch.cat([b[1] for b in batches]).tolist()
    assert [b[0].shape[0] for b in batches] == [2, 1]
    assert inputs == [[10, 11, 12], [13, 14, 15], [16, 17, 18]]
    assert targets == [[11, 12, 13], [14, 15, 16], [17, 18, 19]]
    again = list(eval_blocks(TOKENS, block=3, max_blocks=10, batch_size=2))
    assert all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, again, strict=True)
    )
    # Fewer blocks than available: spread over the stream (first and last), not the first two.
    ((x, y),) = list(eval_blocks(TOKENS, block=3, max_blocks=2))
    assert x.tolist() == [[10, 11, 12], [16, 17, 18]] and y.tolist() == [[11, 12, 13], [17, 18, 19]]


def test_blocks_need_one_more_token_than_the_block() -> None:
    short = TOKENS[:4]
    list(eval_blocks(short, block=3, max_blocks=1))  # exactly block + 1 tokens is enough
    with pytest.raises(UserError, match="needs 5"):
        random_blocks(short, 4, 2, torch.Generator())
    with pytest.raises(UserError, match="too few"):
        list(eval_blocks(short, block=4, max_blocks=1))
