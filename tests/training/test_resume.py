"""Resuming (octlm/training/resume.py): a resume accepts only the bookkeeping fields of a config changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import tiny_config
from tiny import write_train_corpus as write_corpus

from octlm.training.resume import RESUMABLE_FIELDS, config_differences


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "text")


def test_config_differences_allow_only_bookkeeping(tmp_path: Path, corpus: Path) -> None:
    old = tiny_config(tmp_path, corpus)
    new = tiny_config(tmp_path, corpus, steps=99, eval_interval=3, model={"position": "rope"})
    assert config_differences(old, new) == ["model.position rope != learned"]
    assert "train.steps" in RESUMABLE_FIELDS and "train.lr" not in RESUMABLE_FIELDS
