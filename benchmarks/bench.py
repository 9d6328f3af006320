#!/usr/bin/env python
"""octlm performance benchmarks: one command, one table.

    .venv/bin/python benchmarks/bench.py            # full run (about 15 minutes on 2 cores)
    .venv/bin/python benchmarks/bench.py --quick    # smoke test: config a only, tiny repetitions (< 60 s)

Measures, in one run: the machine's matmul peak; training tokens/s and model-FLOP utilisation for octlm
with every position scheme and for Hugging Face GPT-2 (learned) and Llama (RoPE) at configs a, b, c; forward
latency and peak memory against context length; generation tokens/s with and without the KV cache against HF
`generate`; embedding lookup against one-hot × table; cached against rebuilt position tables; tokenizer
training and encoding; and (full run only) a `torch.compile` training step. Every timing is the median and
min–max over >= 5 repetitions after warm-up (quick: 3). Results: `benchmarks/results/<device>.json`, `.md`.

Fairness: the machine is shared and noisy, so the models being compared are timed *interleaved* — each round
runs one step of every model (and one matmul-peak probe) before the next round starts — and medians are
reported.
Ratios and MFU use the medians of the same rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from octlm.config import POSITIONS, ModelConfig  # noqa: E402
from octlm.model import Decoder  # noqa: E402

THREADS = int(os.environ.get("OCTLM_BENCH_THREADS", "2"))
# Flush denormals to zero (FTZ/DAZ)? ALiBi's far-away penalties put exp() in the denormal range, which x86
# computes ~100x slower: without this, ALiBi's attention backward runs ~2x slower than plain causal attention
# (see README.md). It applies to HF alike. Set in main() (process-wide state), never at import.
FLUSH_DENORMAL = False

# The three shapes. d_ff = 4·C (GPT-2); Llama-shaped models use SwiGLU with d_ff ≈ 8C/3 (same FLOPs).
CONFIGS: dict[str, dict[str, int]] = {
    "a": dict(vocab_size=1024, d_model=128, n_layers=2, n_heads=4, context_length=128, batch=8),
    "b": dict(vocab_size=1024, d_model=256, n_layers=4, n_heads=4, context_length=256, batch=16),
    "c": dict(vocab_size=8192, d_model=384, n_layers=6, n_heads=6, context_length=512, batch=8),
}

MFU_FORMULA = (
    "FLOPs/token = 6·(N_nonembed + V·C) + 12·L·T·C  "
    "(N_nonembed: every parameter except the token and position tables; V·C: the tied output head's matmul; "
    "12·L·T·C: attention scores and weighted sum, forward + backward, causal half not discounted — "
    "the PaLM / nanoGPT convention). MFU = FLOPs/token × tokens/s ÷ measured matmul peak."
)
MEMORY_METHOD = (
    "peak memory = VmHWM − VmRSS around one inference forward (after a warm-up forward of the same shape), "
    "in a worker process started with MALLOC_MMAP_THRESHOLD_=65536 so every tensor is mmapped and given back "
    "to the OS when freed; the high-water mark is reset through /proc/self/clear_refs before each "
    "measurement. It counts everything the forward allocates (activations, scores, bias, scratch), "
    "not the weights."
)


# ----------------------------------------------------------------------------------------------------------
# Timing helpers


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def time_once(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(fns: dict[str, Callable[[], Any]], warmup: int, reps: int) -> dict[str, list[float]]:
    """Seconds per call of every fn, timed round-robin so that machine noise hits all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            times[name].append(time_once(fn))
    return times


def fmt_range(values: list[float], digits: int = 0) -> str:
    s = summary(values)
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}–{s['max']:,.{digits}f})"


# ----------------------------------------------------------------------------------------------------------
# Machine


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "flush_denormal": bool(FLUSH_DENORMAL),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in load],
        "device": f"cpu-{os.cpu_count()}core",
    }


def matmul_probe(n: int = 1024, inner: int = 1) -> Callable[[], Any]:
    """`inner` back-to-back n×n fp32 matmuls into a preallocated output."""
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)

    def probe() -> None:
        for _ in range(inner):
            torch.matmul(a, b, out=out)

    probe.flops = inner * 2 * n**3  # type: ignore[attr-defined]
    return probe


