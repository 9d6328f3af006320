"""The pieces of the length experiment that make its numbers comparable: the windows each length scores, exact
scores on a context-dependent text, `Score`'s figures, lengths past a learned table, the RoPE variants, the
seeds' summary table, and chunked scoring past the whole-bias limit."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.experiments.length import Settings, evaluate_run, set_rope_variant
from octlm.experiments.length_results import bpb_table, summarize
from octlm.experiments.lengths_scorer import MODES, EvalText, score, sliding_part, windows_for
from octlm.inspect.render import render_markdown
from octlm.model.decoder import Decoder
from octlm.positions.formulas import rope_frequencies
from octlm.training.scoring import Score, evaluate


def text_of(count: int = 256, start: int = 32, vocab: int = 50) -> EvalText:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab, start + count + 1).astype(np.int64)
    return EvalText(tokens, start, count, np.ones(vocab, dtype=np.int64))


@pytest.mark.parametrize("length", [16, 32, 64])
@pytest.mark.parametrize("mode", MODES)
def test_windows_score_each_target_once(length: int, mode: str) -> None:
    text = text_of()
    starts, scored = windows_for(text, length, mode)
    assert (starts >= 0).all() and (starts + length + 1 <= len(text.tokens)).all()
    # Window s predicts targets s+1 .. s+L; the last `scored` of them count.
    targets = np.concatenate([np.arange(s + length + 1 - scored, s + length + 1) for s in starts])
    assert np.array_equal(np.sort(targets), np.arange(text.start + 1, text.start + text.count + 1))
    if mode == "sliding":
        assert (
            scored == sliding_part(length) == length // 2
        )  # each scored target sees >= L/2 tokens before it


def test_score_counts_tokens_and_bytes() -> None:
    text = text_of()
    model = Decoder(ModelConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, position="alibi"))
    for mode in MODES:
        s = score(model, text, 32, mode, batch_tokens=64)
        assert s.tokens == s.bytes == 256
        assert 0 < s.nats / s.tokens < 2 * np.log(50)


VOCAB = 50


def successor(ids: np.ndarray | torch.Tensor) -> Any:
    """The rule of the context-dependent text: each token determines the next, 3t + 1 mod 50 (never t itself)."""
    return (3 * ids + 1) % VOCAB


class Oracle(torch.nn.Module):
    """A model of that text whose confidence grows with the context it has read: at window position i (i + 1
    tokens seen) it gives the true next token logit (i + 1) / 4 and every other token 0. So the loss of a target
    at position i is exactly log(49 + e^a) - a, a = (i + 1) / 4: scoring the wrong part of a window, or the inputs as
    their own targets (logit 0, never the successor), gives a different sum."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        b, t = x.shape
        logits = torch.zeros(b, t, VOCAB, dtype=torch.float64)
        logits.scatter_(
            2,
            successor(x).unsqueeze(-1),
            torch.arange(1.0, t + 1, dtype=torch.float64).div(4).expand(b, t).unsqueeze(-1),
        )
        return logits, None


def chain_text(count: int = 256, start: int = 32) -> EvalText:
    tokens = [7]
    for _ in range(start + count):
        tokens.append(int(successor(np.int64(tokens[-1]))))
    return EvalText(np.array(tokens, dtype=np.int64), start, count, np.arange(VOCAB, dtype=np.int64) % 3 + 1)


# summed_loss takes the log-softmax in float32: measured 1e-9 (whole windows), 8.5e-8 (sliding: smaller losses)
# and 8e-9 (evaluate) relative to the exact float64 sums below.
REL = 2e-7


def oracle_nats(positions: range) -> float:
    """Summed loss of the oracle's targets at these window positions, one window."""
    return sum(math.log(VOCAB - 1 + math.exp((i + 1) / 4)) - (i + 1) / 4 for i in positions)


@pytest.mark.parametrize("batch_tokens", [32, 64, 10_000])  # one window per batch, two, all at once
def test_score_is_exact_on_a_context_dependent_text(batch_tokens: int) -> None:
    text = chain_text()
    targets = text.tokens[text.start + 1 : text.start + text.count + 1]
    nbytes = int((targets % 3 + 1).sum())  # every target once, whatever the mode
    windows = score(Oracle(), text, 32, "windows", batch_tokens)
    # 8 windows of 32, each scoring positions 0 .. 31.
    assert (windows.tokens, windows.bytes) == (256, nbytes)
    assert windows.nats == pytest.approx(8 * oracle_nats(range(32)), rel=REL)
    # Sliding: 16 windows (stride 16), each scoring only its last half, positions 16 .. 31, where the oracle
    # is surest (42.13 nats; its first halves would give 514.63).
    sliding = score(Oracle(), text, 32, "sliding", batch_tokens)
    assert (sliding.tokens, sliding.bytes) == (256, nbytes)
    assert sliding.nats == pytest.approx(16 * oracle_nats(range(16, 32)), rel=REL)
    assert sliding.nats == pytest.approx(42.1336, abs=1e-4) and windows.nats == pytest.approx(
        278.3823, abs=1e-4
    )


