"""`octlm generate`: stream text from a trained run (or print `--num-samples` continuations decoded
together)."""

from __future__ import annotations

import argparse
import sys
import time

from octlm.commands.options import add_run, add_threads, int_in_range, run_folder
from octlm.errors import SEED_RANGE, check_text
from octlm.generation.generate import print_samples, stream_text
from octlm.generation.sampling import Sampling, check_sampling
from octlm.runtime import resolve_device, torch_threads
from octlm.storage.checkpoint import load_model

DEVICES = "auto, cpu, cuda or cuda:N"
# `--num-samples`: one batch, one KV cache of N rows; past a few thousand rows a cache would not fit in
# memory.
NUM_SAMPLES_RANGE = (1, 4096)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run(parser)
    parser.add_argument(
        "--prompt", required=True, help='the text to continue ("" samples a document from its start)'
    )
    parser.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate (default 200)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens only")
    parser.add_argument(
        "--top-p", type=float, default=1.0, help="nucleus sampling: keep tokens up to this mass"
    )
    parser.add_argument("--seed", type=int_in_range(*SEED_RANGE), default=0, help="sampling seed (default 0)")
    parser.add_argument("--device", type=_device_name, default="auto", help=DEVICES + " (default auto)")
    parser.add_argument("--no-cache", action="store_true", help="re-run the whole sequence for every token")
    parser.add_argument("--keep-going", action="store_true", help="do not stop at the end-of-text token")
    parser.add_argument(
        "--num-samples",
        type=int_in_range(*NUM_SAMPLES_RANGE),
        default=1,
        help="continuations decoded together as one batch, printed when done (default 1: stream)",
    )
    # One token at a time is a chain of tiny matmuls: a second thread only adds synchronisation (on a busy
    # 2-core machine two threads measured 15x slower), so one is the default.
    add_threads(parser, default=1)


def _device_name(text: str) -> str:
    """An argparse `type`: a device octlm can run on (whether it is present is checked when it is used)."""
    index = text[5:] if text.startswith("cuda:") else "0"
    if text not in ("auto", "cpu", "cuda") and not (text.startswith("cuda:") and index.isdecimal()):
        raise argparse.ArgumentTypeError(f"unknown device {text!r}; choose {DEVICES}")
    return text


def run(args: argparse.Namespace) -> int:
    args.run = run_folder(args, "octlm generate")
    check_sampling(args.temperature, args.top_k, args.top_p, args.max_new_tokens)
    check_text(args.prompt, "--prompt")
    with torch_threads(args.threads):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    model, _config, tokenizer = load_model(args.run, device=resolve_device(args.device, "--device"))
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    # stdout carries the text alone; notices wait until it is written, so that even `2>&1` or a terminal
    # showing both streams never splits the text with a line of stderr.
    notices: list[str] = []
    options = {"use_cache": not args.no_cache, "stop_at_eot": not args.keep_going, "notice": notices.append}
    # Greedy decoding makes every row of a batch the same text: decode it once and say so, rather than print
    # N copies (or refuse, when the text itself is what was asked for).
    greedy = args.num_samples > 1 and sampling.temperature == 0
    if greedy:
        notices.append(
            f"note: --temperature 0 is greedy, so the {args.num_samples} samples would be identical: printed "
            "once; pass --temperature > 0 (e.g. 0.8) for different samples"
        )
    start = time.perf_counter()
    if args.num_samples == 1 or greedy:
        count = stream_text(
            model, tokenizer, args.prompt, args.max_new_tokens, sampling, sys.stdout, **options
        )
    else:
        count = print_samples(
            model,
            tokenizer,
            args.prompt,
            args.num_samples,
            args.max_new_tokens,
            sampling,
            sys.stdout,
            **options,
        )
    seconds = time.perf_counter() - start
    sys.stdout.flush()
    for line in dict.fromkeys(notices):  # each once, in order
        sys.stderr.write(line + "\n")
    sys.stderr.write(f"[{count} tokens in {seconds:.2f} s, {count / max(seconds, 1e-9):.1f} tokens/s]\n")
    return 0
