"""Exact expected values for octlm/inspect/analysis.py: the token side (counts, unseen rows, labels, `analyze`,
`to_json`) and the position side (what a scheme shows, `shown`, `tables_of`, the sections a report gets),
worked out by hand on small tables, never from a second run of the same code."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.inspect.analysis import (
    MAP_POSITIONS,
    Tables,
    about,
    analyze,
    most_frequent,
    position_section,
    resolve_tokens,
    shown,
    tables_of,
    to_json,
    token_counts,
    token_label,
    unseen_rows,
)
from octlm.model.decoder import Decoder
from octlm.positions import SCHEMES, PositionScheme
from octlm.positions.formulas import alibi_slopes

S = 1 / math.sqrt(2)
# Six unit-ish rows whose cosines are known: row 1 is row 0 scaled, row 2 at 45°, row 3 orthogonal,
# row 4 opposite, row 5 zero (similarity 0 to everything).
TABLE = np.array([[1.0, 0.0], [2.0, 0.0], [1.0, 1.0], [0.0, 3.0], [-1.0, 0.0], [0.0, 0.0]])


# ------------------------------------------------------------------------------------------------------------
# The token side


def test_token_counts_in_chunks() -> None:
    stream = np.array([0, 2, 2, 4, 2, 0, 1], dtype=np.uint16)
    for chunk in (1, 2, 3, 7, 100):
        got = token_counts(stream, 6, chunk=chunk)
        assert got.dtype == np.int64 and got.tolist() == [2, 1, 3, 0, 1, 0]
    assert token_counts(np.array([5, 5], dtype=np.uint64), 6).tolist() == [0, 0, 0, 0, 0, 2]
    assert token_counts(np.array([], dtype=np.uint16), 3).tolist() == [0, 0, 0]


def test_token_counts_refuse_ids_outside_the_vocabulary() -> None:
    with pytest.raises(UserError, match="^the token stream holds id 6, outside the vocabulary of 6$"):
        token_counts(np.array([0, 1, 6, 2]), 6, chunk=2)
    with pytest.raises(UserError, match="^the token stream holds id -1, outside the vocabulary of 6$"):
        token_counts(np.array([3, -1]), 6)


def test_most_frequent_ranks_by_count_then_id_and_skips_unseen() -> None:
    counts = np.array([3, 0, 5, 3, 1, 0])
    assert most_frequent(counts, 10) == [2, 0, 3, 4]
    assert most_frequent(counts, 2) == [2, 0] and most_frequent(counts, 0) == []
    # 200 ids with counts 1-3: an unstable sort (numpy's default) mixes up the ids within a count
    many = np.random.default_rng(0).integers(1, 4, 200)
    assert most_frequent(many, 200) == [i for c in (3, 2, 1) for i in range(200) if many[i] == c]


def test_unseen_rows_by_hand() -> None:
    # Rows of norm below 1, as real ones are (0.02·√C): the 1e-12 floors must not touch them.
    initial = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]]) / 16
    trained = np.array([[3.0, 4.0], [0.0, 1.0], [0.0, 4.0]]) / 16  # unseen row 0 did not move
    got = unseen_rows(trained, initial, np.array([0, 5, 2]))
    assert got["init_std"] == 0.02 and got["expected_init_norm"] == pytest.approx(0.02 * math.sqrt(2))
    assert got["unseen"] == {
        "tokens": 1,
        "mean_norm": 5 / 16,
        "mean_initial_norm": 5 / 16,
        "mean_relative_change": 0.0,
        "mean_cosine_to_initial": 1.0,
    }
    # seen: row 1 moved √2 of 1 (cos 0), row 2 moved 2 of 2 (cos 1)
    seen = got["seen"]
    assert (seen["tokens"], seen["mean_norm"], seen["mean_initial_norm"]) == (2, 2.5 / 16, 1.5 / 16)
    assert seen["mean_relative_change"] == pytest.approx((math.sqrt(2) + 1) / 2, rel=0, abs=1e-15)
    assert seen["mean_cosine_to_initial"] == pytest.approx(0.5, rel=0, abs=1e-15)
    none = unseen_rows(trained, initial, np.array([1, 1, 1]))["unseen"]
    assert none == {
        "tokens": 0,
        "mean_norm": None,
        "mean_initial_norm": None,
        "mean_relative_change": None,
        "mean_cosine_to_initial": None,
    }
    zero = unseen_rows(np.zeros((1, 2)), np.zeros((1, 2)), np.array([0]))["unseen"]  # no 0 / 0
    assert zero["mean_relative_change"] == 0.0 and zero["mean_cosine_to_initial"] == 0.0


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=16, context_length=6)
    return ModelConfig(**{**base, **kw})


class Tok:
    """What the report reads of a tokenizer: each token's bytes, encoding a text, the vocabulary size."""

    vocab_size = 5
    pieces = [b"a", b" def", b"\xc3", b"\n ", b"ab"]

    def token_bytes(self, i: int) -> bytes:
        return self.pieces[i]

    def encode(self, text: str) -> list[int]:
        return {"a": [0], " def": [1], "ab": [4], "aa": [0, 0], "": []}[text]


