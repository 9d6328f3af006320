"""Exact expected values for octlm/inspect/similarity.py (cosine neighbours, similarity by distance, PCA, norms,
the probe positions and distances), worked out by hand on small tables, never from a second run of the same
code."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from octlm.errors import UserError
from octlm.inspect.analysis import (
    nearest_positions,
    nearest_tokens,
    pca_2d,
    probe_distances,
    probe_positions,
    row_norms,
    similarity_by_distance,
    similarity_matrix,
)
from octlm.inspect.similarity import cosine_neighbours

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


def test_probe_positions_and_distances() -> None:
    assert [probe_positions(n) for n in (1, 2, 3, 8)] == [[0], [0, 1], [0, 1, 2], [0, 1, 4, 7]]
    assert probe_distances(1) == [] and probe_distances(2) == [1] and probe_distances(3) == [1, 2]
    assert probe_distances(8) == [1, 2, 4, 7] and probe_distances(9) == [1, 2, 4, 8]
    assert probe_distances(1024) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1023]


def test_ties_go_to_the_lower_index_in_a_large_table() -> None:
    # 5,000 rows, every third one [1, 0] and the rest [0, 1]: ties everywhere. Torch's default (unstable) sort
    # reorders equal keys at this size; the neighbours must still come in index order within each tie.
    table = np.zeros((5000, 2))
    table[::3, 0], table[table[:, 0] == 0, 1] = 1.0, 1.0
    got = [j for j, _ in cosine_neighbours(table, [0], 4999)[0]]
    assert got == [*range(3, 5000, 3), *(i for i in range(5000) if i % 3)]
