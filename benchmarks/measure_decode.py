"""The generation section: new tokens/s with and without the KV cache against HF `generate`, and the floor
under cached decoding (the model's weight GEMVs alone); then what `octlm generate` itself does (the lean
decoding step, sampling, streaming text to a file) greedy, sampled and batched, against HF `generate` doing
the same, at the CLI's one thread."""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from measure import CONFIGS, hf_gpt2, hf_llama, interleaved, octlm_config, summary

from octlm.data.sources import Document
from octlm.data.tokenizer import Tokenizer, train_tokenizer
from octlm.generation.generate import generate_batch, stream_text
from octlm.generation.sampling import Sampling
from octlm.model.decode_step import Dense
from octlm.model.decoder import Decoder
from octlm.runtime import torch_threads

FLOOR = "floor: octlm learned's weight GEMVs alone"
# `octlm generate`'s rows: its defaults (temperature 0.8, no top-k, top-p 1, one thread), HF given the same.
CLI_GREEDY, CLI_SAMPLED = "octlm generate (CLI path), greedy", "octlm generate (CLI path), sampled"
HF_GREEDY, HF_SAMPLED = (
    "HF GPT-2 generate, cache, greedy, 1 thread",
    "HF GPT-2 generate, cache, sampled, 1 thread",
)
FLOOR_1 = FLOOR + ", 1 thread"
FLOOR_DENSE_1 = "floor: the same GEMVs on [in, out] weights (DecodeStep's layout), 1 thread"
BATCH = 8  # `octlm generate --num-samples 8`
CLI_BATCH, HF_BATCH = (
    f"octlm generate --num-samples {BATCH}, sampled",
    f"HF GPT-2 generate, cache, batch {BATCH}, sampled, 1 thread",
)
TEMPERATURE = 0.8  # the CLI's default


