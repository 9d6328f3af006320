"""Forward-only sections: latency and peak memory against context length, and embedding / position tables."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from measure import CONFIGS, THREADS, interleaved, octlm_config, summary

import octlm.model.decoder
from octlm.model.decoder import Decoder
from octlm.positions import scheme_names
from octlm.positions.bias import AlibiPositions, T5Positions
from octlm.positions.formulas import t5_bucket
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
    """Runs in a subprocess (see MEMORY_METHOD): print one JSON line per (scheme, length).

    `spec["whole_bias"]`: measure the code before chunking (`whole_bias`); `spec["cap_bytes"]`: refuse any
    allocation past that much more address space (the line then says "error"), so that the old T^2 bias at
    16k tokens cannot take the machine's memory from its other users.
    """
    CONFIGS[spec["config"]] = spec["shape"]
    libc = ctypes.CDLL("libc.so.6")
    with torch_threads(THREADS), whole_bias() if spec.get("whole_bias") else contextlib.nullcontext():
        for pos in spec["schemes"]:
            model = Decoder(octlm_config(spec["config"], pos)).eval()
            for length in spec["lengths"]:
                if too_long(model, length):
                    print(json.dumps({"scheme": pos, "length": length, "bytes": None}), flush=True)
                    continue
                ids = torch.randint(0, model.config.vocab_size, (1, length))
                if spec.get("cap_bytes"):
                    limit = proc_status("VmSize") + spec["cap_bytes"]
                    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
                row: dict[str, Any] = {"scheme": pos, "length": length}
                try:
                    with torch.inference_mode():
                        model(
                            ids
                        )  # warm-up: lazily built tables and library scratch are not per-forward cost
                        gc.collect()
                        libc.malloc_trim(0)
                        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
                        base = proc_status("VmRSS")
                        start = time.perf_counter()
                        logits, _ = model(ids)
                        row["seconds"] = time.perf_counter() - start
                        row["bytes"] = proc_status("VmHWM") - base
                        del logits
                except RuntimeError as e:  # the cap refused an allocation: torch's out-of-memory error
                    row.update(bytes=None, error=str(e).splitlines()[0][:200])
                print(json.dumps(row), flush=True)


def measure_memory(
    config: str, lengths: list[int], log, schemes=None, whole: bool = False, cap: int | None = None
) -> dict[tuple[str, int], int | None]:
    """Peak forward memory by (scheme, length), from `memory_worker` in a fresh process; {} if it failed."""
    return {k: r["bytes"] for k, r in memory_rows(config, lengths, log, schemes, whole, cap).items()}


MEMORY_WORKER_SECONDS = 600  # one worker process for every scheme and length of a memory table


def memory_rows(
    config: str, lengths: list[int], log, schemes, whole: bool = False, cap: int | None = None
) -> dict[tuple[str, int], dict[str, Any]]:
    """`memory_worker`'s lines by (scheme, length), from a fresh process; {} if it failed."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    spec = json.dumps(
        {
            "config": config,
            "shape": CONFIGS[config],
            "schemes": list(schemes or scheme_names()),
            "lengths": lengths,
            "whole_bias": whole,
            "cap_bytes": cap,
        }
    )
    try:
        proc = subprocess.run(
            [sys.executable, str(CLI), "--memory-worker", spec],
            env=env,
            capture_output=True,
            text=True,
            timeout=MEMORY_WORKER_SECONDS,
        )
    except subprocess.TimeoutExpired:
        log(
            f"memory worker stopped after {MEMORY_WORKER_SECONDS} s (lengths {lengths}); its rows are left out"
        )
        return {}
    memory: dict[tuple[str, int], dict[str, Any]] = {}
    if proc.returncode == 0:
        for line in proc.stdout.splitlines():
            r = json.loads(line)
            memory[(r["scheme"], r["length"])] = r
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
    for pos in scheme_names():
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
    from octlm.positions.absolute import SinusoidalPositions
    from octlm.positions.formulas import add_positions, rope_rotate, sinusoidal_table
    from octlm.positions.rotary import RotaryPositions

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


