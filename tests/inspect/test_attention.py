"""Attention against distance (octlm/inspect/attention.py): the recorded probabilities are the model's own, and
every figure equals a NumPy recomputation from them; ALiBi's locality at initialisation, NoPE's uniformity."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from references import paper_alibi_slopes

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.inspect import attention
from octlm.inspect.figures import plot_attention_distance
from octlm.inspect.render import render_markdown
from octlm.model.attention_record import recording_attention
from octlm.model.decoder import Decoder
from octlm.positions import scheme_names

T, HEADS, LAYERS, VOCAB = 12, 4, 2, 64


def tiny(position: str, seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    config = ModelConfig(
        vocab_size=VOCAB,
        d_model=32,
        context_length=T,
        n_layers=LAYERS,
        n_heads=HEADS,
        d_ff=64,
        position=position,
    )
    return Decoder(config).eval()


def windows(count: int = 5, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (count, T)).astype(np.int64)


def np_layer0_attention(model: Decoder, ids: np.ndarray) -> np.ndarray:
    """Layer 0's ALiBi attention `[B, H, T, T]` from the weights, in NumPy float64: LayerNorm, q and k, scores
    q·k/√D - slope·(i - j), the causal mask, softmax."""
    p = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    x = p["token_embedding.weight"][ids]  # [B, T, C]; ALiBi adds nothing to the input
    h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    h = h * p["blocks.0.norm1.weight"] + p["blocks.0.norm1.bias"]
    qkv = h @ p["blocks.0.attn.qkv.weight"].T + p["blocks.0.attn.qkv.bias"]
    D = 32 // HEADS
    q = qkv[..., :32].reshape(len(ids), T, HEADS, D).transpose(0, 2, 1, 3)
    k = qkv[..., 32:64].reshape(len(ids), T, HEADS, D).transpose(0, 2, 1, 3)
    i = np.arange(T)
    distance = i[:, None] - i[None, :]
    bias = -np.array(paper_alibi_slopes(HEADS))[:, None, None] * distance
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D) + bias
    scores = np.where(distance >= 0, scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_recorded_probabilities_are_the_models_own() -> None:
    model, ids = tiny("alibi"), windows()
    probs = attention.attention_probabilities(model, torch.from_numpy(ids))
    assert len(probs) == LAYERS and all(p.shape == (5, HEADS, T, T) for p in probs)
    assert np.abs(probs[0].double().numpy() - np_layer0_attention(model, ids)).max() < 1e-6  # measured 6e-8
    # The recording swaps the attention function back: the plain forward pass is untouched.
    with torch.no_grad():
        plain = model(torch.from_numpy(ids))[0]
    assert torch.equal(plain, model(torch.from_numpy(ids))[0])


def test_rows_sum_to_one_over_distances_0_to_i() -> None:
    for p in attention.attention_probabilities(tiny("alibi"), torch.from_numpy(windows())):
        p = p.double().numpy()
        for i in range(T):
            assert np.abs(sum(p[:, :, i, i - d] for d in range(i + 1)) - 1).max() < 1e-6
            assert (p[:, :, i, i + 1 :] == 0).all()  # the future gets exactly nothing


def test_figures_equal_a_numpy_recomputation() -> None:
    model, ids = tiny("alibi", seed=3), windows(7)
    probs = [p.double().numpy() for p in attention.attention_probabilities(model, torch.from_numpy(ids))]
    numbers = attention.attention_by_distance(model, ids)
    assert numbers["windows"] == 7 and numbers["length"] == T
    assert numbers["mean"].shape == numbers["lift"].shape == (LAYERS, HEADS, T)
    assert numbers["entropy"].shape == numbers["mean_distance"].shape == (LAYERS, HEADS)
    for layer in range(LAYERS):
        for head in range(HEADS):
            rows = probs[layer][:, head]  # [W, T, T]
            for d in range(T):  # plain loops: every (window, query) that sees distance d
                seen = [(w, i) for w in range(7) for i in range(d, T)]
                mean = sum(rows[w, i, i - d] for w, i in seen) / len(seen)
                lift = sum((i + 1) * rows[w, i, i - d] for w, i in seen) / len(seen)
                assert abs(numbers["mean"][layer, head, d] - mean) < 1e-12
                assert abs(numbers["lift"][layer, head, d] - lift) < 1e-12
            entropy = spread = 0.0
            for w in range(7):
                for i in range(T):
                    entropy -= sum(p * math.log(p) for p in rows[w, i, : i + 1])
                    spread += sum(rows[w, i, j] * (i - j) for j in range(i + 1))
            assert abs(numbers["entropy"][layer, head] - entropy / (7 * T)) < 1e-12
            assert abs(numbers["mean_distance"][layer, head] - spread / (7 * T)) < 1e-12
    assert numbers["uniform_entropy"] == pytest.approx(sum(math.log(i + 1) for i in range(T)) / T, abs=1e-15)


def test_batches_do_not_change_the_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    model, ids = tiny("rope"), windows(5)
    whole = attention.attention_by_distance(model, ids)
    monkeypatch.setattr(attention, "MAX_RECORDED", LAYERS * HEADS * T * T * 2)  # two windows per batch
    split = attention.attention_by_distance(model, ids)
    for key in ("mean", "lift", "entropy", "mean_distance"):
        assert np.abs(whole[key] - split[key]).max() < 1e-12


def test_alibi_at_init_is_local_and_nope_is_uniform() -> None:
    alibi = attention.attention_by_distance(tiny("alibi"), windows(8))
    steepest = int(np.argmax(paper_alibi_slopes(HEADS)))
    for layer in range(LAYERS):
        assert (np.diff(alibi["mean"][layer, steepest]) < 0).all()
        assert (np.diff(alibi["lift"][layer, steepest]) < 0).all()  # falls faster than uniform attention
        assert alibi["lift"][layer, steepest, 1] > 1.3
    # NoPE at init: scores near 0, so near-uniform rows (lift ≈ 1, entropy ≈ the uniform entropy), yet the
    # plain mean falls with distance all the same: why the report shows the lift.
    nope = attention.attention_by_distance(tiny("nope"), windows(8))
    assert np.abs(nope["lift"] - 1).max() < 0.05
    assert np.abs(nope["entropy"] - nope["uniform_entropy"]).max() < 0.01
    assert (np.diff(nope["mean"][0, 0]) < 0).all()


def test_windows_and_refusals() -> None:
    tokens = np.arange(50)
    assert attention.attention_windows(tokens, 10, 3).tolist() == [
        list(range(0, 10)),
        list(range(20, 30)),
        list(range(40, 50)),
    ]
    assert attention.attention_windows(tokens, 10, 99).shape == (5, 10)
    with pytest.raises(UserError, match="needs a window of 64 tokens, but the text has 50"):
        attention.attention_windows(tokens, 64, 4)
    with pytest.raises(UserError, match="use at most 1024 tokens"):
        attention.attention_probabilities(tiny("alibi"), torch.zeros(1, 1025, dtype=torch.long))


def test_section_and_figure(tmp_path: Path) -> None:
    numbers = attention.attention_by_distance(tiny("alibi"), windows(4))
    figure = plot_attention_distance(numbers["mean"], tmp_path / "attention.png")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = render_markdown(attention.attention_blocks(numbers, figure), tmp_path)
    assert "## Attention by distance" in text and "(attention.png)" in text
    lift = numbers["lift"]
    first = (
        f"| 0 | 0 | {numbers['mean_distance'][0, 0]:.2f} | {numbers['entropy'][0, 0]:.3f} | "
        f"{lift[0, 0, 0]:.3f} | {lift[0, 0, 1]:.3f} | {lift[0, 0, 2]:.3f} | {lift[0, 0, 4]:.3f} | "
        f"{lift[0, 0, 8]:.3f} |"
    )
    assert first in text
    assert attention.attention_blocks(None, None) == []
    skipped = render_markdown(attention.attention_blocks({"skipped": "no data"}, None), tmp_path)
    assert "Not measured: no data" in skipped


@pytest.mark.parametrize("position", scheme_names())
def test_every_scheme_gives_rows_that_sum_to_one(position: str) -> None:
    torch.manual_seed(0)
    nope = [] if position in ("learned", "sinusoidal") else [1]  # a NoPE layer where the scheme allows one
    config = ModelConfig(
        vocab_size=VOCAB,
        d_model=32,
        context_length=T,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=64,
        position=position,
        nope_layers=nope,
    )
    model, ids = Decoder(config).eval(), torch.from_numpy(windows(3))
    probs = attention.attention_probabilities(model, ids)
    record: list[torch.Tensor] = []
    with (
        torch.no_grad()
    ):  # the written-out softmax gives the logits of the model's own kernels (grouped KV heads)
        plain = model(ids)[0]
        with recording_attention(record):
            recorded = model(ids)[0]
    assert (plain - recorded).abs().max() < 1e-5 and all(
        torch.equal(a, b) for a, b in zip(probs, record, strict=True)
    )
    breaks = [position == "stick-breaking" and layer not in nope for layer in range(2)]
    for p, broken in zip(probs, breaks, strict=True):
        sums = p.sum(-1)
        assert p.shape == (3, 4, T, T)
        if broken:  # 1 - Π(1 - β) of the keys before the query: below 1, and 0 for the first (no key)
            assert sums.max() <= 1 + 1e-6 and (sums[..., 0] == 0).all() and sums[..., 1:].min() > 0
        else:
            assert (sums - 1).abs().max() < 1e-5
    numbers = attention.attention_by_distance(model, windows(3))
    # Per query the probabilities over distances sum to 1 (softmax) or to the row's mass (stick-breaking): so
    # do the lifts' plain means, summed with weights.
    total = (numbers["mean"] * (T - np.arange(T))).sum(-1) / T  # mean over queries of sum over distances
    mass = np.stack([p.sum(-1).double().mean((0, 2)).numpy() for p in probs])  # [L, H]
    assert np.abs(total - numbers["mass"]).max() < 1e-6 and np.abs(numbers["mass"] - mass).max() < 1e-6
    assert (np.abs(numbers["mass"] - 1).max(1) < 1e-6).tolist() == [not b for b in breaks]
