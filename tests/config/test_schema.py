"""The config's sections and their cross-field checks (octlm/config/schema.py): a config that passes validation
also runs; every field says what it means; a misspelt name ends with the nearest one."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from configs import SECTION_CLASSES

from octlm.config import DataConfig, ModelConfig, TrainConfig, config_fields, config_from_dict
from octlm.config.registry import SCHEMES, SOURCES
from octlm.config.schema import choices, description
from octlm.errors import UserError
from octlm.model.decoder import Decoder


@pytest.mark.parametrize(("buckets", "max_distance"), [(32, 16), (32, 8), (8, 4), (2, 1)])
def test_t5_max_distance_not_above_exact_range(buckets: int, max_distance: int) -> None:
    """T5 spaces buckets log(d / (buckets/2)) / log(max_distance / (buckets/2)): max_distance must exceed
    buckets // 2. A config that passes validation must also run; today these divide by log(1) = 0 (or go
    negative) and the bucket index leaves the table."""
    fields = dict(vocab_size=64, d_model=32, context_length=8, n_layers=1, n_heads=4, d_ff=64, position="t5")
    try:
        config = config_from_dict(
            {"model": {**fields, "t5_buckets": buckets, "t5_max_distance": max_distance}}
        )
    except UserError as error:
        assert "t5_max_distance" in str(error)
        return
    logits, _ = Decoder(config.model)(torch.zeros(1, 40, dtype=torch.long))
    assert torch.isfinite(logits).all()


def test_every_field_has_one_short_line_of_meaning() -> None:
    """`--help` shows each field's meaning (`described`) beside its flag: one line, no flag spelt in it (a
    command's --help must name only its own flags), short enough to read at 100 columns with its default."""
    for section, cls in SECTION_CLASSES.items():
        for f in dataclasses.fields(cls):
            meaning = description(cls, f.name)
            assert meaning == f.metadata["help"] and meaning.isprintable(), (section, f.name)
            assert 0 < len(meaning) <= 66 and "--" not in meaning, (section, f.name, meaning)


def test_choices_are_the_names_a_field_takes() -> None:
    assert choices("model.position") == tuple(SCHEMES)
    assert choices("data.source") == tuple(SOURCES)
    assert choices("model.norm") == ("layernorm", "rmsnorm")
    assert choices("train.dtype") == ("auto", "fp32", "bf16", "bf16-autocast")
    assert choices("model.d_model") is None
    every = [key for key in config_fields() if choices(key)]
    assert every == [
        "model.position",
        "model.norm",
        "model.mlp",
        "model.rope_layout",
        "model.attention_scaling",
        "model.rope_scaling",
        "data.source",
        "train.log",
        "train.dtype",
    ]


def test_an_unknown_name_ends_with_the_nearest() -> None:
    assert ModelConfig(mlp="swiglo").problems() == [
        "model.mlp = 'swiglo' is unknown; choose one of gelu, swiglu; did you mean swiglu?"
    ]
    assert TrainConfig(log="tensorbord").problems() == [
        "train.log = 'tensorbord' is unknown; choose one of none, tensorboard; did you mean tensorboard?"
    ]
    assert DataConfig(source="prse").problems() == [
        f"data.source = 'prse' is unknown; choose one of {', '.join(SOURCES)}; did you mean prose?"
    ]
    assert TrainConfig(dtype="int8").problems() == [  # nothing close enough: nothing suggested
        "train.dtype = 'int8' is unknown; choose one of auto, fp32, bf16, bf16-autocast"
    ]