def test_token_labels() -> None:
    assert [token_label(Tok(), i) for i in range(5)] == ["'a'", "' def'", "b'\\xc3'", "'\\n '", "'ab'"]
    assert token_label(Tok(), 5) == "<id 5>" and token_label(None, 0) == "<id 0>"


def test_resolve_tokens() -> None:
    assert resolve_tokens(Tok(), [" def", "a", "ab"]) == [1, 0, 4]
    assert resolve_tokens(None, []) == []
    with pytest.raises(
        UserError,
        match="^--tokens needs the model's tokenizer, and there is none; name the tokens with --ids$",
    ):
        resolve_tokens(None, ["a"])
    with pytest.raises(
        UserError,
        match=r"^--tokens 'aa' is not a single token: it encodes to 2 tokens: 'a' "
        r"\(id 0\), 'a' \(id 0\); pass one of those, or use --ids$",
    ):
        resolve_tokens(Tok(), ["a", "aa"])
    with pytest.raises(
        UserError, match="^--tokens '' is not a single token: it encodes to 0 tokens: nothing;"
    ):
        resolve_tokens(Tok(), [""])


def table_tables(token_table: np.ndarray, source: dict | None = None) -> Tables:
    model = {
        "vocab_size": len(token_table),
        "d_model": 2,
        "context_length": 4,
        "n_layers": 1,
        "n_heads": 1,
        "position": "nope",
        "tie_embeddings": True,
    }
    return Tables(token_table, model, {"shows": [], "about": "None."}, source=source)


def test_analyze_with_counts() -> None:
    trained, initial = table_tables(TABLE, source={"hf": "x"}), table_tables(np.eye(6, 2) + 1)
    counts = np.array([0, 4, 9, 4, 1, 0])
    r = analyze(trained, initial, Tok(), counts, k=2, frequent=2, run="r1", notes=["n"])
    assert list(r) == [
        "schema",
        "run",
        "model",
        "source",
        "counts_available",
        "counts",
        "tokens",
        "k",
        "trained",
        "untrained",
        "positions",
        "notes",
        "labels",
        "unseen",
    ]
    assert (r["schema"], r["run"], r["source"], r["counts_available"], r["k"]) == (
        1,
        "r1",
        {"hf": "x"},
        True,
        2,
    )
    assert r["model"] == trained.model and r["model"] is not trained.model and r["counts"] is counts
    assert r["tokens"] == [0, 2, 1] and r["notes"] == ["n"]  # token 0, then the 2 most frequent
    view = r["trained"]
    assert view["neighbours"] == {
        0: [(1, pytest.approx(1.0)), (2, pytest.approx(S))],
        2: [(0, pytest.approx(S)), (1, pytest.approx(S))],
        1: [(0, pytest.approx(1.0)), (2, pytest.approx(S))],
    }
    assert view["mean_top1_similarity"] == pytest.approx((1 + S + 1) / 3)
    assert view["pca"]["ids"] == [2, 1, 3, 4] and view["pca"]["coords"].shape == (4, 2)
    assert list(view["pca"]) == ["ids", "coords", "explained"]
    assert view["pca"]["explained"].sum() == pytest.approx(1.0, abs=1e-15)  # 2-D rows: two components are all
    assert [len(nb) for nb in r["positions"]["sinusoidal_reference"]["neighbours"].values()] == [2] * 4  # k
    assert view["norms"].tolist() == [1.0, 2.0, math.sqrt(2), 3.0, 1.0, 0.0]
    assert r["untrained"]["norms"].tolist() == pytest.approx([math.sqrt(5)] * 2 + [math.sqrt(2)] * 4)
    assert r["labels"] == {0: "'a'", 1: "' def'", 2: "b'\\xc3'", 3: "'\\n '", 4: "'ab'"}  # no neighbour is 5
    assert r["unseen"]["unseen"]["tokens"] == 2 and r["unseen"]["seen"]["tokens"] == 4
    assert r["positions"]["scheme"] == "nope"


