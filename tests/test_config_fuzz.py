"""Fuzzed configs (hypothesis): anything TOML-shaped, with or without overrides, gives a valid, fully typed
Config or a UserError, nothing else. The deterministic config tests are in tests/test_config.py."""

from __future__ import annotations

import dataclasses
import typing

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_config import SECTION_CLASSES

from octlm.config import Config, ModelConfig, config_from_dict
from octlm.errors import UserError

FIELD_NAMES = sorted({f.name for cls in SECTION_CLASSES.values() for f in dataclasses.fields(cls)})

huge = st.sampled_from(
    [10**400, -(2**1100), 2**1024]
)  # tomllib reads integers of any size; floats stop at 2**1024
scalars = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["rope", "alibi", "learned", "true", "0", "1e3", "nan", "-5", "1_024", "half", "cuda"]),
    st.integers(),
    st.integers(-3, 600),
    huge,
    st.floats(),
    st.booleans(),
)
keys = st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=6))
values = st.recursive(
    st.one_of(scalars, st.lists(scalars, max_size=3)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=8,
)


def section_tables(section: str) -> st.SearchStrategy[dict]:
    """Every real field of the section, each present or not, plus a few stray keys."""
    own = {f.name: values for f in dataclasses.fields(SECTION_CLASSES[section])}
    return st.builds(
        lambda stray, real: {**stray, **real},
        st.dictionaries(keys, values, max_size=2),
        st.fixed_dictionaries({}, optional=own),
    )


raw_configs = st.builds(
    lambda known, other: {**other, **known},
    st.fixed_dictionaries({}, optional={s: section_tables(s) for s in SECTION_CLASSES}),
    st.dictionaries(
        st.text(max_size=5), st.one_of(values, st.dictionaries(keys, values, max_size=3)), max_size=2
    ),
)
override_maps = st.dictionaries(
    st.builds(lambda s, f: f"{s}.{f}", st.sampled_from(["model", "data", "train", "x", ""]), keys) | keys,
    scalars,
    max_size=3,
)


def assert_typed(config: Config) -> None:
    for section, cls in SECTION_CLASSES.items():
        obj = getattr(config, section)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            value, kind = getattr(obj, f.name), hints[f.name]
            if kind is int:
                assert isinstance(value, int) and not isinstance(value, bool), (f.name, value)
            elif kind is float:
                assert isinstance(value, float), (f.name, value)
            elif kind is bool:
                assert isinstance(value, bool), (f.name, value)
            elif kind is str:
                assert isinstance(value, str), (f.name, value)
            else:
                assert isinstance(value, list) and all(isinstance(v, str) for v in value), (f.name, value)


# No shrink phase: a failure is reported as found (shrinking a nested dict can take a minute); the minimal
# reproductions live in the deterministic tests of tests/test_config.py.
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(raw=raw_configs, overrides=st.none() | override_maps)
def test_fuzz_config_is_valid_or_a_user_error(raw: dict, overrides: dict | None) -> None:
    try:
        config = config_from_dict(raw, overrides=overrides)
    except UserError as error:
        assert str(error)
        return
    assert isinstance(config, Config)
    assert config.problems() == []
    assert_typed(config)
    assert isinstance(config.model, ModelConfig)
