"""The optimizer (octlm/training/optimizer.py): the learning-rate schedule, and weight decay on the linear
layers' matrices only."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import tiny_config
from tiny import write_train_corpus as write_corpus

from octlm.config import config_from_dict
from octlm.model.decoder import Decoder
from octlm.training.optimizer import lr_at, param_groups


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "text")


def test_lr_schedule_warms_up_then_decays_to_min_lr(tmp_path: Path, corpus: Path) -> None:
    tc = tiny_config(tmp_path, corpus, steps=100, warmup_steps=10, lr=1e-2, min_lr=1e-3).train
    lrs = [lr_at(s, tc) for s in range(tc.steps)]
    assert lrs[0] == pytest.approx(1e-3) and lrs[9] == pytest.approx(1e-2)
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10], strict=False))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert lr_at(tc.steps, tc) == pytest.approx(1e-3)
    assert lrs[55] == pytest.approx((1e-2 + 1e-3) / 2)  # cosine midpoint


def test_weight_decay_only_on_linear_matrices() -> None:
    cfg = config_from_dict(
        {"model": {"vocab_size": 64, "d_model": 16, "n_layers": 2, "n_heads": 2, "d_ff": 32}}
    )
    model = Decoder(cfg.model)
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decayed and all(n.endswith("weight") and "norm" not in n and "embedding" not in n for n in decayed)
    assert "token_embedding.weight" in {names[id(p)] for p in no_decay["params"]}  # the table (= tied head)
    assert "positions.table.weight" in {names[id(p)] for p in no_decay["params"]}
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.1
    total = sum(p.numel() for group in (decay, no_decay) for p in group["params"])
    assert total == model.num_parameters()