# ----------------------------------------------------------------------------------------------------------
# Long contexts: a bias scheme's bias built whole (before) or per query chunk (after, octlm.model.decoder.ChunkedBias)

LONG_SCHEMES = ("nope", "rope", "alibi", "t5", "fire", "cope")
BEFORE = ("alibi", "t5")  # the schemes whose bias was built whole before chunking (the "before" rows)
CHUNKED = BEFORE + ("fire", "cope")  # built per query chunk past WHOLE_BIAS_PAIRS (CoPE's in every layer)


def _whole_alibi(self: AlibiPositions, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """ALiBi's bias as octlm computed it before the chunked path (commit 754d1fb)."""
    distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(0)).to(self.slopes.dtype)
    bias = -self.slopes.view(-1, 1, 1) * distance
    return bias.masked_fill(distance < 0, float("-inf"))


def _whole_t5(self: T5Positions, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    """T5's bias as octlm computed it before the chunked path (commit 754d1fb)."""
    relative = k_positions.unsqueeze(0) - q_positions.unsqueeze(-1)
    bias = self.table(t5_bucket(relative, self.num_buckets, self.max_distance)).permute(2, 0, 1)
    return bias.masked_fill(relative > 0, float("-inf"))


@contextlib.contextmanager
def whole_bias():
    """The code before chunking: every bias built whole, by the formulas of that time."""
    saved = octlm.model.decoder.WHOLE_BIAS_PAIRS, AlibiPositions.bias, T5Positions.bias
    octlm.model.decoder.WHOLE_BIAS_PAIRS = math.inf
    AlibiPositions.bias, T5Positions.bias = _whole_alibi, _whole_t5
    try:
        yield
    finally:
        octlm.model.decoder.WHOLE_BIAS_PAIRS, AlibiPositions.bias, T5Positions.bias = saved


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None elsewhere)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def timed_forward(model: Decoder, ids: torch.Tensor, whole: bool) -> None:
    with whole_bias() if whole else contextlib.nullcontext():
        inference_forward(model, ids)


def bench_long(config: str, memory_lengths: list[int], time_lengths: list[int], warmup: int, reps: int, log):
    """Peak forward memory (one fresh process per point) and latency, before (whole bias) and after (chunked).

    Schemes without a bias run the same code before and after: measured once, as the reference. The old
    path is refused past 3/4 of the memory available when its process starts (the row says so).
    """
    log(f"long contexts: memory at {memory_lengths}, time at {time_lengths} (config {config} shape)")
    memory: list[dict[str, Any]] = []
    for length in memory_lengths:
        for pos in LONG_SCHEMES:
            for whole in (True, False) if pos in BEFORE else (False,):
                free = available_bytes()
                cap = int(0.75 * free) if free else None
                r = memory_rows(config, [length], log, [pos], whole, cap).get((pos, length), {})
                path = "before: whole" if whole else "after: chunked" if pos in CHUNKED else "no bias"
                memory.append({"scheme": pos, "length": length, "path": path, **r})
                log(f"  memory {pos} {length} {'whole' if whole else 'after'}: {r.get('bytes')}")
    rows = []
    for pos in LONG_SCHEMES:
        model = Decoder(octlm_config(config, pos)).eval()
        for length in time_lengths:
            ids = torch.randint(0, model.config.vocab_size, (1, length))
            paths = {"before": True, "after": False} if pos in BEFORE else {"after": False}
            fns = {k: partial(timed_forward, model, ids, whole) for k, whole in paths.items()}
            secs = interleaved(fns, warmup, reps)
            row = {
                "scheme": pos,
                "length": length,
                **{f"{k}_ms": summary([1e3 * s for s in v]) for k, v in secs.items()},
            }
            if "before" in secs:
                row["after_over_before"] = statistics.median(secs["after"]) / statistics.median(
                    secs["before"]
                )
            rows.append(row)
    return {
        "config": config,
        "memory": memory,
        "time": rows,
        "memory_method": MEMORY_METHOD,
        "chunk": {
            "whole_bias_pairs": octlm.model.decoder.WHOLE_BIAS_PAIRS,
            "chunk_bias_entries": octlm.model.decoder.CHUNK_BIAS_ENTRIES,
        },
    }
