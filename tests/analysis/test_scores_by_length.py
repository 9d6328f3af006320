"""Scoring one run outside the length experiment (octlm/analysis/scores_by_length.py): the very numbers of the length
experiment's `score` on the same windows, bytes counted independently, and the refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from analysis_runs import train_tiny

from octlm.analysis.scores_by_length import check_lengths, score_run, scored_text
from octlm.data.cache import prepare_data
from octlm.errors import UserError
from octlm.experiments import lengths_scorer
from octlm.storage.checkpoint import load_model


@pytest.fixture(scope="module")
def alibi_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("score"), "alibi")


def utf8_bytes(tokenizer, ids: np.ndarray) -> int:
    """The test's own count: decode each id alone and measure its UTF-8 (the corpus is ASCII, so every token
    decodes to whole characters). The end-of-text token spells no text of the document: 0 bytes, by definition
    (octlm/training/scoring.py), though it decodes to its 13-character marker."""
    return sum(0 if t == tokenizer.eot_id else len(tokenizer.decode([int(t)]).encode("utf-8")) for t in ids)


def test_score_run_is_the_length_experiments_score(alibi_run: Path) -> None:
    result = score_run(alibi_run, [16, 8, 32, 8], sliding=True)
    model, config, tokenizer = load_model(alibi_run)
    val = prepare_data(config.data, config.model.vocab_size, progress=False).val
    # The experiment's cut, called directly.
    text = lengths_scorer.make_eval_text(val, tokenizer, [8, 16, 32], 16)
    assert [(r["length"], r["mode"]) for r in result["records"]] == [
        (8, "windows"),
        (8, "sliding"),
        (16, "windows"),
        (16, "sliding"),
        (32, "windows"),
        (32, "sliding"),
    ]
    for record in result["records"]:
        direct = lengths_scorer.score(model, text, record["length"], record["mode"])
        assert (record["nats"], record["tokens"], record["bytes"]) == (
            direct.nats,
            direct.tokens,
            direct.bytes,
        )
        assert record["bpb"] == direct.bpb and record["loss"] == direct.loss
    # The same 16 x 32 targets after 16 tokens of context (32 - 32 // 2) in every length and mode.
    assert result["windows"] == 16 and result["context_tokens"] == 16 and result["scored_tokens"] == 512
    targets = np.asarray(val[17 : 17 + 512])
    assert (targets == tokenizer.eot_id).any()  # the 0-byte convention is exercised
    independent = utf8_bytes(tokenizer, targets)
    assert result["scored_bytes"] == independent and all(r["bytes"] == independent for r in result["records"])
    assert all(r["tokens"] == 512 for r in result["records"])


def test_a_text_file_is_scored_in_as_many_windows_as_it_holds(alibi_run: Path, tmp_path: Path) -> None:
    source = tmp_path / "other.txt"
    source.write_text(
        "class Point:\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n" * 4
    )
    result = score_run(alibi_run, [8, 16], text=source)
    model, _, tokenizer = load_model(alibi_run)
    ids = np.asarray(tokenizer.encode(source.read_text()), dtype=np.int64)
    fit = (len(ids) - 1 - 8) // 16
    assert 1 <= fit < 16 and result["windows"] == fit and result["source"] == str(source)
    text = lengths_scorer.make_eval_text(ids, tokenizer, [8, 16], fit)
    for record in result["records"]:
        assert record["nats"] == lengths_scorer.score(model, text, record["length"], "windows").nats
    assert result["scored_bytes"] == utf8_bytes(tokenizer, ids[9 : 9 + 16 * fit])
    with pytest.raises(
        UserError, match=f"room for {fit} windows of 16 after 8 of context, not --windows {fit + 1}"
    ):
        score_run(alibi_run, [8, 16], text=source, windows=fit + 1)


def test_lengths_are_checked() -> None:
    assert check_lengths([32, 8, 32], None, "r") == [8, 32]
    with pytest.raises(
        UserError, match=r"--lengths 24 32 is past the learned position table of 'r' \(16 rows\)"
    ):
        check_lengths([8, 32, 24], 16, "r")
    assert check_lengths([16], 16, "r") == [16]
    with pytest.raises(UserError, match="must be lengths from 2 to"):
        check_lengths([1, 8], None, "r")


def test_a_short_text_is_refused_in_one_line() -> None:
    class Bytes:  # what make_eval_text asks of a tokenizer
        eot_id, vocab_size = 0, 4

        def token_bytes(self, i: int) -> bytes:
            return b"x"

    tokens = np.zeros(40, dtype=np.int64)
    assert scored_text(tokens, Bytes(), [8, 16], None).count == 16 * 1  # (40 - 1 - 8) // 16 = 1 window
    with pytest.raises(UserError, match="room for 0 windows of 64 after 32 of context, not one window"):
        scored_text(tokens, Bytes(), [64], None)
