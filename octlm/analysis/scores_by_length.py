"""`octlm score RUN`: bits per byte of one trained run at chosen lengths, outside the length experiment.

The scoring is the length experiment's own (octlm/experiments/length.py): the text is cut by `make_eval_text`
(a context prefix of S tokens, then N = windows x max(lengths) scored targets, so every length scores the same
targets), windows by `windows_for`, and each length is scored by `length.score`, which sums the loss through
`octlm.training.scoring.summed_loss`. Bits per byte = nats / ln 2 / the UTF-8 bytes of the scored target
tokens (EOT: 0 bytes). A number here therefore equals the experiment's cell for the same model and text.

Non-overlapping windows are always scored; sliding windows (stride L // 2, the last half of each window
scored, so every token sees at least L // 2 tokens of context) only with `sliding=True`: they cost twice the
forward passes, and on a CPU the long lengths are what take the time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from octlm.errors import UserError, writing
from octlm.experiments.length import MAX_LENGTH
from octlm.experiments.lengths_scorer import EvalText, make_eval_text, score, sliding_part
from octlm.files import write_atomic
from octlm.inspect.validation import text_tokens, validation_tokens
from octlm.positions import unbounded_schemes

if TYPE_CHECKING:
    from octlm.data.tokenizer import Tokenizer

DEFAULT_WINDOWS = 16  # the length experiment's default --eval-windows
MAX_WINDOWS = 100_000


def check_lengths(lengths: Sequence[int], table_rows: int | None, run: str) -> list[int]:
    """The lengths, sorted and without repeats; refused past MAX_LENGTH or past a learned table's rows."""
    if not lengths or min(lengths) < 2 or max(lengths) > MAX_LENGTH:
        raise UserError(
            f"--lengths {' '.join(map(str, lengths))} must be lengths from 2 to {MAX_LENGTH:,} tokens"
        )
    if table_rows is not None and max(lengths) > table_rows:
        past = " ".join(str(n) for n in sorted(set(lengths)) if n > table_rows)
        raise UserError(
            f"--lengths {past} is past the learned position table of {run!r} ({table_rows} rows); use "
            f"lengths up to {table_rows}, or score a run of a scheme without a maximum: "
            f"{', '.join(unbounded_schemes())}"
        )
    return sorted(set(lengths))


def scored_text(
    tokens: np.ndarray, tokenizer: Tokenizer, lengths: Sequence[int], windows: int | None
) -> EvalText:
    """`make_eval_text` for `windows` windows of max(lengths) (None: DEFAULT_WINDOWS, or as many as fit)."""
    start = max(length - sliding_part(length) for length in lengths)
    fit = max(0, (len(tokens) - 1 - start) // max(lengths))  # windows the text holds after the context
    if fit < 1 or (windows is not None and windows > fit):
        asked = f"--windows {windows}" if windows is not None else "one window"
        raise UserError(
            f"the text has {len(tokens):,} tokens: room for {fit} windows of {max(lengths)} after {start} of "
            f"context, not {asked}; use {f'--windows {fit} or fewer, ' if fit else ''}shorter --lengths or a "
            "longer --text"
        )
    if windows is not None and windows < 1:
        raise UserError(f"--windows {windows} must be at least 1")
    return make_eval_text(
        tokens, tokenizer, lengths, min(DEFAULT_WINDOWS, fit) if windows is None else windows
    )


def score_model(
    model: torch.nn.Module,
    text: EvalText,
    lengths: Sequence[int],
    sliding: bool = False,
    batch_tokens: int = 8192,
) -> list[dict[str, Any]]:
    """One record per length and mode (`windows`, and `sliding` if asked): `length.score`'s figures."""
    records = []
    model.eval()
    for length in lengths:
        for mode in ("windows", "sliding") if sliding else ("windows",):
            s = score(model, text, length, mode, batch_tokens)
            records.append(
                {
                    "length": length,
                    "mode": mode,
                    "tokens": s.tokens,
                    "bytes": s.bytes,
                    "nats": s.nats,
                    "loss": s.loss,
                    "bpb": s.bpb,
                    "perplexity": s.perplexity,
                }
            )
    return records


def score_run(
    run_dir: str | Path,
    lengths: Sequence[int],
    text: str | Path | None = None,
    windows: int | None = None,
    sliding: bool = False,
) -> dict[str, Any]:
    """Score a trained run at `lengths` on its validation stream (or `text`, a UTF-8 file): every record, and
    what was scored (tokens, bytes, the SHA-256 of the scored token ids and their byte counts)."""
    from octlm.storage.checkpoint import load_model

    run_dir = Path(run_dir)
    model, config, tokenizer = load_model(run_dir)  # a one-line UserError for a folder that is not a run
    lengths = check_lengths(lengths, model.positions.max_length, str(run_dir))
    tokens = validation_tokens(config, tokenizer) if text is None else text_tokens(text, tokenizer)
    eval_text = scored_text(tokens, tokenizer, lengths, windows)
    targets = eval_text.tokens[eval_text.start + 1 : eval_text.start + eval_text.count + 1]
    return {
        "run": run_dir.name,
        "position": config.model.position,
        "context_length": config.model.context_length,
        "source": f"the run's validation stream (data cache in {config.data.data_dir})"
        if text is None
        else str(text),
        "windows": eval_text.count // max(lengths),
        "context_tokens": eval_text.start,
        "scored_tokens": eval_text.count,
        "scored_bytes": eval_text.bytes_of(targets),
        "eval_sha256": eval_text.sha256,
        "records": score_model(model, eval_text, lengths, sliding),
    }


def score_lines(result: dict[str, Any]) -> list[str]:
    """The printed table: one line per length and mode."""
    lines = [
        f"{result['run']} ({result['position']}, trained at {result['context_length']}): "
        f"{result['scored_tokens']:,} "
        f"tokens ({result['scored_bytes']:,} bytes) of {result['source']}",
        f"  {'length':>7} {'mode':<8} {'tokens':>9} {'loss':>7} {'ppl':>9} {'bits/byte':>9}",
    ]
    lines += [
        f"  {r['length']:>7} {r['mode']:<8} {r['tokens']:>9,} {r['loss']:7.4f} {r['perplexity']:9.2f} "
        f"{r['bpb']:9.4f}"
        for r in result["records"]
    ]
    return lines


def write_score(result: dict[str, Any], path: str | Path) -> Path:
    """`result` as JSON at `path`, written atomically; floats in full (they round-trip to the same
    numbers)."""
    with writing(path):
        write_atomic(path, (json.dumps(result, indent=1, allow_nan=False) + "\n").encode("utf-8"))
    return Path(path)
