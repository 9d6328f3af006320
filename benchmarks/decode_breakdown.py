#!/usr/bin/env python
"""Where one lean decoding step's time goes (config b, learned, batch 1, greedy, 128 new tokens).

    .venv/bin/python benchmarks/decode_breakdown.py [--threads 1] [--rounds 7]

Each round times, in this order (the figures are medians over rounds, ms per new token):
- step: `DecodeStep` after a 16-token prompt, greedy: what `octlm generate` runs per token;
- floor: the step's own weight GEMVs (its `Dense` layers, on fixed inputs) back to back, nothing else;
- no GEMV: the same step with every `Dense` returning a ready output: all the other ops;
- GEMVs inside the step: the real step again, each `Dense` call timed on its own;
- floor, paused: the floor's GEMVs with the CPU kept busy after each token for as long as this round's
  "no GEMV" took (a spin on the clock, touching no data), the GEMVs timed on their own.
If "GEMVs inside the step" is near "floor, paused" and above "floor", time passing between two visits to the
same weights slows them, whatever runs in that time: a step cannot reach the back-to-back floor by cutting
its other ops alone.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from measure import octlm_config

from octlm.model.decode_step import DecodeStep, Dense
from octlm.model.decoder import Decoder
from octlm.runtime import torch_threads

NEW, PROMPT = 128, 16
PARTS = ("step", "floor (GEMVs alone)", "no GEMV (every other op)", "GEMVs inside the step", "floor, paused")


class Ready:
    """Stands in for a `Dense`: returns a ready zero tensor of its output's shape, computes nothing."""

    def __init__(self, dense: Dense) -> None:
        self.out_features, self.outputs = dense.weight.shape[1], {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] not in self.outputs:
            self.outputs[x.shape[0]] = torch.zeros(x.shape[0], self.out_features)
        return self.outputs[x.shape[0]]


class Timed:
    """A `Dense` whose calls add their wall time to `clock[0]`."""

    def __init__(self, dense: Dense, clock: list[float]) -> None:
        self.dense, self.clock = dense, clock

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        y = self.dense(x)
        self.clock[0] += time.perf_counter() - start
        return y


def swap_dense(step: DecodeStep, wrap: Any) -> DecodeStep:
    """`step` with each of its `Dense` layers (the head included) replaced by `wrap(dense)`."""
    step.layers = [tuple(map(wrap, layer)) for layer in step.layers]
    step.head = wrap(step.head)
    return step


def decode(model: Decoder, step: DecodeStep, prompt: torch.Tensor, new: int) -> float:
    """Seconds for `new` greedy tokens after `prompt` `[1, T]` through `step` (the prompt's pass excluded)."""
    with torch.inference_mode():
        cache = model.new_cache(1, prompt.shape[1] + new)
        token = model(prompt, cache=cache)[0][:, -1].argmax(-1)
        start = time.perf_counter()
        for _ in range(new):
            token = step(token, cache).argmax(-1)
        return time.perf_counter() - start


def floor(layers: list[Dense], inputs: list[torch.Tensor], new: int, pause: float = 0.0) -> float:
    """Seconds spent in `new` rounds of every layer's GEMV on its fixed input; after each round the CPU spins
    for `pause` seconds (not counted)."""
    spent = 0.0
    with torch.inference_mode():
        for _ in range(new):
            start = time.perf_counter()
            for layer, x in zip(layers, inputs, strict=True):
                layer(x)
            now = time.perf_counter()
            spent += now - start
            spin_until(now + pause)
    return spent


def spin_until(deadline: float) -> None:
    """Keep the CPU busy on the clock alone (no data touched, no sleep: the core must not idle) until
    `time.perf_counter()` reaches `deadline`."""
    while time.perf_counter() < deadline:
        continue


def one_round(model: Decoder, prompt: torch.Tensor, new: int) -> dict[str, float]:
    """Each part's ms per new token, measured once, in `PARTS` order."""
    step = DecodeStep(model)
    inputs = [torch.randn(1, dense.weight.shape[0]) for dense in step.dense]
    clock = [0.0]
    seconds = {
        "step": decode(model, step, prompt, new),
        "floor (GEMVs alone)": floor(step.dense, inputs, new),
        "no GEMV (every other op)": decode(model, swap_dense(DecodeStep(model), Ready), prompt, new),
    }
    decode(model, swap_dense(DecodeStep(model), lambda d: Timed(d, clock)), prompt, new)
    seconds["GEMVs inside the step"] = clock[0]
    seconds["floor, paused"] = floor(step.dense, inputs, new, seconds["no GEMV (every other op)"] / new)
    return {k: 1e3 * v / new for k, v in seconds.items()}


def breakdown(rounds: int, new: int = NEW) -> dict[str, float]:
    """Median ms per new token of each part (see the module's docstring), in the current thread count."""
    torch.manual_seed(0)
    model = Decoder(octlm_config("b", "learned")).eval()
    prompt = torch.randint(0, 1024, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    one_round(model, prompt, new)  # warm-up
    measured = [one_round(model, prompt, new) for _ in range(rounds)]
    return {k: statistics.median(r[k] for r in measured) for k in PARTS}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1, as the CLI)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with torch_threads(args.threads):
        ms = breakdown(args.rounds)

    print(f"config b, learned, batch 1, {NEW} new tokens, {args.threads} thread(s); median ms per new token")
    for k, v in ms.items():
        print(f"  {k:40s} {v:.3f}")
    total = ms["floor (GEMVs alone)"] + ms["no GEMV (every other op)"]
    print(f"  {'floor + no GEMV':40s} {total:.3f}  (step / that = {ms['step'] / total:.2f})")
    return ms


if __name__ == "__main__":
    main()
