"""A row of an experiment's tables (octlm/experiments/rows.py), as far as its scheme's name goes: read in any
case, and a misspelt one refused with the nearest registered scheme."""

from __future__ import annotations

import argparse

import pytest

from octlm.commands import experiment, experiment_length
from octlm.errors import UserError
from octlm.experiments.length import Settings
from octlm.experiments.rows import Row, spelt
from octlm.positions import SCHEMES


def test_a_row_is_read_in_any_case() -> None:
    assert spelt("ROPE+ssmax") == "rope+ssmax"
    assert spelt("Alibi") == "alibi"
    assert spelt("sideways+random") == "sideways+random"  # unknown: left for Row.parse to refuse
    row = Row.parse("RoPE+random+nope0")
    assert (row.spec, row.scheme, row.randomized, row.nope_layers) == (
        "rope+random+nope0",
        "rope",
        True,
        (0,),
    )


def test_a_misspelt_scheme_in_a_row_ends_with_the_nearest() -> None:
    with pytest.raises(UserError) as error:
        Row.parse("alibl+ssmax")
    assert str(error.value) == (
        f"unknown position scheme 'alibl' in row 'alibl+ssmax'; choose one of {', '.join(SCHEMES)}; "
        "did you mean alibi?"
    )


def test_the_length_experiments_schemes_in_any_case_are_its_rows() -> None:
    parser = argparse.ArgumentParser(prog="octlm experiment length")
    experiment_length.add_arguments(parser)
    settings = experiment.settings_from_args(Settings, parser.parse_args(["--schemes", "ROPE", "NoPE+ssmax"]))
    assert settings.schemes == ["rope", "nope+ssmax"] and settings.problems() == []