def test_analyze_without_counts_ranks_by_id() -> None:
    t = table_tables(TABLE)
    r = analyze(t, t, None, None, k=0, frequent=3)
    assert r["run"] == ""
    assert r["tokens"] == [0, 1, 2, 3] and r["k"] == 0 and "unseen" not in r and "source" not in r
    assert r["notes"] == ["Tokens are ranked by id, not by training frequency: there are no training counts."]
    assert r["trained"]["mean_top1_similarity"] is None
    assert r["trained"]["pca"]["ids"] == [1, 2, 3, 4, 5, 0]
    assert r["labels"] == {i: f"<id {i}>" for i in range(6)}
    assert r["counts_available"] is False and r["counts"] is None
    r = analyze(t, t, None, None, ids=[3, 3, 5, 3])
    assert r["tokens"] == [3, 5] and r["k"] == 5 and len(r["trained"]["neighbours"][3]) == 5
    assert analyze(t, t, None, None, k=1)["tokens"] == [0, *range(1, 6)]  # frequent: 12 by default


@pytest.mark.parametrize("bad", [6, -1])
def test_analyze_refuses_a_token_outside_the_vocabulary(bad: int) -> None:
    t = table_tables(TABLE)
    with pytest.raises(UserError, match=rf"^token id {bad} is outside the vocabulary \[0, 6\)$"):
        analyze(t, t, None, None, ids=[0, bad])
    analyze(t, t, None, None, ids=[0, 5])


def test_analyze_takes_decoders() -> None:
    torch.manual_seed(0)
    m = Decoder(tiny())
    r = analyze(m, m, None, np.ones(11, dtype=np.int64), k=1, frequent=1)
    assert r["model"]["position"] == "learned" and r["tokens"] == [0]
    assert r["positions"]["trained"]["similarity"].shape == (6, 6)


def test_to_json_rounds_to_five_decimals() -> None:
    assert to_json({"a": np.array([1.234567, 2.0]), "b": 0.1234549}) == {"a": [1.23457, 2.0], "b": 0.12345}
    assert to_json(1.234567, 2) == 1.23


# ------------------------------------------------------------------------------------------------------------
# The id a refused token stream names


def test_token_counts_name_the_too_large_id_beside_id_0() -> None:
    """Kills token_counts mutants 26/27 (`min() <= 0`, `< 1`): a chunk holding id 0 and a too-large id must
    name the too-large one, not 0 (an off-by-one in "is the offender the negative one?")."""
    with pytest.raises(UserError, match="^the token stream holds id 6, outside the vocabulary of 6$"):
        token_counts(np.array([0, 6]), 6)


# ------------------------------------------------------------------------------------------------------------
# The position side: what a scheme shows, read through it


