"""What every benchmark section shares: the configs, the timing helpers, the machine, the matmul peaks (fp32 and
bf16), the models and their FLOP count.

Every timing is taken with `interleaved`: the functions being compared run round-robin, one call each per
round, so that the noise of a shared machine hits all of them alike. On CUDA (`bench.py --device cuda`) each
call is followed by a synchronize, so that it times the kernels rather than their launch.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from octlm.config import ModelConfig
from octlm.runtime import cpu_bf16_support

THREADS = int(os.environ.get("OCTLM_BENCH_THREADS", "2"))

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


# ----------------------------------------------------------------------------------------------------------
# Timing helpers


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def time_once(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # CUDA kernels run asynchronously: wait for them
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


# ----------------------------------------------------------------------------------------------------------
# Machine


def machine(flush_denormal: bool = False) -> dict[str, Any]:
    """The machine and the process's settings; `flush_denormal`: whether FTZ/DAZ was turned on (bench.main)."""
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
    bf16 = cpu_bf16_support()
    return {
        "cpu": cpu,
        "bf16_support": bf16.kind,  # AMX, AVX512-BF16 or none (octlm.runtime.cpu_bf16_support)
        "bf16_detected": bf16.detail,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "flush_denormal": bool(flush_denormal),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in load],
        "device": f"cpu-{os.cpu_count()}core",
    }


class MatmulProbe:
    """`inner` back-to-back n×n matmuls (fp32 or bf16) into a preallocated output; `flops` per call."""

    def __init__(
        self, n: int = 1024, inner: int = 1, dtype: torch.dtype = torch.float32, device: str = "cpu"
    ) -> None:
        self.a, self.b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        self.out = torch.empty(n, n, dtype=dtype, device=device)
        self.inner = inner
        self.flops = inner * 2 * n**3

    def __call__(self) -> None:
        for _ in range(self.inner):
            torch.matmul(self.a, self.b, out=self.out)


PEAK_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def bench_peak(sizes: list[int], reps: int, device: str = "cpu") -> dict[str, Any]:
    """Square fp32 and bf16 matmuls, interleaved size by size; each peak is its best size's median GFLOP/s.

    The fp32 figures sit at the top level (the MFU denominator), the bf16 ones under "bf16", with
    "bf16_over_fp32", the ratio of the two peaks measured in these same rounds.
    """
    # n³·inner per call: 2.1 GFLOP on a CPU (~11 ms at 200 GFLOP/s), 2.2 TFLOP on a GPU (~3 ms bf16 on an H200)
    work = 2**30 if device == "cpu" else 2**40
    rows: dict[str, dict[int, list[float]]] = {name: {} for name in PEAK_DTYPES}
    for n in sizes:
        inner = max(1, work // n**3)
        probes = {name: MatmulProbe(n, inner, dt, device) for name, dt in PEAK_DTYPES.items()}
        secs = interleaved(probes, 1, reps)
        for name, probe in probes.items():
            rows[name][n] = [probe.flops / s / 1e9 for s in secs[name]]
    out: dict[str, Any] = {}
    for name, by_size in rows.items():
        best = max(by_size, key=lambda n: statistics.median(by_size[n]))
        out[name] = {
            "gflops_by_size": {str(n): summary(v) for n, v in by_size.items()},
            "best_size": best,
            "peak_gflops": statistics.median(by_size[best]),
            "samples": by_size[best],
        }
    result = dict(out["fp32"], bf16=out["bf16"])
    result["bf16_over_fp32"] = out["bf16"]["peak_gflops"] / out["fp32"]["peak_gflops"]
    return result


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
