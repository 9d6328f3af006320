"""`octlm export hf`: a run as a Hugging Face transformers model folder."""

from __future__ import annotations

import argparse

from octlm.interop.hf import export_hf

# What `octlm export hf --help` says maps where (hf_arch.hf_architecture decides; its refusal says the same).
SHAPES = (
    "A run exports when its model matches one transformers architecture: GPT-2 (learned positions, layernorm, "
    "gelu, bias); Llama (rope, half layout, rope_fraction 1, rmsnorm, swiglu, no bias; grouped KV heads "
    "allowed), or SmolLM3 when it also has nope_layers; GPT-NeoX (rope, half layout, any rope_fraction as "
    "rotary_pct, layernorm, gelu, bias). Anything else is refused, naming what differs."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = SHAPES
    parser.add_argument(
        "--run", required=True, metavar="RUN_DIR", help="a trained run folder, e.g. runs/day1-learned"
    )
    parser.add_argument("out", metavar="OUT", help="the folder to write (must be new or empty)")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists and is not empty")


def run(args: argparse.Namespace) -> None:
    out = export_hf(args.run, args.out, force=args.force)
    print(f"wrote {out}: load it with transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
