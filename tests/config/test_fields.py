"""A config's values as they are read (octlm/config/fields.py): a value that passes the type check but cannot
work (an integer too large for a float, NaN) is a problem named by its key."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from configs import SECTION_CLASSES, problems_of

from octlm.config import config_from_dict
from octlm.errors import UserError

# ------------------------------------------------------------------------------------------------------------
# Values that pass the checks but cannot work


def test_huge_integer_for_a_float_field_is_a_user_error() -> None:
    """TOML (tomllib) accepts integers of any size; `float(10**400)` raises OverflowError."""
    with pytest.raises(UserError, match="rope_base"):
        config_from_dict({"model": {"rope_base": 10**400}})


FLOAT_FIELDS = [
    f"{section}.{f.name}"
    for section, cls in SECTION_CLASSES.items()
    for f in dataclasses.fields(cls)
    if typing.get_type_hints(cls)[f.name] is float
]


@pytest.mark.parametrize("key", FLOAT_FIELDS)
def test_nan_is_rejected_for_every_float_field(key: str) -> None:
    """TOML has `nan`; a NaN base or epsilon makes every logit NaN, and NaN fails no `<` or `<=` check."""
    message = problems_of({}, overrides={key: float("nan")})
    assert "nan" in message
