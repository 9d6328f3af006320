"""`model.rope_scaling`: a RoPE model built with a context extension's frequencies (for fine-tuning at a longer
length and running there), each method's exactly; its problems listed; old configs keep their hashes."""

from __future__ import annotations

import math

import pytest
import torch

from octlm.config import config_from_dict
from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.positions.formulas import rope_frequencies
from octlm.positions.rope_scaling import scaled_frequencies, yarn_mscale


def test_rope_scaling_builds_the_methods_frequencies() -> None:
    mc = config_from_dict({"model": {"position": "rope", "d_model": 32, "n_heads": 2}}).model
    for method in ("linear", "ntk", "yarn"):
        scaled = config_from_dict(
            {"model": {**mc.__dict__, "rope_scaling": method, "rope_factor": 4.0, "rope_original_length": 64}}
        ).model
        rope = Decoder(scaled).positions
        inv_freq, scale = scaled_frequencies(method, 16, 10000.0, 4.0, 64)
        assert torch.equal(rope.frequencies(), inv_freq) and rope.attention_scaling == scale
    assert torch.equal(Decoder(mc).positions.frequencies(), rope_frequencies(16, 10000.0))
    pi = config_from_dict(
        {"model": {**mc.__dict__, "rope_scaling": "linear", "rope_factor": 4.0, "rope_original_length": 64}}
    ).model
    assert torch.equal(
        Decoder(pi).positions.frequencies(), rope_frequencies(16, 10000.0) / 4
    )  # θ / s, exactly
    assert yarn_mscale(4.0) == pytest.approx(0.1 * math.log(4) + 1, abs=1e-15)


def test_rope_scaling_problems_are_listed() -> None:
    with pytest.raises(UserError) as caught:
        config_from_dict({"model": {"position": "alibi", "rope_scaling": "linear", "rope_factor": 0.5}})
    text = str(caught.value)
    assert "model.rope_factor = 0.5 must be" in text and "rope_scaling = 'linear' rescales RoPE" in text
    with pytest.raises(UserError, match="needs model.rope_original_length"):
        config_from_dict({"model": {"position": "rope", "rope_scaling": "yarn", "rope_factor": 2.0}})
    with pytest.raises(
        UserError, match="model.rope_scaling = 'dynamic' is unknown; choose one of none, linear"
    ):
        config_from_dict({"model": {"position": "rope", "rope_scaling": "dynamic"}})


def test_new_fields_at_their_defaults_keep_old_hashes() -> None:
    config = config_from_dict({"model": {"position": "rope"}})
    old = config.to_dict()
    for key in ("rope_scaling", "rope_factor", "rope_original_length"):
        old["model"].pop(key)
    old["train"].pop("init_from")
    assert config_from_dict(old).hash() == config.hash()
    changed = config_from_dict(
        old,
        overrides={
            "model.rope_scaling": "linear",
            "model.rope_factor": 2.0,
            "model.rope_original_length": 16,
        },
    )
    assert changed.hash() != config.hash()
    assert config_from_dict(old, overrides={"train.init_from": "runs/x"}).hash() != config.hash()