def test_evaluate_scores_every_target_exactly() -> None:
    """`octlm train`'s validation: all targets of each block, bits per byte from the bytes per token."""
    text = chain_text(count=64, start=0)
    blocks = [
        (
            torch.from_numpy(text.tokens[i : i + 16]).view(1, 16),
            torch.from_numpy(text.tokens[i + 1 : i + 17]).view(1, 16),
        )
        for i in (0, 16, 32)
    ]
    got = evaluate(Oracle(), blocks, torch.device("cpu"), bytes_per_token=2.5)
    assert (got.tokens, got.bytes) == (48, 120.0)
    assert got.nats == pytest.approx(3 * oracle_nats(range(16)), rel=REL)


def test_score_figures_from_hand_computed_values() -> None:
    s = Score(nats=6.0, tokens=4, bytes=3.0)
    assert s.loss == 1.5
    assert s.perplexity == pytest.approx(4.4816890703380645, rel=1e-15)  # e^1.5
    assert s.bpb == pytest.approx(2.8853900817779268, rel=1e-15)  # 6 nats = 8.656 bits over 3 bytes
    assert Score(nats=8 * math.log(2), tokens=8, bytes=4.0).bpb == pytest.approx(2.0, rel=1e-15)


def test_learned_past_its_table_reads_no_rows() -> None:
    model = Decoder(ModelConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, context_length=16))
    text = text_of()
    with pytest.raises(UserError, match="learned position table"):
        score(model, text, 32, "windows")
    settings = Settings(train_length=16, eval_lengths=[16, 32], seeds=1)
    records = evaluate_run(model, "learned", 0, text, settings)
    assert [(r["length"], r["status"]) for r in records] == [
        (16, "ok"),
        (16, "ok"),
        (32, "no rows"),
        (32, "no rows"),
    ]


def test_rope_variants_set_and_restore_frequencies() -> None:
    mc = ModelConfig(
        vocab_size=50, d_model=32, n_heads=2, n_layers=1, d_ff=32, context_length=16, position="rope"
    )
    model = Decoder(mc)
    settings = Settings(train_length=16, eval_lengths=[16, 64], seeds=1)
    plain = rope_frequencies(16)
    set_rope_variant(model, "pi", 64, settings)
    assert torch.allclose(model.positions.inv_freq, plain / 4)
    set_rope_variant(model, "yarn", 64, settings)
    assert model.positions.attention_scaling > 1
    set_rope_variant(model, "dynamic", 16, settings)
    assert torch.equal(model.positions.inv_freq, plain)
    evaluate_run(model, "rope", 0, text_of(), settings)
    assert torch.equal(model.positions.inv_freq, plain) and model.positions.attention_scaling == 1.0


def test_table_marks_best_and_within_spread() -> None:
    settings = Settings(train_length=16, eval_lengths=[16], seeds=3, schemes=["alibi", "t5", "nope"])
    records = []
    for scheme, values in (
        ("alibi", [1.00, 1.02, 1.04]),
        ("t5", [1.03, 1.05, 1.07]),
        ("nope", [1.5, 1.6, 1.7]),
    ):
        for seed, bpb in enumerate(values):
            for mode in MODES:
                records.append(
                    {
                        "scheme": scheme,
                        "variant": "",
                        "seed": seed,
                        "length": 16,
                        "mode": mode,
                        "status": "ok",
                        "bpb": bpb,
                        "ppl": 2.0,
                        "tokens": 10,
                    }
                )
    summary = summarize(records, settings)
    alibi = next(s for s in summary if s["scheme"] == "alibi" and s["mode"] == "windows")
    assert alibi["bpb_mean"] == pytest.approx(1.02) and alibi["bpb_std"] == pytest.approx(0.02)
    lines = render_markdown([bpb_table(summary, "windows", settings)], Path()).splitlines()[2:]
    assert lines == ["| alibi | **1.020 ± 0.020** |", "| t5 | ≈ 1.050 ± 0.020 |", "| nope | 1.600 ± 0.100 |"]


# ------------------------------------------------------------------------------------------------------------
# --long: a score at 2,048 tokens, past the whole-bias limit


@pytest.mark.parametrize("position", ["alibi", "t5"])
def test_a_long_score_goes_by_chunks_and_equals_the_whole_bias(position: str, monkeypatch) -> None:
    """Scoring at 2,048 tokens (past the whole-bias limit of 1,024 x 1,024 pairs) equals the whole-bias score."""
    import octlm.model.decoder

    torch.manual_seed(0)
    model = Decoder(
        ModelConfig(
            vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, position=position, context_length=16
        )
    ).eval()
    text = text_of(count=4096, start=1024)
    chunked = {mode: score(model, text, 2048, mode, batch_tokens=2048) for mode in MODES}
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", math.inf)
    for mode in MODES:
        whole = score(model, text, 2048, mode, batch_tokens=2048)
        assert (chunked[mode].tokens, chunked[mode].bytes) == (whole.tokens, whole.bytes) == (4096, 4096)
        # float64 sums of float32 losses over 4,096 targets: measured 2e-12 relative.
        assert chunked[mode].nats == pytest.approx(whole.nats, rel=1e-6)
