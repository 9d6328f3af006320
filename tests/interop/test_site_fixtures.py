"""The web site's fixtures: fresh (what `octlm export fixtures` writes today) and right (an independent NumPy
re-derivation of every value, written from the papers' formulas rather than from octlm/positions/scheme.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from octlm.cli import main
from octlm.interop import site_fixtures as fixtures
from octlm.storage.jsonable import to_json

COMMITTED = Path(__file__).resolve().parents[2] / "web" / "fixtures"


def load(name: str) -> list[dict]:
    return json.loads((COMMITTED / f"{name}.json").read_text(encoding="utf-8"))["cases"]


# A fresh process: what `octlm export fixtures` writes, and octlm's registry as `import octlm.positions` fills it. In
# this process other test files may have registered schemes of their own (or imported a scheme module that
# octlm.positions does not yet), which would change schemes.json.
FRESH = """
import json, sys
import torch
from octlm.positions import scheme as P
from octlm.cli import main
from octlm.config import ModelConfig
from octlm.model.decoder import Decoder

model = Decoder(ModelConfig(vocab_size=16, d_model=8, context_length=4, n_layers=1, n_heads=2, d_ff=16))
try:
    model.check_ids(torch.zeros(1, 5, dtype=torch.long))
except Exception as error:
    message = str(error)
print(json.dumps({"order": P.table_order(P.scheme_names()), "unbounded": P.unbounded_schemes(), "message": message}))
# last: the export imports the scheme modules whose formulas it mirrors, and each registers its scheme
assert main(["export", "fixtures", "--out", sys.argv[1]]) == 0
"""


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("fixtures")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=COMMITTED.parent.parent,
        timeout=120,
        check=True,
    )
    return out, json.loads(done.stdout.splitlines()[0])


def test_committed_fixtures_are_fresh(fresh: tuple[Path, dict]) -> None:
    out = fresh[0]
    written = sorted(p.name for p in out.glob("*.json"))
    committed = sorted(p.name for p in COMMITTED.glob("*.json"))
    assert written == committed, "web/fixtures/ holds other files than `octlm export fixtures` writes"
    for name in written:
        assert (out / name).read_bytes() == (COMMITTED / name).read_bytes(), (
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


def test_rotary_variant_values() -> None:
    # GPT-NeoX: rotary_ndims = int(head_size * rotary_pct), applied to whole pairs
    for case in load("rotary_dims"):
        d, fraction = case["inputs"]["head_dim"], case["inputs"]["fraction"]
        assert case["output"] == 2 * (math.floor(d * fraction) // 2)
    assert [c["output"] for c in load("rotary_dims")][:3] == [64, 16, 18]  # 64 × 0.3 = 19.2: 9 pairs
    # p-RoPE (Barbero et al.): keep the fraction p of the frequencies that turn fastest, zero the slowest
    for case in load("prope_frequencies"):
        d, base, kept = (case["inputs"][key] for key in ("head_dim", "base", "kept"))
        theta = base ** (-np.arange(0, d, 2) / d)
        n_kept = int(np.floor(kept * (d // 2) + 0.5))
        fastest = np.argsort(-theta, kind="stable")[:n_kept]
        want = np.zeros(d // 2)
        want[fastest] = theta[fastest]
        close(case["output"], want, atol=1e-12)
        assert np.count_nonzero(case["output"]) == n_kept
    assert load("prope_frequencies")[1]["output"] == [
        1.0,
        0.1,
        0.01,
        0.0,
    ]  # 0.625 × 4 pairs = 2.5: rounds up to 3


def test_xpos_values() -> None:
    # Sun et al.'s reference code (torchscale): scale = (arange(0, dim, 2) + 0.4 * dim) / (1.4 * dim)
    for case in load("xpos_scales"):
        d, gamma = case["inputs"]["head_dim"], case["inputs"]["gamma"]
        close(case["output"], (np.arange(0, d, 2) + gamma * d) / ((1 + gamma) * d), atol=1e-12)
    for case in load("xpos_safe_length"):
        d, scale_base, gamma = (case["inputs"][key] for key in ("head_dim", "scale_base", "gamma"))
        zeta0 = gamma / (1 + gamma)
        length = case["output"]
        # the last position keeps the key scale zeta_0^(-t / scale_base) within 2^64, the next one leaves it
        assert (length - 1) / scale_base * -math.log2(zeta0) <= 64 < length / scale_base * -math.log2(zeta0)
    assert load("xpos_safe_length")[0]["output"] == 18131  # positions 0 .. 18,130 at D = 64, scale_base 512


def test_fire_values() -> None:
    # Li et al.: b(i, j) = f(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1)
    for case in load("fire_inputs"):
        c, threshold, q, k = (case["inputs"][key] for key in ("c", "threshold", "q_positions", "k_positions"))
        want = [
            [math.log(c * (i - j) + 1) / math.log(c * max(threshold, i) + 1) if j <= i else 0.0 for j in k]
            for i in q
        ]
        close(case["output"], want, atol=1e-11)
    last = load("fire_inputs")[2]  # query 300 >= L = 100 and key 0: distance 300 over psi(300) is exactly 1
    assert last["output"][1][0] == 1.0 and last["output"][0][0] == 1.0
    for case in load("fire_mlp"):
        x, w1, b1, w2, b2 = (np.asarray(case["inputs"][key]) for key in ("x", "w1", "b1", "w2", "b2"))
        hidden = np.maximum(x[..., None] * w1 + b1, 0)  # [Tq, Tk, hidden]
        close(case["output"], np.einsum("qkn,hn->hqk", hidden, w2) + b2[:, None, None], atol=1e-11)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def test_cope_values() -> None:
    # Golovneva et al.: p_ij = sum over t = j..i of sigmoid(q_i . k_t / sqrt(D)); z_ij interpolates q_i . e[p_ij]
    for case in load("gated_counts"):
        q, k = np.asarray(case["inputs"]["q"]), np.asarray(case["inputs"]["k"])
        qp, kp, limit = case["inputs"]["q_positions"], case["inputs"]["k_positions"], case["inputs"]["limit"]
        batch, heads, _, d = q.shape
        want = np.zeros((batch, heads, len(qp), len(kp)))
        for b, h, i, j in np.ndindex(want.shape):
            keys = k[b, h // (heads // k.shape[1])]
            visible = [t for t in range(len(kp)) if kp[j] <= kp[t] <= qp[i]]  # keys j .. i
            want[b, h, i, j] = min(sum(sigmoid(q[b, h, i] @ keys[t] / math.sqrt(d)) for t in visible), limit)
        close(case["output"], want, atol=1e-10)
    counts = np.asarray(load("gated_counts")[1]["output"])  # limit 3: clamped counts are exactly the limit
    assert counts.max() == 3.0 and (counts == 3.0).sum() > 1
    for case in load("interpolated_bias"):
        q, table, p = (np.asarray(case["inputs"][key]) for key in ("q", "table", "counts"))
        low, high = table[np.floor(p).astype(int)], table[np.ceil(p).astype(int)]  # [B, H, Tq, Tk, D]
        w = (p - np.floor(p))[..., None]
        close(case["output"], np.einsum("bhqd,bhqkd->bhqk", q, (1 - w) * low + w * high), atol=1e-10)


def masked(rows: list) -> np.ndarray:
    """A fixture's nested lists with null (a masked -inf) as NaN."""
    return np.asarray(json.loads(json.dumps(rows).replace("null", "NaN")), dtype=np.float64)


