"""How a training step runs in `train.dtype`: the autocast context, and for `bf16` a bfloat16 working copy.

- `fp32`, `auto` (bf16 autocast on CUDA, fp32 on CPU) and `bf16-autocast`: the steps run through the float32
  model itself, under `runtime.autocast`, which casts weights and activations op by op.
- `bf16`: bf16 weights with float32 master weights. The forward and backward passes run through a bfloat16
  copy of the model (every activation bf16, no cast per op); after backward its gradients become the float32
  masters' (`gradients_to_master`), the optimizer steps the masters, and they are rounded into the copy again
  (`weights_from_master`). Checkpoints, evaluation and generation use the float32 model; the copy is a pure
  function of it, so a resumed run stays bit-identical. It trained config c faster than autocast on an
  AVX512-BF16 EPYC (benchmarks/README.md).
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn

from octlm.runtime import autocast


class Precision:
    """The `train.dtype` of one run for `model` (float32) on `device`."""

    def __init__(self, model: nn.Module, device: torch.device, dtype: str) -> None:
        self.device, self.dtype = device, dtype
        self.model = model
        self.work: nn.Module | None = None
        if dtype == "bf16":
            self.work = copy.deepcopy(model).to(torch.bfloat16)
            self.pairs = list(zip(self.work.parameters(), model.parameters(), strict=True))

    @property
    def step_model(self) -> nn.Module:
        """The module the training steps run through (before DDP or torch.compile wrap it)."""
        return self.work if self.work is not None else self.model

    def context(self) -> contextlib.AbstractContextManager:
        """The autocast of a step (none around the bf16 copy: it is bf16 already)."""
        return contextlib.nullcontext() if self.work is not None else autocast(self.device, self.dtype)

    def gradients_to_master(self) -> None:
        """After backward: the bf16 copy's gradients, as float32, on the master weights."""
        if self.work is not None:
            for low, master in self.pairs:
                master.grad = None if low.grad is None else low.grad.float()
                low.grad = None

    @torch.no_grad()
    def weights_from_master(self) -> None:
        """After the optimizer step: the updated masters, rounded to bf16, into the copy."""
        if self.work is not None:
            for low, master in self.pairs:
                low.copy_(master)
