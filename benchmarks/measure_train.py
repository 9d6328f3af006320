"""Training sections: tokens/s of every model at configs a, b, c, a `torch.compile` training step, and fp32
against bf16 (bf16 weights with fp32 master weights, and autocast) at one config."""

from __future__ import annotations

import gc
import time
from typing import Any

import torch
from measure import (
    CONFIGS,
    PEAK_DTYPES,
    MatmulProbe,
    flops_per_token,
    hf_gpt2,
    hf_llama,
    interleaved,
    octlm_config,
    summary,
)

from octlm.model.decoder import Decoder
from octlm.positions import scheme_names
from octlm.training.precision import Precision


class TrainStep:
    """One fused AdamW step on a fixed random batch: forward, loss, backward, update.

    Fused AdamW for both sides: `octlm train` uses it, and so does HF's Trainer by default (torch >= 2.8).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        batch: int,
        length: int,
        vocab: int,
        hf: bool,
        dtype: str = "fp32",
        device: str = "cpu",
    ) -> None:
        model.train()
        self.model, self.hf = model.to(device), hf
        # `train.dtype` as `octlm train` runs it: autocast, or a bf16 copy with fp32 masters (octlm/training/precision.py)
        self.precision = Precision(self.model, torch.device(device), dtype)
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (batch, length + 1), generator=g).to(device)
        self.x, self.y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def __call__(self) -> None:
        model, x = self.precision.step_model, self.x
        # HF shifts the labels itself; octlm takes the next-token targets.
        # octlm as `octlm train` calls it: the chunked loss, no [B, T, V] logits (octlm/model/loss.py).
        with self.precision.context():
            loss = model(input_ids=x, labels=x).loss if self.hf else model(x, self.y, return_logits=False)[1]
        loss.backward()
        self.precision.gradients_to_master()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.precision.weights_from_master()


def training_models(name: str) -> dict[str, tuple[torch.nn.Module, bool]]:
    """Every model trained at config `name`, with whether it is a Hugging Face model."""
    models: dict[str, tuple[torch.nn.Module, bool]] = {}
    for pos in scheme_names():
        models[f"octlm {pos}"] = (Decoder(octlm_config(name, pos)), False)
    models["octlm rope llama-shaped"] = (Decoder(octlm_config(name, "rope", llama=True)), False)
    models["HF GPT2LMHeadModel"] = (hf_gpt2(name), True)
    models["HF LlamaForCausalLM"] = (hf_llama(name), True)
    return models


def bench_training(names: list[str], warmup: int, reps: int, log) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        c = CONFIGS[name]
        B, T, V = c["batch"], c["context_length"], c["vocab_size"]
        models = training_models(name)
        fns = {k: TrainStep(m, B, T, V, hf) for k, (m, hf) in models.items()}
        probe = MatmulProbe()
        fns["matmul peak probe"] = probe
        log(f"training config {name}: {len(models)} models × {reps} interleaved rounds")
        times = interleaved(fns, warmup, reps)
        peak = [probe.flops / s / 1e9 for s in times.pop("matmul peak probe")]
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
            step = TrainStep(compiled, B, T, V, hf=False)
            start = time.perf_counter()
            step()
            first = time.perf_counter() - start
            times = interleaved({"eager": TrainStep(eager, B, T, V, False), "compiled": step}, warmup, reps)
            out[name] = {
                "compile_first_step_s": first,
                "eager_tokens_per_s": summary([B * T / s for s in times["eager"]]),
                "compiled_tokens_per_s": summary([B * T / s for s in times["compiled"]]),
            }
        except Exception as error:  # a missing compiler or an inductor bug is a result, not a crash
            out[name] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
    return out


# row -> train.dtype: `bf16` is bf16 weights with fp32 master weights, `bf16-autocast` casts op by op
PRECISIONS = {"fp32": "fp32", "bf16 (bf16 weights, fp32 masters)": "bf16", "bf16-autocast": "bf16-autocast"}


def bench_precision(name: str, warmup: int, reps: int, log, device: str = "cpu") -> dict[str, Any]:
    """octlm learned at config `name` in fp32 and in both bf16 modes, interleaved round by round with an fp32
    and a bf16 matmul probe (n 1024), so every ratio compares figures of the same rounds."""
    c = CONFIGS[name]
    B, T, V = c["batch"], c["context_length"], c["vocab_size"]

    def model() -> Decoder:
        torch.manual_seed(0)  # the same weights in every mode
        return Decoder(octlm_config(name, "learned"))

    fns: dict[str, Any] = {k: TrainStep(model(), B, T, V, False, dt, device) for k, dt in PRECISIONS.items()}
    probes = {
        dt: MatmulProbe(1024, 1 if device == "cpu" else 64, PEAK_DTYPES[dt], device) for dt in PEAK_DTYPES
    }
    fns.update({f"matmul {dt}": probe for dt, probe in probes.items()})
    log(f"precision config {name}: {', '.join(PRECISIONS)} × {reps} interleaved rounds")
    times = interleaved(fns, warmup, reps)
    rows = {k: {"tokens_per_s": summary([B * T / s for s in times[k]])} for k in PRECISIONS}
    fp32 = rows["fp32"]["tokens_per_s"]
    for row in rows.values():
        row["over_fp32"] = row["tokens_per_s"]["median"] / fp32["median"]
    peaks = {dt: summary([p.flops / s / 1e9 for s in times[f"matmul {dt}"]]) for dt, p in probes.items()}
    return {"config": name, "rows": rows, "probe_gflops": peaks, "batch": B, "length": T}
