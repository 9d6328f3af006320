"""How the next token is chosen: greedy at temperature 0, otherwise logits / temperature, optionally cut to
the `top_k` most likely tokens and to the smallest set whose probability reaches `top_p`, then drawn with a
seeded generator, so the same seed gives the same text. Every row of a batch is drawn on its own, on the
logits' device, with no host round trip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from octlm.errors import UserError


@dataclass(frozen=True)
class Sampling:
    """How each next token is chosen; made only with settings in range (otherwise a UserError)."""

    temperature: float = 0.0  # 0: greedy
    top_k: int | None = None  # None: no limit
    top_p: float = 1.0  # 1: keep every token
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.temperature < math.inf:  # also catches NaN
            raise UserError(
                f"temperature = {self.temperature} must be 0 (greedy) or a finite positive number"
            )
        if self.top_k is not None and self.top_k < 1:
            raise UserError(f"top-k = {self.top_k} must be at least 1 (or left unset for no limit)")
        if not 0.0 < self.top_p <= 1.0:
            raise UserError(f"top-p = {self.top_p} must be in (0, 1]; 1 keeps every token")


def check_max_new_tokens(max_new_tokens: int) -> None:
    if max_new_tokens < 0:
        raise UserError(f"max-new-tokens = {max_new_tokens} must not be negative")


def check_sampling(temperature: float, top_k: int | None, top_p: float, max_new_tokens: int) -> None:
    """UserError for a sampling setting outside its range."""
    Sampling(temperature, top_k, top_p)
    check_max_new_tokens(max_new_tokens)


def choose_tokens(
    logits: Tensor, temperature: float, top_k: int | None, top_p: float, generator: torch.Generator | None
) -> Tensor:
    """Token ids `[...]` (long, on the logits' device) from `logits` `[..., V]`: every row on its own, one
    draw per row, no host round trip. Entries set to -inf are never chosen."""
    # float64, and the largest logit moved to 0 first: a tiny temperature then sends the others to -inf
    # instead of overflowing to inf (softmax NaN), and a tiny top-p is not rounded to 0.
    logits = logits.double()
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens before it already reach top_p; the most likely one always stays.
        drop = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
