"""Exact expected values for octlm/inspect/analysis.py's token side (cosine neighbours, PCA, counts, unseen rows,
labels, `analyze`, `to_json`), written to kill its mutants (scripts/mutation, docs/MUTANTS.md); the position
sections are in test_analysis_positions.py. Expected values are worked out by hand on small tables, never from a
second run of the same code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.inspect.analysis import (
    Tables,
    analyze,
    most_frequent,
    nearest_positions,
    nearest_tokens,
    pca_2d,
    probe_distances,
    probe_positions,
    resolve_tokens,
    row_norms,
    similarity_by_distance,
    similarity_matrix,
    to_json,
    token_counts,
    token_label,
    unseen_rows,
)
from octlm.inspect.similarity import cosine_neighbours
from octlm.model.decoder import Decoder

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
    return Tables(token_table, model, {"shows": [], "about": "None."}, source=source)


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
# Survivors of the mutmut run of issue 19: the id a refused token stream names (the others are in
# test_analysis_positions.py).


def test_token_counts_name_the_too_large_id_beside_id_0() -> None:
    """Kills token_counts mutants 26/27 (`min() <= 0`, `< 1`): a chunk holding id 0 and a too-large id must
    name the too-large one, not 0 (an off-by-one in "is the offender the negative one?")."""
    with pytest.raises(UserError, match="^the token stream holds id 6, outside the vocabulary of 6$"):
        token_counts(np.array([0, 6]), 6)
