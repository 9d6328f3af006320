"""Tiny decoders for the model and scheme tests: every position scheme with the settings it is tested at, small
configs, and random weights at a scale where every part of the model moves the logits."""

from __future__ import annotations

import math

import torch

from octlm.config import ModelConfig
from octlm.model.decoder import Decoder

# (name, position, extra config) for every scheme; RoPE in both layouts.
SCHEMES = [
    ("learned", "learned", {}),
    ("sinusoidal", "sinusoidal", {}),
    ("rope-half", "rope", {"rope_layout": "half"}),
    ("rope-interleaved", "rope", {"rope_layout": "interleaved"}),
    ("alibi", "alibi", {}),
    ("t5", "t5", {"t5_buckets": 8, "t5_max_distance": 16}),  # small, so short sequences reach the log buckets
    ("nope", "nope", {}),
]


def tiny(position: str, **overrides) -> ModelConfig:
    fields = dict(
        vocab_size=64, d_model=32, context_length=8, n_layers=1, n_heads=4, d_ff=64, position=position
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def randomized(config: ModelConfig, seed: int = 0) -> Decoder:
    """A Decoder whose every parameter is O(1)-relevant: matrices N(0, 1/fan_in), norm gains 1 + N(0, 0.1),
    biases N(0, 0.1), and the T5 bias table N(0, 1)."""
    torch.manual_seed(seed)
    model = Decoder(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "positions.table.weight" and config.position == "t5":
                p.normal_(0.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    return model.eval()


def small(position: str, **fields) -> ModelConfig:
    """Two layers of four heads at width 32 with `position` and any other `fields` (the schemes' own tests)."""
    return ModelConfig(
        **dict(vocab_size=64, d_model=32, context_length=8, n_layers=2, n_heads=4, d_ff=64, position=position)
        | fields
    )
