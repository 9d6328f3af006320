"""Exact expected values for octlm/analysis.py, written to kill its mutants (scripts/mutation, docs/MUTANTS.md).

Expected values are worked out by hand on small tables (cosines of chosen vectors, principal components of
data built from known orthogonal directions, counts), never from a second run of the same code.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from octlm.analysis import (
    MAP_POSITIONS,
    Tables,
    analyze,
    most_frequent,
    nearest_positions,
    nearest_tokens,
    pca_2d,
    position_section,
    probe_distances,
    probe_positions,
    registered_tables,
    resolve_tokens,
    row_norms,
    similarity_by_distance,
    similarity_matrix,
    tables_of,
    to_json,
    token_counts,
    token_label,
    unseen_rows,
)
from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.model import Decoder
from octlm.positions import PositionScheme
from octlm.similarity import cosine_neighbours, partner_hits

S = 1 / math.sqrt(2)
# Six unit-ish rows whose cosines are known: row 1 is row 0 scaled, row 2 at 45°, row 3 orthogonal,
# row 4 opposite, row 5 zero (similarity 0 to everything).
TABLE = np.array([[1.0, 0.0], [2.0, 0.0], [1.0, 1.0], [0.0, 3.0], [-1.0, 0.0], [0.0, 0.0]])


def test_cosine_neighbours_by_hand() -> None:
    got = cosine_neighbours(TABLE, [0, 3], 6)
    assert got[0] == [(1, pytest.approx(1.0)), (2, pytest.approx(S)), (3, 0.0), (5, 0.0), (4, -1.0)]
    assert got[1] == [(2, pytest.approx(S)), (0, 0.0), (1, 0.0), (4, 0.0), (5, 0.0)]  # ties: lower id first
    assert cosine_neighbours(torch.tensor(TABLE), [4], 2) == [[(3, 0.0), (5, 0.0)]]
    assert cosine_neighbours(TABLE, [0], 0) == [[]] and cosine_neighbours(TABLE, [0], -3) == [[]]
    assert cosine_neighbours(TABLE, [5], 1) == [[(0, 0.0)]]
    assert isinstance(got[0][0][0], int) and isinstance(got[0][0][1], float)


@pytest.mark.parametrize("row", [6, -1])
def test_cosine_neighbours_refuses_a_row_outside_the_table(row: int) -> None:
    with pytest.raises(UserError, match=rf"^row {row} is outside the table's 6 rows$"):
        cosine_neighbours(TABLE, [0, row], 1)


def test_cosine_neighbours_keep_float64_precision() -> None:
    # cos = 3 / √10 exactly in float64; float32 arithmetic is off by 3e-8
    table = np.array([[1.0, 0.0], [3.0, 1.0]], dtype=np.float32)
    assert cosine_neighbours(table, [0], 1)[0][0][1] == pytest.approx(3 / math.sqrt(10), abs=1e-15)


def test_nearest_tokens_and_positions_default_to_five() -> None:
    assert [j for j, _ in nearest_tokens(TABLE, [0])[0]] == [1, 2, 3, 5, 4]
    assert [j for j, _ in nearest_positions(TABLE, [3])[0]] == [2, 0, 1, 4, 5]
    assert len(nearest_tokens(TABLE, [0], 2)[0]) == len(nearest_positions(TABLE, [0], 2)[0]) == 2


def test_partner_hits_counts_nearest_partners() -> None:
    # 0's nearest is 1, 1's is 0, 2's is 0 (cos 1/√2, the lower id of the tie with 1), 3's is 2.
    assert partner_hits(TABLE, {0: 1, 1: 0, 2: 1, 3: 2}) == 3
    assert partner_hits(TABLE, {2: 0}) == 1 and partner_hits(TABLE, {4: 0}) == 0


def test_similarity_matrix_and_mean_by_distance() -> None:
    sim = similarity_matrix(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]]))
    want = np.array([[1, S, 0], [S, 1, S], [0, S, 1]])
    assert sim.dtype == np.float64 and np.abs(sim - want).max() < 1e-15
    by = similarity_by_distance(want, [0, 1, 2, 3, -1])
    assert list(by) == [0, 1, 2] and by[0] == 1.0 and by[1] == pytest.approx(S, abs=1e-15) and by[2] == 0.0


def test_pca_finds_known_orthogonal_directions() -> None:
    """Data = mean + a·u + b·v + c·w with u, v, w orthonormal and a, b, c uncorrelated: the components are u
    and v, coordinates a and b, and each explains its share of Σa² + Σb² + Σc² = 8 + 2 + 1."""
    u = np.array([0.6, -0.8, 0.0])  # largest loading -0.8: flipped to (-0.6, 0.8)
    v = np.array([0.0, 0.0, 1.0])
    w = np.array([0.8, 0.6, 0.0])
    a, b, c = np.array([2, -2, 0, 0.0]), np.array([0, 0, 1, -1.0]), np.array([0.5, 0.5, -0.5, -0.5])
    rows = np.array([5.0, -1.0, 2.0]) + np.outer(a, u) + np.outer(b, v) + np.outer(c, w)
    coords, explained = pca_2d(rows)
    assert np.abs(coords - np.stack([-a, b], 1)).max() < 1e-12
    assert np.abs(explained - [8 / 11, 2 / 11]).max() < 1e-15
    # rows as small as real embeddings (total variance 11/256 < 1): the floor of the division must not touch them
    coords, explained = pca_2d(rows / 16)
    assert np.abs(explained - [8 / 11, 2 / 11]).max() < 1e-15
    coords, explained = pca_2d(torch.tensor(rows, dtype=torch.float32))  # tensors, any dtype
    assert np.abs(coords - np.stack([-a, b], 1)).max() < 1e-6  # float32 input: measured 2e-7


def test_pca_of_one_column_or_one_row_pads_with_zeros() -> None:
    coords, explained = pca_2d(np.array([[1.0], [3.0], [5.0]]))
    assert coords.tolist() == [[-2.0, 0.0], [0.0, 0.0], [2.0, 0.0]] and explained.tolist() == [1.0, 0.0]
    coords, explained = pca_2d(np.array([[1.0, 2.0, 3.0]]))
    assert coords.tolist() == [[0.0, 0.0]] and explained.tolist() == [0.0, 0.0]


def test_row_norms() -> None:
    got = row_norms(np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 1.0]], dtype=np.float32))
    assert got.dtype == np.float64 and got.tolist() == [5.0, 0.0, math.sqrt(2)]


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


def test_probe_positions_and_distances() -> None:
    assert [probe_positions(n) for n in (1, 2, 3, 8)] == [[0], [0, 1], [0, 1, 2], [0, 1, 4, 7]]
    assert probe_distances(1) == [] and probe_distances(2) == [1] and probe_distances(3) == [1, 2]
    assert probe_distances(8) == [1, 2, 4, 7] and probe_distances(9) == [1, 2, 4, 8]
    assert probe_distances(1024) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1023]


def test_unseen_rows_by_hand() -> None:
    # Rows of norm below 1, as real ones are (0.02·√C): the 1e-12 floors must not touch them.
    initial = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]]) / 16
    trained = np.array([[3.0, 4.0], [0.0, 1.0], [0.0, 4.0]]) / 16  # unseen row 0 did not move
    got = unseen_rows(trained, initial, np.array([0, 5, 2]))
    assert got["init_std"] == 0.02 and got["expected_init_norm"] == pytest.approx(0.02 * math.sqrt(2))
    assert got["unseen"] == {"tokens": 1, "mean_norm": 5 / 16, "mean_initial_norm": 5 / 16,
                             "mean_relative_change": 0.0, "mean_cosine_to_initial": 1.0}  # fmt: skip
    # seen: row 1 moved √2 of 1 (cos 0), row 2 moved 2 of 2 (cos 1)
    seen = got["seen"]
    assert (seen["tokens"], seen["mean_norm"], seen["mean_initial_norm"]) == (2, 2.5 / 16, 1.5 / 16)
    assert seen["mean_relative_change"] == pytest.approx((math.sqrt(2) + 1) / 2, rel=0, abs=1e-15)
    assert seen["mean_cosine_to_initial"] == pytest.approx(0.5, rel=0, abs=1e-15)
    none = unseen_rows(trained, initial, np.array([1, 1, 1]))["unseen"]
    assert none == {"tokens": 0, "mean_norm": None, "mean_initial_norm": None, "mean_relative_change": None,
                    "mean_cosine_to_initial": None}  # fmt: skip
    zero = unseen_rows(np.zeros((1, 2)), np.zeros((1, 2)), np.array([0]))["unseen"]  # no 0 / 0
    assert zero["mean_relative_change"] == 0.0 and zero["mean_cosine_to_initial"] == 0.0


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=16, context_length=6)
    return ModelConfig(**{**base, **kw})


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
    with pytest.raises(UserError, match="^--tokens needs the model's tokenizer, and there is none; name the "
                                        "tokens with --ids$"):  # fmt: skip
        resolve_tokens(None, ["a"])
    with pytest.raises(UserError, match=r"^--tokens 'aa' is not a single token: it encodes to 2 tokens: 'a' "
                                        r"\(id 0\), 'a' \(id 0\); pass one of those, or use --ids$"):  # fmt: skip
        resolve_tokens(Tok(), ["a", "aa"])
    with pytest.raises(
        UserError, match="^--tokens '' is not a single token: it encodes to 0 tokens: nothing;"
    ):
        resolve_tokens(Tok(), [""])


def table_tables(token_table: np.ndarray, source: dict | None = None) -> Tables:
    model = {"vocab_size": len(token_table), "d_model": 2, "context_length": 4, "n_layers": 1, "n_heads": 1,
             "position": "nope", "tie_embeddings": True}  # fmt: skip
    return Tables(token_table, model, source=source)


def test_analyze_with_counts() -> None:
    trained, initial = table_tables(TABLE, source={"hf": "x"}), table_tables(np.eye(6, 2) + 1)
    counts = np.array([0, 4, 9, 4, 1, 0])
    r = analyze(trained, initial, Tok(), counts, k=2, frequent=2, run="r1", notes=["n"])
    assert list(r) == ["schema", "run", "model", "source", "counts_available", "counts", "tokens", "k",
                       "trained", "untrained", "positions", "notes", "labels", "unseen"]  # fmt: skip
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
    assert view["neighbours"] == {0: [(1, pytest.approx(1.0)), (2, pytest.approx(S))],
                                  2: [(0, pytest.approx(S)), (1, pytest.approx(S))],
                                  1: [(0, pytest.approx(1.0)), (2, pytest.approx(S))]}  # fmt: skip
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


def test_ties_go_to_the_lower_index_in_a_large_table() -> None:
    # 5,000 rows, every third one [1, 0] and the rest [0, 1]: ties everywhere. Torch's default (unstable) sort
    # reorders equal keys at this size; the neighbours must still come in index order within each tie.
    table = np.zeros((5000, 2))
    table[::3, 0], table[table[:, 0] == 0, 1] = 1.0, 1.0
    got = [j for j, _ in cosine_neighbours(table, [0], 4999)[0]]
    assert got == [*range(3, 5000, 3), *(i for i in range(5000) if i % 3)]


# ------------------------------------------------------------------------------------------------------------
# Survivors of the mutmut run of issue 19: a registered scheme's section, its tables, a partial RoPE's note,
# the id a refused token stream names.


def test_token_counts_name_the_too_large_id_beside_id_0() -> None:
    """Kills token_counts mutants 26/27 (`min() <= 0`, `< 1`): a chunk holding id 0 and a too-large id must
    name the too-large one, not 0 (an off-by-one in "is the offender the negative one?")."""
    with pytest.raises(UserError, match="^the token stream holds id 6, outside the vocabulary of 6$"):
        token_counts(np.array([0, 6]), 6)


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
