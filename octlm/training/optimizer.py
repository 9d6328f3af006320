"""The optimizer and its schedule: AdamW with decay on weight matrices only, warmup then cosine.

- Weight decay on the 2-D Linear weights only. Biases and norm gains are never decayed (they are offsets and
  scales, not capacity). The embedding tables (token table = tied output head, learned position table, T5
  bucket table) are not decayed either: decay shrinks every row each step, including rows of tokens the batch
  never contains, so a rare token's row would drift to zero instead of keeping what it learned or its initial
  random row. octlm studies these tables, so they stay undecayed.
- The learning rate warms up linearly over `warmup_steps`, then follows a cosine from `lr` down to `min_lr`
  at `steps`. The schedule is a pure function of the step, so a resumed run continues it exactly.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from octlm.config import TrainConfig


def lr_at(step: int, tc: TrainConfig) -> float:
    """Learning rate for the step with 0-based index `step`: linear warmup, then cosine from lr to min_lr."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    span = max(1, tc.steps - tc.warmup_steps)
    progress = min(1.0, (step - tc.warmup_steps) / span)
    return tc.min_lr + 0.5 * (tc.lr - tc.min_lr) * (1.0 + math.cos(math.pi * progress))


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay the 2-D Linear weights; not biases, norms or embedding tables (see the top)."""
    embedding_params = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    decay, no_decay = [], []
    for p in model.parameters():  # a tied head is the token table: one Parameter, listed once
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and id(p) not in embedding_params else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, tc: TrainConfig) -> torch.optim.AdamW:
    """AdamW over `param_groups`, fused: one kernel for every parameter (on CPU 5-6x faster than foreach)."""
    return torch.optim.AdamW(
        param_groups(model, tc.weight_decay), lr=tc.lr, betas=(tc.beta1, tc.beta2), fused=True
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