def octlm_generate(model: Decoder, prompt: torch.Tensor, new: int, use_cache: bool) -> torch.Tensor:
    """Greedy decoding, the lean way: prefill once, then one token per forward through the KV cache."""
    with torch.inference_mode():
        if not use_cache:
            ids = prompt
            for _ in range(new):
                logits, _ = model(ids)
                ids = torch.cat((ids, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
            return ids
        cache = model.new_cache(prompt.shape[0], prompt.shape[1] + new)
        logits, _ = model(prompt, cache=cache)
        out = [prompt]
        for _ in range(new):
            token = logits[:, -1].argmax(-1, keepdim=True)
            out.append(token)
            logits, _ = model(token, cache=cache)
        return torch.cat(out, dim=1)


def linear_layers(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """Every `nn.Linear` of `model`: the weights a batch-1 decoding step reads once per token."""
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def weight_gemvs(
    layers: list[Callable[[torch.Tensor], torch.Tensor]], inputs: list[torch.Tensor], new: int
) -> None:
    """Every layer on its one-token input, `new` times over."""
    with torch.inference_mode():
        for _ in range(new):
            for layer, x in zip(layers, inputs, strict=True):
                layer(x)


def weights_only_decode(model: Decoder, new: int) -> Callable[[], None]:
    """The floor under cached decoding: every weight matrix's matrix-vector product, `new` times, and nothing else.

    Batch-1 decoding must read each weight once per token. This times exactly that work (the model's own
    `nn.Linear` layers, the tied head included, on a `[1, 1, in]` input), so `new / seconds` is the most
    tokens/s any fp32 implementation built on torch's GEMV could reach: no attention, norms or dispatch.
    """
    layers = linear_layers(model)
    inputs = [torch.randn(1, 1, m.in_features) for m in layers]
    return partial(weight_gemvs, layers, inputs, new)


def dense_only_decode(model: Decoder, new: int) -> Callable[[], None]:
    """The floor in the lean step's own layout: each weight transposed to `[in, out]` and its bias added by the
    same `addmm` (`octlm.model.decode_step.Dense`), on a `[1, in]` input. At batch 1 torch's CPU GEMV reads that layout
    faster than `nn.Linear`'s `[out, in]`, so this is the stricter floor for `DecodeStep`."""
    linears = linear_layers(model)
    layers = [Dense(m) for m in linears]
    inputs = [torch.randn(1, m.in_features) for m in linears]
    return partial(weight_gemvs, layers, inputs, new)


def hf_generate(
    model: Any, prompt: torch.Tensor, new: int, use_cache: bool, sample: bool = False
) -> torch.Tensor:
    """Exactly `new` tokens after `prompt` `[B, T]` with a Hugging Face model's `generate`: greedy, or (`sample`)
    drawn at the CLI's temperature from every token (`top_k=0`: HF's default would keep only 50)."""
    sampling = (
        {"do_sample": True, "temperature": TEMPERATURE, "top_k": 0, "top_p": 1.0}
        if sample
        else {"do_sample": False}
    )
    with torch.inference_mode():
        return model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=new,
            min_new_tokens=new,
            use_cache=use_cache,
            pad_token_id=0,
            **sampling,
        )


def bench_tokenizer(vocab: int) -> Tokenizer:
    """A byte-level BPE of up to `vocab` entries, trained on a few stdlib modules (a second or so)."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    docs = [
        Document(n, (lib / n).read_text(encoding="utf-8")) for n in ("argparse.py", "inspect.py", "typing.py")
    ]
    return train_tokenizer(docs, vocab)


def cli_generate(model: Decoder, tokenizer: Tokenizer, new: int, sampling: Sampling, out: Any) -> int:
    """What `octlm generate --keep-going` does once the run is loaded: prompt, `new` tokens, text streamed to
    `out` (a file on /dev/null: every piece is written and flushed), exactly `new` tokens."""
    with torch_threads(1):  # the CLI's default
        count = stream_text(model, tokenizer, "class", new, sampling, out, stop_at_eot=False)
    assert count == new
    return count


def cli_batch(model: Decoder, tokenizer: Tokenizer, new: int, sampling: Sampling) -> int:
    """`octlm generate --num-samples BATCH --keep-going`'s decoding: one batch, `new` tokens per sample."""
    with torch_threads(1):
        rows = generate_batch(
            model,
            tokenizer,
            [tokenizer.eot_id, *tokenizer.encode("class")],
            BATCH,
            new,
            sampling,
            stop_at_eot=False,
        )
    assert [len(r) for r in rows] == [new] * BATCH
    return BATCH * new


def one_thread(fn: Callable[[], Any]) -> Any:
    """`fn()` with one torch intra-op thread, then the previous count back."""
    with torch_threads(1):
        return fn()


def generation_paths(
    config: str, prompt: torch.Tensor, new: int
) -> tuple[dict[str, Callable[[], Any]], Decoder]:
    """Every decoding path timed at `config`, by row name, and octlm's learned model (for the floor's size)."""
    learned = Decoder(octlm_config(config, "learned")).eval()
    rope = Decoder(octlm_config(config, "rope", llama=True)).eval()
    gpt2, llama = hf_gpt2(config).eval(), hf_llama(config).eval()
    fns: dict[str, Callable[[], Any]] = {
        "octlm learned, KV cache": partial(octlm_generate, learned, prompt, new, True),
        "octlm learned, no cache": partial(octlm_generate, learned, prompt, new, False),
        "HF GPT-2 generate, cache": partial(hf_generate, gpt2, prompt, new, True),
        "HF GPT-2 generate, no cache": partial(hf_generate, gpt2, prompt, new, False),
        "octlm rope llama-shaped, KV cache": partial(octlm_generate, rope, prompt, new, True),
        "HF Llama generate, cache": partial(hf_generate, llama, prompt, new, True),
    }
    fns[FLOOR] = weights_only_decode(learned, new)
    # One token at a time is a chain of tiny ops; on a busy machine OpenMP's second thread mostly waits at
    # barriers, so the same paths are also timed with one intra-op thread (both sides alike).
    fns["octlm learned, KV cache, 1 thread"] = partial(one_thread, fns["octlm learned, KV cache"])
    fns["HF GPT-2 generate, cache, 1 thread"] = partial(one_thread, fns["HF GPT-2 generate, cache"])
    return fns, learned


def cli_paths(learned: Decoder, gpt2: Any, new: int, out: Any) -> dict[str, Callable[[], Any]]:
    """`octlm generate`'s own path greedy, sampled and batched, HF `generate` likewise, and the floor, all at
    one thread (the CLI's default). HF's prompt is as long as the CLI's ("class" after EOT)."""
    tokenizer = bench_tokenizer(learned.config.vocab_size)
    prompt = torch.zeros(1, len(tokenizer.encode("class")) + 1, dtype=torch.long)
    batch = prompt.repeat(BATCH, 1)
    return {
        CLI_GREEDY: partial(cli_generate, learned, tokenizer, new, Sampling(), out),
        HF_GREEDY: partial(one_thread, partial(hf_generate, gpt2, prompt, new, True)),
        CLI_SAMPLED: partial(cli_generate, learned, tokenizer, new, Sampling(TEMPERATURE), out),
        HF_SAMPLED: partial(one_thread, partial(hf_generate, gpt2, prompt, new, True, True)),
        FLOOR_1: partial(one_thread, weights_only_decode(learned, new)),
        FLOOR_DENSE_1: partial(one_thread, dense_only_decode(learned, new)),
        CLI_BATCH: partial(cli_batch, learned, tokenizer, new, Sampling(TEMPERATURE)),
        HF_BATCH: partial(one_thread, partial(hf_generate, gpt2, batch, new, True, True)),
    }


def bench_generation(config: str, prompt_len: int, new: int, warmup: int, reps: int, log) -> dict[str, Any]:
    log(f"generation config {config}: prompt {prompt_len}, {new} new tokens, batch 1, greedy")
    c = CONFIGS[config]
    prompt = torch.randint(0, c["vocab_size"], (1, prompt_len), generator=torch.Generator().manual_seed(0))
    fns, learned = generation_paths(config, prompt, new)
    for name, fn in fns.items():  # every path must really make `new` tokens
        if name != FLOOR:
            assert fn().shape[1] == prompt_len + new, name
    with open(os.devnull, "w", encoding="utf-8") as out:
        cli = cli_paths(learned, hf_gpt2(config).eval(), new, out)
        times = interleaved({**fns, **cli}, warmup, reps)
    tokens = {k: BATCH * new if k in (CLI_BATCH, HF_BATCH) else new for k in times}
    return {
        "config": config,
        "prompt": prompt_len,
        "new_tokens": new,
        "batch": BATCH,
        "cli_rows": list(cli),
        "rows": {k: {"tokens_per_s": summary([tokens[k] / s for s in v])} for k, v in times.items()},
        "weight_megabytes_per_token": sum(
            m.weight.numel() * m.weight.element_size() for m in linear_layers(learned)
        )
        / 1e6,
    }
