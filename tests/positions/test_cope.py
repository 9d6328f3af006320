"""CoPE (octlm/positions/cope.py) against references that do not share its code: a NumPy float64 loop over every
query-key pair written from the paper's formulas, x-transformers' `CoPE` (the paper's appendix B), hand-made
cases with exact values; then through the decoder: KV-cache decoding, the per-chunk path, grouped KV heads,
training.

Tolerances: float32 results at 1e-5 absolute unless a comment says otherwise, with the measured error beside.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from decoders import small
from references import np_cope_bias
from tiny import memorise
from torch import Tensor

import octlm.model.decoder
import octlm.positions.cope
import octlm.positions.rotary
from octlm.config import ModelConfig
from octlm.model.decoder import ContextualBias, Decoder
from octlm.positions import SCHEMES
from octlm.positions.cope import CopePositions, gated_counts, interpolated_bias

H, D = 4, 8


def randn(*shape: int, seed: int, scale: float = 1.0) -> Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def scheme_with(tables: list[Tensor]) -> CopePositions:
    """A CoPE scheme whose per-layer tables `[npos, D]` are `tables`."""
    npos, dim = tables[0].shape
    scheme = CopePositions(len(tables), npos, dim)
    with torch.no_grad():
        for table, rows in zip(scheme.tables, tables, strict=True):
            table.weight.copy_(rows)
    return scheme


# ------------------------------------------------------------------------------------------------------------
# The bias against independent references


@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_bias_matches_a_numpy_loop_over_every_pair(kv_heads: int) -> None:
    T, npos = 11, 5  # counts reach past npos - 1 = 4: the clamp is exercised (asserted below)
    q, k = randn(2, H, T, D, seed=1), randn(2, kv_heads, T, D, seed=2)
    table = randn(npos, D, seed=3)
    positions = torch.arange(T)
    bias = scheme_with([table]).contextual_bias(q, k, positions, positions, 0).detach()
    expected = np_cope_bias(q.double().numpy(), k.double().numpy(), table.double().numpy())
    assert bias.shape == (2, H, T, T) and bias.dtype == torch.float32
    future = np.triu(np.ones((T, T), dtype=bool), 1)
    assert torch.isneginf(bias[..., torch.from_numpy(future)]).all()  # causal: every key after the query
    # float32 against float64, |z| up to ~6: measured 1.1e-6 to 3.4e-6.
    np.testing.assert_allclose(bias.numpy()[..., ~future], expected[..., ~future], rtol=0, atol=1e-5)
    counts = gated_counts(q, k, positions, positions, npos - 1)[..., torch.from_numpy(~future)]
    assert (counts == npos - 1).float().mean() > 0.05 and (counts < 1).any()  # clamped pairs, fractional ones


def test_bias_and_gradients_match_x_transformers() -> None:
    """x-transformers' `CoPE` is the paper's appendix B: gates of the scaled, causally masked scores, the bias
    added to them unscaled. Forward and the gradients of q, k and the table."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    T, npos = 13, 6
    q = randn(2, H, T, D, seed=4).requires_grad_()
    k = randn(2, H, T, D, seed=5).requires_grad_()
    table = randn(npos, D, seed=6, scale=0.5)
    ours = scheme_with([table])
    theirs = xt.CoPE(dim=D, heads=H, max_pos=npos)
    with torch.no_grad():
        theirs.pos_emb.copy_(table)
    positions = torch.arange(T)
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    bias = ours.contextual_bias(q, k, positions, positions, 0)[..., visible]
    scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~visible, -torch.finfo(torch.float32).max)
    reference = theirs(q, scores)[..., visible]
    torch.testing.assert_close(bias, reference, rtol=0, atol=1e-5)  # measured 2.6e-6
    weights = randn(*bias.shape, seed=7, scale=0.1)  # gradients O(1): the table's sums 700 pairs
    grads = torch.autograd.grad((bias * weights).sum(), (q, k, ours.tables[0].weight))
    grads_ref = torch.autograd.grad((reference * weights).sum(), (q, k, theirs.pos_emb))
    for name, ours_g, theirs_g in zip(("q", "k", "table"), grads, grads_ref, strict=True):
        assert ours_g.abs().max() > 0.3, name  # every input moves the bias
        torch.testing.assert_close(ours_g, theirs_g, rtol=0, atol=1e-5, msg=name)  # measured 0.9e-7 to 4.8e-7


