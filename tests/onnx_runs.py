"""Runs for the ONNX export tests (tests/interop/test_onnx_export*.py): a small tokenizer, a model whose every
parameter is far from its initial value, and a run folder as `octlm train` leaves it."""

from __future__ import annotations

from pathlib import Path

import torch

from octlm.config import Config, ModelConfig
from octlm.data.sources import Document
from octlm.data.tokenizer import Tokenizer, train_tokenizer
from octlm.model.decoder import Decoder
from octlm.storage.checkpoint import save_checkpoint
from octlm.storage.run import Run

TINY = ModelConfig(d_model=32, n_layers=2, n_heads=4, d_ff=64, context_length=16)


def small_tokenizer() -> Tokenizer:
    docs = [
        Document(f"doc{i}", f"def function_{i}(x):\n    return x * {i} + 'text, with punctuation!'\n")
        for i in range(40)
    ]
    return train_tokenizer(docs, vocab_size=300)


def random_model(config: ModelConfig, seed: int = 0) -> Decoder:
    """A Decoder in eval mode whose every parameter is moved well away from its initial value."""
    torch.manual_seed(seed)
    model = Decoder(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.1))
        for block in model.blocks:
            block.attn.qkv.weight.mul_(4.0)  # scores 16x larger: peaked attention, where a wrong score shows
    return model


def make_run(folder: Path, config: ModelConfig, tokenizer: Tokenizer) -> Decoder:
    """A run folder as `octlm train` leaves it (checkpoint/ and the tokenizer); returns its model."""
    model = random_model(config)
    save_checkpoint(
        folder,
        model,
        None,
        Config(model=config, name="tiny"),
        step=3,
        state={"sha256": {"tokenizer": tokenizer.sha256}},
    )
    tokenizer.save(Run.of(folder).tokenizer_path)
    return model
