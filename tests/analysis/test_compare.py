"""Runs side by side (octlm/analysis/compare.py): each row read back from the run independently, the
attention numbers of octlm/inspect/attention.py, the report's files, and every difference beyond the scheme
(steps, tokens seen, config, tokenizer, data) named above the table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from analysis_runs import train_tiny, write_corpus

from octlm.analysis.compare import SAME_SCHEME_ONLY, compare_runs, write_compare
from octlm.config import config_from_dict
from octlm.data.cache import prepare_data
from octlm.errors import UserError
from octlm.inspect.attention import attention_by_distance, attention_windows
from octlm.storage.checkpoint import load_checkpoint, load_model
from octlm.storage.run import Run

# The tiny config's parameters by hand: token table 300 x 32 (tied to the head); per block two LayerNorms
# (2 x 64), qkv 32 x 96 + 96, proj 32 x 32 + 32, MLP 32 x 64 + 64 and 64 x 32 + 32; the final LayerNorm 64.
BLOCK = 2 * 64 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 64 + 64) + (64 * 32 + 32)
PARAMETERS = {"alibi": 300 * 32 + 2 * BLOCK + 64, "learned": 300 * 32 + 16 * 32 + 2 * BLOCK + 64}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("compare")
    return [train_tiny(root, "alibi", seed=3), train_tiny(root, "learned", seed=4)]


def test_rows_are_each_runs_own_numbers(runs: list[Path], tmp_path: Path) -> None:
    result = compare_runs(runs, windows=4)
    seeds = f"train.seed: {runs[0].name} 3, {runs[1].name} 4"  # one corpus, one tokenizer, one config else
    assert result["differences"] == [seeds]
    assert result["verdict"] == "not comparable on the scheme alone: 1 other difference(s)"
    for row, path, scheme, seed in zip(result["runs"], runs, ("alibi", "learned"), (3, 4), strict=True):
        metrics = [json.loads(line) for line in Run.of(path).metrics_path.read_text().splitlines()]
        assert (row["label"], row["scheme"], row["seed"], row["steps"]) == (path.name, scheme, seed, 10)
        assert row["parameters"] == PARAMETERS[scheme] and (row["planned_steps"], row["tokens"]) == (
            10,
            10 * 8 * 16,
        )
        assert (row["val_loss"], row["val_bpb"], row["val_step"]) == (
            metrics[-1]["val_loss"],
            metrics[-1]["val_bpb"],
            10,
        )
        assert row["curve"] == {"step": [0, 5, 10], "val_bpb": [m["val_bpb"] for m in metrics]}
        model, config, _ = load_model(path)
        val = prepare_data(config.data, 300, progress=False).val
        expected = attention_by_distance(model, attention_windows(val, 16, 4))
        for key in ("mean", "lift", "entropy", "mean_distance"):
            assert np.array_equal(row["attention"][key], expected[key])
        summary = row["attention_summary"]
        assert [s["layer"] for s in summary] == [0, 1]
        assert summary[1]["entropy"] == expected["entropy"][1].mean()
        assert summary[0]["lift_1"] == expected["lift"][0, :, 1].mean()

    folder = write_compare(result, tmp_path / "out")
    names = {p.name for p in folder.iterdir()}
    assert names == {
        "compare.md",
        "compare.json",
        "curves.png",
        f"attention-0-{runs[0].name}.png",
        f"attention-1-{runs[1].name}.png",
    }
    markdown = (folder / "compare.md").read_text(encoding="utf-8")
    above = f"not comparable on the scheme alone: 1 other difference(s):\n\n- {seeds}\n\nValidation loss"
    assert markdown.index(above) < markdown.index("| run | scheme | seed |")
    alibi = result["runs"][0]
    assert (
        f"| {runs[0].name} | alibi | 3 | 10 | {PARAMETERS['alibi']:,} | 16 | {alibi['val_loss']:.4f} | "
        f"{alibi['val_bpb']:.4f} |"
    ) in markdown
    numbers = json.loads((folder / "compare.json").read_text(encoding="utf-8"))
    assert numbers["runs"][1]["scheme"] == "learned" and numbers["figures"]["curves"] == "curves.png"
    assert np.asarray(numbers["runs"][0]["attention"]["lift"]).shape == (2, 2, 16)


def test_runs_of_other_data_are_flagged(runs: list[Path], tmp_path: Path) -> None:
    other = train_tiny(tmp_path, "nope", corpus=write_corpus(tmp_path / "other", offset=100))
    result = compare_runs([runs[0], other], windows=2)
    a, b = (r["label"] for r in result["runs"])
    hashes = {key: [r[key][:12] for r in result["runs"]] for key in ("tokenizer_sha256", "corpus_sha256")}
    text = "their losses and bits per byte are not measured on the same text"
    assert result["differences"] == [
        f"data.text: {a} {runs[0].parent.parent / 'corpus'}, {b} {tmp_path / 'other'}",
        f"train.seed: {a} 3, {b} 0",
        f"tokenizer: {a} {hashes['tokenizer_sha256'][0]}, {b} {hashes['tokenizer_sha256'][1]}; {text}",
        f"corpus: {a} {hashes['corpus_sha256'][0]}, {b} {hashes['corpus_sha256'][1]}; {text}",
    ]
    assert len(set(hashes["tokenizer_sha256"])) == len(set(hashes["corpus_sha256"])) == 2


def test_steps_tokens_and_the_schedule_are_named_and_only_a_scheme_is_comparable(
    runs: list[Path], tmp_path: Path
) -> None:
    """Runs of 10 steps, and one stopped at step 6 of 16: the differences a table of steps would hide."""
    from octlm.training.loop import train

    rope = train_tiny(runs[0].parent.parent, "rope", seed=3)  # alibi's corpus, seed and config
    alibi = load_checkpoint(runs[0], load_optimizer=False).config
    stopped = tmp_path / "stopped"
    nope = config_from_dict(
        alibi.to_dict(), name="tiny", overrides={"train.steps": 16, "model.position": "nope"}
    )
    assert train(nope, stopped, progress=False, stop_after=6).interrupted
    assert compare_runs([runs[0], rope], windows=2)["verdict"] == SAME_SCHEME_ONLY
    result = compare_runs([runs[0], rope, stopped], windows=2)
    a, b = runs[0].name, rope.name
    assert result["differences"] == [
        f"steps: {a} 10, {b} 10, stopped 6 (of 16 planned)",
        f"tokens seen: {a} 1,280, {b} 1,280, stopped 768",
    ]
    assert result["verdict"] == "not comparable on the scheme alone: 2 other difference(s)"


def test_refusals(runs: list[Path]) -> None:
    with pytest.raises(UserError, match="compare needs at least two runs, got 1"):
        compare_runs(runs[:1])
    with pytest.raises(UserError, match="is given twice"):
        compare_runs([runs[0], runs[1], runs[0].parent / ".." / "runs" / runs[0].name])
