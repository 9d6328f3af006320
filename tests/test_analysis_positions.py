"""Exact expected values for octlm/inspect/analysis.py's position side: `position_section` for each scheme, by hand, and
the tables a model yields (`tables_of`, `registered_tables`), written to kill its mutants (scripts/mutation,
docs/MUTANTS.md). Expected values are worked out by hand (cosines of chosen vectors, the sinusoidal table).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from test_analysis_exact import S, tiny

from octlm.inspect.analysis import MAP_POSITIONS, Tables, position_section, registered_tables, tables_of
from octlm.model.decoder import Decoder
from octlm.positions import PositionScheme


def test_tables_of_each_scheme() -> None:
    same = Tables(np.zeros((2, 2)), {})
    assert tables_of(same) is same
    learned = Decoder(tiny(sinusoidal_base=500.0))
    t = tables_of(learned)
    assert t.model == {"vocab_size": 11, "d_model": 8, "context_length": 6, "n_layers": 1, "n_heads": 2,
                       "position": "learned", "tie_embeddings": True}  # fmt: skip
    assert t.token_table.dtype == np.float64 and np.array_equal(t.token_table, learned.token_embedding.weight
                                                                  .detach().double().numpy())  # fmt: skip
    assert np.array_equal(t.position_table, learned.positions.table.weight.detach().double().numpy())
    assert t.sinusoidal_base == 500.0 and t.rope is None and t.scheme == {} and t.source is None
    rope = tables_of(Decoder(tiny(position="rope", rope_base=100.0, rope_layout="interleaved")))
    assert rope.position_table is None and rope.scheme == {}
    assert rope.rope["inv_freq"].tolist() == [1.0, 0.1]  # 100^(-0/4), 100^(-2/4), head_dim 4
    assert {k: v for k, v in rope.rope.items() if k != "inv_freq"} == {"head_dim": 4, "base": 100.0,
                                                                       "layout": "interleaved", "rotary_dims": 4}  # fmt: skip
    alibi = tables_of(Decoder(tiny(position="alibi")))
    assert alibi.scheme["slopes"].tolist() == [0.0625, 0.00390625] and alibi.rope is None  # 2^-4, 2^-8
    t5m = Decoder(tiny(position="t5", t5_buckets=8, t5_max_distance=20))
    t5 = tables_of(t5m)
    assert t5.scheme["buckets"] == 8 and t5.scheme["max_distance"] == 20
    assert np.array_equal(t5.scheme["bias"], t5m.positions.table.weight.detach().double().numpy())
    assert tables_of(Decoder(tiny(position="nope"))).scheme == {}


def tables(position: str, length: int = 8, width: int = 4, **kw) -> Tables:
    model = {"vocab_size": 6, "d_model": width, "context_length": length, "n_layers": 1, "n_heads": 2,
             "position": position, "tie_embeddings": True}  # fmt: skip
    return Tables(np.eye(6, width), model, **kw)


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


def test_sinusoidal_section_and_the_reference_of_an_odd_width() -> None:
    t = tables("sinusoidal", width=5, sinusoidal_base=100.0)
    got = position_section(t, t, k=2)
    want = cosines(sinusoid(8, 6, 100.0)[:, :5])  # width 5: the table of width 6, cut
    ref = got["sinusoidal_reference"]
    assert np.abs(ref["similarity"] - want).max() < 1e-6  # float32 table: measured 1e-7
    assert got["trained"] is ref
    assert list(got) == ["scheme", "context_length", "probe_positions", "distances", "sinusoidal_reference",
                         "has_vectors", "trained", "summary"]  # fmt: skip
    assert (got["scheme"], got["context_length"], got["has_vectors"]) == ("sinusoidal", 8, True)
    assert got["probe_positions"] == [0, 1, 4, 7] and got["distances"] == [1, 2, 4, 7]
    assert list(ref["neighbours"]) == [0, 1, 4, 7] and len(ref["neighbours"][0]) == 2
    assert ref["neighbours"][0][0][0] == int(np.argsort(-want[0], kind="stable")[1])
    assert ref["similarity_by_distance"][7] == pytest.approx(want[0, 7], abs=1e-6)
    assert got["summary"] == (
        "The fixed sinusoidal table (base 100): nothing here is learned, so the trained and untrained models "
        "have the same position vectors. Similarity depends only on the distance t - s."
    )


def test_learned_section_compares_trained_and_untrained_tables() -> None:
    rows = np.array([[1.0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])
    trained = tables("learned", length=4, position_table=rows)
    initial = tables("learned", length=4, position_table=np.eye(4))
    got = position_section(trained, initial, k=1)
    assert got["has_vectors"] and "map_positions" not in got
    assert got["trained"]["neighbours"] == {0: [(1, pytest.approx(S))], 1: [(0, pytest.approx(S))],
                                            2: [(1, pytest.approx(S))], 3: [(0, 0.0)]}  # fmt: skip
    assert np.abs(got["trained"]["similarity"] - cosines(rows)).max() < 1e-15
    assert got["untrained"]["similarity"].tolist() == np.eye(4).tolist()
    assert got["trained"]["similarity_by_distance"] == {1: pytest.approx(2 * S / 3), 2: 0.0, 3: 0.0}
    assert got["summary"] == (
        "A learned table of 4 rows, one vector per position, added to the token vectors. Its similarity map is "
        "compared with the untrained table (random: no structure) and with the fixed sinusoidal table of the "
        "same width."
    )


def test_maps_cover_at_most_map_positions() -> None:
    length = MAP_POSITIONS + 6
    rows = np.random.default_rng(0).normal(size=(length, 4))
    t = tables("learned", length=length, position_table=rows)
    got = position_section(t, t, k=1)
    assert got["map_positions"] == MAP_POSITIONS and got["context_length"] == length
    assert got["trained"]["similarity"].shape == (MAP_POSITIONS, MAP_POSITIONS)
    assert got["sinusoidal_reference"]["similarity"].shape == (MAP_POSITIONS, MAP_POSITIONS)
    assert got["probe_positions"] == [0, 1, 512, 1023] and got["distances"][-1] == 1023
    assert got["summary"].endswith(" Position x position maps cover the first 1,024 positions.")
    nope = position_section(tables("nope", length=length), tables("nope", length=length))
    assert nope["summary"].endswith("adds up to. Position x position maps cover the first 1,024 positions.")


def test_rope_section_by_hand() -> None:
    theta = np.array([1.0, 0.01, 1e-4])
    rope = {"inv_freq": theta, "head_dim": 6, "base": 10000.0, "layout": "half", "scaling": "yarn",
            "note": " (scaled)"}  # fmt: skip
    t = tables("rope", length=100, rope=rope)
    got = position_section(t, t)
    r = got["rope"]
    wavelength = [2 * math.pi, 200 * math.pi, 20000 * math.pi]
    assert list(r) == ["head_dim", "base", "layout", "theta", "wavelength", "turns_in_context",
                       "pairs_slower_than_context", "scaling"]  # fmt: skip
    assert (r["head_dim"], r["base"], r["layout"], r["scaling"]) == (6, 10000.0, "half", "yarn")
    assert r["theta"] is theta and np.abs(r["wavelength"] - wavelength).max() < 1e-9
    assert np.abs(r["turns_in_context"] - [100 / w for w in wavelength]).max() < 1e-12
    assert r["pairs_slower_than_context"] == 2 and not got["has_vectors"]
    assert got["summary"] == (
        "RoPE has no position vectors: every attention layer rotates each of the 3 channel pairs of a head's "
        "queries and keys by position x θ_i. The fastest pair turns once every 6.3 positions, the slowest once "
        "every 62,832; 2 of 3 pairs do not complete one turn within the 100-token context. Nothing here is "
        "learned (base 10000). (scaled)"
    )
    assert rope["note"] == " (scaled)" and "inv_freq" in rope  # the model's dict is left alone
    plain = position_section(
        tables("rope", length=100, rope={k: v for k, v in rope.items() if k != "note"}), t
    )
    assert plain["summary"].endswith("(base 10000).") and "note" not in plain["rope"]
    # θ = 2π/64 (exact: a power-of-two division) turns exactly once in 64 tokens: not slower than the context
    edge = tables("rope", length=64, rope={**rope, "inv_freq": np.array([1.0, 2 * math.pi / 64, 1e-4])})
    assert position_section(edge, edge)["rope"]["pairs_slower_than_context"] == 1


def test_alibi_section_by_hand() -> None:
    slopes = np.array([0.5, 0.25, 0.125])
    t = tables("alibi", scheme={"slopes": slopes})
    got = position_section(t, t)
    assert got["alibi"]["slopes"] is slopes
    assert {d: b.tolist() for d, b in got["alibi"]["bias_at_distance"].items()} == {
        1: [-0.5, -0.25, -0.125], 2: [-1.0, -0.5, -0.25], 4: [-2.0, -1.0, -0.5],
        7: [-3.5, -1.75, -0.875]}  # fmt: skip
    assert got["summary"] == (
        "ALiBi has no position vectors: each of the 3 heads subtracts slope x distance from every attention "
        "score. Slopes run from 0.5 to 0.125; nothing here is learned."
    )


def test_t5_section_by_hand() -> None:
    # 4 buckets, max distance 8: distances 0, 1 exact; 2-3 bucket 2; 4-7 bucket 3 (the last one, also past 8)
    bias = np.array([[0.1, -0.1], [0.2, -0.2], [0.3, -0.3], [0.4, -0.45]])
    t = tables("t5", length=10, scheme={"bias": bias, "buckets": 4, "max_distance": 8})
    initial = tables("t5", length=10, scheme={"bias": np.full((4, 2), 0.01), "buckets": 4, "max_distance": 8})
    got = position_section(t, initial)["t5"]
    assert got["bucket_of_distance"].tolist() == [0, 1, 2, 2, 3, 3, 3, 3, 3, 3]
    assert got["bucket_distances"] == {0: [0, 0], 1: [1, 1], 2: [2, 3], 3: [4, 9]}
    assert (got["buckets"], got["max_distance"]) == (4, 8)
    assert got["bias"] is bias and got["untrained_bias"] is initial.scheme["bias"]
    assert {d: b.tolist() for d, b in got["bias_at_distance"].items()} == {
        1: [0.2, -0.2], 2: [0.3, -0.3], 4: [0.4, -0.45], 8: [0.4, -0.45], 9: [0.4, -0.45]}  # fmt: skip
    assert position_section(t, initial)["summary"] == (
        "T5 has no position vectors: it learns one number per head (2) and distance bucket (4, 4 reached within "
        "10 tokens), added to the attention scores. Trained biases span -0.450 to 0.400; untrained ones 0.010 "
        "to 0.010."
    )


def test_nope_section() -> None:
    got = position_section(tables("nope"), tables("nope"))
    assert list(got) == ["scheme", "context_length", "probe_positions", "distances", "sinusoidal_reference",
                         "has_vectors", "summary"]  # fmt: skip
    assert got["summary"] == (
        "NoPE has no position parameters at all. The causal mask is its only source of order: a token sees how "
        "many tokens came before it only through what attention over them adds up to."
    )


# ------------------------------------------------------------------------------------------------------------
# Survivors of the mutmut run of issue 19: a registered scheme's section, its tables, a partial RoPE's note.


def test_registered_section_frequencies_by_hand() -> None:
    """Kills _registered_section 46/53 (dividing by θ = 0: a divide-by-zero warning on every `octlm inspect`),
    64-67 (turns = length·θ/2π), 72-75 (the "fastest" clause with some / no pair rotating), 111 (the join)."""
    theta = np.array([1.0, 0.25, 0.0])  # wavelengths 2π, 8π and ∞ (pair 2 never rotates)
    t = tables("xpos", length=8, scheme={"about": "About it.", "frequencies": theta})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 2π / 0 must not be computed: only θ > 0 is divided
        got = position_section(t, t)
    f = got["frequencies"]
    assert list(f) == ["theta", "wavelength", "turns_in_context"] and f["theta"] is theta
    assert f["wavelength"].tolist() == [2 * math.pi, 8 * math.pi, math.inf]
    assert np.abs(f["turns_in_context"] - [4 / math.pi, 1 / math.pi, 0.0]).max() < 1e-15  # 8·θ / 2π
    assert got["summary"] == (
        "xpos: About it. 2 of 3 channel pairs rotate; the fastest turns once every 6.3 positions."
    )
    still = tables("xpos", length=8, scheme={"about": "Still.", "frequencies": np.zeros(2)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        none = position_section(still, still)
    assert none["frequencies"]["wavelength"].tolist() == [math.inf, math.inf]
    assert none["summary"] == "xpos: Still. 0 of 2 channel pairs rotate."


def test_registered_section_bias_spans_by_hand() -> None:
    """Kills _registered_section 98 (`min() - 0.0` keeps a -0.0 minimum, printing "-0.000") and 105 (the
    untrained span printed as the trained one): the two spans differ, and the trained minimum is -0.0."""
    trained = np.array([[-0.0, 0.25, 0.5], [0.125, -0.0, 0.375]])  # [H, T]; its minimum is -0.0
    untrained = np.array([[-1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    t = tables("fire", length=3, scheme={"about": "A bias.", "bias": trained})
    initial = tables("fire", length=3, scheme={"about": "A bias.", "bias": untrained})
    got = position_section(t, initial)
    assert got["bias"]["trained"] is trained and got["bias"]["untrained"] is untrained
    assert {d: b.tolist() for d, b in got["bias"]["bias_at_distance"].items()} == {1: [0.25, -0.0],
                                                                                  2: [0.5, 0.375]}  # fmt: skip
    assert got["summary"] == (
        "fire: A bias. Bias against distance, seen from the last position: 0.000 to 0.500 trained, -1.000 to "
        "2.000 untrained."
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


def test_registered_tables_about_and_shows() -> None:
    """Kills registered_tables 14 (a scheme without a docstring gets "XXXX"), 15 (the first paragraph, not
    the whole docstring) and 18/19 (the "shows" key)."""
    model = Decoder(tiny(position="nope"))
    model.positions = _Undocumented()
    assert registered_tables(model) == {"shows": [], "about": ""}
    model.positions = _Documented()
    got = registered_tables(model)
    assert list(got) == ["shows", "about", "frequencies"]
    assert got["shows"] == ["frequencies"] and got["about"] == "A scheme for the test."
    assert got["frequencies"].tolist() == [1.0, 0.0]


def test_tables_of_partial_rope_says_which_dimensions_rotate() -> None:
    """Kills tables_of 36-41: the note of a RoPE rotating 4 of its 8 head dimensions (rope_fraction 0.5),
    its key and both counts (off-by-one and sign slips in "0 to rotary_dims - 1", "head_dim - rotary_dims")."""
    t = tables_of(Decoder(tiny(position="rope", d_model=16, rope_fraction=0.5)))
    assert t.rope["rotary_dims"] == 4 and t.rope["head_dim"] == 8
    assert t.rope["note"] == " Only dimensions 0 to 3 of each head's 8 rotate; the other 4 carry no position."
