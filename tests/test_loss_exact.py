"""Exact expected values for octlm/model/loss.py, written to kill its mutants (scripts/mutation, docs/MUTANTS.md).

The reference is the plain computation in float64 (full logits, `F.cross_entropy`, autograd), or numbers worked
out by hand; never the chunked code itself.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from octlm.model.loss import linear_cross_entropy


def _inputs(n: int, c: int, v: int, dtype=torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(n, c, generator=g) * 2).to(dtype)
    w = torch.randn(v, c, generator=g).to(dtype)
    t = torch.randint(0, v, (n,), generator=g)
    return h, w, t


def test_a_hand_computed_loss_and_gradient():
    # h = [[1, 0]], W = [[0, 0], [ln 3, 0]] -> logits [0, ln 3], softmax [1/4, 3/4]; target 0 -> loss ln 4.
    h = torch.tensor([[1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[0.0, 0.0], [math.log(3), 0.0]], dtype=torch.float64, requires_grad=True)
    loss = linear_cross_entropy(h, w, torch.tensor([0]))
    assert loss.item() == pytest.approx(math.log(4), abs=1e-15)
    loss.backward()
    # dL/dlogits = softmax - onehot = [-3/4, 3/4]; dh = G W = [3/4 ln 3, 0]; dW = Gᵀ h = [[-3/4, 0], [3/4, 0]].
    torch.testing.assert_close(h.grad, torch.tensor([[0.75 * math.log(3), 0.0]], dtype=torch.float64))
    torch.testing.assert_close(w.grad, torch.tensor([[-0.75, 0.0], [0.75, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("which", ["h", "weight"])
def test_only_one_input_needing_a_gradient_still_gets_it(which):
    # The gradients are computed when either input wants one (a frozen head, or frozen hidden states).
    h, w, t = _inputs(12, 5, 9)
    (h if which == "h" else w).requires_grad_()
    loss = linear_cross_entropy(h, w, t, 5)
    (got,) = torch.autograd.grad(loss, h if which == "h" else w)
    hr, wr = h.detach().requires_grad_(), w.detach().requires_grad_()
    ref = torch.autograd.grad(F.cross_entropy(hr @ wr.t(), t), hr if which == "h" else wr)[0]
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-13)  # measured 1e-16


def test_float64_gradcheck_through_the_hand_written_backward():
    h, w, t = _inputs(6, 3, 4)
    h.requires_grad_(), w.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: linear_cross_entropy(a, b, t, 4), (h, w))


def test_bfloat16_inputs_give_a_float32_loss_and_bfloat16_gradients():
    h, w, t = _inputs(16, 8, 32, torch.bfloat16)
    h.requires_grad_(), w.requires_grad_()
    loss = linear_cross_entropy(h, w, t, 5)
    assert loss.dtype == torch.float32
    loss.backward()
    assert h.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.bfloat16
    ref = F.cross_entropy(h.detach().double() @ w.detach().double().t(), t)
    assert loss.item() == pytest.approx(ref.item(), abs=1e-5)  # float32 work on bf16 values; measured 5e-7


def test_float64_stays_float64_and_the_loss_needs_no_grad_without_inputs_that_do():
    h, w, t = _inputs(10, 4, 7)
    loss = linear_cross_entropy(h, w, t)
    assert loss.dtype == torch.float64 and not loss.requires_grad
    assert loss.item() == pytest.approx(F.cross_entropy(h @ w.t(), t).item(), abs=1e-14)


def test_the_default_chunk_covers_every_row_with_a_huge_vocabulary():
    # V > 2**20: 2**20 // V is 0, and at least one row per chunk must still be taken.
    h = torch.zeros(2, 1, dtype=torch.float64)
    w = torch.zeros((1 << 20) + 1, 1, dtype=torch.float64)
    loss = linear_cross_entropy(h, w, torch.tensor([0, 5]))
    assert loss.item() == pytest.approx(math.log((1 << 20) + 1), abs=1e-12)  # uniform over V classes


@pytest.mark.parametrize(
    "shapes",
    [
        ((3, 4), (5, 4), (3,)),
        ((3, 4, 1), (5, 4), (3,)),
        ((3, 4), (5, 4, 1), (3,)),
        ((3, 4), (5, 4), (2,)),
        ((3, 4), (5, 3), (3,)),
        ((3, 4), (5, 4), (3, 1)),
    ],  # fmt: skip
)
def test_each_shape_check_on_its_own(shapes):
    h_shape, w_shape, t_shape = shapes
    args = torch.zeros(h_shape), torch.zeros(w_shape), torch.zeros(t_shape, dtype=torch.long)
    if shapes == ((3, 4), (5, 4), (3,)):
        assert linear_cross_entropy(*args).item() == pytest.approx(math.log(5), abs=1e-6)
        return
    with pytest.raises(ValueError, match=r"wants h \[N, C\], weight \[V, C\], targets \[N\]; got \[") as err:
        linear_cross_entropy(*args)
    assert f"got {list(h_shape)}, {list(w_shape)}, {list(t_shape)}" in str(err.value)


@pytest.mark.filterwarnings("error")
def test_each_chunk_writes_its_own_rows_of_the_gradient_without_a_resize():
    # PyTorch still resizes a wrong-sized `out=` view in place (with a deprecation warning), which would hide a
    # wrong slice today and break it tomorrow; the warning is an error here.
    h, w, t = _inputs(7, 3, 5)
    h.requires_grad_()
    (got,) = torch.autograd.grad(linear_cross_entropy(h, w, t, 3), h)  # chunks of 3, 3 and 1 rows
    hr = h.detach().requires_grad_()
    torch.testing.assert_close(
        got, torch.autograd.grad(F.cross_entropy(hr @ w.t(), t), hr)[0], rtol=0, atol=1e-13
    )
