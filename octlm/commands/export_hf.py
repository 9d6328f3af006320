"""`octlm export hf`: a run as a Hugging Face transformers model folder."""

from __future__ import annotations

import argparse

from octlm.commands import options
from octlm.interop.hf import export_hf

# What `octlm export hf --help` says maps where (hf_arch.hf_architecture decides; its refusal says the same).
SHAPES = (
    "A run exports when its model matches one transformers architecture: GPT-2 (learned positions, "
    "layernorm, gelu, bias); Llama (rope, half layout, rope_fraction 1, rmsnorm, swiglu, no bias; grouped KV "
    "heads allowed), or SmolLM3 when it also has nope_layers; GPT-NeoX (rope, half layout, any rope_fraction "
    "as rotary_pct, layernorm, gelu, bias); MPT (alibi, layernorm, gelu, no bias, d_ff = 4 x d_model, no "
    "nope_layers or grouped KV heads); Llama 4's text model (Llama4ForCausalLM) for a Llama-shaped rope or "
    "nope run with attention_scaling llama4 (its temperature in the NoPE layers). Anything else is refused "
    "with the flags to retrain it with for the nearest (one that keeps its scheme, if any). The exported tokenizer puts <|endoftext|> before the text, as octlm generate does, "
    "so transformers' generate continues a prompt as octlm does."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = SHAPES
    options.add_export_folders(parser, "runs/day1-learned")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists and is not empty")
    options.add_threads(parser)


def run(args: argparse.Namespace) -> None:
    run_dir, out_dir = options.run_and_out(args, "octlm export hf")
    with options.threads(args.threads):
        out = export_hf(run_dir, out_dir, force=args.force)
    print(f"wrote {out}: load it with transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
