"""Generating text from a trained model: one token at a time with the KV cache, streamed, or a batch of
samples.

The prompt is run once through the model, filling the cache; after that each new token is a single-position
forward pass that reads the cached keys and values (`octlm.model.decode_step`). The cache starts with room for
`INITIAL_NEW_TOKENS` new tokens and doubles when full, so `--max-new-tokens 10**12` allocates nothing up
front. Schemes with no maximum length keep using the cache past the trained context. A learned position table
has no row past its last one, so once the sequence outgrows it the window slides: every new token re-reads the
last `context_length` tokens without the cache (slower, and said once on stderr). How each token is chosen is
`octlm.generation.sampling`.

Streaming: `StreamDecoder` feeds each token's bytes through an incremental UTF-8 decoder, so printing is
linear in the output and a character spelled out over several tokens prints once it is whole.
"""

from __future__ import annotations

import codecs
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import torch
from torch import Tensor, nn

from octlm.errors import UserError
from octlm.generation.sampling import Sampling, check_max_new_tokens, choose_tokens
from octlm.model.decode_step import DecodeStep

if TYPE_CHECKING:
    from octlm.config import Config

# The sample a training run writes into its results: low temperature, top-k, so it reads as the model's best.
SAMPLE_TEMPERATURE = 0.7
SAMPLE_TOP_K = 40
# The KV cache starts with room for the prompt and this many new tokens, then doubles as decoding needs: a
# huge --max-new-tokens costs nothing up front, and growth copies each cached entry about once on average.
INITIAL_NEW_TOKENS = 256


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """EOT then the prompt's tokens: training streams put EOT before every document, so this marks a start.
    An empty prompt is EOT alone: the model writes a document from its start (an unconditional sample)."""
    return [tokenizer.eot_id, *tokenizer.encode(text)]


# A notice names at most this many characters, then how many more.
SHOWN_CHARACTERS = 10


def _shown(chars: list[str]) -> str:
    """`日, 本, U+200B and 3 more`: printable characters as themselves, the others as code points."""
    names = [c if c.isprintable() and not c.isspace() else f"U+{ord(c):04X}" for c in chars]
    more = len(names) - SHOWN_CHARACTERS
    return ", ".join(names[:SHOWN_CHARACTERS]) + (f" and {more} more" if more > 0 else "")


def prompt_notice(tokenizer: Any, text: str) -> str | None:
    """One line naming the prompt's characters the tokenizer cannot represent (lost in its round trip), or
    else those it has no token for (a multi-byte character spelled byte by byte: rare or absent in its
    training text, so the model has barely seen those bytes and tends to answer with stray bytes, printed
    as U+FFFD); None when every character has a token."""
    lost, spelled = [], []
    for char in dict.fromkeys(text):
        ids = tokenizer.encode(char)
        if tokenizer.decode(ids) != char:
            lost.append(char)
        elif len(ids) > 1 and len(ids) == len(char.encode("utf-8")):
            spelled.append(char)
    if lost:
        return (
            f"note: the tokenizer cannot represent {_shown(lost)} in the prompt: the model reads the prompt "
            "without them"
        )
    if spelled:
        return (
            f"note: the tokenizer has no token for {_shown(spelled)} in the prompt (rare or absent in its "
            "training text): the model reads them byte by byte and may answer with stray bytes, shown as "
            "\ufffd"
        )
    return None


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _silent(message: str) -> None:
    """Drop a notice (`generate(..., notice=None)`)."""


