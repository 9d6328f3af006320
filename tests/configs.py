"""What the config tests share (tests/config/): the config's section classes, and a config's problems as the one
line a UserError gives."""

from __future__ import annotations

import pytest

from octlm.config import Config, config_from_dict
from octlm.errors import UserError

SECTION_CLASSES = {section: type(getattr(Config(), section)) for section in ("model", "data", "train")}


def problems_of(raw: dict, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        config_from_dict(raw, **kwargs)
    return str(info.value)
