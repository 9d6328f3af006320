"""Batches of a task's examples for a decoder, the loss on their answers, and how an answer is scored
(`octlm.experiments.battery` trains and scores its cells with these): padded inputs, next-token targets and
the answer mask, exact match and per-token counts under the model's argmax, and Ruoss et al.'s randomized
positions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from octlm.errors import UserError
from octlm.experiments.tasks import EOS, PAD, Example


def batch_of(examples: Sequence[Example]) -> tuple[Tensor, Tensor, Tensor]:
    """Inputs `[B, T]`, next-token targets `[B, T]` and the answer mask `[B, T]` of padded examples: input t
    is what the model reads at t (`Example.inputs`: the token, or `<pad>` where it is withheld), target t is
    token t + 1, scored where that token answers. Padding (`<pad>`) comes after each example's `<eos>`, so a
    causal model never reads it before an answer."""
    length = max(len(e.tokens) for e in examples)
    ids = torch.full((len(examples), length), PAD, dtype=torch.long)
    inputs = ids.clone()
    mask = torch.zeros(len(examples), length, dtype=torch.bool)
    for row, example in enumerate(examples):
        ids[row, : len(example.tokens)] = torch.tensor(example.tokens)
        inputs[row, : len(example.tokens)] = torch.tensor(example.inputs)
        mask[row, : len(example.answer)] = torch.tensor(example.answer)
    return inputs[:, :-1], ids[:, 1:], mask[:, 1:]


def answer_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Mean cross-entropy of `logits` `[B, T, V]` against `targets` `[B, T]` over the answer tokens
    (`mask`)."""
    return F.cross_entropy(logits[mask].float(), targets[mask])


def exact_matches(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """`[B]` bool: every answer token of the example is the model's argmax."""
    wrong = (logits.argmax(-1) != targets) & mask
    return ~wrong.any(dim=-1)


def token_counts(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[int, int]:
    """(answer tokens right, answer tokens) under the model's argmax, the `<eos>` that ends each answer left
    out (per token as `octlm.experiments.baselines` scores it; per query for MQAR)."""
    scored = mask & (targets != EOS)
    return int(((logits.argmax(-1) == targets) & scored).sum()), int(scored.sum())


def random_positions(length: int, limit: int, generator: torch.Generator) -> Tensor:
    """A sorted random subset of 0 .. limit - 1 of `length` positions (Ruoss et al.'s randomized
    positions)."""
    if length > limit:
        raise UserError(f"randomized positions: {length} positions do not fit in 0 .. {limit - 1}")
    return torch.randperm(limit, generator=generator)[:length].sort().values


@dataclass(frozen=True)
class Counts:
    """What a model got right of some examples: `hits` exactly (every answer token and the `<eos>`),
    `token_hits` of the `tokens` of their answers (`<eos>` left out)."""

    hits: int
    token_hits: int
    tokens: int


def answer_tokens(examples: Sequence[Example]) -> int:
    """How many answer tokens `examples` have, the `<eos>` that ends each left out."""
    return sum(len(e.answer_tokens) - 1 for e in examples)
