"""The chunked head + cross-entropy (octlm/model/loss.py) against PyTorch's own `F.cross_entropy` and autograd."""

from __future__ import annotations

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
    config = ModelConfig(vocab_size=300, d_model=32, n_layers=2, n_heads=4, context_length=16, d_ff=64,
                         position=position, tie_embeddings=tied)  # fmt: skip
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
