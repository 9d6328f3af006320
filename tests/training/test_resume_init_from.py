"""Fine-tuning: a run started from another run's weights (`train.init_from`), at a longer context and with RoPE's
frequencies rescaled for it (`model.rope_scaling`); every mismatch refused in one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tiny import check_one_line, run_cli, tiny_config, tiny_flags
from tiny import write_train_corpus as write_corpus

from octlm.config import Config, config_from_dict
from octlm.data.batches import eval_blocks
from octlm.data.cache import prepare_data
from octlm.errors import UserError
from octlm.positions.rope_scaling import scaled_frequencies
from octlm.storage.checkpoint import load_model
from octlm.storage.run import Run
from octlm.training.loop import train
from octlm.training.scoring import summed_loss


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A RoPE run trained at context 16 (its folder, config and corpus)."""
    root = tmp_path_factory.mktemp("init")
    corpus = write_corpus(root / "text")
    config = tiny_config(root, corpus, steps=20, model={"position": "rope"}, run_name="base")
    train(config, progress=False)
    return {"root": root, "corpus": corpus, "config": config, "dir": root / "runs" / "base"}


def extended(base: dict, name: str, **model: object) -> Config:
    """The base config at context 32, started from the base run's weights, a few steps."""
    overrides = {
        "model.context_length": 32,
        "train.init_from": str(base["dir"]),
        "train.run_name": name,
        "train.steps": 2,
        "train.eval_interval": 1,
        "train.checkpoint_interval": 2,
    }
    overrides |= {f"model.{k}": v for k, v in model.items()}
    return config_from_dict(base["config"].to_dict(), overrides=overrides)


def test_fine_tuning_starts_from_the_base_weights(base: dict) -> None:
    """The fine-tuning's step-0 evaluation is the base model's, at the new length with PI's frequencies."""
    config = extended(base, "pi", rope_scaling="linear", rope_factor=2.0, rope_original_length=16)
    train(config, progress=False)
    first = Run.of(base["root"] / "runs" / "pi").read_metrics()[0]
    assert first["step"] == 0
    model, _, _ = load_model(base["dir"])
    model.positions.set_frequencies(*scaled_frequencies("linear", 16, 10000.0, 2.0, 16))
    data = prepare_data(config.data, config.model.vocab_size, progress=False)
    blocks = list(
        eval_blocks(
            data.val, 32, config.train.eval_batches * config.train.batch_size, config.train.batch_size
        )
    )
    with torch.no_grad():
        nats = sum(float(summed_loss(model, x, y)) for x, y in blocks)
        tokens = sum(y.numel() for _, y in blocks)
    assert first["val_loss"] == pytest.approx(nats / tokens, abs=1e-6)
    tuned, tuned_config, _ = load_model(base["root"] / "runs" / "pi")
    assert (
        tuned_config.model.rope_scaling == "linear"
        and tuned.positions.frequencies()[-1] < model.positions.inv_freq[-1] * 1.0001
    )
    assert torch.equal(tuned.positions.frequencies(), model.positions.frequencies())


def test_a_fresh_start_differs_from_a_fine_tuning(base: dict) -> None:
    """Without init_from the same config starts from random weights: the step-0 loss is near ln V."""
    config = config_from_dict(extended(base, "fresh").to_dict(), overrides={"train.init_from": ""})
    train(config, progress=False)
    fresh = Run.of(base["root"] / "runs" / "fresh").read_metrics()[0]["val_loss"]
    tuned = extended(base, "plain")
    train(tuned, progress=False)
    start = Run.of(base["root"] / "runs" / "plain").read_metrics()[0]["val_loss"]
    assert fresh > start + 1.0 and abs(fresh - math.log(300)) < 0.5


def test_another_model_is_refused_naming_the_field(base: dict) -> None:
    config = config_from_dict(extended(base, "other").to_dict(), overrides={"model.position": "alibi"})
    with pytest.raises(
        UserError, match=r"holds another model: model.position alibi != rope; a run may start"
    ):
        train(config, progress=False)
    assert not (base["root"] / "runs" / "other" / "checkpoint").exists()


def test_a_learned_table_cannot_grow(tmp_path: Path, base: dict) -> None:
    learned = tiny_config(
        tmp_path, base["corpus"], steps=2, model={"position": "learned"}, run_name="learned"
    )
    train(learned, progress=False)
    longer = config_from_dict(
        learned.to_dict(),
        overrides={
            "model.context_length": 32,
            "train.run_name": "long",
            "train.init_from": str(tmp_path / "runs" / "learned"),
        },
    )
    with pytest.raises(UserError, match=r"do not fit this model \(.*size mismatch"):
        train(longer, progress=False)


def test_another_tokenizer_is_refused(tmp_path: Path, base: dict) -> None:
    other = write_corpus(tmp_path / "other", files=3, lines=40)
    config = config_from_dict(
        extended(base, "tok").to_dict(),
        overrides={"data.text": [str(other)], "data.data_dir": str(tmp_path / "data")},
    )
    with pytest.raises(UserError, match="was trained with another tokenizer than this run's data"):
        train(config, progress=False)


def test_the_cli_refuses_a_missing_run_in_one_line(tmp_path: Path, base: dict) -> None:
    flags = tiny_flags(tmp_path, base["corpus"])
    code, _, err = run_cli(["train", *flags, "--init-from", str(tmp_path / "nowhere"), "--no-progress"])
    check_one_line(code, err, "train.init_from: run folder")
    assert "nowhere" in err
