"""The decoder of octlm/model/decoder.py against independent checks: the token table, causality, the length limits,
KV-cache equivalence, bad ids, the tied head and hand-counted parameter totals (the NumPy float64 forward pass
written from the formulas is in test_decoder_numpy.py).

Weights are re-drawn at a scale where every part of the model moves the output (the default GPT-2 init makes
the logits so small that a 1e-5 tolerance would hide almost anything). Tolerances are float32 at 1e-5 unless a
comment says otherwise.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from decoders import SCHEMES, randomized, tiny

from octlm.config import load_config
from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.positions.formulas import add_positions

SCHEME_IDS = [s[0] for s in SCHEMES]
UNBOUNDED = ["sinusoidal", "rope", "alibi", "t5", "nope"]


# ------------------------------------------------------------------------------------------------------------
# The token table


def test_one_hot_times_table_is_the_looked_up_row() -> None:
    model = randomized(tiny("learned"))
    E = model.token_embedding.weight.detach()
    ids = torch.tensor([[0, 5, 63, 5], [17, 2, 2, 40]])
    one_hot = F.one_hot(ids, 64).to(E.dtype)  # [B, T, V]
    looked_up = model.token_embedding(ids).detach()
    # Exact: each output is 1 * E[i, c] plus zeros.
    assert torch.equal(one_hot @ E, looked_up)
    assert torch.equal(looked_up, E[ids])
    # And against NumPy.
    assert np.array_equal(np.eye(64)[ids.numpy()] @ E.double().numpy(), E.double().numpy()[ids.numpy()])


def test_gradient_reaches_only_the_rows_used() -> None:
    model = randomized(tiny("learned"))
    ids = torch.tensor([[3, 7, 3, 60], [7, 7, 1, 3]])
    upstream = torch.randn(2, 4, 32, generator=torch.Generator().manual_seed(0))
    (model.token_embedding(ids) * upstream).sum().backward()
    grad = model.token_embedding.weight.grad
    expected = np.zeros((64, 32))
    np.add.at(expected, ids.numpy().ravel(), upstream.numpy().reshape(-1, 32))  # scatter-add by hand
    used = sorted(set(ids.flatten().tolist()))
    unused = [i for i in range(64) if i not in used]
    assert torch.equal(grad[unused], torch.zeros(len(unused), 32))  # exactly zero, not just small
    np.testing.assert_allclose(grad.numpy(), expected, rtol=0, atol=1e-6)  # float32 sums of <= 3 terms


def test_untied_model_leaves_unused_rows_without_gradient() -> None:
    """Through the whole model (untied head): a token that never appears gets exactly zero gradient."""
    model = randomized(tiny("learned", tie_embeddings=False))
    model.train()
    ids = torch.tensor([[3, 7, 3, 60, 9], [7, 7, 1, 3, 9]])
    _, loss = model(ids, targets=torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1)))
    loss.backward()
    grad = model.token_embedding.weight.grad
    used = set(ids.flatten().tolist())
    for row in range(64):
        if row in used:
            assert grad[row].abs().sum() > 0
        else:
            assert torch.equal(grad[row], torch.zeros(32)), row


def test_input_embedding_shapes_from_the_seed() -> None:
    """ids [8, 4] -> token vectors [8, 4, 256]; a [4, 256] position table broadcast over the batch."""
    model = Decoder(tiny("learned", d_model=256, context_length=4, vocab_size=100))
    ids = torch.randint(0, 100, (8, 4), generator=torch.Generator().manual_seed(0))
    tokens = model.token_embedding(ids)
    assert tokens.shape == (8, 4, 256)
    pos = model.positions.table(torch.arange(4))
    assert pos.shape == (4, 256)
    inputs = add_positions(tokens, pos)
    assert inputs.shape == (8, 4, 256)
    for b in range(8):
        assert torch.equal(inputs[b], tokens[b] + pos)
    # The scheme's own embed step does the same thing.
    assert torch.equal(model.positions.embed(tokens, torch.arange(4)), inputs)
    for bad in ([4, 128], [5, 256]):
        with pytest.raises(UserError) as info:
            add_positions(tokens, torch.zeros(bad))
        assert str(bad) in str(info.value) and "[8, 4, 256]" in str(info.value)


# ------------------------------------------------------------------------------------------------------------
# Causality and length


@pytest.mark.parametrize(("name", "position", "extra"), SCHEMES, ids=SCHEME_IDS)
def test_changing_a_later_token_leaves_earlier_logits_unchanged(
    name: str, position: str, extra: dict
) -> None:
    config = tiny(position, n_layers=2, **extra)
    model = randomized(config, seed=5)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        base, _ = model(ids)
        for t in range(7):
            changed = ids.clone()
            changed[:, t + 1] = (changed[:, t + 1] + 1 + t) % 64
            logits, _ = model(changed)
            # Masked scores contribute exact zeros; 1e-6 allows for a different reduction order only.
            torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-6)
            assert (logits[:, t + 1] - base[:, t + 1]).abs().max() > 1e-3  # the change itself is visible


def test_learned_positions_stop_at_the_table() -> None:
    model = Decoder(tiny("learned"))
    model(torch.zeros(1, 8, dtype=torch.long))  # exactly the table is fine
    with pytest.raises(UserError) as info:
        model(torch.zeros(1, 9, dtype=torch.long))
    message = str(info.value)
    assert "9" in message and "8" in message
    for scheme in UNBOUNDED:
        assert scheme in message
    # The same limit applies to cached decoding: 6 cached + 3 new = 9 positions.
    cache = model.new_cache(1)
    model(torch.zeros(1, 6, dtype=torch.long), cache=cache)
    with pytest.raises(UserError, match="9"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=cache)


@pytest.mark.parametrize(("name", "position", "extra"), SCHEMES[1:], ids=SCHEME_IDS[1:])
def test_unbounded_schemes_run_at_four_times_the_context(name: str, position: str, extra: dict) -> None:
    model = randomized(tiny(position, **extra))
    ids = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits, loss = model(ids, targets=ids)
    assert logits.shape == (2, 32, 64)
    assert torch.isfinite(logits).all() and torch.isfinite(loss)


# ------------------------------------------------------------------------------------------------------------
# KV cache


def cached_logits(
    model: Decoder, ids: torch.Tensor, prompt: int, step: int, capacity: int | None
) -> torch.Tensor:
    cache = model.new_cache(ids.shape[0], capacity)
    parts = [model(ids[:, :prompt], cache=cache)[0]]
    for start in range(prompt, ids.shape[1], step):
        parts.append(model(ids[:, start : start + step], cache=cache)[0])
    assert cache.length == ids.shape[1]
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize(("name", "position", "extra"), SCHEMES, ids=SCHEME_IDS)
def test_cached_decoding_equals_a_full_pass(name: str, position: str, extra: dict, kv_heads: int) -> None:
    config = tiny(position, n_layers=2, n_kv_heads=kv_heads, **extra)
    model = randomized(config, seed=8)
    # Past the training context (8) for every scheme that has no maximum.
    length = 8 if position == "learned" else 21
    ids = torch.randint(0, 64, (2, length), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        full, _ = model(ids)
        for step, capacity in (
            (1, None),
            (3, None),
            (3, 2),
            (1, 4),
        ):  # small capacities force the cache to grow
            cached = cached_logits(model, ids, prompt=5, step=step, capacity=capacity)
            # float32, O(1) logits, different matmul shapes: 1e-5 absolute.
            torch.testing.assert_close(
                cached, full, rtol=0, atol=1e-5, msg=f"step {step}, capacity {capacity}"
            )


def test_cache_offset_matters() -> None:
    """Sanity for the test above: decoding at the wrong positions does change RoPE's logits by far more than
    the tolerance, so agreement there is evidence that the cache passes the right positions."""
    model = randomized(tiny("rope", n_layers=2), seed=8)
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        full, _ = model(ids)
        wrong, _ = model(ids[:, 6:])  # the same tokens seen from position 0 with no context
    assert (full[:, 6:] - wrong).abs().max() > 1e-2


# ------------------------------------------------------------------------------------------------------------
# Bad ids


@pytest.mark.parametrize(
    ("ids", "named"),
    [
        (torch.zeros(2, 4), "float32"),
        (torch.zeros(2, 4, dtype=torch.float64), "float64"),
        (torch.zeros(2, 4, dtype=torch.bool), "bool"),
        (torch.tensor([[1, 2, 64]]), "64"),
        (torch.tensor([[1, 2, 1000]]), "1000"),
        (torch.tensor([[1, -1, 2]]), "-1"),
        (torch.tensor([[-7, 3]]), "-7"),
        (torch.tensor([1, 2, 3]), "[3]"),
        (torch.zeros(1, 2, 3, dtype=torch.long), "[1, 2, 3]"),
        (torch.zeros(2, 0, dtype=torch.long), "[2, 0]"),
        (torch.tensor(5), "[]"),
    ],
    ids=[
        "float32",
        "float64",
        "bool",
        "eq-V",
        "far-above-V",
        "minus-one",
        "minus-seven",
        "1d",
        "3d",
        "empty-T",
        "0d",
    ],
)
def test_bad_ids_raise_a_user_error_naming_the_value(ids: torch.Tensor, named: str) -> None:
    model = Decoder(tiny("rope"))
    with pytest.raises(UserError) as info:
        model(ids)
    assert named in str(info.value)
    assert "\n" not in str(info.value)


def test_non_tensor_ids_raise_a_user_error() -> None:
    with pytest.raises(UserError, match="list"):
        Decoder(tiny("rope"))([[1, 2, 3]])


@pytest.mark.parametrize("shape", [(0, 4), (2, 0), (0, 0)])
def test_empty_batch_is_not_a_crash(shape: tuple[int, int]) -> None:
    """ids with no rows or no columns: a UserError naming the shape, never a raw RuntimeError from inside."""
    model = Decoder(tiny("rope"))
    with pytest.raises(UserError, match=re.escape(f"got {list(shape)}")):
        model(torch.zeros(shape, dtype=torch.long))


# ------------------------------------------------------------------------------------------------------------
# Tied head and parameter counts


def test_tied_head_is_the_token_table() -> None:
    tied = Decoder(tiny("learned"))
    assert tied.head.weight is tied.token_embedding.weight
    assert tied.head.weight.data_ptr() == tied.token_embedding.weight.data_ptr()
    untied = Decoder(tiny("learned", tie_embeddings=False))
    assert untied.head.weight is not untied.token_embedding.weight
    assert untied.head.weight.data_ptr() != untied.token_embedding.weight.data_ptr()
    assert untied.num_parameters() - tied.num_parameters() == 64 * 32  # the second table counts


def test_day1_parameter_count_by_hand() -> None:
    C, V, T, F_, L = 128, 1024, 128, 512, 2
    token_table = 1024 * 128  # 131,072; the head reuses it
    learned_positions = 128 * 128  # 16,384
    per_layer = (
        2 * (128 + 128)  # two LayerNorms, weight and bias
        + (128 * 384 + 384)  # qkv
        + (128 * 128 + 128)  # attention proj
        + (128 * 512 + 512)  # mlp fc
        + (512 * 128 + 128)  # mlp proj
    )  # 198,272
    final_norm = 128 + 128
    expected = token_table + learned_positions + 2 * per_layer + final_norm
    assert expected == 544_256
    config = load_config("day1").model
    assert (config.vocab_size, config.d_model, config.context_length, config.d_ff, config.n_layers) == (
        V,
        C,
        T,
        F_,
        L,
    )
    model = Decoder(config)
    assert model.num_parameters() == expected
    assert sum(p.numel() for p in model.parameters()) == expected


def test_modern_parameter_count_by_hand() -> None:
    token_table = 1024 * 128  # 131,072; tied head, RoPE has no parameters
    per_layer = (
        2 * 128  # two RMSNorms, weight only
        + 128 * 384  # qkv, no bias
        + 128 * 128  # attention proj
        + 128 * (2 * 344)  # SwiGLU gate and up, fused
        + 344 * 128  # mlp proj
    )  # 197,888
    final_norm = 128
    expected = token_table + 2 * per_layer + final_norm
    assert expected == 526_976
    assert Decoder(load_config("modern").model).num_parameters() == expected
