"""`octlm model`: describe a model config: its parameter count and, with `--dry-run`, one forward pass's
shapes."""

from __future__ import annotations

import argparse

import torch

from octlm.commands import options
from octlm.commands.options import add_config_arguments, config_from_args
from octlm.config import config_fields
from octlm.model.decoder import Decoder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, config_fields("model"))
    parser.add_argument("--dry-run", action="store_true", help="also run one forward pass on random ids")
    options.add_threads(parser, what="torch CPU threads of --dry-run")


def run(args: argparse.Namespace) -> None:
    config = config_from_args(args)
    mc = config.model
    model = Decoder(mc)
    table = mc.vocab_size * mc.d_model
    print(
        f"config {config.name}: position={mc.position} norm={mc.norm} mlp={mc.mlp} tied={mc.tie_embeddings}"
    )
    print(f"parameters: {model.num_parameters():,} (token table {mc.vocab_size} x {mc.d_model} = {table:,})")
    if model.positions.cost:  # a scheme whose cost grows faster than softmax attention's says how
        print(f"{mc.position} cost: {model.positions.cost}")
    if args.dry_run:
        ids = torch.randint(0, mc.vocab_size, (2, mc.context_length))
        with options.threads(args.threads), torch.inference_mode():
            logits, _ = model(ids)
        print(f"ids {list(ids.shape)} -> logits {list(logits.shape)}")
