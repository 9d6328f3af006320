#!/usr/bin/env python
"""octlm performance benchmarks: one command, one table.

    .venv/bin/python benchmarks/bench.py            # full run (about 15 minutes on 2 cores)
    .venv/bin/python benchmarks/bench.py --quick    # smoke test: config a only, tiny repetitions (< 60 s)
    .venv/bin/python benchmarks/bench.py --only schemes   # every position scheme against NoPE (several minutes)

Measures, in one run: the machine's bf16 support and its fp32 and bf16 matmul peaks; fp32 against bf16
training tokens/s at config c (autocast, and bf16 weights with fp32 master weights); training tokens/s and model-FLOP utilisation for octlm
with every position scheme and for Hugging Face GPT-2 (learned) and Llama (RoPE) at configs a, b, c; forward
latency and peak memory against context length; generation tokens/s with and without the KV cache against HF
`generate`; embedding lookup against one-hot × table; cached against rebuilt position tables; tokenizer
training and encoding; a task-battery cell's training steps against HF GPT-2 on the same batches; and (full
run only) a `torch.compile` training step. Every timing is the median and
min–max over >= 5 repetitions after warm-up (quick: 3). Results: `benchmarks/results/<device>.json`, `.md`.

Fairness: the machine is shared and noisy, so the models being compared are timed *interleaved* — each round
runs one step of every model (and one matmul-peak probe) before the next round starts — and medians are
reported.
Ratios and MFU use the medians of the same rounds.

This file is the command: what to run, running it, writing the results. The measuring is in the `measure*.py`
modules beside it (one per group of sections), the Markdown in `render.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from measure import CONFIGS, MFU_FORMULA, THREADS, bench_peak, machine
from measure_decode import bench_generation
from measure_forward import bench_context, bench_embedding, bench_long, memory_worker
from measure_schemes import LENGTH, LONG_LENGTH, bench_schemes, rows_in_memory_worker
from measure_tasks import bench_task_cells
from measure_threads import bench_threads
from measure_tokenizer import bench_tokenizer
from measure_train import bench_compile, bench_precision, bench_training
from render import (
    generation_section,
    header,
    long_section,
    markdown,
    schemes_section,
    task_cells_section,
    threads_section,
)

from octlm.runtime import torch_threads

RESULTS = Path(__file__).resolve().parent / "results"
# The long-context section (`--long` runs it alone): bias schemes built whole against per query chunk.
LONG = {"config": "b", "memory_lengths": [1024, 4096, 16384], "time_lengths": [256, 1024, 4096]}


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
            "precision": ["a"],
            "context": "a",
            "lengths": [128, 256],
            "long": {"config": "a", "memory_lengths": [2048], "time_lengths": [128]},
            "context_reps": 3,
            "generation": "a",
            "new_tokens": 16,
            "embedding": "a",
            "tokenizer_bytes": 300_000,
            "tokenizer_vocab": [1024],
            "tokenizer_reps": 2,
            "task_cells": ["copy"],
        }
    return {
        "quick": False,
        "warmup": 2,
        "reps": 5,
        "peak_sizes": [512, 1024, 2048],
        "train": list(configs or "abc"),
        "compile": ["a", "b"] if compile_ else [],
        "precision": ["c"],
        "context": "b",
        "lengths": [128, 256, 512, 1024, 2048, 4096],
        "long": LONG,
        "context_reps": 7,
        "generation": "b",
        "new_tokens": 128,
        "embedding": "c",
        "tokenizer_bytes": None,
        "tokenizer_vocab": [1024, 8192],
        "tokenizer_reps": 5,
        "task_cells": ["copy", "counting", "passkey"],
    }


def log_to_stderr(started: float, msg: str) -> None:
    """A progress line on stderr, stamped with the seconds since `started`."""
    print(f"[{time.time() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)


def run_sections(r: dict[str, Any], s: dict[str, Any], log) -> None:
    """Every section of `settings` `s`, in order, each into its key of the results `r`."""
    warmup, reps = s["warmup"], s["reps"]
    if s.get("device", "cpu") == "cuda":  # on a GPU: the matmul peaks and fp32 against bf16 training only
        r["peak"] = bench_peak(s["peak_sizes"], reps, "cuda")
        r["precision"] = {n: bench_precision(n, warmup, reps, log, "cuda") for n in s["precision"]}
        return
    r["peak"] = bench_peak(s["peak_sizes"], reps)
    r["training"] = bench_training(s["train"], warmup, reps, log)
    r["precision"] = {n: bench_precision(n, warmup, reps, log) for n in s["precision"]}
    r["compile"] = bench_compile(s["compile"], warmup, reps, log)
    r["context"] = bench_context(s["context"], s["lengths"], warmup, s["context_reps"], log)
    if s.get("long"):
        r["long"] = bench_long(**s["long"], warmup=warmup, reps=s["context_reps"], log=log)
    prompt = min(
        16, CONFIGS[s["generation"]]["context_length"] - s["new_tokens"]
    )  # learned: stay in the table
    r["generation"] = bench_generation(s["generation"], prompt, s["new_tokens"], 1, reps, log)
    r["embedding"] = bench_embedding(s["embedding"], warmup, s["context_reps"], log)
    r["tokenizer"] = bench_tokenizer(s["tokenizer_bytes"], s["tokenizer_vocab"], s["tokenizer_reps"], log)
    r["task_cells"] = bench_task_cells(s["task_cells"], warmup, reps, log)


def write_results(r: dict[str, Any], out_dir: Path, stem: str, md: str) -> None:
    """`<stem>.json` and `<stem>.md` under `out_dir`, each written whole, then renamed into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps(r, indent=1, default=str)), (".md", md)):
        tmp = out_dir / f"{stem}{suffix}.tmp"  # written whole, then renamed: never a half-written result
        tmp.write_text(text)
        tmp.replace(out_dir / f"{stem}{suffix}")


