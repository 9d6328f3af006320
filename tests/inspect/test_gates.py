"""FoX's forget gates measured on text (octlm/inspect/gates.py): exact values for constant gates, a loop-by-loop
NumPy re-derivation for gates that read the text, NoPE layers left out, and the report's section."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from octlm.config import ModelConfig
from octlm.inspect.gates import gate_blocks, gate_decay, has_gates, layer_inputs
from octlm.inspect.render import render_markdown
from octlm.model.decoder import Decoder


def fox(**kw) -> Decoder:
    torch.manual_seed(0)
    base = dict(position="fox", vocab_size=40, d_model=16, n_heads=2, n_layers=2, d_ff=32, context_length=12)
    return Decoder(ModelConfig(**{**base, **kw}))


WINDOWS = np.random.default_rng(0).integers(0, 40, (5, 12))


def test_constant_gates_give_a_linear_decay_their_mean_and_half_life():
    model = fox(nope_layers=[1])
    gate = model.positions.gates[0]
    with torch.no_grad():
        gate.weight.zero_()
        gate.bias.copy_(torch.tensor([1.5, -0.5]))
    g = gate_decay(model, WINDOWS)
    log_f = np.log(1 / (1 + np.exp(-np.array([1.5, -0.5]))))  # log σ(b)
    assert np.abs(g["decay"][0] - log_f[:, None] * np.arange(12)).max() < 1e-12  # d · log σ(b): ALiBi's line
    assert np.abs(g["forget"][0] - np.exp(log_f)).max() < 1e-12
    assert np.abs(g["half_life"][0] - math.log(2) / -log_f).max() < 1e-9
    assert np.isnan(g["decay"][1]).all() and np.isnan(g["forget"][1]).all()  # a NoPE layer has no gates
    assert (g["windows"], g["length"]) == (5, 12)


def test_gates_from_the_text_match_a_loop_by_loop_sum():
    model = fox().eval()
    with torch.no_grad():
        model.positions.gates[1].weight.mul_(60)  # gates spread over (0, 1), not all near 1/2
    g = gate_decay(model, WINDOWS)
    ids = torch.from_numpy(WINDOWS)
    x = layer_inputs(model, ids)[1].double().numpy()  # layer 1's normed input [W, T, C]
    gate = model.positions.gates[1]
    logits = x @ gate.weight.detach().double().numpy().T + gate.bias.detach().double().numpy()
    log_f = -np.logaddexp(0, -logits)  # [W, T, H]
    want = np.zeros((2, 12))
    for d in range(12):
        sums = [log_f[w, i - d + 1 : i + 1].sum(0) for w in range(5) for i in range(d, 12)]
        want[:, d] = np.mean(sums, axis=0)
    assert np.abs(g["decay"][1] - want).max() < 1e-5  # float32 gate logits against float64: 1e-7 measured
    assert np.ptp(np.diff(want, axis=1)) > 0.01  # not a straight line: the text sets the gates
    assert np.abs(g["half_life"][1] - math.log(2) / -log_f.mean((0, 1))).max() < 1e-4


def test_layer_inputs_are_each_layers_normed_input_and_leave_no_hook():
    model = fox().eval()
    ids = torch.from_numpy(WINDOWS[:2])
    caught = layer_inputs(model, ids)
    with torch.no_grad():
        first = model.blocks[0].norm1(model.token_embedding(ids))
    assert sorted(caught) == [0, 1] and torch.equal(caught[0], first)
    assert not any(block.attn._forward_pre_hooks for block in model.blocks)


def test_the_report_section_says_what_was_measured():
    g = gate_decay(fox(nope_layers=[0]), WINDOWS)
    text = render_markdown(gate_blocks(g, Path("/r/gates.png")), Path("/r"))
    assert "## Forget gates" in text and "half-life" in text and "![" in text
    assert (
        text.count("\n| 1 |") == 2 and "\n| 0 |" not in text
    )  # the gated layer's two heads, not the NoPE one
    assert gate_blocks(None, None) == []
    assert "Not measured: no text" in render_markdown(gate_blocks({"skipped": "no text"}, None), Path("/r"))


@pytest.mark.parametrize("position", ["fox", "rope", "stick-breaking"])
def test_only_a_scheme_with_gates_has_the_section(position: str):
    assert has_gates(fox(position=position)) == (position == "fox")
