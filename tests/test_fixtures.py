"""The web site's fixtures: fresh (what `octlm export fixtures` writes today) and right (an independent NumPy
re-derivation of every value, written from the papers' formulas rather than from octlm/positions.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from octlm import fixtures
from octlm.cli import main
from octlm.jsonable import to_json

COMMITTED = Path(__file__).resolve().parent.parent / "web" / "fixtures"


def load(name: str) -> list[dict]:
    return json.loads((COMMITTED / f"{name}.json").read_text(encoding="utf-8"))["cases"]


def test_committed_fixtures_are_fresh(tmp_path: Path) -> None:
    assert main(["export", "fixtures", "--out", str(tmp_path)]) == 0
    fresh = sorted(p.name for p in tmp_path.glob("*.json"))
    committed = sorted(p.name for p in COMMITTED.glob("*.json"))
    assert fresh == committed, "web/fixtures/ holds other files than `octlm export fixtures` writes"
    for name in fresh:
        assert (tmp_path / name).read_bytes() == (COMMITTED / name).read_bytes(), (
            f"web/fixtures/{name} is stale; run `octlm export fixtures` from the repository root"
        )


def test_check_flag_and_bad_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "fixtures", "--out", str(tmp_path), "--check"]) == 1  # empty folder: all stale
    assert main(["export", "fixtures", "--out", str(tmp_path)]) == 0
    assert main(["export", "fixtures", "--out", str(tmp_path), "--check"]) == 0
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["export", "fixtures", "--out", str(blocker)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_every_value_survives_json() -> None:
    for fixture in fixtures.build_fixtures().values():
        json.loads(fixtures.render(fixture))  # no NaN, no Infinity


def close(got, want, atol: float = 1e-6) -> None:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    worst = np.unravel_index(np.argmax(np.abs(got - want)), got.shape) if got.size else ()
    assert np.allclose(got, want, rtol=0, atol=atol), f"worst index {worst}: {got[worst]} vs {want[worst]}"


def test_sinusoidal_table_values() -> None:
    for case in load("sinusoidal_table"):
        n, w, base = case["inputs"]["length"], case["inputs"]["width"], case["inputs"]["base"]
        t = np.arange(n)[:, None]
        i = np.arange(w // 2)[None, :]
        want = np.empty((n, w))
        want[:, 0::2] = np.sin(t / base ** (2 * i / w))
        want[:, 1::2] = np.cos(t / base ** (2 * i / w))
        close(case["output"], want)  # the table is float32, so 1e-6 and not tighter


def test_cosine_similarity_values() -> None:
    for case in load("cosine_similarity_matrix"):
        x = np.asarray(case["inputs"]["x"])
        unit = x / np.linalg.norm(x, axis=1, keepdims=True)
        close(case["output"], unit @ unit.T, atol=1e-10)


def test_rope_values() -> None:
    for case in load("rope_frequencies"):
        d, base = case["inputs"]["head_dim"], case["inputs"]["base"]
        close(case["output"], [base ** (-2 * i / d) for i in range(d // 2)], atol=1e-12)
    for case in load("rope_rotate"):
        x, inputs = np.asarray(case["inputs"]["x"]), case["inputs"]
        d = x.shape[1]
        want = x.copy()
        for r, pos in enumerate(inputs["positions"]):
            for i in range(d // 2):
                a, b = (i, i + d // 2) if inputs["layout"] == "half" else (2 * i, 2 * i + 1)
                phi = pos * inputs["base"] ** (-2 * i / d)
                want[r, a] = x[r, a] * math.cos(phi) - x[r, b] * math.sin(phi)
                want[r, b] = x[r, a] * math.sin(phi) + x[r, b] * math.cos(phi)
        close(case["output"], want, atol=1e-10)


def paper_slopes(n: int) -> list[float]:
    """Press et al.'s reference code, as published with ALiBi."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


def test_alibi_values() -> None:
    for case in load("alibi_slopes"):
        close(case["output"], paper_slopes(case["inputs"]["n_heads"]))  # float32 slopes
    assert load("alibi_slopes")[6]["output"][:2] == [0.5, 0.25]  # 8 heads: 1/2, 1/4, ...
    for case in load("alibi_bias"):
        slopes, q, k = (
            np.asarray(case["inputs"][key], dtype=np.float64)
            for key in ("slopes", "q_positions", "k_positions")
        )
        dist = q[:, None] - k[None, :]
        want = np.where(dist < 0, np.nan, -slopes[:, None, None] * dist)
        got = np.asarray(
            [[[np.nan if v is None else v for v in row] for row in head] for head in case["output"]]
        )
        assert np.array_equal(np.isnan(got), np.isnan(want)), (
            "the masked (null) entries are not exactly k > q"
        )
        close(np.nan_to_num(got), np.nan_to_num(want), atol=1e-10)


def test_t5_bucket_values() -> None:
    for case in load("t5_bucket"):
        inputs = case["inputs"]
        buckets, max_distance = inputs["num_buckets"], inputs["max_distance"]
        max_exact = buckets // 2
        want = []
        for rel in inputs["relative_position"]:
            n = max(-rel, 0)
            if n < max_exact:
                want.append(n)
                continue
            # as T5 computes it: in float32
            ratio = np.float32(np.log(np.float32(n) / np.float32(max_exact))) / np.float32(
                math.log(max_distance / max_exact)
            )
            want.append(
                min(max_exact + int(np.float32(ratio * np.float32(buckets - max_exact))), buckets - 1)
            )
        assert case["output"] == want
    first = load("t5_bucket")[0]  # 32 buckets, max distance 128
    assert first["output"][first["inputs"]["relative_position"].index(-15)] == 15
    assert first["output"][0] == 31  # distance 300: past max_distance, the last bucket


def test_to_json_rounds_and_handles_non_finite_values_per_caller() -> None:
    value = {1: torch.tensor([0.123456789, -1e-9]), "n": np.int64(3), "t": (np.bool_(True), None)}
    assert to_json(value, 3) == {"1": [0.123, 0.0], "n": 3, "t": [True, None]}  # decimals; no -0.0
    assert to_json(123456.789, 4, significant=True) == 123500.0
    assert to_json([math.nan, math.inf, -math.inf], 5) == [None, None, None]  # report.json, length.json
    assert to_json(-math.inf, 12, significant=True, nonfinite="mask") is None  # a masked ALiBi entry
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError):
            to_json(bad, 12, significant=True, nonfinite="mask")  # in a fixture only a bug makes these
    with pytest.raises(TypeError):
        to_json(object(), 5)
