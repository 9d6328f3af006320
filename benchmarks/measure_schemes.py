"""The schemes section (`bench.py --only schemes`): every row of the length experiment against NoPE at that
experiment's training shape — training tokens/s, and the peak memory and time of one inference forward at a
long length (16,384 tokens), each with its ratio to NoPE measured in the same run.

A row is a registered scheme or `scheme+option` (`rope+ssmax`: queries scaled by s log n), as
`octlm experiment length` names them (`octlm.experiments.length.default_rows`, `row_overrides`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import measure_forward
import torch
from measure import CONFIGS, interleaved, octlm_config, summary
from measure_forward import MEMORY_METHOD, available_bytes, memory_rows, too_long
from measure_train import TrainStep

from octlm.config import ModelConfig, load_config
from octlm.experiments.length import FULL, FULL_DEFAULTS, LONG, default_rows, row_overrides
from octlm.model.decoder import Decoder
from octlm.runtime import torch_threads

LENGTH = "length"  # the name of the length experiment's shape among measure.CONFIGS
REFERENCE = "nope"  # every ratio is over this row
LONG_LENGTH = max(LONG["eval_lengths"])  # the forward's: the longest the length experiment scores (16,384)
# One torch thread, for training and for the forward worker alike: the length experiment's default
# (`--threads 1`: one thread per worker is fastest on a small machine), and steadier beside other jobs.
THREADS = 1


def length_shape() -> dict[str, int]:
    """The length experiment's training shape: day1 with FULL_DEFAULTS at context `FULL["train_length"]`."""
    config = load_config(None, {**FULL_DEFAULTS, "model.context_length": FULL["train_length"]})
    m = config.model
    return dict(
        vocab_size=m.vocab_size,
        d_model=m.d_model,
        n_layers=m.n_layers,
        n_heads=m.n_heads,
        context_length=m.context_length,
        batch=config.train.batch_size,
    )


# Beside configs a, b, c, so that the shared helpers (`octlm_config`, `memory_rows`) build it by name.
CONFIGS.setdefault(LENGTH, length_shape())


def row_config(name: str, row: str) -> ModelConfig:
    """Config `name`'s model with a row's settings: a scheme (`rope`) or a scheme with options (`rope+ssmax`)."""
    fields = row_overrides(row)
    if fields is None:
        raise ValueError(f"{row!r} is not a row of the length experiment")
    base = octlm_config(name, row.split("+")[0])
    return dataclasses.replace(base, **{key.removeprefix("model."): value for key, value in fields.items()})


@contextlib.contextmanager
def rows_in_memory_worker() -> Iterator[None]:
    """Let `measure_forward.memory_worker` build rows (`nope+ssmax`) where it takes scheme names; a plain
    scheme name builds the same config as before. Used by `bench.py --memory-worker`."""
    saved = measure_forward.octlm_config
    measure_forward.octlm_config = row_config
    try:
        yield
    finally:
        measure_forward.octlm_config = saved


def over_reference(rows: dict[str, dict[str, Any]], key: str, value: Callable[[dict], float | None]) -> None:
    """Set `row[key]` to `value(row) / value(reference row)` in every row where both are known."""
    ref = value(rows[REFERENCE]) if REFERENCE in rows else None
    for row in rows.values():
        own = value(row)
        row[key] = own / ref if own is not None and ref else None


def train_speeds(config: str, rows: list[str], warmup: int, reps: int, log) -> dict[str, dict[str, Any]]:
    """Training tokens/s of every row (forward, loss, backward, fused AdamW as `octlm train`), interleaved
    round by round; with a NoPE row, each row's ratio to it: of the medians, and round by round."""
    c = CONFIGS[config]
    B, T, V = c["batch"], c["context_length"], c["vocab_size"]
    steps = {}
    for row in rows:
        torch.manual_seed(0)  # the same initial weights wherever two rows share parameters
        steps[row] = TrainStep(Decoder(row_config(config, row)), B, T, V, hf=False)
    log(f"schemes: training {len(rows)} rows, config {config}, {reps} interleaved rounds, {THREADS} thread")
    with torch_threads(THREADS):
        times = interleaved(steps, warmup, reps)
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        tokens = [B * T / s for s in times[row]]
        out[row] = {"tokens_per_s": summary(tokens), "samples": tokens}
    if REFERENCE in times:  # per round: both rows timed within the same round
        for row in rows:
            per_round = [ref / own for own, ref in zip(times[row], times[REFERENCE], strict=True)]
            out[row]["train_over_nope_per_round"] = summary(per_round)
    over_reference(out, "train_over_nope", lambda r: r["tokens_per_s"]["median"])
    return out


def forward_memory(config: str, row: str, length: int, log) -> dict[str, Any]:
    """Peak memory and time of one inference forward of `row` at `length` (batch 1), in a fresh process.

    As `measure_forward.bench_long`: any allocation past 3/4 of the memory available when the process starts
    is refused (the row then holds "error"), so that a T² tensor cannot take the machine from its other users.
    """
    free = available_bytes()
    cap = int(0.75 * free) if free else None
    with mock.patch.dict(os.environ, {"OCTLM_BENCH_THREADS": str(THREADS)}):  # the worker's thread count
        point = memory_rows(config, [length], log, [row], cap=cap).get((row, length), {})
    log(f"  schemes: forward {row} at {length}: {point.get('bytes')} bytes, {point.get('seconds')} s")
    return {
        "peak_memory_bytes": point.get("bytes"),
        "forward_s": point.get("seconds"),
        **({"error": point["error"]} if "error" in point else {}),
    }


def bench_schemes(
    config: str, length: int, warmup: int, reps: int, log, rows: list[str] | None = None
) -> dict[str, Any]:
    """Every row (default: the length experiment's) against NoPE: training tokens/s at config `config`, and
    one forward's peak memory and time at `length` tokens. Plain numbers; ratios are over the NoPE row."""
    rows = list(rows or default_rows())
    out = train_speeds(config, rows, warmup, reps, log)
    for row in rows:
        if too_long(Decoder(row_config(config, row)), length):  # past a learned table's rows: no forward
            out[row].update(no_rows=True, peak_memory_bytes=None, forward_s=None)
        else:
            out[row].update(forward_memory(config, row, length, log))
    over_reference(out, "memory_over_nope", lambda r: r["peak_memory_bytes"])
    over_reference(out, "forward_over_nope", lambda r: r["forward_s"])
    return {
        "config": config,
        "shape": CONFIGS[config],
        "length": length,
        "threads": THREADS,
        "rows": out,
        "memory_method": MEMORY_METHOD,
    }
