"""Fuzzed configs (hypothesis): anything TOML-shaped, as a dict with or without overrides or as a file, gives a
valid, fully typed Config or a clear UserError, never another exception. The properties count the examples they
ran and check the count (tests/fuzzing.py); the extreme values that broke them are pinned as plain tests at the
bottom. The deterministic config tests are in tests/config/test_load.py and its neighbours."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
from configs import SECTION_CLASSES
from fuzzing import FUZZ, report
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from octlm.config import Config, ModelConfig, config_from_dict, load_config
from octlm.config.fields import field_types as _field_types
from octlm.config.load import SECTIONS
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
# reproductions live in the deterministic tests of tests/config/.
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


# ---------------------------------------------------------------------------------------------------------------
# Config: a clear UserError or a valid config, never another exception

FIELDS = {section: _field_types(cls) for section, cls in SECTIONS.items()}
ALL_KEYS = sorted({key for table in FIELDS.values() for key in table})
CHOICES = [
    "learned",
    "rope",
    "alibi",
    "t5",
    "nope",
    "sinusoidal",
    "rmsnorm",
    "layernorm",
    "gelu",
    "swiglu",
    "half",
    "interleaved",
    "stdlib",
    "text",
    "hub",
    "cpu",
    "cuda",
    "auto",
    "cuda:1",
]

SCALARS = st.one_of(
    st.booleans(),
    st.integers(-3, 300),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1),
    st.text(max_size=10),
    st.sampled_from(CHOICES),
    st.sampled_from(["1", "0", "true", "no", "1e-3", "1_000", "nan", "inf", "-5", " 7 ", "0x10"]),
    st.datetimes(),
    st.dates(),
    st.times(),
    st.none(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
KEYS = st.one_of(st.sampled_from(ALL_KEYS), st.text(max_size=8))
SECTION_NAMES = st.one_of(st.sampled_from(list(SECTIONS)), st.text(max_size=6))
TABLES = st.one_of(st.dictionaries(KEYS, VALUES, max_size=6), VALUES)
RAW = st.one_of(st.dictionaries(SECTION_NAMES, TABLES, max_size=4), VALUES)
OVERRIDES = st.dictionaries(
    st.one_of(st.builds(lambda s, k: f"{s}.{k}", SECTION_NAMES, KEYS), st.text(max_size=10)),
    st.one_of(st.text(max_size=8), st.sampled_from(CHOICES), st.integers(-2, 99).map(str)),
    max_size=4,
)


def check_outcome(build: Any) -> Config | None:
    """Run `build()`: it must give a valid config or raise UserError; anything else propagates."""
    try:
        config = build()
    except UserError as error:
        assert str(error)
        return None
    assert isinstance(config, Config) and config.problems() == []
    assert len(config.hash()) == 64  # a valid config is one a checkpoint can record
    return config


def test_config_from_dict_on_random_tables() -> None:
    count, valid = [0], [0]

    @FUZZ
    @given(raw=RAW, overrides=st.one_of(st.none(), OVERRIDES))
    @example(raw={"model": {"d_model": 32, "n_heads": 2}}, overrides={"train.steps": "5"})
    @example(raw={}, overrides=None)
    @example(raw=[], overrides=None)
    def prop(raw: Any, overrides: dict[str, Any] | None) -> None:
        count[0] += 1
        valid[0] += check_outcome(lambda: config_from_dict(raw, name="fuzz", overrides=overrides)) is not None

    prop()
    print(f"\n[fuzz] config_from_dict: {valid[0]} of {count[0]} examples gave a valid config")
    report("config_from_dict", count[0])


FRAGMENTS = st.sampled_from(
    [
        "[model]",
        "[data]",
        "[train]",
        "[other]",
        "[[model]]",
        "d_model = 32",
        "n_heads = 3",
        "position = 'rope'",
        "steps = 0",
        'text = ["a", "b"]',
        "lr = nan",
        "lr = -inf",
        "bias = yes",
        "x = [",
        "y = {",
        "z = '''",
        "vocab_size = 1_024",
        "model.d_model = 64",
        "a.b.c = 1",
        "= 1",
        "date = 1979-05-27T07:32:00Z",
        "#",
        "",
    ]
)
TOML_ISH = st.one_of(
    st.text(), st.lists(st.one_of(FRAGMENTS, st.text(max_size=12)), max_size=10).map("\n".join)
)


def test_load_config_on_random_files(tmp_path: Path) -> None:
    count = [0]
    path = tmp_path / "fuzz.toml"

    @FUZZ
    @given(
        content=st.one_of(TOML_ISH.map(lambda s: s.encode("utf-8", "surrogatepass")), st.binary(max_size=64))
    )
    @example(content=b"[model]\nd_model = 30\nn_heads = 4\n")
    @example(content=b"\xff\xfe[model]")
    def prop(content: bytes) -> None:
        count[0] += 1
        path.write_bytes(content)
        check_outcome(lambda: load_config(path))

    prop()
    report("load_config", count[0])


# ---------------------------------------------------------------------------------------------------------------
# Extreme values found by fuzzing, pinned (each is a product bug until fixed; see the reliability report)


def test_deeply_nested_toml_is_a_user_error(tmp_path: Path) -> None:
    """tomllib recurses per nesting level: 3,000 `[` raise RecursionError, which must become a UserError."""
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 3000 + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="deep.toml"):
        load_config(path)


def test_non_finite_numbers_are_refused() -> None:
    """`--set train.lr=inf` or `rope_base = nan` in TOML is a typo, not a setting: a valid config is finite."""
    accepted = []
    for key in (
        "model.rope_base",
        "model.sinusoidal_base",
        "model.norm_eps",
        "train.lr",
        "train.weight_decay",
        "train.grad_clip",
        "train.beta1",
        "model.dropout",
        "data.val_fraction",
    ):
        for value in ("nan", "inf"):
            overrides = {key: value, **({"train.min_lr": "0"} if key == "train.lr" else {})}
            try:
                config_from_dict({}, overrides=overrides)
                accepted.append(f"{key}={value}")
            except UserError as error:
                assert key in str(error)
    assert not accepted, f"accepted as valid: {', '.join(accepted)}"


@pytest.mark.parametrize("raw", [{"model": {"d_\nmodel": 1}}, {"mo\ndel": {}}], ids=["key", "section"])
def test_config_errors_are_one_line(raw: dict[str, Any]) -> None:
    """A quoted TOML key may hold a newline; the error must still be one line (names printed with repr)."""
    with pytest.raises(UserError) as info:
        config_from_dict(raw)
    assert "\n" not in str(info.value)
