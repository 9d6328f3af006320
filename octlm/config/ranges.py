"""The range of every number a config holds, checked once at the boundary by `octlm.config.schema`.

A typo (an extra zero, a value past 64 bits, a NaN) is refused where it enters, with the range it missed,
rather than found by the allocator or the loss minutes into a run. Sizes are capped far past any model that
fits a machine; `tests/config/test_ranges.py` checks that every int and float field of the configs is listed
here.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from octlm.errors import SEED_RANGE, whole_range_words

INT64_MAX = 2**63 - 1  # counts past this fit no int64 tensor, and no plausible run needs them


class Span(NamedTuple):
    """The values a number may take: `low` to `high`, each bound included unless marked open."""

    low: float
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    why: str = ""  # said after the range, when the bound is not obvious

    def problem(self, where: str, value: float) -> str | None:
        """`where = value must be ...`, or None when `value` is inside."""
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        if above and below:
            return None
        whole = isinstance(value, int)
        low, high = (f"{x:,}" if whole else f"{x:g}" for x in (self.low, self.high))
        if self.high == math.inf:
            wanted = f"{'greater than' if self.low_open else 'at least'} {low}"
        elif whole:  # whole-number spans are closed; one that ends at a machine limit is said in words
            wanted = whole_range_words(value, int(self.low), int(self.high))
        else:  # interval notation: [0, 1) holds 0 but not 1
            wanted = f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        return f"{where} = {show(value)} must be {wanted}" + (f" ({self.why})" if self.why else "")


# torch.manual_seed takes -2**63 .. 2**64 - 1, but a negative seed aliases a large one (-1 is 2**64 - 1): the
# distinct seeds are 0 .. 2**64 - 1 (`errors.SEED_RANGE`, shared with the --seed flags).
SEED = Span(*SEED_RANGE, why="torch seeds are unsigned 64-bit numbers")
# `section.field` -> its span. The widest models published use d_model ~25,000, d_ff ~100,000, ~130 layers.
SPANS: dict[str, Span] = {
    "model.vocab_size": Span(1, 2**32, why="token files hold ids as uint32"),
    "model.d_model": Span(1, 2**16),
    "model.context_length": Span(1, 2**24),
    "model.n_layers": Span(1, 1024),
    "model.n_heads": Span(1, 2**16),
    "model.n_kv_heads": Span(0, 2**16, why="0 means the same as model.n_heads"),
    "model.d_ff": Span(1, 2**20),
    "model.dropout": Span(0.0, 1.0, high_open=True),
    "model.norm_eps": Span(0.0, 1.0, low_open=True),
    "model.rope_base": Span(1.0, low_open=True, why="the frequencies base**(-2i/d) must fall with i"),
    "model.sinusoidal_base": Span(1.0, low_open=True, why="the frequencies base**(-2i/d) must fall with i"),
    "model.sinusoidal_scale": Span(0.0, low_open=True),
    "model.t5_buckets": Span(2, 2**16),
    "model.t5_max_distance": Span(1, INT64_MAX),
    "model.rope_fraction": Span(
        0.0, 1.0, low_open=True, why="the share of each head's channels RoPE rotates"
    ),
    "model.prope_fraction": Span(0.0, 1.0, why="the share of RoPE's frequencies p-RoPE keeps"),
    "model.xpos_scale_base": Span(0.0, low_open=True),
    "model.fire_hidden": Span(
        1, 1024, why="one query chunk holds fire_hidden / n_heads x 8 MiB of hidden units"
    ),
    "model.fire_threshold": Span(0.0, low_open=True),
    "model.cope_positions": Span(1, 2**24),
    "model.ssmax_init": Span(-100.0, 100.0, why="s log n multiplies every attention score"),
    "model.attention_floor": Span(1, INT64_MAX),
    "model.attention_temperature": Span(0.0, 100.0),
    "model.rope_factor": Span(1.0, 2.0**20, why="a context-extension factor s: new length / original length"),
    "model.rope_original_length": Span(0, 2**24, why="0 when model.rope_scaling = 'none'"),
    "data.hub_max_documents": Span(1, INT64_MAX),
    "data.val_fraction": Span(0.0, 1.0, low_open=True, high_open=True),
    "train.steps": Span(1, INT64_MAX),
    "train.batch_size": Span(1, 2**20),
    "train.lr": Span(0.0, low_open=True),
    "train.min_lr": Span(0.0),
    "train.warmup_steps": Span(0, INT64_MAX),
    "train.weight_decay": Span(0.0),
    "train.beta1": Span(0.0, 1.0, high_open=True),
    "train.beta2": Span(0.0, 1.0, high_open=True),
    "train.grad_clip": Span(0.0, why="0 turns clipping off"),
    "train.eval_interval": Span(1, INT64_MAX),
    "train.eval_batches": Span(1, INT64_MAX),
    "train.checkpoint_interval": Span(1, INT64_MAX),
    "train.seed": SEED,
    "train.sample_tokens": Span(0, 100_000, why="the sample printed after training; octlm generate for more"),
}


def show(value: Any) -> str:
    """A value for an error line: repr, cut short, and never failing (str() of a 5,000-digit int raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:  # > 77 digits
        return f"a {value.bit_length()}-bit number"
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"
