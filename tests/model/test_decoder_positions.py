"""Explicit positions (`Decoder.forward(..., positions=)`), which randomized positions (Ruoss et al., 2023) need:
cached decoding at a sorted random subset of a longer range equals the full pass, for every scheme; the default
is 0 .. T - 1; the schemes that read only distances cannot tell a shifted sequence from the original, the others
can; and every misuse is one UserError naming the value."""

from __future__ import annotations

import pytest
import torch
from decoders import randomized, small

from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.positions import SCHEMES

RANGE = 40  # positions are drawn from 0 .. RANGE - 1, five times the tokens
RELATIVE = ["rope", "p-rope", "xpos", "alibi", "t5", "fire"]  # scores depend on the distance alone (FIRE's
# below its threshold L, 512 here, where every query divides by the same ψ(L))
ORDER_ONLY = ["cope", "fox", "path", "stick-breaking", "nope"]  # their position ids only order the keys
# The model runs in float64, but these schemes' position math is float32 by design (RoPE's cos/sin tables,
# FIRE's MLP): other positions or other query chunks round differently, by up to 6e-8 measured.
FLOAT32_MATH = ["rope", "p-rope", "xpos", "fire"]


def tolerance(scheme: str) -> float:
    return 2e-7 if scheme in FLOAT32_MATH else 1e-12


def model_for(scheme: str) -> Decoder:
    return randomized(small(scheme, context_length=RANGE, t5_buckets=8, t5_max_distance=16), seed=1).double()


def sorted_subset(length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(RANGE, generator=generator)[:length].sort().values


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_cached_decoding_at_random_positions_equals_the_full_pass(scheme: str) -> None:
    model, ids = model_for(scheme), torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    positions = sorted_subset(8, seed=2)
    assert positions[-1] > 8  # a gap somewhere: not 0 .. 7
    full, _ = model(ids, positions=positions)
    cache = model.new_cache(2, capacity=2)  # grows on the way
    parts = [
        model(ids[:, a:b], cache=cache, positions=positions[a:b])[0] for a, b in ((0, 3), (3, 4), (4, 8))
    ]
    assert cache.length == 8 and torch.equal(cache.positions[:8], positions)
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=tolerance(scheme))


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_the_default_positions_are_zero_to_t(scheme: str) -> None:
    model, ids = model_for(scheme), torch.randint(0, 64, (1, 7), generator=torch.Generator().manual_seed(3))
    assert torch.equal(model(ids)[0], model(ids, positions=torch.arange(7))[0])


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_a_shift_changes_the_logits_exactly_when_the_scheme_reads_absolute_positions(scheme: str) -> None:
    model, ids = model_for(scheme), torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(4))
    base = torch.tensor([0, 2, 3, 7, 8, 12])
    at, shifted, gapped = (model(ids, positions=p)[0] for p in (base, base + 9, torch.arange(6)))
    if scheme in RELATIVE + ORDER_ONLY:
        torch.testing.assert_close(shifted, at, rtol=0, atol=tolerance(scheme))
    else:  # learned, sinusoidal
        assert (shifted - at).abs().max() > 1e-3
    if scheme in ORDER_ONLY:
        torch.testing.assert_close(gapped, at, rtol=0, atol=tolerance(scheme))
    else:  # other distances, other scores
        assert (gapped - at).abs().max() > 1e-3


def test_learned_positions_read_the_rows_they_name() -> None:
    model = model_for("learned")
    x = torch.zeros(1, 3, model.config.d_model, dtype=torch.float64)
    rows = model.positions.table.weight
    assert torch.equal(model.positions.embed(x, torch.tensor([1, 5, 39])), rows[[1, 5, 39]].unsqueeze(0))


@pytest.mark.parametrize(
    ("positions", "cached", "message"),
    [
        (torch.tensor([0.0, 1.0, 2.0]), 0, "positions must be a 1-D int64 tensor, got torch.float32"),
        (torch.tensor([[0, 1, 2]]), 0, "positions must be a 1-D int64 tensor"),
        (
            torch.tensor([0, 2, 2]),
            0,
            "positions must increase, past the cached ones (the last at -1); got [0, 2, 2]",
        ),
        (torch.tensor([3, 1, 5]), 0, "positions must increase"),
        (torch.tensor([4, 6, 9]), 2, "past the cached ones (the last at 5); got [4, 6, 9]"),
        (torch.tensor([5, 6, 7]), 2, "past the cached ones (the last at 5); got [5, 6, 7]"),
        (torch.arange(9, -1, -1), 0, "got [9, 8, 7, 6, 5, 4, 3, 2]"),  # the first 8, not all of them
        ([0, 1, 2], 0, "positions must be a 1-D int64 tensor, got <class 'list'>"),
        (torch.tensor([0, 1]), 0, "2 positions for 3 tokens; give one per token"),
        (torch.tensor([0, 1, RANGE]), 0, str(RANGE + 1)),  # the learned table has RANGE rows
    ],
)
def test_bad_positions_are_one_user_error(positions: torch.Tensor | list, cached: int, message: str) -> None:
    model, ids = model_for("learned"), torch.zeros(1, 3, dtype=torch.long)
    cache = None
    if cached:
        cache = model.new_cache(1)
        model(ids[:, :cached], cache=cache, positions=torch.tensor([1, 5]))
    with pytest.raises(UserError) as error:
        model(ids, cache=cache, positions=positions)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_cache_s_positions_grow_with_its_keys() -> None:
    """Decoding past the cache's capacity doubles keys, values and positions alike; the positions stay put."""
    model = model_for("rope")
    cache = model.new_cache(1, capacity=2)
    model(torch.zeros(1, 3, dtype=torch.long), cache=cache, positions=torch.tensor([2, 7, 11]))
    assert cache.positions.shape[0] == cache.k.shape[3] == cache.v.shape[3] == 4
    assert cache.positions[:3].tolist() == [2, 7, 11]