def test_gradients_pass_a_float64_gradcheck() -> None:
    """The interpolation weight carries the gradient to the gates (the row index does not): finite
    differences agree."""
    T, npos = 6, 4
    q = randn(1, 2, T, 3, seed=8).double().requires_grad_()
    k = randn(1, 1, T, 3, seed=9).double().requires_grad_()
    table = randn(npos, 3, seed=10).double().requires_grad_()
    positions = torch.arange(T)
    visible = torch.ones(T, T, dtype=torch.bool).tril()

    def bias(q: Tensor, k: Tensor, table: Tensor) -> Tensor:
        counts = gated_counts(q, k, positions, positions, npos - 1)
        return interpolated_bias(q, table, counts)[..., visible]

    counts = gated_counts(q, k, positions, positions, npos - 1)[..., visible]
    assert (counts == npos - 1).any() and (counts < npos - 1).any()  # clamped and interpolated pairs
    assert torch.autograd.gradcheck(bias, (q, k, table), eps=1e-6, atol=1e-8)


# ------------------------------------------------------------------------------------------------------------
# Exact values


def constant_heads(value: float, T: int) -> Tensor:
    """q = k = `value` in every channel, `[1, 1, T, 4]`: q · k / sqrt(4) = 2 value^2."""
    return torch.full((1, 1, T, 4), value)


def test_gates_of_one_count_the_keys_from_j_to_i_inclusive() -> None:
    """q · k / sqrt(D) = 32: σ = 1.0 in float32, so p_ij = i - j + 1 (the query's own key counts 1) up to
    npos - 1 = 5. Rows e[p] = p/16 in every channel make q · e[p] = 4 · 4 · p / 16 = p: the bias is the
    count."""
    T, npos = 9, 6
    q = constant_heads(4.0, T)
    table = torch.arange(npos, dtype=torch.float32).unsqueeze(1).expand(npos, 4) / 16
    positions = torch.arange(T)
    bias = scheme_with([table]).contextual_bias(q, q, positions, positions, 0)[0, 0]
    i, j = positions.unsqueeze(1), positions.unsqueeze(0)
    expected = torch.where(j <= i, (i - j + 1).clamp(max=npos - 1).float(), -math.inf)
    assert torch.equal(bias, expected)
    assert bias[8, 0] == 5 and bias[3, 0] == 4 and bias[3, 3] == 1  # clamped; i - j + 1; the query itself


def test_gates_of_one_half_interpolate_between_rows() -> None:
    """q ⟂ k: every gate is σ(0) = 1/2, so p_ij = (i - j + 1) / 2, half of them between two rows. With
    q · e[p] = p^2 the bias is n^2/4 for an even number n of keys counted and the mean of the neighbouring
    rows, (⌊n/2⌋^2 + ⌈n/2⌉^2) / 2, for an odd n."""
    T, npos = 8, 10
    q = torch.zeros(1, 1, T, 4)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, T, 4)
    k[..., 1] = 3.0
    table = torch.zeros(npos, 4)
    table[:, 0] = torch.arange(npos, dtype=torch.float32) ** 2
    positions = torch.arange(T)
    bias = scheme_with([table]).contextual_bias(q, k, positions, positions, 0)[0, 0]
    for i in range(T):
        for j in range(T):
            n = i - j + 1
            want = -math.inf if j > i else (math.floor(n / 2) ** 2 + math.ceil(n / 2) ** 2) / 2
            assert bias[i, j].item() == want, (i, j)
    assert bias[4, 0].item() == 6.5  # n = 5: p = 2.5, halfway between 4 and 9