def test_fox_decay_bias_values() -> None:
    # Lin et al.: logit_ij = q_i . k_j / sqrt(D) + sum over t = j+1 .. i of log f_t, keys j <= i
    for case in load("decay_bias"):
        log_f, qp, kp = (case["inputs"][key] for key in ("log_forget", "q_positions", "k_positions"))
        log_f = np.asarray(log_f)
        want = np.full(log_f.shape[:2] + (len(qp), len(kp)), np.nan)
        for b, h, i, j in np.ndindex(want.shape):
            query = len(kp) - len(qp) + i  # the queries are the last keys
            if kp[j] <= qp[i]:
                want[b, h, i, j] = sum(log_f[b, h, t] for t in range(j + 1, query + 1))
        got = masked(case["output"])
        assert np.array_equal(np.isnan(got), np.isnan(want)), (
            "the masked (null) entries are not exactly j > i"
        )
        close(np.nan_to_num(got), np.nan_to_num(want), atol=1e-10)
    alibi = masked(load("decay_bias")[2]["output"])[0, 0]  # every gate e^-0.5: ALiBi's -0.5 (i - j)
    dist = np.subtract.outer(np.arange(5), np.arange(5))
    assert np.array_equal(alibi, np.where(dist < 0, np.nan, -0.5 * dist), equal_nan=True)