def test_tables_of_a_decoder_reads_what_its_scheme_shows() -> None:
    same = Tables(np.zeros((2, 2)), {})
    assert tables_of(same) is same
    learned = Decoder(tiny(sinusoidal_base=500.0))
    t = tables_of(learned)
    assert t.model == {
        "vocab_size": 11,
        "d_model": 8,
        "context_length": 6,
        "n_layers": 1,
        "n_heads": 2,
        "position": "learned",
        "tie_embeddings": True,
    }
    assert t.token_table.dtype == np.float64 and np.array_equal(
        t.token_table, learned.token_embedding.weight.detach().double().numpy()
    )
    assert t.sinusoidal_base == 500.0 and t.source is None
    assert list(t.positions) == ["shows", "about", "vectors"] and t.positions["shows"] == ["vectors"]
    assert (
        t.positions["about"]
        == "A learned table with one row per position (GPT-2). It has no row past its last one."
    )
    assert t.positions["vectors"].dtype == np.float64
    assert np.array_equal(t.positions["vectors"], learned.positions.table.weight.detach().double().numpy())
    rope = tables_of(Decoder(tiny(position="rope", rope_base=100.0, rope_layout="interleaved"))).positions
    assert list(rope) == ["shows", "about", "frequencies", "head_dim"]
    assert rope["frequencies"].tolist() == [1.0, 0.1] and rope["head_dim"] == 4  # 100^(-0/4), 100^(-2/4)
    alibi = tables_of(Decoder(tiny(position="alibi"))).positions
    # the bias a query at position 5 adds to the key d back: -slope · d, slopes 2^-4 and 2^-8 for 2 heads
    assert alibi["bias"].tolist() == [[-d / 16 for d in range(6)], [-d / 256 for d in range(6)]]
    t5m = Decoder(tiny(position="t5", t5_buckets=8, t5_max_distance=20))
    table = (
        t5m.positions.table.weight.detach().double().numpy()
    )  # [buckets, H]; distances 0-3 have a bucket each
    assert np.array_equal(tables_of(t5m).positions["bias"][:, :4], table[:4].T)
    assert tables_of(Decoder(tiny(position="nope"))).positions == {
        "shows": [],
        "about": about(SCHEMES["nope"]),
    }


def tables(position: str, length: int = 8, width: int = 4, about: str = "About it.", **shows) -> Tables:
    """A model description and what its scheme shows (`vectors`, `frequencies` + `head_dim`, `bias`)."""
    model = {
        "vocab_size": 6,
        "d_model": width,
        "context_length": length,
        "n_layers": 1,
        "n_heads": 2,
        "position": position,
        "tie_embeddings": True,
    }
    kinds = [kind for kind in ("vectors", "frequencies", "bias") if kind in shows]
    return Tables(np.eye(6, width), model, {"shows": kinds, "about": about, **shows})


