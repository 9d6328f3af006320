"""The task-battery section: a battery cell's training throughput (`octlm experiment tasks`) against the same
model and batches in Hugging Face GPT-2 trained the usual way, with non-answer labels set to -100."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from measure import interleaved, summary

from octlm.config import TrainConfig
from octlm.experiments import battery_train
from octlm.experiments.battery import Cell, Row, Settings
from octlm.experiments.task_batches import answer_loss
from octlm.experiments.tasks import TASKS
from octlm.model.decoder import Decoder
from octlm.runtime import torch_threads
from octlm.training.loop import optimizer_step
from octlm.training.optimizer import make_optimizer

POOL = 8  # batches drawn once and cycled, so both models train on the same ones


class OctlmStep:
    """One step of a battery cell (`octlm.training.loop.optimizer_step` on `task_batches.answer_loss`), on pooled
    batches or, with `fresh`, drawing each batch as the battery does (the task's generator is part of a
    cell's time)."""

    def __init__(self, cell: Cell, pool: list[tuple], fresh: bool) -> None:
        torch.manual_seed(0)
        self.cell, self.model = cell, Decoder(cell.model_config())
        self.model.train()
        self.train = TrainConfig(lr=cell.settings.lr, warmup_steps=0)  # the full rate at every step
        self.optimizer = make_optimizer(self.model, self.train)
        self.rng = np.random.default_rng(0)
        self.pool, self.fresh = itertools.cycle(pool), fresh

    def __call__(self) -> None:
        batch = battery_train.training_batch(self.cell, self.rng) if self.fresh else next(self.pool)
        ids, targets, mask = batch
        loss = lambda: answer_loss(self.model(ids)[0], targets, mask)  # noqa: E731
        optimizer_step(self.model, self.optimizer, self.train, 0, loss, lambda *_: ValueError("not finite"))


class HFStep:
    """GPT2LMHeadModel of the cell's shape on the same batches: labels -100 off the answer (HF shifts them
    itself, so it reads the batch's last token too: one position more than octlm), fused AdamW, the same
    gradient clipping."""

    def __init__(self, cell: Cell, pool: list[tuple]) -> None:
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        c = cell.model_config()
        config = GPT2Config(
            vocab_size=c.vocab_size,
            n_positions=c.context_length + 1,
            n_embd=c.d_model,
            n_layer=c.n_layers,
            n_head=c.n_heads,
            n_inner=c.d_ff,
            activation_function="gelu",
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=1e-5,
            tie_word_embeddings=True,
        )
        self.model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cell.settings.lr, fused=True)
        self.pool = itertools.cycle([hf_batch(*batch) for batch in pool])

    def __call__(self) -> None:
        ids, labels = next(self.pool)
        self.model(input_ids=ids, labels=labels).loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def hf_batch(
    ids: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """octlm's (inputs, targets, answer mask), each `[B, T]`, as HF's (input_ids, labels), each `[B, T + 1]`:
    exact for a task whose inputs are its tokens (not MQAR's, whose withheld answers are read as `<pad>`)."""
    full = torch.cat([ids[:, :1], targets], dim=1)
    answer = torch.cat([torch.zeros_like(mask[:, :1]), mask], dim=1)
    return full, full.masked_fill(~answer, -100)


def bench_task_cells(tasks: list[str], warmup: int, reps: int, log) -> dict[str, Any]:
    """Per task: training steps per second of a default battery cell (learned positions, the default model and
    batch) for octlm on pooled batches, octlm drawing its batches, and HF GPT-2, interleaved; tokens per
    second count the batch's `[B, T]` inputs. One thread, as each of the battery's workers has."""
    out: dict[str, Any] = {}
    settings = replace(Settings(), jobs=1)
    for name in tasks:
        cell = Cell(TASKS[name], Row.parse("learned", settings.model["n_layers"]), 0, settings)
        rng = np.random.default_rng(1)
        pool = [battery_train.training_batch(cell, rng) for _ in range(POOL)]
        fns = {
            "octlm": OctlmStep(cell, pool, fresh=False),
            "octlm, drawing its batches": OctlmStep(cell, pool, True),
            "HF GPT2LMHeadModel": HFStep(cell, pool),
        }
        log(f"task cell {name}: {len(fns)} steps x {reps} interleaved rounds")
        with torch_threads(settings.threads):  # as the battery's workers run their cells
            times = interleaved(fns, warmup, reps)
        tokens = sum(b[0].numel() for b in pool) / POOL
        out[name] = {
            "steps_per_s": {k: summary([1 / t for t in v]) for k, v in times.items()},
            "tokens_per_s": {k: summary([tokens / t for t in v]) for k, v in times.items()},
            "batch": settings.batch_size,
            "mean_tokens": tokens,
            "model": settings.model,
            "cell_steps": settings.steps,
        }
    return out
