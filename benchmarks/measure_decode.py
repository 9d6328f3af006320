"""The generation section: new tokens/s with and without the KV cache against HF `generate`, and the floor
under cached decoding (the model's weight GEMVs alone)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from measure import CONFIGS, hf_gpt2, hf_llama, interleaved, octlm_config, summary

from octlm.model import Decoder
from octlm.runtime import torch_threads

FLOOR = "floor: octlm learned's weight GEMVs alone"


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


def weight_gemvs(layers: list[torch.nn.Linear], inputs: list[torch.Tensor], new: int) -> None:
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


def hf_generate(model: Any, prompt: torch.Tensor, new: int, use_cache: bool) -> torch.Tensor:
    """Greedy decoding of exactly `new` tokens after `prompt` with a Hugging Face model's `generate`."""
    with torch.inference_mode():
        return model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            do_sample=False,
            max_new_tokens=new,
            min_new_tokens=new,
            use_cache=use_cache,
            pad_token_id=0,
        )


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


def bench_generation(config: str, prompt_len: int, new: int, warmup: int, reps: int, log) -> dict[str, Any]:
    log(f"generation config {config}: prompt {prompt_len}, {new} new tokens, batch 1, greedy")
    c = CONFIGS[config]
    prompt = torch.randint(0, c["vocab_size"], (1, prompt_len), generator=torch.Generator().manual_seed(0))
    fns, learned = generation_paths(config, prompt, new)
    for name, fn in fns.items():  # every path must really make `new` tokens
        if name != FLOOR:
            assert fn().shape[1] == prompt_len + new, name
    times = interleaved(fns, warmup, reps)
    return {
        "config": config,
        "prompt": prompt_len,
        "new_tokens": new,
        "rows": {k: {"tokens_per_s": summary([new / s for s in v])} for k, v in times.items()},
        "weight_megabytes_per_token": sum(
            m.weight.numel() * m.weight.element_size() for m in linear_layers(learned)
        )
        / 1e6,
    }
