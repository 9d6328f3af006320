"""The chunked head + cross-entropy (octlm/model/loss.py) against PyTorch's own `F.cross_entropy` and autograd,
and with expected values worked out by hand (the hand-written backward, dtypes, chunking, shape checks)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from octlm.config import ModelConfig
from octlm.model.decoder import Decoder
from octlm.model.loss import linear_cross_entropy


def inputs(n: int, c: int, v: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(n, c, generator=g) * 2).to(dtype).requires_grad_()
    w = torch.randn(v, c, generator=g).to(dtype).requires_grad_()
    t = torch.randint(0, v, (n,), generator=g)
    return h, w, t


def reference(h, w, t, scale: float = 1.0):
    """Loss and gradients the plain way: full logits, F.cross_entropy, autograd."""
    loss = F.cross_entropy(h @ w.t(), t)
    return (loss.detach(), *torch.autograd.grad(loss * scale, (h, w)))


@pytest.mark.parametrize("chunk", [1, 7, 64, 300, 1000])
def test_loss_and_gradients_equal_cross_entropy_in_float64(chunk):
    # 300 rows: chunks of 7 and 64 leave a short last chunk; 300 and 1000 are one chunk.
    h, w, t = inputs(300, 24, 50, torch.float64)
    loss = linear_cross_entropy(h, w, t, chunk)
    got = (loss.detach(), *torch.autograd.grad(loss, (h, w)))
    for a, b in zip(got, reference(h, w, t), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_float32_within_1e5_and_the_default_chunking_splits_rows():
    h, w, t = inputs(2048, 64, 4096)  # default chunk: 2**20 / 4096 = 256 rows, so 8 chunks
    loss = linear_cross_entropy(h, w, t)
    got = (loss.detach(), *torch.autograd.grad(loss, (h, w)))
    assert loss.dtype == torch.float32
    for a, b in zip(got, reference(h, w, t), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_value_matches_a_numpy_log_sum_exp():
    h, w, t = inputs(40, 8, 30, torch.float64)
    logits = h.detach().numpy() @ w.detach().numpy().T
    top = logits.max(axis=1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
    expected = float(np.mean(lse - logits[np.arange(40), t.numpy()]))
    assert float(linear_cross_entropy(h, w, t, 16).detach()) == pytest.approx(expected, abs=1e-12)


def test_incoming_gradient_scales_both_gradients():
    h, w, t = inputs(50, 8, 20, torch.float64)
    got = torch.autograd.grad(linear_cross_entropy(h, w, t, 16) * -2.5, (h, w))
    for a, b in zip(got, reference(h, w, t, -2.5)[1:], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_without_grad_it_returns_the_loss_and_builds_no_graph():
    h, w, t = inputs(100, 8, 20)
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, t, 16)
    assert loss.grad_fn is None
    torch.testing.assert_close(loss, reference(h, w, t)[0], rtol=1e-6, atol=1e-6)


def test_autocast_does_not_lower_the_loss_precision():
    h, w, t = inputs(64, 16, 40)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = linear_cross_entropy(h, w, t, 16)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.detach(), reference(h, w, t)[0], rtol=1e-6, atol=1e-6)


def test_wrong_shapes_are_a_clear_error():
    h, w, t = inputs(10, 8, 20)
    with pytest.raises(ValueError, match=r"h \[N, C\], weight \[V, C\], targets \[N\]"):
        linear_cross_entropy(h, w, t[:5])
    with pytest.raises(ValueError, match="weight"):
        linear_cross_entropy(h, w[:, :4], t)


@pytest.mark.parametrize("position", ["learned", "rope", "alibi"])
@pytest.mark.parametrize("tied", [True, False])
def test_decoder_without_logits_gives_the_same_loss_and_parameter_gradients(position, tied):
    config = ModelConfig(
        vocab_size=300,
        d_model=32,
        n_layers=2,
        n_heads=4,
        context_length=16,
        d_ff=64,
        position=position,
        tie_embeddings=tied,
    )
    torch.manual_seed(0)
    model = Decoder(config)
    ids = torch.randint(0, 300, (3, 16))
    targets = torch.randint(0, 300, (3, 16))
    logits, plain = model(ids, targets)
    plain_grads = torch.autograd.grad(plain, list(model.parameters()))
    none, chunked = model(ids, targets, return_logits=False)
    chunked_grads = torch.autograd.grad(chunked, list(model.parameters()))
    assert logits.shape == (3, 16, 300) and none is None
    torch.testing.assert_close(chunked, plain, rtol=1e-6, atol=1e-6)
    for a, b in zip(chunked_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk", [1, 4, 13])
def test_gradients_pass_gradcheck_in_float64(chunk):
    """The hand-written backward against finite differences, not against another autograd path: h, weight and
    the incoming gradient (the loss is scaled by a non-trivial factor inside the checked function). Marked
    once-differentiable, so there is no second derivative to gradgradcheck."""
    h, w, t = inputs(13, 6, 11, torch.float64, seed=3)
    assert torch.autograd.gradcheck(
        lambda h, w: linear_cross_entropy(h, w, t, chunk) * -1.7, (h, w), eps=1e-6, atol=1e-8
    )


# ------------------------------------------------------------------------------------------------------------
# Exact values, worked out by hand


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
    ],
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
