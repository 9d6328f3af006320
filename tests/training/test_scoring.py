"""Exact expected values for octlm/training/scoring.py, written to kill its mutants (scripts/mutation, docs/MUTANTS.md).

A stub model returns logits chosen by hand, so every loss below is a closed form (log of a sum of exps), not a
second run of the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from octlm.runtime import Dist
from octlm.training.scoring import Score, evaluate, summed_loss

V = 4


class Stub(nn.Module):
    """Logits `[b, T, V]` with `x[b, t]` at the class `x[b, t] % V` and 0 elsewhere, in `dtype`."""

    def __init__(self, dtype=torch.float32) -> None:
        super().__init__()
        self.dtype = dtype
        self.calls: list[Tensor] = []
        self.modes: list[bool] = []

    def forward(self, x: Tensor) -> tuple[Tensor, None]:
        self.calls.append(x)
        self.modes.append(self.training)
        logits = torch.zeros(*x.shape, V, dtype=torch.float64)
        logits.scatter_(-1, (x % V).unsqueeze(-1), x.unsqueeze(-1).double())
        return logits.to(self.dtype), None


def nll(a: float, hit: bool) -> float:
    """Cross-entropy of logits with `a` at one class and 0 at the V - 1 others: the target is that class or not."""
    lse = math.log(math.exp(a) + V - 1)
    return lse - a if hit else lse


def test_score_figures_by_hand():
    s = Score(nats=12 * math.log(2), tokens=3, bytes=4.0)
    assert s.loss == pytest.approx(4 * math.log(2), abs=1e-15)
    assert s.perplexity == pytest.approx(16.0, abs=1e-12)
    assert s.bpb == pytest.approx(3.0, abs=1e-15)  # 12 bits over 4 bytes


@pytest.mark.parametrize("nats", [700.5, 5000.0])
def test_perplexity_stops_at_exp_700(nats):
    assert Score(nats=nats, tokens=1, bytes=1.0).perplexity == math.exp(700.0)
    assert Score(nats=699.0, tokens=1, bytes=1.0).perplexity == pytest.approx(math.exp(699.0), rel=1e-15)


def test_summed_loss_is_the_float64_sum_of_each_target():
    x = torch.tensor([[1, 2, 3], [5, 6, 7]])
    y = torch.tensor([[1, 0, 0], [1, 1, 3]])  # hit, miss, miss / hit, miss, hit (class = x % 4)
    got = summed_loss(Stub(), x, y)
    assert got.dtype == torch.float64
    want = nll(1, True) + nll(2, False) + nll(3, False) + nll(5, True) + nll(6, False) + nll(7, True)
    assert got.item() == pytest.approx(want, abs=1e-6)  # float32 logits; measured 1e-7


@pytest.mark.parametrize("last", [1, 2])
def test_last_scores_the_last_targets_of_each_row(last):
    x = torch.tensor([[1, 2, 3], [5, 6, 7]])
    y = torch.tensor([[1, 0, 0], [1, 1, 3]])
    per = [[nll(1, True), nll(2, False), nll(3, False)], [nll(5, True), nll(6, False), nll(7, True)]]
    want = sum(sum(row[-last:]) for row in per)
    assert summed_loss(Stub(), x, y, last=last).item() == pytest.approx(want, abs=1e-6)


def test_low_precision_logits_are_upcast_before_the_loss():
    # bf16 holds 9.0 exactly, but a bf16 cross-entropy rounds the loss to 8 bits (error ~1e-3).
    x, y = torch.tensor([[9]]), torch.tensor([[0]])
    got = summed_loss(Stub(torch.bfloat16), x, y).item()
    assert got == pytest.approx(nll(9, False), abs=1e-6)  # measured 0 (float32 on exact inputs)


def test_evaluate_sums_every_batch_and_restores_training_mode():
    model = Stub()
    model.train()
    batches = [(torch.tensor([[1, 2]]), torch.tensor([[1, 1]])), (torch.tensor([[6]]), torch.tensor([[2]]))]
    s = evaluate(model, batches, torch.device("cpu"), bytes_per_token=2.5)
    want = nll(1, True) + nll(2, False) + nll(6, True)
    assert s.nats == pytest.approx(want, abs=1e-6) and s.tokens == 3 and s.bytes == 7.5
    assert model.modes == [False, False] and model.training  # scored in eval mode, then put back
    model.eval()
    evaluate(model, batches, torch.device("cpu"), bytes_per_token=1.0)
    assert not model.training


@pytest.fixture
def one_process_group(tmp_path):
    """A real gloo group of one process: `all_reduce` runs (and sums over the one rank)."""
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("rank", [0, 1])
def test_evaluate_takes_every_world_th_batch_on_each_rank(rank, one_process_group):
    # Dist says two ranks; the group has one, so the all-reduce leaves this rank's sums as they are.
    model = Stub()
    batches = [(torch.tensor([[i]]), torch.tensor([[0]])) for i in range(5)]
    s = evaluate(model, batches, torch.device("cpu"), 1.0, Dist(rank=rank, world=2))
    assert [int(c) for c in model.calls] == list(range(rank, 5, 2))
    assert s.tokens == len(range(rank, 5, 2))
    assert s.nats == pytest.approx(sum(nll(i, i % V == 0) for i in range(rank, 5, 2)), abs=1e-6)
