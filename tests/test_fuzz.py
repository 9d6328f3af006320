"""Fuzzing with hypothesis: the tokenizer round trip, the config loader and the sampler, on arbitrary input.

Each property counts the examples it ran and prints the count (`pytest -s` shows it); the counts are also
checked, so a property that silently ran nothing fails. Properties either hold or raise a clear UserError;
any other exception is a bug. The extreme values that break them are pinned as plain tests at the bottom.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from octlm.config import Config, config_from_dict, load_config
from octlm.config.fields import field_types as _field_types
from octlm.config.load import SECTIONS
from octlm.data.sources import Document
from octlm.data.tokenizer import EOT, Tokenizer, train_tokenizer
from octlm.errors import UserError
from octlm.generation.generate import StreamDecoder
from octlm.generation.sampling import check_sampling, choose_tokens


def pick_token(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float,
               generator: torch.Generator | None) -> int:  # fmt: skip
    """One token id from `logits` `[V]`: `choose_tokens` on one row, read as an int."""
    return int(choose_tokens(logits, temperature, top_k, top_p, generator))


EXAMPLES = 400
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip


def report(name: str, count: int) -> None:
    print(f"\n[fuzz] {name}: {count} examples")
    assert count >= EXAMPLES // 2, f"{name} ran only {count} examples"


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer: decode(encode(text)) == text for any Unicode string


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    texts = ["def f(x):\n    return x * 2  # é€ 漢字 🙂\n", "The cat sat on the mat.\r\n\tTabs\u00a0and\u200bspaces",
             "Ünïcödé ß ǅ ﬁ İı ΣΑΣ Привет مرحبا שלום नमस्ते", "<|endoftext|> is plain text here"]  # fmt: skip
    docs = [Document(f"d{i}", text * (i + 2)) for i, text in enumerate(texts)]
    return train_tokenizer(docs, 320)


TRICKY = st.sampled_from([EOT, "<|", "|>", "endoftext", "\r\n", "\x00", "\ufeff", "\u0301", "e\u0301", "\U0001f600",
                          "\ud7ff", "\uffff", " ", "  ", "\t", "'s", "Ġ", "Ċ", "ÿ", "\u2028"])  # fmt: skip
ANY_TEXT = st.one_of(
    st.text(),
    st.text(st.characters(codec="utf-8"), max_size=200),
    st.lists(st.one_of(TRICKY, st.text(max_size=5)), max_size=12).map("".join),
)


def test_tokenizer_round_trips_any_unicode(tokenizer: Tokenizer) -> None:
    count = [0]

    @FUZZ
    @given(text=ANY_TEXT)
    @example(text="")
    @example(text=EOT + EOT)
    @example(text="a" * 5000)
    def prop(text: str) -> None:
        count[0] += 1
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text
        assert tokenizer.eot_id not in ids  # text can never fake a document boundary
        assert all(0 <= i < tokenizer.vocab_size for i in ids)
        assert b"".join(tokenizer.token_bytes(i) for i in ids) == text.encode("utf-8")
        stream = StreamDecoder(tokenizer)  # linear in the output, so every text, long ones included
        assert "".join(stream.push(i) for i in ids) + stream.flush() == text

    prop()
    report("tokenizer round trip", count[0])


# ---------------------------------------------------------------------------------------------------------------
# Config: a clear UserError or a valid config, never another exception

FIELDS = {section: _field_types(cls) for section, cls in SECTIONS.items()}
ALL_KEYS = sorted({key for table in FIELDS.values() for key in table})
CHOICES = ["learned", "rope", "alibi", "t5", "nope", "sinusoidal", "rmsnorm", "layernorm", "gelu", "swiglu",
           "half", "interleaved", "stdlib", "text", "hub", "cpu", "cuda", "auto", "cuda:1"]  # fmt: skip

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
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4),
                      inner, max_size=3), max_leaves=6)  # fmt: skip
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
# Sampling: settings that pass check_sampling always give a token that was allowed


def test_pick_token_on_random_logits_and_settings() -> None:
    count = [0]
    generator = torch.Generator().manual_seed(0)

    @FUZZ
    @given(
        logits=st.lists(
            st.one_of(st.floats(-1e4, 1e4, width=32), st.just(-math.inf)), min_size=1, max_size=40
        ),
        temperature=st.one_of(st.just(0.0), st.floats(1e-3, 1e3), st.floats(-10, 0, exclude_max=True)),
        top_k=st.one_of(st.none(), st.integers(-2, 50)),
        top_p=st.one_of(
            st.just(1.0), st.floats(1e-6, 1.0), st.floats(-1, 2).filter(lambda p: not 0 < p < 1e-6)
        ),
    )
    def prop(logits: list[float], temperature: float, top_k: int | None, top_p: float) -> None:
        count[0] += 1
        if all(x == -math.inf for x in logits):
            logits[0] = 0.0  # at least one token is allowed
        try:
            check_sampling(temperature, top_k, top_p, 1)
        except UserError:
            return
        token = pick_token(torch.tensor(logits), temperature, top_k, top_p, generator)
        assert 0 <= token < len(logits) and logits[token] != -math.inf

    prop()
    report("pick_token", count[0])


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


@pytest.mark.parametrize(
    ("temperature", "top_p"), [(1e-40, 1.0), (5e-324, 1.0), (1.0, 1e-300), (math.inf, 1.0)]
)
def test_extreme_sampling_settings_do_not_crash(temperature: float, top_p: float) -> None:
    """`--temperature 1e-40` overflows logits / T to inf (softmax NaN); top-p below float32's range drops every
    token; T = inf turns a masked -inf logit into NaN. Each must be refused or sampled, never a RuntimeError."""
    logits = torch.tensor([1.0, 2.0, 3.0, -math.inf])  # generate masks ids the tokenizer lacks with -inf
    try:
        check_sampling(temperature, None, top_p, 1)
    except UserError:
        return
    token = pick_token(logits, temperature, None, top_p, torch.Generator().manual_seed(0))
    assert token in (0, 1, 2)
