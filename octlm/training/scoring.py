"""Scoring a model on held-out tokens: summed next-token loss, and the figures made from it.

One function, `summed_loss`, computes the loss of a batch in float64; `octlm train`'s validation (`evaluate`)
and the length experiment's windows both go through it, so both report the same quantity:

    loss (nats/token)  = nats / tokens
    perplexity         = exp(loss)
    bits per byte      = nats / ln 2 / bytes      (bytes: UTF-8 bytes of the scored target tokens)

Bits per byte does not depend on the tokenizer, which is why octlm reports it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from octlm.runtime import Dist, autocast


@dataclass(frozen=True)
class Score:
    """Summed loss over some scored tokens, and how many UTF-8 bytes those tokens spell."""

    nats: float
    tokens: int
    bytes: float

    @property
    def loss(self) -> float:
        """Mean nats per scored token."""
        return self.nats / self.tokens

    @property
    def perplexity(self) -> float:
        return math.exp(min(self.loss, 700.0))  # exp(700) is near float64's limit; a loss that high is noise

    @property
    def bpb(self) -> float:
        """Bits per byte: the tokenizer-independent figure."""
        return self.nats / math.log(2) / self.bytes


def summed_loss(model: nn.Module, x: Tensor, y: Tensor, last: int | None = None) -> Tensor:
    """Float64 sum of next-token cross-entropy for inputs `[b, T]` and targets `[b, T]`.

    `last` scores only the last `last` targets of each row (a sliding window scores its new tokens only);
    None scores all of them. The logits are upcast before the loss, so autocast does not round the figure.
    """
    logits, _ = model(x)  # [b, T, V]
    if last is not None:
        logits, y = logits[:, -last:], y[:, -last:]
    losses = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none")
    return losses.double().sum()  # summed in float64: long evaluations add up many small numbers


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[Tensor, Tensor]],
    device: torch.device,
    bytes_per_token: float,
    dist: Dist | None = None,
    dtype: str = "auto",
) -> Score:
    """Score every batch `(x [b, T], y [b, T])`; under DDP each rank takes every world-th batch.

    `dtype` is the run's `train.dtype` (`runtime.autocast`): `fp32` on CUDA evaluates in float32 too.

    The sums are all-reduced, so every rank returns the same Score. Bytes are tokens × `bytes_per_token`
    (the validation stream's average, EOTs counted). The model's train/eval mode is restored afterwards.
    """
    dist = dist or Dist()
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # [sum of token losses, token count]
    with autocast(device, dtype):
        for i, (x, y) in enumerate(batches):
            if i % dist.world != dist.rank:
                continue
            total[0] += summed_loss(model, x.to(device), y.to(device))
            total[1] += y.numel()
    if dist.world > 1:
        torch.distributed.all_reduce(total)
    model.train(was_training)
    nats, tokens = float(total[0]), int(total[1])
    return Score(nats=nats, tokens=tokens, bytes=tokens * bytes_per_token)
