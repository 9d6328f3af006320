"""The registries a config field chooses among (octlm/config/registry.py): names in any case, and a misspelt
name refused with the nearest registered one (`nearest`, the helper every name kind's suggestion uses)."""

from __future__ import annotations

import pytest

from octlm.config.registry import FIELD_REGISTRIES, SCHEMES, SOURCES, Registry, did_you_mean, nearest
from octlm.errors import UserError

NAMES = ["learned", "rope", "p-rope", "alibi", "nope"]


def test_nearest_is_the_closest_name_in_any_case_or_none() -> None:
    assert nearest("rop", NAMES) == "rope"
    assert nearest("ALIBY", NAMES) == "alibi"
    assert nearest("p_rope", NAMES) == "p-rope"
    assert nearest("sideways", NAMES) is None
    assert nearest("rope", []) is None
    assert did_you_mean("lerned", NAMES) == "; did you mean learned?"
    assert did_you_mean("sideways", NAMES) == ""


def test_a_scheme_is_read_in_any_case() -> None:
    assert SCHEMES.canonical("ROPE") == "rope"
    assert SCHEMES.canonical("P-RoPE") == "p-rope"
    assert SCHEMES.canonical("alibi") == "alibi"
    assert SCHEMES.canonical("sideways") == "sideways"  # unknown: left for the check to refuse
    assert SCHEMES.choose("ALiBi") is SCHEMES["alibi"]
    assert SOURCES.choose("STDLIB") is SOURCES["stdlib"]
    assert FIELD_REGISTRIES == {"model.position": SCHEMES, "data.source": SOURCES}


def test_an_unknown_name_is_refused_with_the_choices_and_the_nearest() -> None:
    every = ", ".join(SCHEMES)
    with pytest.raises(UserError) as error:
        SCHEMES.choose("rop")
    assert str(error.value) == f"unknown position scheme 'rop'; choose one of {every}; did you mean rope?"
    assert SCHEMES.unknown("sideways") == f"unknown position scheme 'sideways'; choose one of {every}"
    assert SCHEMES.unknown("alibl", " in row 'alibl+ssmax'") == (
        f"unknown position scheme 'alibl' in row 'alibl+ssmax'; choose one of {every}; did you mean alibi?"
    )


def test_a_registry_of_ones_own_suggests_too() -> None:
    shapes = Registry("shape", "octlm.config")  # its built-ins' module registers nothing

    @shapes.register
    class Circle:
        name = "circle"

    assert shapes.unknown("CIRCEL") == "unknown shape 'CIRCEL'; choose one of circle; did you mean circle?"
    assert shapes.choose("Circle") is Circle
