#!/usr/bin/env python
"""Where one cached decoding step's time goes (config b, learned, batch 1, greedy, 128 new tokens).

    .venv/bin/python benchmarks/decode_breakdown.py [--threads 2] [--rounds 7]

Times, interleaved round by round (median ms per new token):
- decode: `octlm_generate` with the KV cache, as in bench.py;
- floor: the model's weight GEMVs alone, back to back (measure_decode.weights_only_decode);
- no GEMV: the same decode with every `nn.Linear` replaced by a preallocated output: all the other ops;
- the GEMVs inside the real decode, timed one by one (perf_counter around each `nn.Linear`).
If decode ≈ floor + no GEMV, the GEMVs run at their isolated speed inside the model; if the in-model GEMV sum
is well above the floor, something between them (cache, threads) slows them down.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from measure import interleaved, octlm_config
from measure_decode import octlm_generate, weights_only_decode

from octlm.model import Decoder
from octlm.runtime import torch_threads


class Preallocated(torch.nn.Module):
    """Stands in for an `nn.Linear`: returns a ready zero tensor of the right shape, computes nothing."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.out_features, self.outputs = linear.out_features, {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (*x.shape[:-1], self.out_features)
        if shape not in self.outputs:
            self.outputs[shape] = torch.zeros(shape)
        return self.outputs[shape]


def without_gemvs(model: Decoder) -> Decoder:
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, Preallocated(child))
    return model


class LinearClock:
    """While entered, every `nn.Linear` forward runs through `forward`, which adds its time to `seconds`.

    It stands in `nn.Linear`'s class as a descriptor: looked up on a layer, it returns `forward` bound to
    that layer. On exit the original `nn.Linear.forward` comes back.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.original: Any = None

    def __get__(self, linear: torch.nn.Linear | None, owner: type) -> Any:
        return self if linear is None else partial(self.forward, linear)

    def forward(self, linear: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        y = F.linear(x, linear.weight, linear.bias)
        self.seconds += time.perf_counter() - start
        return y

    def __enter__(self) -> LinearClock:
        self.original = torch.nn.Linear.forward
        torch.nn.Linear.forward = self  # type: ignore[assignment,method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.nn.Linear.forward = self.original  # type: ignore[method-assign]


def gemvs_inside_decode(model: Decoder, prompt: torch.Tensor, new: int, rounds: int) -> float:
    """Median ms per new token spent in the `nn.Linear` calls of a real cached decode, timed one by one."""
    inside = []
    with LinearClock() as clock:
        for _ in range(rounds):
            clock.seconds = 0.0
            octlm_generate(model, prompt, new, True)
            inside.append(1e3 * clock.seconds / new)
    return statistics.median(inside)


def breakdown(rounds: int, new: int = 128) -> dict[str, float]:
    """Median ms per new token of each part (see the module's docstring), in the current thread count."""
    torch.manual_seed(0)
    model = Decoder(octlm_config("b", "learned")).eval()
    hollow = without_gemvs(Decoder(octlm_config("b", "learned")).eval())
    prompt = torch.randint(0, 1024, (1, 16), generator=torch.Generator().manual_seed(0))
    fns = {
        "decode": partial(octlm_generate, model, prompt, new, True),
        "floor (GEMVs alone)": weights_only_decode(model, new),
        "no GEMV (every other op)": partial(octlm_generate, hollow, prompt, new, True),
    }
    times = interleaved(fns, 2, rounds)
    ms = {k: 1e3 * statistics.median(v) / new for k, v in times.items()}
    ms["GEMVs inside decode (timed one by one)"] = gemvs_inside_decode(model, prompt, new, rounds)
    return ms


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    new = 128
    with torch_threads(args.threads):
        ms = breakdown(args.rounds, new)

    print(f"config b, learned, batch 1, {new} new tokens, {args.threads} thread(s); median ms per new token")
    for k, v in ms.items():
        print(f"  {k:40s} {v:.3f}")
    total = ms["floor (GEMVs alone)"] + ms["no GEMV (every other op)"]
    print(f"  {'floor + no GEMV':40s} {total:.3f}  (decode / that = {ms['decode'] / total:.2f})")
    return ms


if __name__ == "__main__":
    main()
