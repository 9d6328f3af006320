"""`octlm model`: describe a model config: its parameter count and, with `--dry-run`, one forward pass's shapes."""

from __future__ import annotations

import argparse

import torch

from octlm.config import add_config_arguments, config_from_args
from octlm.model.decoder import Decoder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="also run one forward pass on random ids")


def run(args: argparse.Namespace) -> None:
    config = config_from_args(args)
    mc = config.model
    model = Decoder(mc)
    table = mc.vocab_size * mc.d_model
    print(
        f"config {config.name}: position={mc.position} norm={mc.norm} mlp={mc.mlp} tied={mc.tie_embeddings}"
    )
    print(f"parameters: {model.num_parameters():,} (token table {mc.vocab_size} x {mc.d_model} = {table:,})")
    if args.dry_run:
        ids = torch.randint(0, mc.vocab_size, (2, mc.context_length))
        with torch.inference_mode():
            logits, _ = model(ids)
        print(f"ids {list(ids.shape)} -> logits {list(logits.shape)}")
