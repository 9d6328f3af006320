"""Building and calling a decoder (octlm/model/decoder.py), with expected values worked out by hand: the initial
weights' scales and means, the layer norms' settings, the parameter count, the config's problems, the checks of
the token ids, and the loss computed without the logits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.model.decoder import Decoder


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=16, context_length=6)
    return ModelConfig(**{**base, **kw})


def test_init_scales_by_hand():
    torch.manual_seed(0)
    m = Decoder(tiny(d_model=64, d_ff=256, n_heads=4, n_layers=8, vocab_size=512, context_length=8))
    proj_std = 0.02 / math.sqrt(16)  # GPT-2: 0.02 / √(2 · layers)
    for block in m.blocks:
        assert block.attn.proj.weight.std().item() == pytest.approx(proj_std, rel=0.1)
        assert block.mlp.proj.weight.std().item() == pytest.approx(proj_std, rel=0.06)
        assert block.attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert not block.attn.qkv.bias.any() and not block.mlp.fc.bias.any()
    assert m.token_embedding.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert m.positions.table.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_num_parameters_counts_a_tied_table_once():
    # V=11, C=8, H=2, 1 layer, d_ff 16, learned table of 6 rows, biases, LayerNorms.
    per_block = 2 * 8 * 2 + (8 * 24 + 24) + (8 * 8 + 8) + (8 * 16 + 16) + (16 * 8 + 8)
    want = 11 * 8 + 6 * 8 + per_block + 2 * 8
    assert Decoder(tiny()).num_parameters() == want
    assert Decoder(tiny(tie_embeddings=False)).num_parameters() == want + 11 * 8


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.zeros(1, 2), "^token ids must be an integer tensor, got torch.float32$"),
        (torch.zeros(1, 2, dtype=torch.bool), "^token ids must be an integer tensor, got torch.bool$"),
        (
            torch.zeros(1, 2, dtype=torch.complex64),
            "^token ids must be an integer tensor, got torch.complex64$",
        ),
        ([[1, 2]], "^token ids must be an integer tensor, got list$"),
        (torch.zeros(3, dtype=torch.long), r"^token ids must have shape \[B, T\] with B, T >= 1, got \[3\]$"),
        (
            torch.zeros(1, 0, dtype=torch.long),
            r"^token ids must have shape \[B, T\] with B, T >= 1, got \[1, 0\]$",
        ),
        (
            torch.tensor([[0, -1, 11]]),
            r"^token id -1 is outside the vocabulary \[0, 11\); encode text with the ",
        ),
        (torch.tensor([[0, 11]]), r"^token id 11 is outside the vocabulary \[0, 11\)"),
    ],
)
def test_check_ids_messages(ids, message):
    with pytest.raises(UserError, match=message):
        Decoder(tiny()).check_ids(ids)


def test_check_ids_accepts_the_edges_and_counts_the_offset():
    m = Decoder(tiny())
    m.check_ids(torch.tensor([[0, 10, 3, 4, 5, 6]]))  # ids 0 and V - 1, exactly the table's 6 rows
    m.check_ids(torch.tensor([[1, 2]], dtype=torch.int32), offset=4)
    with pytest.raises(
        UserError,
        match=r"^a sequence of length 7 is longer than the learned position table "
        r"\(6 rows\); use at most 6 tokens, or a scheme with no maximum: "
        r"sinusoidal, rope, p-rope, xpos, alibi, t5, fire, cope, fox, path, stick-breaking, nope$",
    ):
        m.check_ids(torch.tensor([[1, 2]]), offset=5)
    Decoder(tiny(position="rope")).check_ids(torch.zeros(1, 50, dtype=torch.long))


def test_an_invalid_config_lists_its_problems():
    with pytest.raises(UserError, match="^invalid model config: "):
        Decoder(tiny(n_heads=3))


@pytest.mark.parametrize("position", ["alibi", "rope", "learned"])
def test_loss_without_logits_equals_cross_entropy_of_the_logits(position):
    torch.manual_seed(0)
    m = Decoder(tiny(position=position, n_layers=2)).double()
    ids, targets = torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 5))
    logits, loss = m(ids, targets)
    none, chunked = m(ids, targets, return_logits=False)
    assert none is None and logits.shape == (2, 5, 11)
    want = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert loss.item() == pytest.approx(want.item(), abs=1e-6)  # float32 upcast of float64 logits
    assert chunked.item() == pytest.approx(want.item(), abs=1e-12)
    assert m(ids)[1] is None


def test_an_invalid_config_lists_every_problem_separated_by_semicolons():
    cfg = tiny(n_heads=3, dropout=1.5)
    problems = cfg.problems()  # config.py's wording; what the model adds is the prefix and the separator
    assert len(problems) == 2
    with pytest.raises(UserError) as e:
        Decoder(cfg)
    assert str(e.value) == f"invalid model config: {problems[0]}; {problems[1]}"


def test_init_means_are_zero():
    torch.manual_seed(0)
    m = Decoder(tiny(d_model=64, d_ff=256, n_heads=4, n_layers=8, vocab_size=512, context_length=8))
    # N(0, σ²) over n entries: the mean's standard error is σ/√n, at most 0.02/√4096 = 3e-4 here
    for block in m.blocks:
        for p in (block.attn.qkv.weight, block.attn.proj.weight, block.mlp.fc.weight, block.mlp.proj.weight):
            assert abs(p.mean().item()) < 2e-3
    assert abs(m.token_embedding.weight.mean().item()) < 2e-3
    assert abs(m.positions.table.weight.mean().item()) < 2e-3
    assert m.head.bias is None  # the head is the token table: no bias


def test_layer_norm_takes_the_configs_eps_and_bias():
    m = Decoder(tiny(norm_eps=1e-3, bias=False))
    for norm in (m.blocks[0].norm1, m.blocks[0].norm2, m.norm):
        assert isinstance(norm, torch.nn.LayerNorm) and norm.eps == 1e-3 and norm.bias is None
    assert Decoder(tiny(norm_eps=1e-3)).norm.bias is not None
    rms = Decoder(tiny(norm="rmsnorm", norm_eps=1e-4)).norm
    assert isinstance(rms, torch.nn.RMSNorm) and rms.eps == 1e-4
