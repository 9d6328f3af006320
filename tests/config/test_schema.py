"""The config's sections and their cross-field checks (octlm/config/schema.py): a config that passes validation
also runs."""

from __future__ import annotations

import pytest
import torch

from octlm.config import config_from_dict
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
