#!/usr/bin/env python
"""Where one cached decoding step's time goes (config b, learned, batch 1, greedy, 128 new tokens).

    .venv/bin/python benchmarks/decode_breakdown.py [--threads 2] [--rounds 7]

Times, interleaved round by round (median ms per new token):
- decode: `octlm_generate` with the KV cache, as in bench.py;
- floor: the model's weight GEMVs alone, back to back (bench.weights_only_decode);
- no GEMV: the same decode with every `nn.Linear` replaced by a preallocated output: all the other ops;
- the GEMVs inside the real decode, timed one by one (perf_counter around each `nn.Linear`).
If decode ≈ floor + no GEMV, the GEMVs run at their isolated speed inside the model; if the in-model GEMV sum
is well above the floor, something between them (cache, threads) slows them down.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

from octlm.model import Decoder  # noqa: E402


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


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    new = 128
    torch.manual_seed(0)
    model = Decoder(bench.octlm_config("b", "learned")).eval()
    hollow = without_gemvs(Decoder(bench.octlm_config("b", "learned")).eval())
    prompt = torch.randint(0, 1024, (1, 16), generator=torch.Generator().manual_seed(0))
    fns = {
        "decode": lambda: bench.octlm_generate(model, prompt, new, True),
        "floor (GEMVs alone)": bench.weights_only_decode(model, new),
        "no GEMV (every other op)": lambda: bench.octlm_generate(hollow, prompt, new, True),
    }
    times = bench.interleaved(fns, 2, args.rounds)
    ms = {k: 1e3 * statistics.median(v) / new for k, v in times.items()}

    spent = [0.0]
    linear_forward = torch.nn.Linear.forward

    def timed(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        y = F.linear(x, self.weight, self.bias)
        spent[0] += time.perf_counter() - start
        return y

    torch.nn.Linear.forward = timed  # type: ignore[method-assign]
    try:
        inside = []
        for _ in range(args.rounds):
            spent[0] = 0.0
            bench.octlm_generate(model, prompt, new, True)
            inside.append(1e3 * spent[0] / new)
    finally:
        torch.nn.Linear.forward = linear_forward  # type: ignore[method-assign]
    ms["GEMVs inside decode (timed one by one)"] = statistics.median(inside)

    print(f"config b, learned, batch 1, {new} new tokens, {args.threads} thread(s); median ms per new token")
    for k, v in ms.items():
        print(f"  {k:40s} {v:.3f}")
    total = ms["floor (GEMVs alone)"] + ms["no GEMV (every other op)"]
    print(f"  {'floor + no GEMV':40s} {total:.3f}  (decode / that = {ms['decode'] / total:.2f})")
    return ms


if __name__ == "__main__":
    main()