def bench_peak(sizes: list[int], reps: int) -> dict[str, Any]:
    """Square fp32 matmuls; the peak is the best size's median GFLOP/s."""
    rows = {}
    for n in sizes:
        probe = matmul_probe(n, max(1, 2**30 // n**3))
        secs = interleaved({"p": probe}, 1, reps)["p"]
        rows[n] = [probe.flops / s / 1e9 for s in secs]  # type: ignore[attr-defined]
    best = max(rows, key=lambda n: statistics.median(rows[n]))
    return {
        "gflops_by_size": {str(n): summary(v) for n, v in rows.items()},
        "best_size": best,
        "peak_gflops": statistics.median(rows[best]),
        "samples": rows[best],
    }


# ----------------------------------------------------------------------------------------------------------
# Models


def octlm_config(name: str, position: str, llama: bool = False) -> ModelConfig:
    c = CONFIGS[name]
    kw = dict(
        vocab_size=c["vocab_size"],
        d_model=c["d_model"],
        n_layers=c["n_layers"],
        n_heads=c["n_heads"],
        context_length=c["context_length"],
        d_ff=4 * c["d_model"],
        position=position,
        dropout=0.0,
    )
    if llama:
        kw.update(norm="rmsnorm", mlp="swiglu", bias=False, d_ff=llama_ff(c["d_model"]))
    return ModelConfig(**kw)


def llama_ff(d_model: int) -> int:
    """SwiGLU width with the FLOPs of a 4·C GELU MLP (8C/3), rounded up to a multiple of 64."""
    return 64 * math.ceil(8 * d_model / 3 / 64)


def hf_gpt2(name: str):
    from transformers import GPT2Config, GPT2LMHeadModel

    c = CONFIGS[name]
    cfg = GPT2Config(
        vocab_size=c["vocab_size"],
        n_positions=c["context_length"],
        n_embd=c["d_model"],
        n_layer=c["n_layers"],
        n_head=c["n_heads"],
        n_inner=4 * c["d_model"],
        activation_function="gelu",  # exact GELU, as octlm (GPT-2's default is the tanh form)
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=True,
    )
    return GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")


def hf_llama(name: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    c = CONFIGS[name]
    cfg = LlamaConfig(
        vocab_size=c["vocab_size"],
        hidden_size=c["d_model"],
        intermediate_size=llama_ff(c["d_model"]),
        num_hidden_layers=c["n_layers"],
        num_attention_heads=c["n_heads"],
        num_key_value_heads=c["n_heads"],
        max_position_embeddings=c["context_length"],
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=None,
    )
    return LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")


def matmul_params(model: torch.nn.Module, vocab: int, d_model: int) -> int:
    """N_nonembed + V·C: parameters that take part in a matmul per token (the tied head counted once).

    Tables are told apart by their module (`nn.Embedding`: token, learned-position and T5 bucket tables, in
    octlm and in HF alike), never by shape: at config b the MLP's 4·C equals V.
    """
    tables = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    seen, n = set(tables), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n + vocab * d_model


def flops_per_token(model: torch.nn.Module, name: str) -> float:
    c = CONFIGS[name]
    n = matmul_params(model, c["vocab_size"], c["d_model"])
    return 6 * n + 12 * c["n_layers"] * c["context_length"] * c["d_model"]


def train_step_fn(
    model: torch.nn.Module, batch: int, length: int, vocab: int, hf: bool
) -> Callable[[], None]:
    """One fused AdamW step on a fixed random batch: forward, loss, backward, update.

    Fused AdamW for both sides: `octlm train` uses it, and so does HF's Trainer by default (torch >= 2.8).
    """
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, length + 1), generator=g)
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def step() -> None:
        # HF shifts the labels itself; octlm takes the next-token targets.
        # octlm as `octlm train` calls it: the chunked loss, no [B, T, V] logits (octlm/loss.py).
        loss = model(input_ids=x, labels=x).loss if hf else model(x, y, return_logits=False)[1]
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


# ----------------------------------------------------------------------------------------------------------
# Sections


def bench_training(names: list[str], warmup: int, reps: int, log) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        c = CONFIGS[name]
        B, T, V = c["batch"], c["context_length"], c["vocab_size"]
        models: dict[str, tuple[torch.nn.Module, bool]] = {}
        for pos in POSITIONS:
            models[f"octlm {pos}"] = (Decoder(octlm_config(name, pos)), False)
        models["octlm rope llama-shaped"] = (Decoder(octlm_config(name, "rope", llama=True)), False)
        models["HF GPT2LMHeadModel"] = (hf_gpt2(name), True)
        models["HF LlamaForCausalLM"] = (hf_llama(name), True)
        fns = {k: train_step_fn(m, B, T, V, hf) for k, (m, hf) in models.items()}
        probe = matmul_probe()
        fns["matmul peak probe"] = probe
        log(f"training config {name}: {len(models)} models × {reps} interleaved rounds")
        times = interleaved(fns, warmup, reps)
        peak = [probe.flops / s / 1e9 for s in times.pop("matmul peak probe")]  # type: ignore[attr-defined]
        rows = {}
        for k, (m, _) in models.items():
            toks = [B * T / s for s in times[k]]
            rows[k] = {
                "tokens_per_s": summary(toks),
                "samples": toks,
                "flops_per_token": flops_per_token(m, name),
            }
        out[name] = {"rows": rows, "peak_probe_gflops": summary(peak), "batch": B, "length": T}
        del models, fns
        gc.collect()
    return out


def bench_compile(names: list[str], warmup: int, reps: int, log) -> dict[str, Any]:
    """A `torch.compile` (mode default) training step for the learned scheme, against eager, interleaved."""
    out: dict[str, Any] = {}
    for name in names:
        c = CONFIGS[name]
        B, T, V = c["batch"], c["context_length"], c["vocab_size"]
        log(f"torch.compile config {name}")
        try:
            torch._dynamo.reset()
            eager = Decoder(octlm_config(name, "learned"))
            compiled_model = Decoder(octlm_config(name, "learned"))
            compiled = torch.compile(compiled_model)
            step = train_step_fn(compiled, B, T, V, hf=False)
            start = time.perf_counter()
            step()
            first = time.perf_counter() - start
            times = interleaved(
                {"eager": train_step_fn(eager, B, T, V, False), "compiled": step}, warmup, reps
            )
            out[name] = {
                "compile_first_step_s": first,
                "eager_tokens_per_s": summary([B * T / s for s in times["eager"]]),
                "compiled_tokens_per_s": summary([B * T / s for s in times["compiled"]]),
            }
        except Exception as error:  # a missing compiler or an inductor bug is a result, not a crash
            out[name] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
    return out


def memory_worker(spec: dict[str, Any]) -> None:
    """Runs in a subprocess (see MEMORY_METHOD): print one JSON line per (scheme, length)."""
    torch.set_num_threads(THREADS)
    CONFIGS[spec["config"]] = spec["shape"]
    libc = ctypes.CDLL("libc.so.6")

    def status(key: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(key)

    for pos in spec["schemes"]:
        model = Decoder(octlm_config(spec["config"], pos)).eval()
        for length in spec["lengths"]:
            if model.positions.max_length is not None and length > model.positions.max_length:
                print(json.dumps({"scheme": pos, "length": length, "bytes": None}), flush=True)
                continue
            ids = torch.randint(0, model.config.vocab_size, (1, length))
            with torch.inference_mode():
                model(ids)  # warm-up: lazily built tables and library scratch are not per-forward cost
                gc.collect()
                libc.malloc_trim(0)
                Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
                base = status("VmRSS")
                logits, _ = model(ids)
                peak = status("VmHWM") - base
                del logits
            print(json.dumps({"scheme": pos, "length": length, "bytes": peak}), flush=True)


def bench_context(config: str, lengths: list[int], warmup: int, reps: int, log) -> dict[str, Any]:
    """Forward latency (batch 1, inference mode) and peak memory against context length, every scheme."""
    log(f"context lengths {lengths} (config {config} shape)")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=str(ROOT))
    spec = json.dumps(
        {"config": config, "shape": CONFIGS[config], "schemes": list(POSITIONS), "lengths": lengths}
    )
    proc = subprocess.run(
        [sys.executable, __file__, "--memory-worker", spec],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    memory: dict[tuple[str, int], int | None] = {}
    if proc.returncode == 0:
        for line in proc.stdout.splitlines():
            r = json.loads(line)
            memory[(r["scheme"], r["length"])] = r["bytes"]
    else:
        log(f"memory worker failed: {proc.stderr[-500:]}")
    rows = []
    for pos in POSITIONS:
        model = Decoder(octlm_config(config, pos)).eval()
        for length in lengths:
            row: dict[str, Any] = {"scheme": pos, "length": length}
            if model.positions.max_length is not None and length > model.positions.max_length:
                row["no_rows"] = True
                rows.append(row)
                continue
            ids = torch.randint(0, model.config.vocab_size, (1, length))

            def fwd(model=model, ids=ids) -> None:
                with torch.inference_mode():
                    model(ids)

            secs = interleaved({"f": fwd}, warmup, reps)["f"]
            row["latency_ms"] = summary([1000 * s for s in secs])
            row["peak_memory_bytes"] = memory.get((pos, length))
            rows.append(row)
    return {"config": config, "rows": rows, "memory_method": MEMORY_METHOD}


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


FLOOR = "floor: octlm learned's weight GEMVs alone"


def linear_layers(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """Every `nn.Linear` of `model`: the weights a batch-1 decoding step reads once per token."""
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def weights_only_decode(model: Decoder, new: int) -> Callable[[], Any]:
    """The floor under cached decoding: every weight matrix's matrix-vector product, `new` times, and nothing else.

    Batch-1 decoding must read each weight once per token. This times exactly that work (the model's own
    `nn.Linear` layers, the tied head included, on a `[1, 1, in]` input), so `new / seconds` is the most
    tokens/s any fp32 implementation built on torch's GEMV could reach: no attention, norms or dispatch.
    """
    layers = linear_layers(model)
    inputs = [torch.randn(1, 1, m.in_features) for m in layers]

    def run() -> None:
        with torch.inference_mode():
            for _ in range(new):
                for layer, x in zip(layers, inputs, strict=True):
                    layer(x)

    return run


def one_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        torch.set_num_threads(1)
        try:
            return fn()
        finally:
            torch.set_num_threads(THREADS)

    return run


def bench_generation(config: str, prompt_len: int, new: int, warmup: int, reps: int, log) -> dict[str, Any]:
    log(f"generation config {config}: prompt {prompt_len}, {new} new tokens, batch 1, greedy")
    c = CONFIGS[config]
    prompt = torch.randint(0, c["vocab_size"], (1, prompt_len), generator=torch.Generator().manual_seed(0))
    models = {
        "learned": Decoder(octlm_config(config, "learned")).eval(),
        "rope": Decoder(octlm_config(config, "rope", llama=True)).eval(),
    }
    gpt2, llama = hf_gpt2(config).eval(), hf_llama(config).eval()

    def hf_gen(m, use_cache: bool) -> Callable[[], Any]:
        def run() -> Any:
            with torch.inference_mode():
                return m.generate(
                    prompt,
                    attention_mask=torch.ones_like(prompt),
                    do_sample=False,
                    max_new_tokens=new,
                    min_new_tokens=new,
                    use_cache=use_cache,
                    pad_token_id=0,
                )

        return run

    fns = {
        "octlm learned, KV cache": lambda: octlm_generate(models["learned"], prompt, new, True),
        "octlm learned, no cache": lambda: octlm_generate(models["learned"], prompt, new, False),
        "HF GPT-2 generate, cache": hf_gen(gpt2, True),
        "HF GPT-2 generate, no cache": hf_gen(gpt2, False),
        "octlm rope llama-shaped, KV cache": lambda: octlm_generate(models["rope"], prompt, new, True),
        "HF Llama generate, cache": hf_gen(llama, True),
    }
    fns[FLOOR] = weights_only_decode(models["learned"], new)
    # One token at a time is a chain of tiny ops; on a busy machine OpenMP's second thread mostly waits at
    # barriers, so the same paths are also timed with one intra-op thread (both sides alike).
    fns["octlm learned, KV cache, 1 thread"] = one_thread(fns["octlm learned, KV cache"])
    fns["HF GPT-2 generate, cache, 1 thread"] = one_thread(fns["HF GPT-2 generate, cache"])
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
            m.weight.numel() * m.weight.element_size() for m in linear_layers(models["learned"])
        )
        / 1e6,
    }


def bench_embedding(config: str, warmup: int, reps: int, log) -> dict[str, Any]:
    """Embedding lookup vs one-hot × table, and cached vs rebuilt position tables (forward only)."""
    from octlm.positions import (
        RotaryPositions,
        SinusoidalPositions,
        add_positions,
        rope_rotate,
        sinusoidal_table,
    )

    log(f"embedding and position tables (config {config} shape)")
    c = CONFIGS[config]
    B, T, V, C, H = c["batch"], c["context_length"], c["vocab_size"], c["d_model"], c["n_heads"]
    table = torch.randn(V, C)
    ids = torch.randint(0, V, (B, T))
    assert torch.allclose(F.embedding(ids, table), F.one_hot(ids, V).float() @ table, atol=1e-5)
    x = torch.randn(B, T, C)
    positions = torch.arange(T)
    sin = SinusoidalPositions(C, initial_length=T)
    q, k = torch.randn(B, H, T, C // H), torch.randn(B, H, T, C // H)
    rope = RotaryPositions(C // H, initial_length=T)
    fns = {
        "lookup": lambda: F.embedding(ids, table),
        "one-hot × table": lambda: F.one_hot(ids, V).to(table.dtype) @ table,
        "sinusoidal cached": lambda: sin.embed(x, positions),
        "sinusoidal rebuilt": lambda: add_positions(x, sinusoidal_table(T, C)),
        "rope cached": lambda: rope.rotate(q, k, positions),
        "rope rebuilt": lambda: (rope_rotate(q, positions), rope_rotate(k, positions)),
    }
    with torch.inference_mode():
        times = interleaved(fns, warmup, reps)
    rows = {k: {"ms": summary([1000 * s for s in v])} for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "config": config,
        "shape": [B, T, V, C],
        "rows": rows,
        "ratios": {
            "one-hot / lookup": med["one-hot × table"] / med["lookup"],
            "sinusoidal rebuilt / cached": med["sinusoidal rebuilt"] / med["sinusoidal cached"],
            "rope rebuilt / cached": med["rope rebuilt"] / med["rope cached"],
        },
    }


def bench_tokenizer(max_bytes: int | None, vocab_sizes: list[int], reps: int, log) -> dict[str, Any]:
    from octlm.corpus import stdlib_documents, total_bytes

    docs = stdlib_documents()
    if max_bytes is not None:
        kept, size = [], 0
        for d in docs:
            if size >= max_bytes:
                break
            kept.append(d)
            size += len(d.text.encode("utf-8"))
        docs = kept
    mb = total_bytes(docs) / 1e6
    texts = [d.text for d in docs]
    log(f"tokenizer: {len(docs)} stdlib documents, {mb:.1f} MB")
    try:
        from octlm.tokenizer import train_tokenizer

        impl = "octlm.tokenizer"
    except ImportError:  # before octlm.tokenizer existed: HF ByteLevel BPE directly
        train_tokenizer, impl = None, "tokenizers ByteLevel BPE"
    out: dict[str, Any] = {"implementation": impl, "documents": len(docs), "megabytes": mb, "rows": {}}
    for vocab in vocab_sizes:
        train_s, tok = [], None
        for _ in range(reps):
            start = time.perf_counter()
            tok = train_tokenizer(docs, vocab)
            train_s.append(time.perf_counter() - start)
        assert tok is not None
        tok.encode_batch(texts[:10])  # warm-up
        serial = [mb / time_once(lambda tok=tok: [tok.encode(t) for t in texts]) for _ in range(reps)]
        batch = [mb / time_once(lambda tok=tok: tok.encode_batch(texts)) for _ in range(reps)]
        out["rows"][str(vocab)] = {
            "train_s": summary(train_s),
            "encode_mb_s": summary(serial),
            "encode_batch_mb_s": summary(batch),
        }
    return out


# ----------------------------------------------------------------------------------------------------------
# Report


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [f"# octlm benchmarks — {m['device']}{' (quick)' if r['quick'] else ''}", ""]
    lines += [
        f"- CPU: {m['cpu']} ({m['cpu_capability']}), {m['cores']} cores, torch {m['torch']}, "
        f"{m['threads']} threads, denormals flushed: {m['flush_denormal']}, Python {m['python']}; load average (1/5/15 min) at start "
        f"{m['load_average_at_start']}, at end {m.get('load_average_at_end')}",
        f"- Run: {r['started']}, {r['wall_s']:.0f} s in all; timings are median (min–max) over "
        f"{r['reps']} repetitions after {r['warmup']} warm-up, models interleaved round by round",
        "",
    ]
    p = r["peak"]
    lines += ["## Matmul peak (fp32 square matmul)", "", "| n | GFLOP/s |", "|---|---|"]
    for n, s in p["gflops_by_size"].items():
        lines.append(f"| {n} | {s['median']:.0f} ({s['min']:.0f}–{s['max']:.0f}) |")
    lines += [
        "",
        f"Peak used for MFU: **{p['peak_gflops']:.0f} GFLOP/s** (n = {p['best_size']}, median).",
        "",
    ]
    lines += ["## Training tokens/s (AdamW fused, fp32, dropout 0, tied head)", "", MFU_FORMULA, ""]
    peak = p["peak_gflops"]
    for name, t in r["training"].items():
        c = CONFIGS[name]
        rows = t["rows"]
        pp = t["peak_probe_gflops"]
        lines += [
            f"### Config {name}: V {c['vocab_size']:,}, C {c['d_model']}, {c['n_layers']} layers, "
            f"{c['n_heads']} heads, T {c['context_length']}, batch {c['batch']}",
            "",
            f"matmul probe (n 1024) during these rounds: {pp['median']:.0f} "
            f"({pp['min']:.0f}–{pp['max']:.0f}) "
            "GFLOP/s",
            "",
            "| model | tokens/s | MFU (median) | octlm / HF, matching scheme | time cost over learned |",
            "|---|---|---|---|---|",
        ]

        def ratio(k: str, ref: str, rows=rows) -> str:
            a, b = rows[k]["tokens_per_s"], rows[ref]["tokens_per_s"]
            return f"{a['median'] / b['median']:.2f}× (best {a['max'] / b['max']:.2f}×)"

        for k, row in rows.items():
            tps = row["tokens_per_s"]["median"]
            mfu = tps * row["flops_per_token"] / 1e9 / peak
            vs = {
                "octlm learned": "GPT-2 " + ratio(k, "HF GPT2LMHeadModel"),
                "octlm rope llama-shaped": "Llama " + ratio(k, "HF LlamaForCausalLM"),
                "octlm rope": "Llama " + ratio(k, "HF LlamaForCausalLM") + ", shapes differ",
            }.get(k, "")
            cost = ""
            if k.startswith("octlm") and "llama" not in k:
                cost = f"{rows['octlm learned']['tokens_per_s']['median'] / tps - 1:+.0%}"
            lines.append(f"| {k} | {fmt_range(row['samples'])} | {mfu:.0%} | {vs} | {cost} |")
        lines.append("")
    if r.get("compile"):
        lines += [
            "## torch.compile (mode default), learned scheme",
            "",
            "| config | first step (compile) s | eager tokens/s | compiled tokens/s |",
            "|---|---|---|---|",
        ]
        for name, cpl in r["compile"].items():
            if "error" in cpl:
                lines.append(f"| {name} | failed: {cpl['error']} | | |")
            else:
                e, cc = cpl["eager_tokens_per_s"], cpl["compiled_tokens_per_s"]
                lines.append(
                    f"| {name} | {cpl['compile_first_step_s']:.1f} | {e['median']:,.0f} "
                    f"({e['min']:,.0f}–{e['max']:,.0f}) | {cc['median']:,.0f} "
                    f"({cc['min']:,.0f}–{cc['max']:,.0f}) |"
                )
        lines.append("")
    ctx = r["context"]
    c = CONFIGS[ctx["config"]]
    lines += [
        f"## Forward latency and peak memory vs context length (config {ctx['config']} shape: "
        f"C {c['d_model']}, "
        f"{c['n_layers']} layers, learned table {c['context_length']} rows; batch 1, inference mode)",
        "",
        ctx["memory_method"],
        "",
        "| scheme | length | latency ms | peak memory MiB |",
        "|---|---|---|---|",
    ]
    for row in ctx["rows"]:
        if row.get("no_rows"):
            lines.append(f"| {row['scheme']} | {row['length']:,} | no rows | no rows |")
            continue
        lat = row["latency_ms"]
        mem = row["peak_memory_bytes"]
        mem_s = f"{mem / 2**20:.1f}" if mem is not None else "n/a"
        lines.append(
            f"| {row['scheme']} | {row['length']:,} | {lat['median']:.2f} ({lat['min']:.2f}–{lat['max']:.2f})"
            f" | {mem_s} |"
        )
    lines.append("")
    g = r["generation"]
    lines += [
        f"## Generation (config {g['config']}, batch 1, greedy, prompt {g['prompt']}, {g['new_tokens']} new "
        "tokens, random weights)",
        "",
        "| path | new tokens/s | vs HF generate with cache, same threads |",
        "|---|---|---|",
    ]
    hf = {
        "GPT-2": g["rows"]["HF GPT-2 generate, cache"]["tokens_per_s"]["median"],
        "Llama": g["rows"]["HF Llama generate, cache"]["tokens_per_s"]["median"],
    }
    for k, row in g["rows"].items():
        s = row["tokens_per_s"]
        ref = hf["Llama"] if ("rope" in k or "Llama" in k) else hf["GPT-2"]
        if k.endswith("1 thread"):
            ref = g["rows"]["HF GPT-2 generate, cache, 1 thread"]["tokens_per_s"]["median"]
        lines.append(
            f"| {k} | {s['median']:,.0f} ({s['min']:,.0f}–{s['max']:,.0f}) | {s['median'] / ref:.2f}× |"
        )
    lines += [
        "",
        f"The floor row runs only the {g['weight_megabytes_per_token']:.1f} MB of weight matrix-vector products "
        "that every cached decoding step must do (each `nn.Linear` of octlm's learned model, tied head "
        "included, on one token), and nothing else: the most tokens/s fp32 decoding through torch's GEMV "
        "can reach on this machine.",
        "",
    ]
    e = r["embedding"]
    lines += [
        f"## Embedding and position tables (forward, shape B×T×V×C = {'×'.join(map(str, e['shape']))})",
        "",
        "| operation | ms |",
        "|---|---|",
    ]
    for k, row in e["rows"].items():
        s = row["ms"]
        lines.append(f"| {k} | {s['median']:.3f} ({s['min']:.3f}–{s['max']:.3f}) |")
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {v:.1f}× |" for k, v in e["ratios"].items()]
    lines.append("")
    tk = r["tokenizer"]
    lines += [
        f"## Tokenizer ({tk['implementation']}, {tk['documents']} stdlib documents, "
        f"{tk['megabytes']:.1f} MB)",
        "",
        "| vocab | training s | encode MB/s (one call per document) | encode_batch MB/s |",
        "|---|---|---|---|",
    ]
    for vocab, row in tk["rows"].items():
        a, b, cc = row["train_s"], row["encode_mb_s"], row["encode_batch_mb_s"]
        lines.append(
            f"| {int(vocab):,} | {a['median']:.2f} ({a['min']:.2f}–{a['max']:.2f}) | {b['median']:.1f} "
            f"({b['min']:.1f}–{b['max']:.1f}) | {cc['median']:.1f} ({cc['min']:.1f}–{cc['max']:.1f}) |"
        )
    lines.append("")
    return "\n".join(lines)


def settings(quick: bool, configs: str | None = None, compile_: bool = True) -> dict[str, Any]:
    """What one run measures; `--quick` shrinks every section (config a only, short lengths, few reps)."""
    if quick:
        return {
            "quick": True,
            "warmup": 1,
            "reps": 3,
            "peak_sizes": [1024, 2048],
            "train": list(configs or "a"),
            "compile": [],
            "context": "a",
            "lengths": [128, 256],
            "context_reps": 3,
            "generation": "a",
            "new_tokens": 16,
            "embedding": "a",
            "tokenizer_bytes": 300_000,
            "tokenizer_vocab": [1024],
            "tokenizer_reps": 2,
        }
    return {
        "quick": False,
        "warmup": 2,
        "reps": 5,
        "peak_sizes": [512, 1024, 2048],
        "train": list(configs or "abc"),
        "compile": ["a", "b"] if compile_ else [],
        "context": "b",
        "lengths": [128, 256, 512, 1024, 2048, 4096],
        "context_reps": 7,
        "generation": "b",
        "new_tokens": 128,
        "embedding": "c",
        "tokenizer_bytes": None,
        "tokenizer_vocab": [1024, 8192],
        "tokenizer_reps": 5,
    }


def run_benchmarks(s: dict[str, Any], out_dir: Path, log=None) -> dict[str, Any]:
    """Run every section of `settings` `s`, write `<device>[-quick].json` and `.md` under `out_dir`."""
    started = time.time()
    if log is None:

        def log(msg: str) -> None:
            print(f"[{time.time() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    warmup, reps = s["warmup"], s["reps"]
    r: dict[str, Any] = {
        "machine": machine(),
        "quick": s["quick"],
        "warmup": warmup,
        "reps": reps,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "mfu_formula": MFU_FORMULA,
        "settings": s,
    }
    log(
        f"machine: {r['machine']['cpu']}, {r['machine']['threads']} threads, "
        f"load {r['machine']['load_average_at_start']}"
    )
    r["peak"] = bench_peak(s["peak_sizes"], reps)
    r["training"] = bench_training(s["train"], warmup, reps, log)
    r["compile"] = bench_compile(s["compile"], warmup, reps, log)
    r["context"] = bench_context(s["context"], s["lengths"], warmup, s["context_reps"], log)
    prompt = min(
        16, CONFIGS[s["generation"]]["context_length"] - s["new_tokens"]
    )  # learned: stay in the table
    r["generation"] = bench_generation(s["generation"], prompt, s["new_tokens"], 1, reps, log)
    r["embedding"] = bench_embedding(s["embedding"], warmup, s["context_reps"], log)
    r["tokenizer"] = bench_tokenizer(s["tokenizer_bytes"], s["tokenizer_vocab"], s["tokenizer_reps"], log)
    r["wall_s"] = time.time() - started
    with contextlib.suppress(OSError):
        r["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = r["machine"]["device"] + ("-quick" if s["quick"] else "")
    md = markdown(r)
    for suffix, text in ((".json", json.dumps(r, indent=1, default=str)), (".md", md)):
        tmp = out_dir / f"{stem}{suffix}.tmp"  # written whole, then renamed: never a half-written result
        tmp.write_text(text)
        tmp.replace(out_dir / f"{stem}{suffix}")
    r["markdown"] = md
    log(f"wrote {out_dir / stem}.json and .md")
    return r


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: config a only, tiny repetitions (< 60 s)"
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="results folder")
    parser.add_argument("--configs", default=None, help="training configs to run, e.g. 'ab' (default: abc)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile measurement")
    parser.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global FLUSH_DENORMAL
    torch.set_num_threads(THREADS)
    # Before any parallel region, so that every OpenMP thread inherits it.
    if os.environ.get("OCTLM_BENCH_DENORMALS", "flush") == "flush":
        FLUSH_DENORMAL = torch.set_flush_denormal(True)
    if args.memory_worker:
        memory_worker(json.loads(args.memory_worker))
        return 0
    r = run_benchmarks(settings(args.quick, args.configs, not args.no_compile), Path(args.out))
    print(r["markdown"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
