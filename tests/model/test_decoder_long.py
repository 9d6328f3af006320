"""Bias schemes at long contexts: attention with the bias built per query chunk (octlm.model.decoder.ChunkedBias)
against the whole `[H, T, T]` bias, forward and backward, with grouped KV heads and after a KV cache, and the
largest tensor a long forward allocates (counted op by op, not timed)."""

from __future__ import annotations

import pytest
import tiny
import torch

import octlm.model.decoder
from octlm.config import ModelConfig
from octlm.model.decoder import ChunkedBias, Decoder
from octlm.positions import build_positions

BIAS_SCHEMES = [
    ("fire", {"fire_hidden": 4, "fire_threshold": 8.0}),
    ("alibi", {}),
    ("t5", {"t5_buckets": 8, "t5_max_distance": 16}),
]  # small T5: log buckets reached
H = 4


def model_of(position: str, extra: dict, kv_heads: int = 0, seed: int = 0, **fields) -> Decoder:
    """A 2-layer model whose T5 table is N(0, 1), so that the bias moves the output well past the tolerance."""
    torch.manual_seed(seed)
    config = dict(vocab_size=64, d_model=32, context_length=8, n_layers=2, n_heads=H, d_ff=64)
    config.update(fields)
    model = Decoder(ModelConfig(position=position, n_kv_heads=kv_heads, **config, **extra))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("positions.table"):
                p.normal_()
    return model


def chunked(monkeypatch: pytest.MonkeyPatch, queries: int, keys: int) -> None:
    """Every bias goes by chunks of `queries` queries (for `keys` keys), from the first query-key pair on."""
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", 0)
    monkeypatch.setattr(octlm.model.decoder, "CHUNK_BIAS_ENTRIES", H * queries * keys)


def loss_and_grads(model: Decoder, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    model.zero_grad()
    logits, loss = model(ids[:, :-1], ids[:, 1:])
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize(("position", "extra"), BIAS_SCHEMES, ids=[s[0] for s in BIAS_SCHEMES])
def test_chunked_attention_equals_the_whole_bias_forward_and_backward(
    position: str, extra: dict, kv_heads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_of(position, extra, kv_heads).train()
    ids = torch.randint(0, 64, (2, 38), generator=torch.Generator().manual_seed(1))  # T = 37
    logits, loss, grads = loss_and_grads(model, ids)
    chunked(monkeypatch, 5, 37)  # 37 = 7 chunks of 5 + 2: the last chunk is short
    seen: list[int] = []
    rows = ChunkedBias.rows
    monkeypatch.setattr(ChunkedBias, "rows", lambda self, a, b: seen.append(b - a) or rows(self, a, b))
    logits_c, loss_c, grads_c = loss_and_grads(model, ids)
    assert seen == [5] * 7 + [2] + [5] * 7 + [2]  # both layers went by chunks
    # float32, O(1) logits, same kernels on different shapes: measured 2.4e-7 (logits), 3e-8 (gradients).
    torch.testing.assert_close(logits_c, logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(loss_c, loss, rtol=0, atol=1e-6)
    assert grads.keys() == grads_c.keys()
    for name in grads:
        torch.testing.assert_close(grads_c[name], grads[name], rtol=0, atol=1e-5, msg=name)
    if position == "t5":  # the learned table gets its gradient through every chunk
        assert grads_c["positions.table.weight"].abs().min() > 0


@pytest.mark.parametrize(("position", "extra"), BIAS_SCHEMES, ids=[s[0] for s in BIAS_SCHEMES])
def test_chunked_attention_after_a_cache_equals_a_full_pass(
    position: str, extra: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New tokens at positions cache.length ..: chunks see the cached keys and their own causal prefix."""
    model = model_of(position, extra, kv_heads=2, seed=3).eval()
    ids = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full, _ = model(ids)  # whole bias: 40 x 40 pairs
        chunked(monkeypatch, 3, 40)
        cache = model.new_cache(1, 4)  # small: the cache grows while chunked passes fill it
        parts = [model(ids[:, :11], cache=cache)[0], model(ids[:, 11:30], cache=cache)[0]]
        parts += [model(ids[:, t : t + 1], cache=cache)[0] for t in range(30, 40)]
    # float32, O(1) logits: measured 3e-7.
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-5)


def test_a_bias_chunk_covers_exactly_the_keys_its_queries_can_see() -> None:
    scheme = build_positions(ModelConfig(position="alibi", n_heads=H, d_model=32))
    q_positions = torch.arange(10, 16)  # 6 new queries after 10 cached keys: 16 keys in all
    bias = ChunkedBias(scheme, q_positions, torch.arange(16), torch.float64)
    part, end = bias.rows(2, 4)  # queries at 12 and 13
    assert end == 14 and part.dtype == torch.float64
    torch.testing.assert_close(part, scheme.bias(torch.tensor([12, 13]), torch.arange(14)).double())
    assert (part[:, 0, 13] == float("-inf")).all() and (part[:, 1, 13] == 0).all()


def test_only_schemes_with_a_bias_have_one() -> None:
    has = {
        p: build_positions(ModelConfig(position=p, n_heads=H, d_model=32)).has_bias
        for p in ("learned", "sinusoidal", "rope", "alibi", "t5", "nope")
    }
    assert has == {
        "learned": False,
        "sinusoidal": False,
        "rope": False,
        "alibi": True,
        "t5": True,
        "nope": False,
    }


@pytest.mark.parametrize(("position", "extra"), BIAS_SCHEMES, ids=[s[0] for s in BIAS_SCHEMES])
def test_a_long_forward_never_allocates_the_whole_bias(position: str, extra: dict) -> None:
    T = 4096
    model = model_of(position, extra, n_layers=1, d_model=16, d_ff=16).eval()
    ids = torch.randint(0, 64, (1, T), generator=torch.Generator().manual_seed(5))
    spy = tiny.LargestTensor()
    with torch.inference_mode(), spy:
        model(ids)
    # The largest is one chunk's bias, CHUNK_BIAS_ENTRIES float32 (8 MiB); the whole bias [4, 4096, 4096]
    # would be 256 MiB, and T5's int64 distances alone [4096, 4096] 128 MiB.
    assert spy.largest == 4 * octlm.model.decoder.CHUNK_BIAS_ENTRIES


def test_the_spy_sees_the_whole_bias_where_it_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: with the whole-bias path forced, the same spy sees [H, T, T] at T = 2048."""
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", float("inf"))
    model = model_of("alibi", {}, n_layers=1, d_model=16, d_ff=16).eval()
    spy = tiny.LargestTensor()
    with torch.inference_mode(), spy:
        model(torch.zeros(1, 2048, dtype=torch.long))
    assert spy.largest == 4 * H * 2048 * 2048