def test_stick_breaking_values() -> None:
    # Tan et al.: A_ij = β_ij Π_{j < m < i} (1 - β_im), β = σ(q . k / sqrt(D)), keys before the query only
    for case in load("stick_breaking_weights"):
        q, k = np.asarray(case["inputs"]["q"]), np.asarray(case["inputs"]["k"])
        qp, kp = case["inputs"]["q_positions"], case["inputs"]["k_positions"]
        heads, d = q.shape[1], q.shape[-1]
        want = np.zeros(q.shape[:3] + (len(kp),))
        for b, h, i, j in np.ndindex(want.shape):
            keys = k[b, h // (heads // k.shape[1])]
            beta = [sigmoid(q[b, h, i] @ keys[m] / math.sqrt(d)) for m in range(len(kp))]
            if kp[j] < qp[i]:
                between = [m for m in range(len(kp)) if kp[j] < kp[m] < qp[i]]
                want[b, h, i, j] = beta[j] * math.prod(1 - beta[m] for m in between)
        close(case["output"], want, atol=1e-12)
    first = np.asarray(load("stick_breaking_weights")[0]["output"])  # the first token has no key before it
    assert (first[..., 0, :] == 0).all() and (first.sum(-1) <= 1).all() and first.max() > 0.5


def test_path_values() -> None:
    # Yang et al.: s_ij = q_i^T H_i H_(i-1) ... H_(j+1) k_j / sqrt(D), H_s = I - β_s w_s w_s^T; softmax over j <= i
    for case in load("path_weights"):
        q, k, w, beta = (np.asarray(case["inputs"][key]) for key in ("q", "k", "w", "beta"))
        (batch, heads, tq, d), tk = q.shape, k.shape[2]
        want = np.zeros((batch, heads, tq, tk))
        for b, h, r in np.ndindex(batch, heads, tq):
            g, i = h // (heads // k.shape[1]), tk - tq + r  # key head, query token
            scores = np.full(tk, -np.inf)
            for j in range(i + 1):
                product = np.eye(d)
                for s in range(i, j, -1):  # H_i first on the left, H_(j+1) last
                    product = product @ (np.eye(d) - beta[b, g, s] * np.outer(w[b, g, s], w[b, g, s]))
                scores[j] = q[b, h, r] @ product @ k[b, g, j] / math.sqrt(d)
            e = np.exp(scores - scores.max())
            want[b, h, r] = e / e.sum()
        close(case["output"], want, atol=1e-11)
    beta = np.concatenate([np.ravel(c["inputs"]["beta"]) for c in load("path_weights")])
    assert 0 < beta.min() < 0.5 and 1.5 < beta.max() < 2  # strengths from near identity to near reflection


def test_query_scaling_values() -> None:
    from octlm.config import ModelConfig
    from octlm.model.decoder import QueryScaling

    for case in load("ssmax_factors"):  # Nakanishi: softmax(s log(n) z) for a query that sees n keys
        s, n = case["inputs"]["s"], case["inputs"]["n"]
        close(case["output"], np.outer(s, np.log(n)), atol=1e-10)
        scaling = QueryScaling(ModelConfig(attention_scaling="ssmax", n_heads=len(s)), layer=0)
        with torch.no_grad():
            scaling.s.copy_(torch.tensor(s))
            # one query that sees `keys` keys, as the last of them
            got = [
                scaling(torch.ones(1, len(s), 1, 1), torch.tensor([keys - 1]), keys)[0, :, 0, 0] for keys in n
            ]
        # float32 (s, log n and their product each rounded): measured 4.3e-7 at worst, at 1.7 × ln 16384 = 16.5
        close(torch.stack(got, -1), case["output"], atol=1e-6)
    for case in load("llama4_temperature"):  # Llama 4: 1 + τ log(floor((p + 1) / F) + 1) in the NoPE layers
        p, floor, tau = (case["inputs"][key] for key in ("positions", "floor", "temperature"))
        close(case["output"], [1 + tau * math.log(math.floor((i + 1) / floor) + 1) for i in p], atol=1e-10)
        config = ModelConfig(
            attention_scaling="llama4", position="nope", attention_floor=floor, attention_temperature=tau
        )
        got = QueryScaling(config, layer=0)(torch.ones(1, 1, len(p), 1), torch.tensor(p), len(p))[0, 0, :, 0]
        # float32: measured 6.3e-8 at worst (at 1.26); 2e-7 leaves a CPU's float32 log1p its last bit (1.2e-7)
        close(got, case["output"], atol=2e-7)
        assert all(v == 1.0 for v, i in zip(case["output"], p, strict=True) if i < floor - 1)


def test_schemes_json_is_the_registry(fresh: tuple[Path, dict]) -> None:
    from octlm.positions import scheme as P

    registry = fresh[1]
    rows = json.loads((COMMITTED / "schemes.json").read_text(encoding="utf-8"))["schemes"]
    assert [r["name"] for r in rows] == registry["order"]
    assert {"learned", "sinusoidal", "rope", "p-rope", "alibi", "t5", "nope"} <= set(registry["order"])
    for row in rows:
        cls = P.SCHEMES[row["name"]]
        assert (row["bounded"], row["shows"], row["options"]) == (
            cls.bounded,
            list(cls.shows),
            list(cls.options),
        )
        assert row["family"] == (cls.family or cls.name)
        assert cls.__doc__.split()[0] == row["doc"].split()[0] and "\n" not in row["doc"]
    by_name = {r["name"]: r for r in rows}
    assert by_name["learned"]["hooks"] == ["embed"] and by_name["nope"]["hooks"] == []
    assert by_name["rope"]["hooks"] == ["rotate"] and by_name["t5"]["hooks"] == ["bias"]
    assert by_name["p-rope"]["family"] == "rope"
    for name in ("fox", "path", "stick-breaking"):  # the schemes that compute attention themselves
        assert by_name[name]["hooks"] == ["attend"], name
    assert all(row["cost"] == P.SCHEMES[row["name"]].cost for row in rows)
    assert by_name["path"]["cost"] and by_name["rope"]["cost"] == "" and by_name["fox"]["cost"] == ""
    # the site fills the learned-table error with this list (web/src/schemes.ts): it must be what octlm prints
    unbounded = [r["name"] for r in rows if not r["bounded"]]
    assert unbounded == registry["unbounded"]
    assert registry["message"] == (
        "a sequence of length 5 is longer than the learned position table (4 rows); use at most 4 tokens, "
        f"or a scheme with no maximum: {', '.join(unbounded)}"
    )


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
