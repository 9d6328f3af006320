"""ALiBi and T5 (octlm/positions/bias.py): T5's module reads its table by bucket, each scheme's bias worked out by
hand, ALiBi's slopes are not saved, and T5's config problems at the edge of the exact range."""

from __future__ import annotations

import pytest
import torch
from decoders import small
from references import t5_bucket_reference

from octlm.positions.bias import AlibiPositions, T5Positions

# ------------------------------------------------------------------------------------------------------------
# T5's module against the bucket rule


def test_t5_module_bias_reads_the_table_by_bucket() -> None:
    torch.manual_seed(6)
    scheme = T5Positions(3, num_buckets=8, max_distance=16)
    q_pos, k_pos = torch.arange(20, 25), torch.arange(25)
    bias = scheme.bias(q_pos, k_pos)
    table = scheme.table.weight.detach().numpy()
    for h in range(3):
        for i, qp in enumerate(q_pos.tolist()):
            for kp in range(25):
                if kp > qp:
                    assert bias[h, i, kp] == float("-inf")
                else:
                    assert bias[h, i, kp].item() == table[t5_bucket_reference(kp - qp, 8, 16), h]


# ------------------------------------------------------------------------------------------------------------
# Exact values, worked out by hand


def test_t5_positions_defaults_and_bias_by_hand():
    t5 = T5Positions(2)
    assert (t5.num_buckets, t5.max_distance, tuple(t5.table.weight.shape)) == (32, 128, (32, 2))
    with torch.no_grad():
        t5.table.weight.copy_(torch.arange(64, dtype=torch.float32).view(32, 2))
    bias = t5.bias(torch.tensor([113]), torch.tensor([0, 100, 113, 114]))  # distances 113, 13, 0, -1
    inf = float("-inf")
    assert bias.tolist() == [
        [[62.0, 26.0, 0.0, inf]],
        [[63.0, 27.0, 1.0, inf]],
    ]  # row = bucket, column = head


def test_alibi_scheme_bias_by_hand():
    bias = AlibiPositions(2).bias(torch.tensor([2]), torch.tensor([0, 2, 3]))  # slopes 1/16, 1/256
    assert bias.tolist() == [[[-2 / 16, 0.0, float("-inf")]], [[-2 / 256, 0.0, float("-inf")]]]


# ------------------------------------------------------------------------------------------------------------
# ALiBi's buffers and T5's config problems at their edges


def test_alibi_slopes_are_not_saved() -> None:
    # Rebuilt from n_heads: a checkpoint holds no slopes, so a change of formula never meets stale ones.
    assert list(AlibiPositions(4).state_dict()) == []


@pytest.mark.parametrize(
    "buckets, max_distance, half",
    [(2, 1, 1), (32, 16, 16), (33, 16, 16), (3, 1, 1)],
)
def test_t5_problems_at_the_edge_of_the_exact_range(buckets: int, max_distance: int, half: int) -> None:
    config = small("t5", t5_buckets=buckets, t5_max_distance=max_distance)
    assert T5Positions.problems(config) == [
        f"model.t5_max_distance = {max_distance} must be larger than half of model.t5_buckets ({half}), "
        "the range of exact buckets"
    ]
    assert T5Positions.problems(small("t5", t5_buckets=buckets, t5_max_distance=max_distance + 1)) == []


def test_t5_problems_leave_one_bucket_alone() -> None:
    assert T5Positions.problems(small("t5", t5_buckets=1, t5_max_distance=0)) == []
