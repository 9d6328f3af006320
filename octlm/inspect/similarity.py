"""The pure numbers of `octlm inspect`: cosine neighbours, similarity maps and their mean by distance, PCA and
row norms of `[N, C]` tables, and the positions and distances worth asking about. No models, no files."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from octlm.errors import UserError
from octlm.positions.formulas import cosine_similarity_matrix

Array = Tensor | np.ndarray
Neighbours = list[tuple[int, float]]  # (row index, cosine similarity), most similar first
DEFAULT_TOP = 5  # neighbours shown per token or position


def _as_tensor(table: Array) -> Tensor:
    if isinstance(table, np.ndarray):
        table = torch.from_numpy(table)
    return table.detach().to("cpu", torch.float64)


def cosine_neighbours(table: Array, rows: Sequence[int], k: int) -> list[Neighbours]:
    """For each index in `rows`, the `k` other rows of `table` `[N, C]` most similar by cosine, best first.

    A row is never its own neighbour; ties go to the lower index. Returns one list of (index, similarity)
    per row.
    """
    table = _as_tensor(table)
    n = table.shape[0]
    for row in rows:
        if not 0 <= int(row) < n:
            raise UserError(f"row {row} is outside the table's {n} rows")
    k = max(0, min(k, n - 1))
    unit = table / table.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    index = torch.as_tensor([int(r) for r in rows], dtype=torch.long)
    sims = unit[index] @ unit.T  # [R, N]
    sims[torch.arange(len(index)), index] = -math.inf
    # A stable sort on -similarity keeps lower indices first among equal similarities.
    order = torch.sort(-sims, dim=-1, stable=True).indices[:, :k]
    return [[(int(j), float(sims[i, j])) for j in order[i]] for i in range(len(index))]


def nearest_tokens(table: Array, ids: Sequence[int], k: int = DEFAULT_TOP) -> list[Neighbours]:
    """Nearest token ids to each of `ids` in a token table `[V, C]` (see `cosine_neighbours`)."""
    return cosine_neighbours(table, ids, k)


def nearest_positions(table: Array, positions: Sequence[int], k: int = DEFAULT_TOP) -> list[Neighbours]:
    """Nearest positions to each of `positions` in a position table `[T, C]` (see `cosine_neighbours`)."""
    return cosine_neighbours(table, positions, k)


def similarity_matrix(table: Array) -> np.ndarray:
    """Cosine similarity between every pair of rows of `table` `[N, C]`, `[N, N]` float64."""
    return cosine_similarity_matrix(_as_tensor(table)).numpy()


def similarity_by_distance(similarity: np.ndarray, distances: Sequence[int]) -> dict[int, float]:
    """Mean of `similarity` `[T, T]` over all pairs (t, t + d), for each distance d below T."""
    n = similarity.shape[0]
    return {int(d): float(np.diagonal(similarity, offset=int(d)).mean()) for d in distances if 0 <= d < n}


def pca_2d(rows: Array) -> tuple[np.ndarray, np.ndarray]:
    """Project `rows` `[N, C]` onto their first two principal components.

    Returns (coordinates `[N, 2]`, fraction of the variance each component explains `[2]`). Signs are fixed so
    that each component's largest loading is positive, so the picture does not flip between runs.
    """
    x = _as_tensor(rows).numpy()
    x = x - x.mean(axis=0, keepdims=True)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    components = vt[:2]  # [2, C]
    flip = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    components = components * flip[:, None]
    coords = x @ components.T
    variance = s**2
    explained = variance[:2] / max(variance.sum(), 1e-30)
    if coords.shape[1] < 2:  # fewer than two rows or columns: pad with zeros
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
        explained = np.pad(explained, (0, 2 - len(explained)))
    return coords, explained


def row_norms(table: Array) -> np.ndarray:
    """Euclidean norm of each row of `table` `[N, C]`, `[N]`."""
    return _as_tensor(table).norm(dim=-1).numpy()


def probe_positions(length: int) -> list[int]:
    """Positions worth asking about in a context of `length`: 0, 1, the middle and the last."""
    return sorted({p for p in (0, 1, length // 2, length - 1) if 0 <= p < length})


def probe_distances(length: int) -> list[int]:
    """Distances 1, 2, 4, ... below `length`, plus `length - 1`."""
    out = [2**i for i in range(int(math.log2(max(length - 1, 1))) + 1) if 2**i < length]
    return sorted(set(out + ([length - 1] if length > 1 else [])))