def test_counts_stay_whole_in_bfloat16() -> None:
    """bf16 queries and keys (autocast, the bf16 working copy): counted in float32, 300 keys count 300; a
    bfloat16 sum would stop at 256 (2^8 + 1 is not representable)."""
    T = 300
    q = constant_heads(4.0, T).bfloat16()
    counts = gated_counts(q, q, torch.arange(T), torch.arange(T), 1000)
    assert counts.dtype == torch.float32
    assert torch.equal(counts[0, 0, -1], torch.arange(T, 0, -1, dtype=torch.float32))


def test_grouped_heads_read_their_key_head() -> None:
    """Query head h reads key head h // (H / Hkv), as `scaled_dot_product_attention(enable_gqa=True)` does."""
    T = 7
    q, k = randn(1, H, T, D, seed=11), randn(1, 2, T, D, seed=12)
    scheme, positions = scheme_with([randn(5, D, seed=13)]), torch.arange(T)
    grouped = scheme.contextual_bias(q, k, positions, positions, 0)
    repeated = scheme.contextual_bias(q, k.repeat_interleave(2, dim=1), positions, positions, 0)
    torch.testing.assert_close(grouped, repeated, rtol=0, atol=1e-6)  # the same products, other shapes: 0


# ------------------------------------------------------------------------------------------------------------
# Through the decoder