def run_benchmarks(
    s: dict[str, Any], out_dir: Path, log=None, flush_denormal: bool = False
) -> dict[str, Any]:
    """Run every section of `settings` `s`, write `<device>[-quick].json` and `.md` under `out_dir`.

    `flush_denormal`: whether the caller turned FTZ/DAZ on (recorded with the machine; see `main`).
    """
    started = time.time()
    if log is None:
        log = partial(log_to_stderr, started)
    r: dict[str, Any] = {
        "machine": machine(flush_denormal),
        "quick": s["quick"],
        "warmup": s["warmup"],
        "reps": s["reps"],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "mfu_formula": MFU_FORMULA,
        "settings": s,
    }
    if s.get("device", "cpu") == "cuda":
        r["machine"].update(gpu=torch.cuda.get_device_name(), device="cuda-" + gpu_slug())
    log(
        f"machine: {r['machine']['cpu']}, {r['machine']['threads']} threads, "
        f"load {r['machine']['load_average_at_start']}"
    )
    run_sections(r, s, log)
    r["wall_s"] = time.time() - started
    with contextlib.suppress(OSError):
        r["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    stem = r["machine"]["device"] + ("-quick" if s["quick"] else "")
    md = markdown(r)
    write_results(r, out_dir, stem, md)
    r["markdown"] = md
    log(f"wrote {out_dir / stem}.json and .md")
    return r


def run_alone(
    stem: str,
    key: str,
    measure: Callable[[Callable], dict],
    render: Callable[[dict], list[str]],
    s: dict[str, Any],
    reps: int,
    out_dir: Path,
    flush_denormal: bool,
) -> dict[str, Any]:
    """One section alone (`--long`, `--only`): `measure(log)` into `r[key]`, written as `<device>-<stem>`."""
    started = time.time()
    r: dict[str, Any] = {
        "machine": machine(flush_denormal),
        "quick": s["quick"],
        "warmup": s["warmup"],
        "reps": reps,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    r[key] = measure(partial(log_to_stderr, started))
    r["wall_s"] = time.time() - started
    with contextlib.suppress(OSError):
        r["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    r["markdown"] = "\n".join(header(r) + render(r[key]))
    write_results(r, out_dir, f"{r['machine']['device']}-{stem}", r["markdown"])
    return r


def run_long(s: dict[str, Any], out_dir: Path, flush_denormal: bool) -> dict[str, Any]:
    """`--long`: the long-context section alone, written as `<device>-long.json` and `.md`."""

    def measure(log: Callable) -> dict:
        return bench_long(**LONG, warmup=s["warmup"], reps=s["context_reps"], log=log)

    return run_alone("long", "long", measure, long_section, s, s["context_reps"], out_dir, flush_denormal)


def run_decode(s: dict[str, Any], out_dir: Path, flush_denormal: bool) -> dict[str, Any]:
    """`--only decode`: the generation section alone, written as `<device>-decode.json` and `.md`."""
    prompt = min(16, CONFIGS[s["generation"]]["context_length"] - s["new_tokens"])

    def measure(log: Callable) -> dict:
        return bench_generation(s["generation"], prompt, s["new_tokens"], 1, s["reps"], log)

    s = {**s, "warmup": 1}
    return run_alone(
        "decode", "generation", measure, generation_section, s, s["reps"], out_dir, flush_denormal
    )


def run_tasks(s: dict[str, Any], out_dir: Path, flush_denormal: bool) -> dict[str, Any]:
    """`--only tasks`: a task-battery cell's training steps alone, written as `<device>-tasks.json` and `.md`."""

    def measure(log: Callable) -> dict:
        return bench_task_cells(s["task_cells"], s["warmup"], s["reps"], log)

    return run_alone(
        "tasks", "task_cells", measure, task_cells_section, s, s["reps"], out_dir, flush_denormal
    )


def run_threads(s: dict[str, Any], out_dir: Path, flush_denormal: bool) -> dict[str, Any]:
    """`--only threads`: `octlm train` at octlm's default thread count, 1 thread and torch's choice, quiet and
    beside a busy loop, written as `<device>-threads.json` and `.md`."""
    steps = 20 if s["quick"] else 60

    def measure(log: Callable) -> dict:
        return bench_threads(s["reps"], steps, log)

    s = {**s, "warmup": 1}  # one untimed run: the token cache and the file system's caches

    return run_alone("threads", "threads", measure, threads_section, s, s["reps"], out_dir, flush_denormal)


def run_schemes(s: dict[str, Any], out_dir: Path, flush_denormal: bool) -> dict[str, Any]:
    """`--only schemes`: every row of the length experiment against NoPE (training tokens/s at its shape, one
    forward's peak memory at 16,384 tokens; --quick: 1,024), written as `<device>-schemes.json` and `.md`."""
    length = 1024 if s["quick"] else LONG_LENGTH

    def measure(log: Callable) -> dict:
        return bench_schemes(LENGTH, length, s["warmup"], s["reps"], log)

    return run_alone("schemes", "schemes", measure, schemes_section, s, s["reps"], out_dir, flush_denormal)


def gpu_slug() -> str:
    """The GPU's name as a file stem: "NVIDIA H200" -> "nvidia-h200"."""
    return "-".join("".join(c if c.isalnum() else " " for c in torch.cuda.get_device_name()).lower().split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: config a only, tiny repetitions (< 60 s)"
    )
    parser.add_argument("--out", default=str(RESULTS), help="results folder")
    parser.add_argument("--configs", default=None, help="training configs to run, e.g. 'ab' (default: abc)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile measurement")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: only the matmul peaks and fp32 vs bf16 training at configs a, b, c",
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="only the long-context section: peak memory at 1k-16k tokens, bias whole vs chunked",
    )
    parser.add_argument(
        "--only",
        choices=("decode", "tasks", "threads", "schemes"),
        default=None,
        help="decode: only the generation section (octlm generate, the floor, HF generate); "
        "tasks: only a task-battery cell's training steps against HF GPT-2; threads: "
        "octlm train at its default thread count, 1 and torch's, quiet and busy; schemes: "
        "every position scheme's training tokens/s and peak memory at 16k against NoPE",
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=None,
        help="timed repetitions of each training and generation measurement (default 5, --quick 3)",
    )
    parser.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        parser.error(f"--reps {args.reps}: give at least 1 repetition")
    with torch_threads(THREADS):
        # Flush denormals to zero (FTZ/DAZ)? ALiBi's far-away penalties put exp() in the denormal range, which
        # x86 computes ~100x slower: without this, ALiBi's attention backward runs ~2x slower than plain causal
        # attention (see README.md). It applies to HF alike. Process-wide state: set here, never at import,
        # and before any parallel region, so that every OpenMP thread inherits it.
        flush_denormal = False
        if os.environ.get("OCTLM_BENCH_DENORMALS", "flush") == "flush":
            flush_denormal = torch.set_flush_denormal(True)
        if args.memory_worker:
            with rows_in_memory_worker():  # a length-experiment row (`nope+ssmax`) as well as a scheme
                memory_worker(json.loads(args.memory_worker))
            return 0
        s = settings(args.quick, args.configs, not args.no_compile)
        if args.reps is not None:
            s["reps"] = args.reps
        if args.only:
            run = {"decode": run_decode, "tasks": run_tasks, "threads": run_threads, "schemes": run_schemes}
            r = run[args.only](s, Path(args.out), flush_denormal)
            print(r["markdown"])
            return 0
        if args.long:
            r = run_long(s, Path(args.out), flush_denormal)
            print(r["markdown"])
            return 0
        if args.device == "cuda":
            if not torch.cuda.is_available():
                print("bench.py: --device cuda but CUDA is not available here", file=sys.stderr)
                return 2
            s.update(device="cuda", peak_sizes=[2048, 4096, 8192], precision=list(args.configs or "abc"))
        r = run_benchmarks(s, Path(args.out), flush_denormal=flush_denormal)
    print(r["markdown"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
