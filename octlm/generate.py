"""`octlm generate`: stream text from a trained run, one token at a time, with the KV cache.

The prompt is run once through the model, filling the cache; after that each new token is a single-position
forward pass that reads the cached keys and values. Schemes with no maximum length (sinusoidal, rope, alibi,
t5, nope) keep using the cache past the trained context. A learned position table has no row past its last
one, so once the sequence outgrows it the window slides: every new token re-reads the last `context_length`
tokens without the cache (slower, and said once on stderr).

Sampling: temperature 0 is greedy (argmax); otherwise logits / temperature, optionally cut to the `top_k`
most likely tokens and to the smallest set whose probability reaches `top_p`, then drawn with a seeded
generator, so the same seed gives the same text.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from octlm.errors import UserError


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """EOT then the prompt's tokens: training streams put EOT before every document, so this marks a start."""
    ids = tokenizer.encode(text)
    if not ids:
        raise UserError('the prompt encodes to no tokens; pass some text, e.g. --prompt "class"')
    return [tokenizer.eot_id, *ids]


def check_sampling(temperature: float, top_k: int | None, top_p: float, max_new_tokens: int) -> None:
    """UserError for a sampling setting outside its range."""
    if not 0 <= temperature < math.inf:  # also catches NaN
        raise UserError(f"temperature = {temperature} must be 0 (greedy) or a finite positive number")
    if top_k is not None and top_k < 1:
        raise UserError(f"top-k = {top_k} must be at least 1 (or left unset for no limit)")
    if not 0.0 < top_p <= 1.0:
        raise UserError(f"top-p = {top_p} must be in (0, 1]; 1 keeps every token")
    if max_new_tokens < 0:
        raise UserError(f"max-new-tokens = {max_new_tokens} must not be negative")