def cope_model(kv_heads: int = 0, seed: int = 0, **fields) -> Decoder:
    """A 2-layer CoPE model with O(1) weights (matrices N(0, 1/fan_in), tables N(0, 0.5)), so that every part,
    the counts included, moves the logits well past the tolerances."""
    config = (
        dict(
            vocab_size=64,
            d_model=32,
            context_length=8,
            n_layers=2,
            n_heads=H,
            d_ff=64,
            n_kv_heads=kv_heads,
            position="cope",
            cope_positions=6,
        )
        | fields
    )
    torch.manual_seed(seed)
    model = Decoder(ModelConfig(**config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("positions.tables"):
                p.normal_(0.0, 0.5)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
    return model


def test_the_registry_knows_cope() -> None:
    cls = SCHEMES.choose("cope")
    assert cls is CopePositions and cls.options == ("cope_positions",) and cls.shows == ("vectors",)
    assert not cls.bounded
    model = cope_model(nope_layers=[0])
    scheme = model.positions
    assert scheme.is_contextual and not scheme.has_bias and scheme.max_length is None
    assert len(scheme.tables) == 2 and scheme.tables[1].weight.shape == (6, D)
    # inspect's vectors: the first layer that uses CoPE (layer 1 here), and no rows past npos - 1
    assert torch.equal(scheme.vectors(4), scheme.tables[1].weight[:4])
    assert scheme.vectors(100).shape == (6, D)


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
def test_cached_decoding_equals_a_full_pass(kv_heads: int) -> None:
    model = cope_model(kv_heads, seed=8).eval()
    ids = torch.randint(0, 64, (2, 21), generator=torch.Generator().manual_seed(9))  # past the context (8)
    with torch.no_grad():
        full, _ = model(ids)
        for step, capacity in ((1, None), (3, 2), (16, 4)):  # small capacities make the cache grow
            cache = model.new_cache(2, capacity)
            parts = [model(ids[:, :5], cache=cache)[0]]
            parts += [model(ids[:, t : t + step], cache=cache)[0] for t in range(5, 21, step)]
            # float32, O(1) logits, different matmul shapes: measured 1.5e-6 to 4.6e-6.
            torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-5, msg=f"step {step}")


def test_cache_offset_matters() -> None:
    """Sanity for the test above: the counts (and so the logits) do depend on which keys came before."""
    model = cope_model(seed=8).eval()
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        full, _ = model(ids)
        alone, _ = model(ids[:, 6:])
    assert (full[:, 6:] - alone).abs().max() > 0.1


def loss_and_grads(model: Decoder, ids: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    model.zero_grad()
    logits, loss = model(ids[:, :-1], ids[:, 1:])
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
def test_chunked_path_equals_the_whole_bias_forward_and_backward(
    kv_heads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = cope_model(kv_heads, seed=2).train()
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(3))  # T = 23
    logits, grads = loss_and_grads(model, ids)
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", 0)
    monkeypatch.setattr(octlm.model.decoder, "CHUNK_BIAS_ENTRIES", H * 5 * 23)  # chunks of 5 queries
    seen: list[int] = []
    rows = ContextualBias.rows
    monkeypatch.setattr(ContextualBias, "rows", lambda self, a, b: seen.append(b - a) or rows(self, a, b))
    logits_c, grads_c = loss_and_grads(model, ids)
    assert seen == ([5] * 4 + [3]) * 2  # both layers, the last chunk short
    # Same kernels on other shapes: measured 2.0e-6 (logits), 1.3e-7 (gradients).
    torch.testing.assert_close(logits_c, logits, rtol=0, atol=1e-5)
    assert grads.keys() == grads_c.keys() and "positions.tables.1.weight" in grads
    for name in grads:
        torch.testing.assert_close(grads_c[name], grads[name], rtol=0, atol=1e-5, msg=name)


def test_a_tiny_model_learns_and_every_table_trains() -> None:
    """Next-token loss on a fixed batch falls, and each layer's table gets its own gradient."""
    torch.manual_seed(0)
    model = Decoder(
        ModelConfig(
            vocab_size=32,
            d_model=32,
            context_length=16,
            n_layers=2,
            n_heads=H,
            d_ff=64,
            position="cope",
            cope_positions=8,
            dropout=0.0,
        )
    )
    ids = torch.randint(0, 32, (8, 17), generator=torch.Generator().manual_seed(1))
    losses = memorise(model, ids)
    tables = [t.weight.grad for t in model.positions.tables]
    assert all(g is not None and g.abs().max() > 0 for g in tables) and not torch.equal(*tables)
    # Starts at ln 32 = 3.47; measured 3.48 -> 1.27 after 40 steps (memorising 128 random tokens).
    assert losses[0] == pytest.approx(math.log(32), abs=0.05) and losses[-1] < losses[0] - 1.5


# ------------------------------------------------------------------------------------------------------------
# What CoPE shows, and its bias of bfloat16 queries


def test_cope_shows_layer_zero_by_default_and_when_every_layer_skips_it() -> None:
    assert CopePositions(2, 4, 8).shown_layer == 0
    assert CopePositions.from_config(small("cope", nope_layers=[0, 1])).shown_layer == 0
    assert CopePositions.from_config(small("cope", nope_layers=[0])).shown_layer == 1


def test_cope_bias_of_bfloat16_queries_is_float32() -> None:
    torch.manual_seed(0)
    q = torch.randn(1, 2, 3, 8).to(torch.bfloat16)
    table = torch.randn(4, 8)
    counts = torch.tensor([0.0, 0.5, 1.25, 3.0]).repeat(1, 2, 3, 1)
    bias = interpolated_bias(q, table, counts.clone())
    assert bias.dtype == torch.float32
    per_row = q.double() @ table.to(torch.bfloat16).double().T  # [1, 2, 3, 4]
    lower, frac = counts.long(), counts.frac().double()
    upper = (lower + 1).clamp(max=3)
    expected = per_row.gather(-1, lower) * (1 - frac) + per_row.gather(-1, upper) * frac
    # the bfloat16 matmul rounds its sums (bias values up to 3.2): measured 3.7e-3 from the float64 reference
    torch.testing.assert_close(bias.double(), expected, atol=8e-3, rtol=0)
