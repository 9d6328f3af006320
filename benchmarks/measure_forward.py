"""Forward-only sections: latency and peak memory against context length, and embedding / position tables."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from measure import CONFIGS, THREADS, interleaved, octlm_config, summary

from octlm.config import POSITIONS
from octlm.model import Decoder
from octlm.runtime import torch_threads

# The command whose hidden `--memory-worker` flag runs `memory_worker` in a fresh process (same threads and
# denormal setting as the benchmark itself).
CLI = Path(__file__).resolve().with_name("bench.py")

MEMORY_METHOD = (
    "peak memory = VmHWM − VmRSS around one inference forward (after a warm-up forward of the same shape), "
    "in a worker process started with MALLOC_MMAP_THRESHOLD_=65536 so every tensor is mmapped and given back "
    "to the OS when freed; the high-water mark is reset through /proc/self/clear_refs before each "
    "measurement. It counts everything the forward allocates (activations, scores, bias, scratch), "
    "not the weights."
)


# ----------------------------------------------------------------------------------------------------------
# Context length


def proc_status(key: str) -> int:
    """A `/proc/self/status` memory figure (`VmRSS`, `VmHWM`) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def too_long(model: Decoder, length: int) -> bool:
    """Whether `length` is past the rows of the model's position table (learned): no forward there."""
    return model.positions.max_length is not None and length > model.positions.max_length


def memory_worker(spec: dict[str, Any]) -> None:
    """Runs in a subprocess (see MEMORY_METHOD): print one JSON line per (scheme, length)."""
    CONFIGS[spec["config"]] = spec["shape"]
    libc = ctypes.CDLL("libc.so.6")
    with torch_threads(THREADS):
        for pos in spec["schemes"]:
            model = Decoder(octlm_config(spec["config"], pos)).eval()
            for length in spec["lengths"]:
                if too_long(model, length):
                    print(json.dumps({"scheme": pos, "length": length, "bytes": None}), flush=True)
                    continue
                ids = torch.randint(0, model.config.vocab_size, (1, length))
                with torch.inference_mode():
                    model(ids)  # warm-up: lazily built tables and library scratch are not per-forward cost
                    gc.collect()
                    libc.malloc_trim(0)
                    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
                    base = proc_status("VmRSS")
                    logits, _ = model(ids)
                    peak = proc_status("VmHWM") - base
                    del logits
                print(json.dumps({"scheme": pos, "length": length, "bytes": peak}), flush=True)


def measure_memory(config: str, lengths: list[int], log) -> dict[tuple[str, int], int | None]:
    """Peak forward memory by (scheme, length), from `memory_worker` in a fresh process; {} if it failed."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    spec = json.dumps(
        {"config": config, "shape": CONFIGS[config], "schemes": list(POSITIONS), "lengths": lengths}
    )
    proc = subprocess.run(
        [sys.executable, str(CLI), "--memory-worker", spec],
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
    return memory


def inference_forward(model: Decoder, ids: torch.Tensor) -> None:
    """One inference-mode forward of `model` on `ids`."""
    with torch.inference_mode():
        model(ids)


def bench_context(config: str, lengths: list[int], warmup: int, reps: int, log) -> dict[str, Any]:
    """Forward latency (batch 1, inference mode) and peak memory against context length, every scheme."""
    log(f"context lengths {lengths} (config {config} shape)")
    memory = measure_memory(config, lengths, log)
    rows = []
    for pos in POSITIONS:
        model = Decoder(octlm_config(config, pos)).eval()
        for length in lengths:
            row: dict[str, Any] = {"scheme": pos, "length": length}
            if too_long(model, length):
                row["no_rows"] = True
                rows.append(row)
                continue
            ids = torch.randint(0, model.config.vocab_size, (1, length))
            secs = interleaved({"f": partial(inference_forward, model, ids)}, warmup, reps)["f"]
            row["latency_ms"] = summary([1000 * s for s in secs])
            row["peak_memory_bytes"] = memory.get((pos, length))
            rows.append(row)
    return {"config": config, "rows": rows, "memory_method": MEMORY_METHOD}


# ----------------------------------------------------------------------------------------------------------
# Embedding and position tables


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