def pick_token(
    logits: Tensor, temperature: float, top_k: int | None, top_p: float, generator: torch.Generator | None
) -> int:
    """One token id from `logits` `[V]` (float; entries set to -inf are never chosen)."""
    # float64, and the largest logit moved to 0 first: a tiny temperature then sends the others to -inf
    # instead of overflowing to inf (softmax NaN), and a tiny top-p is not rounded to 0.
    logits = logits.double()
    if temperature == 0:
        return int(torch.argmax(logits))
    logits = (logits - logits.max()) / temperature
    if top_k is not None and top_k < logits.shape[0]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens before it already reach top_p; the most likely one always stays.
        drop = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(0, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def generate(
    model: nn.Module,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    seed: int = 0,
    use_cache: bool = True,
    stop_at_eot: bool = True,
    notice: Callable[[str], None] | None = _stderr,
) -> Iterator[int]:
    """Yield up to `max_new_tokens` new token ids continuing `prompt_ids`, one at a time as they are made.

    Stops early at EOT when `stop_at_eot` (the EOT id is yielded). Ids the tokenizer cannot decode (a model
    vocabulary larger than the tokenizer's) are never chosen. Options are checked before anything runs.
    """
    check_sampling(temperature, top_k, top_p, max_new_tokens)
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise UserError("the prompt is empty: generation needs at least one token to continue")
    vocab = model.config.vocab_size
    bad = [i for i in prompt if not 0 <= i < vocab]
    if bad:
        raise UserError(f"prompt token id {bad[0]} is outside the model's vocabulary [0, {vocab})")
    return _generate(
        model,
        tokenizer,
        prompt,
        max_new_tokens,
        temperature,
        top_k,
        top_p,
        seed,
        use_cache,
        stop_at_eot,
        notice or (lambda message: None),
    )


def _generate(
    model: nn.Module,
    tokenizer: Any,
    ids: list[int],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float,
    seed: int,
    use_cache: bool,
    stop_at_eot: bool,
    notice: Callable[[str], None],
) -> Iterator[int]:
    device = next(model.parameters()).device
    limit: int | None = model.positions.max_length  # None: the scheme has no maximum length
    generator = torch.Generator(device=device).manual_seed(seed)
    usable = min(tokenizer.vocab_size, model.config.vocab_size)
    eot = tokenizer.eot_id
    if limit is not None and len(ids) > limit:
        notice(
            f"the prompt has {len(ids)} tokens; the learned position table has {limit} rows, "
            f"so only the last {limit} are read"
        )
    warned = False

    def last_logits(window: list[int], cache: Any = None) -> Tensor:
        x = torch.tensor([window], dtype=torch.long, device=device)  # [1, T]
        logits, _ = model(x, cache=cache)
        out = logits[0, -1].float()  # [V]
        if usable < out.shape[0]:
            out[usable:] = float("-inf")
        return out

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            cache = None
            if use_cache and (limit is None or len(ids) <= limit):
                capacity = len(ids) + max_new_tokens
                cache = model.new_cache(1, capacity if limit is None else min(limit, capacity))
                logits = last_logits(ids, cache) if max_new_tokens else None
            else:
                logits = last_logits(ids[-limit:] if limit else ids) if max_new_tokens else None
            for n in range(max_new_tokens):
                assert logits is not None
                token = pick_token(logits, temperature, top_k, top_p, generator)
                yield token
                if (stop_at_eot and token == eot) or n == max_new_tokens - 1:
                    return
                ids.append(token)
                if limit is not None and len(ids) > limit:
                    if not warned:
                        notice(
                            f"passed the learned position table's {limit} rows: sliding the window, each "
                            f"new token now re-reads the last {limit} tokens without the cache"
                        )
                        warned = True
                    cache = None
                    logits = last_logits(ids[-limit:])
                elif cache is not None:
                    logits = last_logits([token], cache)
                else:
                    logits = last_logits(ids)
    finally:
        model.train(was_training)


class StreamDecoder:
    """Turns token ids into text pieces as they arrive, never printing half of a multi-byte character.

    Each push decodes the whole running sequence and returns only the new complete text: a trailing U+FFFD
    (bytes of a character still being spelled out by the next tokens) is held back until it completes.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = 0  # characters already returned

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        stable = self.tokenizer.decode(self.ids).rstrip("\ufffd")
        if len(stable) <= self.emitted:
            return ""
        piece, self.emitted = stable[self.emitted :], len(stable)
        return piece

    def flush(self) -> str:
        """Whatever is left, broken characters included (as U+FFFD)."""
        text = self.tokenizer.decode(self.ids)
        piece, self.emitted = text[self.emitted :], len(text)
        return piece


# ------------------------------------------------------------------------------------------------------------
# `octlm generate`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run", required=True, metavar="RUN_DIR", help="a trained run folder, e.g. runs/day1-learned"
    )
    parser.add_argument("--prompt", required=True, help="the text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate (default 200)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens only")
    parser.add_argument(
        "--top-p", type=float, default=1.0, help="nucleus sampling: keep tokens up to this mass"
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--no-cache", action="store_true", help="re-run the whole sequence for every token")
    parser.add_argument("--keep-going", action="store_true", help="do not stop at the end-of-text token")
    # One token at a time is a chain of tiny matmuls: a second thread only adds synchronisation (on a busy
    # 2-core machine two threads measured 15x slower), so one is the default.
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")


def run(args: argparse.Namespace) -> int:

    check_sampling(args.temperature, args.top_k, args.top_p, args.max_new_tokens)
    from octlm.train import torch_threads

    with torch_threads(args.threads):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from octlm.checkpoint import load_model
    from octlm.train import resolve_device

    model, _config, tokenizer = load_model(args.run, device=resolve_device(args.device))
    prompt_ids = encode_prompt(tokenizer, args.prompt)
    out = sys.stdout
    out.write(args.prompt)
    out.flush()
    stream = StreamDecoder(tokenizer)
    start, count = time.perf_counter(), 0
    for token in generate(
        model,
        tokenizer,
        prompt_ids,
        args.max_new_tokens,
        args.temperature,
        args.top_k,
        args.top_p,
        args.seed,
        use_cache=not args.no_cache,
        stop_at_eot=not args.keep_going,
    ):
        count += 1
        if token == tokenizer.eot_id and not args.keep_going:
            break  # the end of a document: nothing to print
        piece = stream.push(token)
        if piece:
            out.write(piece)
            out.flush()
    out.write(stream.flush() + "\n")
    out.flush()
    seconds = time.perf_counter() - start
    _stderr(f"[{count} tokens in {seconds:.2f} s, {count / max(seconds, 1e-9):.1f} tokens/s]")
    return 0
