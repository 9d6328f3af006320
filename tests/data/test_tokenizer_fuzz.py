"""The tokenizer fuzzed with hypothesis (octlm/data/tokenizer.py): decode(encode(text)) == text for any Unicode
string, and streamed decoding gives the same text. The property counts the examples it ran and checks the count
(tests/fuzzing.py)."""

from __future__ import annotations

import pytest
from fuzzing import FUZZ, report
from hypothesis import example, given
from hypothesis import strategies as st

from octlm.data.sources import Document
from octlm.data.tokenizer import EOT, Tokenizer, train_tokenizer
from octlm.generation.generate import StreamDecoder

# ---------------------------------------------------------------------------------------------------------------
# Tokenizer: decode(encode(text)) == text for any Unicode string


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    texts = [
        "def f(x):\n    return x * 2  # é€ 漢字 🙂\n",
        "The cat sat on the mat.\r\n\tTabs\u00a0and\u200bspaces",
        "Ünïcödé ß ǅ ﬁ İı ΣΑΣ Привет مرحبا שלום नमस्ते",
        "<|endoftext|> is plain text here",
    ]
    docs = [Document(f"d{i}", text * (i + 2)) for i, text in enumerate(texts)]
    return train_tokenizer(docs, 320)


TRICKY = st.sampled_from(
    [
        EOT,
        "<|",
        "|>",
        "endoftext",
        "\r\n",
        "\x00",
        "\ufeff",
        "\u0301",
        "e\u0301",
        "\U0001f600",
        "\ud7ff",
        "\uffff",
        " ",
        "  ",
        "\t",
        "'s",
        "Ġ",
        "Ċ",
        "ÿ",
        "\u2028",
    ]
)
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