def _checked_prompt(model: nn.Module, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
    """The prompt as a list of ints, or a UserError naming what is wrong with it or with `max_new_tokens`."""
    check_max_new_tokens(max_new_tokens)
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise UserError("the prompt is empty: generation needs at least one token to continue")
    vocab = model.config.vocab_size
    bad = [i for i in prompt if not 0 <= i < vocab]
    if bad:
        raise UserError(f"prompt token id {bad[0]} is outside the model's vocabulary [0, {vocab})")
    return prompt


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
    sampling = Sampling(temperature, top_k, top_p, seed)
    prompt = _checked_prompt(model, prompt_ids, max_new_tokens)
    return _generate(
        model,
        tokenizer,
        [prompt],
        max_new_tokens,
        sampling,
        use_cache=use_cache,
        stop_at_eot=stop_at_eot,
        notice=notice or _silent,
    )


def generate_batch(
    model: nn.Module,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    num_samples: int,
    max_new_tokens: int,
    sampling: Sampling,
    use_cache: bool = True,
    stop_at_eot: bool = True,
    notice: Callable[[str], None] | None = _stderr,
) -> list[list[int]]:
    """`num_samples` continuations of one prompt, decoded together as a batch (one cache, one forward per
    step for all of them), each drawn from its own row of logits by one seeded generator.

    Each list stops after its own EOT when `stop_at_eot` (the EOT id included); the batch stops when all did.
    """
    if num_samples < 1:
        raise UserError(f"num-samples = {num_samples} must be at least 1")
    prompt = _checked_prompt(model, prompt_ids, max_new_tokens)
    outs: list[list[int]] = [[] for _ in range(num_samples)]
    done = [False] * num_samples
    for tokens in _generate(
        model,
        tokenizer,
        [prompt] * num_samples,
        max_new_tokens,
        sampling,
        use_cache=use_cache,
        stop_at_eot=False,
        notice=notice or _silent,
        batched=True,
    ):
        for out, token, finished in zip(outs, tokens, done, strict=True):
            if not finished:
                out.append(token)
        done = [d or (stop_at_eot and t == tokenizer.eot_id) for d, t in zip(done, tokens, strict=True)]
        if all(done):
            break
    return outs


def _usable(logits: Tensor, usable: int) -> Tensor:
    """`logits` `[..., V]` in float32, ids from `usable` on (which the tokenizer lacks) set to -inf."""
    out = logits.float()
    if usable < out.shape[-1]:
        out[..., usable:] = float("-inf")
    return out


def _generate(
    model: nn.Module,
    tokenizer: Any,
    rows: list[list[int]],
    max_new_tokens: int,
    sampling: Sampling,
    *,
    use_cache: bool,
    stop_at_eot: bool,
    notice: Callable[[str], None],
    batched: bool = False,
) -> Iterator[Any]:
    """`generate` once its arguments are checked, for `rows` (prompts of one length): one int per step for a
    single row, or (`batched`) a list of ints, one per row, however many rows. Stops at EOT when
    `stop_at_eot`, unbatched only: a batch's rows stop one by one in `generate_batch`."""
    limit: int | None = model.positions.max_length  # None: the scheme has no maximum length
    if limit is not None and len(rows[0]) > limit:
        notice(
            f"the prompt has {len(rows[0])} tokens; the learned position table has {limit} rows, "
            f"so only the last {limit} are read"
        )
    if not max_new_tokens:
        return
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            ids = torch.tensor(rows, dtype=torch.long, device=next(model.parameters()).device)
            for tokens in _token_steps(model, ids, max_new_tokens, sampling, tokenizer, use_cache, notice):
                if batched:
                    yield tokens.tolist()  # one device sync per step for the whole batch
                    continue
                token = int(tokens[0])  # the one host round trip per token: the caller prints it now
                yield token
                if stop_at_eot and token == tokenizer.eot_id:
                    return
    finally:
        model.train(was_training)


def _token_steps(
    model: nn.Module,
    ids: Tensor,
    max_new_tokens: int,
    sampling: Sampling,
    tokenizer: Any,
    use_cache: bool,
    notice: Callable[[str], None],
) -> Iterator[Tensor]:
    """The new token ids `[B]` of each step after `ids` `[B, T]`, on the device, `max_new_tokens` of them.

    With the cache, the prompt is read once and each step reads one token (through `DecodeStep` where it
    computes what the model would); a learned table that the sequence outgrows drops the cache and slides
    its window. Without the cache, every step re-reads the whole sequence (the last `limit` tokens).
    """
    limit: int | None = model.positions.max_length
    usable = min(tokenizer.vocab_size, model.config.vocab_size)
    generator = torch.Generator(device=ids.device).manual_seed(sampling.seed)
    cache, step = None, None
    if use_cache and (limit is None or ids.shape[1] <= limit):
        capacity = ids.shape[1] + min(max_new_tokens, INITIAL_NEW_TOKENS)
        cache = model.new_cache(ids.shape[0], capacity if limit is None else min(limit, capacity))
        step = DecodeStep(model) if DecodeStep.supports(model) else None
    first = ids if cache is not None or not limit else ids[:, -limit:]
    logits, sliding = _usable(model(first, cache=cache)[0][:, -1], usable), False
    for n in range(max_new_tokens):
        tokens = choose_tokens(logits, sampling.temperature, sampling.top_k, sampling.top_p, generator)
        yield tokens
        if n == max_new_tokens - 1:
            return
        if cache is None or limit is not None:  # what an uncached pass, or a sliding window, reads
            ids = torch.cat((ids, tokens[:, None]), dim=1)
        if limit is not None and ids.shape[1] > limit:  # past the learned table: slide, no cache
            if not sliding:
                sliding = True
                notice(
                    f"passed the learned position table's {limit} rows: sliding the window, each "
                    f"new token now re-reads the last {limit} tokens without the cache"
                )
            cache = None
        if step is not None and cache is not None:
            logits = step(tokens, cache)
        elif cache is not None:
            logits = model(tokens[:, None], cache=cache)[0][:, -1]
        else:
            logits = model(ids[:, -limit:] if limit else ids)[0][:, -1]
        logits = _usable(logits, usable)


class StreamDecoder:
    """Turns token ids into text pieces as they arrive, never printing half of a multi-byte character.

    Each push feeds the token's exact bytes to an incremental UTF-8 decoder, which holds back a character
    still being spelled out by the next tokens until it completes: the work per token does not grow with
    the output. Once flushed, the pieces joined are exactly `tokenizer.decode(ids)` (byte-level decoding is
    the tokens' bytes joined, then UTF-8 with invalid bytes as U+FFFD).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._utf8.decode(self.tokenizer.token_bytes(int(token_id)))

    def flush(self) -> str:
        """Whatever is left, broken characters included (as U+FFFD)."""
        return self._utf8.decode(b"", final=True)


# ------------------------------------------------------------------------------------------------------------
# The sample a training run prints and saves


def sample_prompt(config: Config) -> str:
    """A fixed prompt that suits the corpus: code for the stdlib, prose otherwise."""
    # A whole word with no trailing space: BPE merges a space into the next word (" self"), so a prompt ending
    # in a lone " " token starts from a context the model rarely saw, and samples from it degenerate.
    return "class" if config.data.source == "stdlib" else "The"


def sample_text(model: nn.Module, tokenizer: Any, prompt: str, max_new_tokens: int, seed: int) -> str:
    """Prompt plus a low-temperature continuation (fixed seed, so the same weights give the same sample)."""
    ids = list(
        generate(
            model,
            tokenizer,
            encode_prompt(tokenizer, prompt),
            max_new_tokens,
            temperature=SAMPLE_TEMPERATURE,
            top_k=SAMPLE_TOP_K,
            top_p=1.0,
            seed=seed,
        )
    )
    if ids and ids[-1] == tokenizer.eot_id:
        ids = ids[:-1]  # the document ended; EOT is not text
    return prompt + tokenizer.decode(ids)


def _note_prompt(tokenizer: Any, prompt: str, notice: Callable[[str], None] | None) -> None:
    """Say (`prompt_notice`) which of the prompt's characters the tokenizer cannot represent or lacks."""
    line = prompt_notice(tokenizer, prompt)
    if line is not None:
        (notice or _silent)(line)


def stream_text(
    model: nn.Module,
    tokenizer: Any,
    prompt: str,
    max_new_tokens: int,
    sampling: Sampling,
    out: TextIO,
    use_cache: bool = True,
    stop_at_eot: bool = True,
    notice: Callable[[str], None] | None = _stderr,
) -> int:
    """What `octlm generate` prints: `prompt`, then each new piece of text as soon as it is whole, flushed.

    Returns the number of tokens made (a final EOT counts, and is not printed). A notice (the window sliding
    past a learned table) goes to `notice`, never to `out`.
    """
    _note_prompt(tokenizer, prompt, notice)
    out.write(prompt)
    out.flush()
    stream, count = StreamDecoder(tokenizer), 0
    for token in generate(
        model,
        tokenizer,
        encode_prompt(tokenizer, prompt),
        max_new_tokens,
        sampling.temperature,
        sampling.top_k,
        sampling.top_p,
        sampling.seed,
        use_cache=use_cache,
        stop_at_eot=stop_at_eot,
        notice=notice,
    ):
        count += 1
        if token == tokenizer.eot_id and stop_at_eot:
            break  # the end of a document: nothing to print
        piece = stream.push(token)
        if piece:
            out.write(piece)
            out.flush()
    out.write(stream.flush() + "\n")
    out.flush()
    return count


def print_samples(
    model: nn.Module,
    tokenizer: Any,
    prompt: str,
    num_samples: int,
    max_new_tokens: int,
    sampling: Sampling,
    out: TextIO,
    use_cache: bool = True,
    stop_at_eot: bool = True,
    notice: Callable[[str], None] | None = _stderr,
) -> int:
    """`octlm generate --num-samples N`: N continuations decoded as one batch, printed whole when done, each
    as `prompt` + text after a `--- sample i ---` line. Returns the number of tokens made, all samples."""
    _note_prompt(tokenizer, prompt, notice)
    samples = generate_batch(
        model,
        tokenizer,
        encode_prompt(tokenizer, prompt),
        num_samples,
        max_new_tokens,
        sampling,
        use_cache=use_cache,
        stop_at_eot=stop_at_eot,
        notice=notice,
    )
    for i, ids in enumerate(samples):
        text = tokenizer.decode(ids[:-1] if stop_at_eot and ids and ids[-1] == tokenizer.eot_id else ids)
        out.write(f"--- sample {i + 1} ---\n{prompt}{text}\n")
    out.flush()
    return sum(len(ids) for ids in samples)