def sinusoid(length: int, width: int, base: float = 10000.0) -> np.ndarray:
    """[T, width] by hand: column 2i is sin(t / base^(2i / width)), column 2i + 1 its cos."""
    out = np.zeros((length, width))
    for t in range(length):
        for i in range(width // 2):
            out[t, 2 * i] = math.sin(t / base ** (2 * i / width))
            out[t, 2 * i + 1] = math.cos(t / base ** (2 * i / width))
    return out


def cosines(x: np.ndarray) -> np.ndarray:
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    return unit @ unit.T


def test_the_sinusoidal_reference_of_an_odd_width_and_fixed_vectors() -> None:
    vectors = sinusoid(8, 6, 100.0)[:, :5]
    t = tables("sinusoidal", width=5, vectors=vectors)
    t.sinusoidal_base = 100.0
    got = position_section(t, t, k=2)
    want = cosines(sinusoid(8, 6, 100.0)[:, :5])  # width 5: the table of width 6, cut
    ref = got["sinusoidal_reference"]
    assert np.abs(ref["similarity"] - want).max() < 1e-6  # float32 table: measured 1e-7
    assert list(got) == [
        "scheme",
        "context_length",
        "probe_positions",
        "distances",
        "shows",
        "sinusoidal_reference",
        "has_vectors",
        "trained",
        "summary",
    ]
    assert (got["scheme"], got["context_length"], got["has_vectors"], got["shows"]) == (
        "sinusoidal",
        8,
        True,
        ["vectors"],
    )
    assert got["probe_positions"] == [0, 1, 4, 7] and got["distances"] == [1, 2, 4, 7]
    assert list(ref["neighbours"]) == [0, 1, 4, 7] and len(ref["neighbours"][0]) == 2
    assert ref["neighbours"][0][0][0] == int(np.argsort(-want[0], kind="stable")[1])
    assert ref["similarity_by_distance"][7] == pytest.approx(want[0, 7], abs=1e-6)
    assert np.abs(got["trained"]["similarity"] - want).max() < 1e-12
    assert got["summary"] == ("About it. Its 8 position vectors are fixed: training does not change them.")


def test_vectors_training_changed_are_compared_with_the_untrained_ones() -> None:
    rows = np.array([[1.0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])
    trained = tables("learned", length=4, vectors=rows)
    initial = tables("learned", length=4, vectors=np.eye(4))
    got = position_section(trained, initial, k=1)
    assert (
        got["has_vectors"] and "map_positions" not in got and "frequencies" not in got and "bias" not in got
    )
    assert got["trained"]["neighbours"] == {
        0: [(1, pytest.approx(S))],
        1: [(0, pytest.approx(S))],
        2: [(1, pytest.approx(S))],
        3: [(0, 0.0)],
    }
    assert np.abs(got["trained"]["similarity"] - cosines(rows)).max() < 1e-15
    assert got["untrained"]["similarity"].tolist() == np.eye(4).tolist()
    assert got["trained"]["similarity_by_distance"] == {1: pytest.approx(2 * S / 3), 2: 0.0, 3: 0.0}
    assert got["summary"] == "About it. Its 4 position vectors are compared with the untrained ones."


def test_maps_cover_at_most_map_positions() -> None:
    length = MAP_POSITIONS + 6
    rows = np.random.default_rng(0).normal(size=(MAP_POSITIONS, 4))
    t = tables("learned", length=length, vectors=rows)
    got = position_section(t, t, k=1)
    assert got["map_positions"] == MAP_POSITIONS and got["context_length"] == length
    assert got["trained"]["similarity"].shape == (MAP_POSITIONS, MAP_POSITIONS)
    assert got["sinusoidal_reference"]["similarity"].shape == (MAP_POSITIONS, MAP_POSITIONS)
    assert got["probe_positions"] == [0, 1, 512, 1023] and got["distances"][-1] == 1023
    assert got["summary"].endswith(
        "fixed: training does not change them. Position x position maps cover the first 1,024 positions."
    )
    nope = position_section(tables("nope", length=length), tables("nope", length=length))
    anonymous = tables("plain-test", about="")
    assert (
        position_section(anonymous, anonymous)["summary"]
        == "plain-test. It has no position parameters to show; attention by distance shows what it does."
    )
    assert nope["summary"] == (
        "About it. It has no position parameters to show; attention by distance shows what it does. Position x "
        "position maps cover the first 1,024 positions."
    )


def test_frequencies_by_hand() -> None:
    """θ = 1, 0.01, 1e-4 and a pair that never turns: wavelengths 2π, 200π, 20000π and none; within 100 tokens
    the fastest turns 15.9 times, and two do not complete one turn."""
    theta = np.array([1.0, 0.01, 1e-4, 0.0])
    t = tables("rope", length=100, frequencies=theta, head_dim=8, note=" (scaled)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 2π / 0 must not be computed: only θ > 0 is divided
        got = position_section(t, t)
    f = got["frequencies"]
    assert list(f) == ["theta", "wavelength", "turns_in_context"] and f["theta"] is theta
    assert f["wavelength"].tolist()[:3] == pytest.approx(
        [2 * math.pi, 200 * math.pi, 20000 * math.pi], rel=1e-15
    )
    assert f["wavelength"][3] == math.inf
    assert (
        np.abs(
            f["turns_in_context"] - [100 / (2 * math.pi), 1 / (2 * math.pi), 0.01 / (2 * math.pi), 0.0]
        ).max()
        < 1e-15
    )
    assert not got["has_vectors"] and "trained" not in got and "bias" not in got
    assert got["summary"] == (
        "About it. 3 of its 4 channel pairs rotate: the fastest turns once every 6.3 positions, the "
        "slowest once every 62,832; 2 do not complete one turn within the 100-token context. (scaled)"
    )


def test_frequencies_of_part_of_each_head_and_of_none() -> None:
    """A RoPE on 4 of a head's 8 channels says which carry no position; θ = 2π/64 turns exactly once in 64
    tokens, so it is not slower than the context; with no pair turning there is no fastest or slowest."""
    theta = np.array([1.0, 2 * math.pi / 64])  # a power-of-two division: exact
    got = position_section(t := tables("rope", length=64, frequencies=theta, head_dim=8), t)
    assert got["summary"] == (
        "About it. 2 of its 2 channel pairs rotate: the fastest turns once every 6.3 positions, the slowest "
        "once every 64; 0 do not complete one turn within the 64-token context. Only 4 of each head's 8 channels "
        "rotate; the other 4 carry no position."
    )
    whole = position_section(t := tables("rope", length=64, frequencies=theta, head_dim=4), t)
    assert whole["summary"].endswith("within the 64-token context.")
    still = tables("p-rope", length=8, frequencies=np.zeros(2), head_dim=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        none = position_section(still, still)
    assert none["frequencies"]["wavelength"].tolist() == [math.inf, math.inf]
    assert none["summary"] == "About it. 0 of its 2 channel pairs rotate."


def test_frequencies_say_which_channels_rotate_past_two_thirds() -> None:
    """Two pairs of a 6-channel head: 4 of 6 rotate, said; the check is 2 x pairs < head size, not 3 x."""
    got = position_section(t := tables("rope", length=8, frequencies=np.array([1.0, 0.5]), head_dim=6), t)
    assert got["summary"].endswith("Only 4 of each head's 6 channels rotate; the other 2 carry no position.")


def test_the_untrained_bias_span_prints_no_negative_zero() -> None:
    """An untrained minimum or maximum of -0.0 prints as 0.000, like the trained one's."""
    trained = np.array([[1.0, 2.0]])
    for untrained, span in (
        (np.array([[-0.0, 0.5]]), "0.000 to 0.500"),
        (np.array([[-0.5, -0.0]]), "-0.500 to 0.000"),
    ):
        got = position_section(tables("t5", length=2, bias=trained), tables("t5", length=2, bias=untrained))
        assert got["summary"].endswith(f"1.000 to 2.000 trained, {span} untrained."), got["summary"]


def test_bias_by_hand_trained_beside_untrained() -> None:
    """The spans differ, and the trained minimum is -0.0, printed as 0.000 (not -0.000)."""
    trained = np.array([[-0.0, 0.25, 0.5], [0.125, -0.0, 0.375]])  # [H, T]; its minimum is -0.0
    untrained = np.array([[-1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    got = position_section(tables("fire", length=3, bias=trained), tables("fire", length=3, bias=untrained))
    assert got["bias"]["trained"] is trained and got["bias"]["untrained"] is untrained
    assert {d: b.tolist() for d, b in got["bias"]["bias_at_distance"].items()} == {
        1: [0.25, -0.0],
        2: [0.5, 0.375],
    }
    assert got["summary"] == (
        "About it. Bias against distance, seen from the last position: 0.000 to 0.500 trained, -1.000 to "
        "2.000 untrained."
    )


def test_a_fixed_bias_is_shown_once() -> None:
    """ALiBi's bias is the same before and after training: said to be fixed, with no untrained copy."""
    bias = -np.outer(alibi_slopes(3).double().numpy(), np.arange(8))  # [H, T]: slopes 1/2^(8/3·(h+1))
    got = position_section(tables("alibi", bias=bias), tables("alibi", bias=bias.copy()))
    assert list(got["bias"]) == ["trained", "bias_at_distance"]
    assert got["bias"]["bias_at_distance"][4].tolist() == pytest.approx((-4 * alibi_slopes(3)).tolist())
    assert got["summary"] == (
        f"About it. Bias against distance, seen from the last position: {bias.min():.3f} to 0.000, fixed "
        "(training does not change it)."
    )


class _Undocumented(PositionScheme):
    shows = ()  # no docstring on purpose: its `__doc__` is None


class _Documented(PositionScheme):
    """A scheme   for the
    test.

    Not this paragraph."""

    shows = ("frequencies",)

    def frequencies(self) -> torch.Tensor:
        return torch.tensor([1.0, 0.0], dtype=torch.float64)


def test_shown_says_what_and_reads_it_through_the_scheme() -> None:
    """A scheme without a docstring says nothing about itself; otherwise its first paragraph, on one line."""
    model = Decoder(tiny(position="nope"))
    model.positions = _Undocumented()
    assert shown(model) == {"shows": [], "about": ""}
    model.positions = _Documented()
    got = shown(model)
    assert list(got) == ["shows", "about", "frequencies", "head_dim"]
    assert got["shows"] == ["frequencies"] and got["about"] == "A scheme for the test."
    assert got["frequencies"].tolist() == [1.0, 0.0] and got["head_dim"] == 4
