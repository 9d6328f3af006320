"""`octlm export fixtures`: the JSON files that the web site's TypeScript math is tested against.

The explainer site (web/) recomputes the position math in the browser, in `web/src/math.ts`. So that the two
never drift, this command evaluates the formulas of `octlm/positions/scheme.py` and `octlm/positions/` on
small fixed inputs and writes one JSON file per function into `web/fixtures/`, inputs included
(`source` names the file). The query scaling of `octlm/model/decoder.py` (`model.attention_scaling`) is
written from its formulas in float64, as `_scaling_fixtures` says why, and the Python test checks the model's
float32 `QueryScaling` against them. `web/tests/unit/parity.test.ts` runs every TypeScript twin on the same
inputs and fails when any value differs by more than 1e-7, and `tests/interop/test_site_fixtures.py` fails
when the committed files are not what this command writes today. `schemes.json` is the position-scheme
registry as data (name, family, bounded, shows, options, hooks, cost and the class docstring's summary of
every scheme `import octlm.positions` registers), from which the site lists the schemes.

The files are stable byte for byte: keys sorted, values converted to float64 and rounded to 12 significant
digits: far below the 1e-7 tolerance, far above the last-bit noise by which one CPU's `sin` may differ from
another's.
A masked entry (an ALiBi bias of minus infinity) is written as `null`, because JSON has no infinity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from octlm.errors import UserError, check_output, writing
from octlm.files import write_atomic
from octlm.storage.jsonable import to_json

if TYPE_CHECKING:
    import torch

DEFAULT_OUT = Path("web") / "fixtures"
SCHEMA = 1
DIGITS = 12

# a function that adds fixture files through build_fixtures' `add(name, note, cases, source)`
FixtureBuilder = Callable[[Callable[..., None]], None]


def _clean(value: Any) -> Any:
    """Plain JSON values: tensors to nested lists, floats to DIGITS significant digits, -inf (masked) to
    None."""
    return to_json(value, DIGITS, significant=True, nonfinite="mask")


def _inputs(rows: int, cols: int, seed: int) -> list[list[float]]:
    """Small fixed inputs in [-1, 1] from a plain LCG: identical on every machine and NumPy version."""
    state = seed
    out = []
    for _ in range(rows):
        row = []
        for _ in range(cols):
            state = (6364136223846793005 * state + 1442695040888963407) % 2**64
            row.append(round((state >> 11) / 2**53 * 2 - 1, 4))
        out.append(row)
    return out


def _f64(rows: Any) -> torch.Tensor:
    """Nested lists (or a tensor) as a float64 tensor."""
    import torch

    return torch.tensor(rows, dtype=torch.float64)


def _exact(value: torch.Tensor) -> Any:
    """`value` as the fixture stores it, so that both languages start from the very same numbers."""
    return _f64(_clean(value))


def _summary(cls: type) -> str:
    """A class docstring's summary: its first paragraph on one line (a first physical line may stop
    mid-sentence)."""
    doc = (cls.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def scheme_table() -> dict[str, Any]:
    """`schemes.json`: every registered scheme in table order, as the site lists them.

    `family` is the scheme it is grouped under (itself unless it is a variant), `hooks` the `PositionScheme`
    hooks it overrides (where it acts), `bounded` whether it has a maximum length, `cost` how its cost grows
    when faster than softmax attention's T² ("" otherwise).
    """
    from octlm.positions import scheme as P

    rows = []
    for name in P.table_order(P.scheme_names()):
        cls = P.SCHEMES[name]
        rows.append(
            {
                "name": name,
                "family": P.family_of(name),
                "bounded": cls.bounded,
                "shows": list(cls.shows),
                "options": list(cls.options),
                "hooks": list(cls.hooks()),
                "cost": cls.cost,
                "doc": _summary(cls),
            }
        )
    note = (
        "the position-scheme registry (octlm.positions.SCHEMES), in table order; "
        "hooks: the PositionScheme methods a scheme overrides; options: the ModelConfig fields it reads; "
        "cost: how its cost grows with the length when faster than softmax attention's T^2, else empty"
    )
    return {"source": "octlm/positions/scheme.py", "schema": SCHEMA, "note": note, "schemes": _clean(rows)}


def build_fixtures(extra: Sequence[FixtureBuilder] = ()) -> dict[str, dict[str, Any]]:
    """Every fixture file by name: {"function", "source", "schema", "note", "cases": [{inputs, output}]}, and
    `schemes.json` (the registry as data). `extra` builders add files from layers above this one (the task
    battery's examples), each called with the same `add(name, note, cases, source)`."""
    files: dict[str, dict[str, Any]] = {}

    def add(
        name: str, note: str, cases: list[dict[str, Any]], source: str = "octlm/positions/formulas.py"
    ) -> None:
        files[f"{name}.json"] = {
            "function": name,
            "source": source,
            "schema": SCHEMA,
            "note": note,
            "cases": _clean(cases),
        }

    # The registry first: the modules below register their schemes as they are imported, and schemes.json
    # lists what `import octlm.positions` registers (in a fresh process that is all octlm has, in its table
    # order).
    files["schemes.json"] = scheme_table()
    _sinusoidal_fixtures(add)
    _rope_fixtures(add)
    _bias_and_shape_fixtures(add)
    _rotary_fixtures(add)
    _xpos_fixtures(add)
    _fire_fixtures(add)
    _cope_fixtures(add)
    _attention_fixtures(add)
    _scaling_fixtures(add)
    for builder in extra:
        builder(add)
    return dict(sorted(files.items()))


def _sinusoidal_fixtures(add: Callable[..., None]) -> None:
    """The sinusoidal table and the cosine similarity matrix (octlm/positions/formulas.py)."""
    from octlm.positions import formulas as P

    add(
        "sinusoidal_table",
        "output[t][2i] = sin(t / base^(2i/width)), output[t][2i+1] = cos(same)",
        [
            {"inputs": {"length": n, "width": w, "base": b}, "output": P.sinusoidal_table(n, w, b)}
            for n, w, b in [
                (8, 8, 10000.0),
                (16, 6, 10000.0),
                (5, 32, 10000.0),
                (12, 10, 100.0),
                (1, 2, 10000.0),
            ]
        ],
    )

    similarity_inputs = [_clean(P.sinusoidal_table(12, 16)), _inputs(6, 5, seed=7), [[3.0, 4.0], [-4.0, 3.0]]]
    add(
        "cosine_similarity_matrix",
        "output[i][j] = cosine of the angle between rows i and j of x",
        [{"inputs": {"x": x}, "output": P.cosine_similarity_matrix(_f64(x))} for x in similarity_inputs],
    )


def _rope_fixtures(add: Callable[..., None]) -> None:
    """RoPE's frequencies and rotation (octlm/positions/formulas.py)."""
    import torch

    from octlm.positions import formulas as P

    add(
        "rope_frequencies",
        "output[i] = base^(-2i/head_dim)",
        [
            {"inputs": {"head_dim": d, "base": b}, "output": P.rope_frequencies(d, b)}
            for d, b in [(8, 10000.0), (16, 500.0), (64, 10000.0), (2, 10000.0)]
        ],
    )

    rope_cases = []
    for layout in ("half", "interleaved"):
        for rows, dim, positions, base, seed in [
            (5, 8, [0, 1, 2, 7, 100], 10000.0, 1),
            (3, 4, [3, 3, 250], 100.0, 2),
        ]:
            x = _inputs(rows, dim, seed)
            pos = torch.tensor(positions, dtype=torch.float64)
            out = P.rope_rotate(_f64(x), pos, base=base, layout=layout)
            rope_cases.append(
                {"inputs": {"x": x, "positions": positions, "base": base, "layout": layout}, "output": out}
            )
    add(
        "rope_rotate",
        "row r of x rotated as position positions[r]: pair i turns by positions[r] * theta_i",
        rope_cases,
    )


def _bias_and_shape_fixtures(add: Callable[..., None]) -> None:
    """ALiBi's slopes and bias, T5's buckets and add_positions' shape check (octlm/positions/formulas.py)."""
    import torch

    from octlm.positions import formulas as P

    add(
        "alibi_slopes",
        "Press et al.'s head slopes, with their recipe for head counts that are not 2^k",
        [{"inputs": {"n_heads": n}, "output": P.alibi_slopes(n)} for n in [1, 2, 3, 4, 5, 6, 8, 12, 16, 24]],
    )

    bias_cases = []
    for heads, q, k in [(4, list(range(6)), list(range(6))), (3, [4, 5], [0, 1, 2, 3, 4, 5, 6])]:
        slopes = P.alibi_slopes(heads).double()
        bias = P.alibi_bias(slopes, torch.tensor(q), torch.tensor(k))
        bias_cases.append({"inputs": {"slopes": slopes, "q_positions": q, "k_positions": k}, "output": bias})
    add(
        "alibi_bias",
        "output[h][q][k] = -slope_h * (q - k) for k <= q; null stands for -inf (k > q, masked)",
        bias_cases,
    )

    t5_cases = []
    for buckets, distance in [(32, 128), (8, 20), (16, 64), (2, 4)]:
        rel = list(range(-300, 4))
        out = P.t5_bucket(torch.tensor(rel), buckets, distance)
        inputs = {"relative_position": rel, "num_buckets": buckets, "max_distance": distance}
        t5_cases.append({"inputs": inputs, "output": out})
    add("t5_bucket", "causal T5 bucket of relative_position = k - q (bidirectional=False)", t5_cases)

    shape_cases = []
    for tokens, table in [([2, 5, 8], [6, 8]), ([1, 4, 8], [4, 6]), ([3, 4, 16], [4, 16])]:
        try:
            P.add_positions(torch.zeros(tokens), torch.zeros(table))
            message = None
        except UserError as error:
            message = str(error)
        shape_cases.append({"inputs": {"token_shape": tokens, "table_shape": table}, "output": message})
    add(
        "add_positions",
        "the error add_positions raises for [B, T, C] + [T', C'] (null: the shapes fit)",
        shape_cases,
    )


def _rotary_fixtures(add: Callable[..., None]) -> None:
    """Partial RoPE's rotated channels and p-RoPE's frequencies (octlm/positions/rotary.py)."""
    from octlm.positions import rotary

    src = "octlm/positions/rotary.py"
    add(
        "rotary_dims",
        "int(head_dim * fraction) rounded down to whole pairs (GPT-NeoX rotary_pct)",
        [
            {"inputs": {"head_dim": d, "fraction": f}, "output": rotary.rotary_dims(d, f)}
            for d, f in [
                (64, 1.0),
                (64, 0.25),
                (64, 0.3),
                (16, 0.5),
                (10, 0.35),
                (8, 0.2),
                (2, 0.99),
                (96, 0.1),
            ]
        ],
        src,
    )
    add(
        "prope_frequencies",
        "theta_i = base^(-2i/head_dim) for the round(kept * D/2) smallest i (half up), else 0",
        [
            {"inputs": {"head_dim": d, "base": b, "kept": k}, "output": rotary.prope_frequencies(d, b, k)}
            for d, b, k in [
                (8, 10000.0, 0.75),
                (8, 10000.0, 0.625),
                (12, 500.0, 0.75),
                (16, 10000.0, 0.25),
                (8, 10000.0, 0.0),
                (8, 10000.0, 1.0),
                (64, 10000.0, 0.75),
            ]
        ],
        src,
    )


def _xpos_fixtures(add: Callable[..., None]) -> None:
    """xPos's per-pair scales and its safe length (octlm/positions/xpos.py)."""
    from octlm.positions import xpos

    src = "octlm/positions/xpos.py"
    add(
        "xpos_scales",
        "zeta_i = (2i / head_dim + gamma) / (1 + gamma), one per channel pair",
        [
            {"inputs": {"head_dim": d, "gamma": g}, "output": xpos.xpos_scales(d, g)}
            for d, g in [(8, 0.4), (16, 0.4), (64, 0.4), (2, 0.4), (10, 0.1)]
        ],
        src,
    )
    add(
        "xpos_safe_length",
        "the first position whose key scale zeta_0^(-t / scale_base) passes 2^64",
        [
            {
                "inputs": {"head_dim": d, "scale_base": sb, "gamma": g},
                "output": xpos.xpos_safe_length(d, sb, g),
            }
            for d, sb, g in [
                (64, 512.0, 0.4),
                (16, 512.0, 0.4),
                (64, 64.0, 0.4),
                (8, 2048.0, 0.4),
                (32, 512.0, 1.0),
            ]
        ],
        src,
    )


def _fire_fixtures(add: Callable[..., None]) -> None:
    """FIRE's normalized distances and its MLP (octlm/positions/fire.py)."""
    import torch

    from octlm.positions import fire

    src = "octlm/positions/fire.py"
    fire_cases = []
    for c, threshold, q, k in [
        (0.1, 4.0, [0, 1, 2, 3, 4, 5, 6, 7], list(range(8))),
        (0.5, 2.0, [5, 9], list(range(10))),
        (2.0, 100.0, [100, 300], [0, 1, 50, 100, 299, 300]),
    ]:
        out = fire.fire_inputs(_f64(c), _f64(threshold), torch.tensor(q), torch.tensor(k))
        fire_cases.append(
            {"inputs": {"c": c, "threshold": threshold, "q_positions": q, "k_positions": k}, "output": out}
        )
    add(
        "fire_inputs",
        "psi(i - j) / psi(max(L, i)), psi(x) = log(c x + 1), for query i and key j <= i (0 for j > i)",
        fire_cases,
        src,
    )
    mlp_cases = []
    for heads, hidden, seed in [(2, 4, 21), (3, 8, 22)]:
        x = _exact(fire_cases[1]["output"] if heads == 2 else fire_cases[0]["output"])
        rows = _f64(_inputs(4, heads * hidden, seed))  # four rows of fixed values in [-1, 1]
        w1, b1, w2, b2 = (
            rows[0, :hidden] * 2,
            rows[1, :hidden],
            rows[2].reshape(heads, hidden),
            rows[3, :heads],
        )
        weights = {"w1": w1, "b1": b1, "w2": w2, "b2": b2}
        mlp_cases.append({"inputs": {"x": x, **weights}, "output": fire.fire_mlp(x, **weights)})
    add("fire_mlp", "output[h][q][k] = w2[h] . relu(w1 x[q][k] + b1) + b2[h]", mlp_cases, src)


def _cope_fixtures(add: Callable[..., None]) -> None:
    """CoPE's gated counts and their interpolated bias (octlm/positions/cope.py)."""
    import torch

    from octlm.positions import cope

    src = "octlm/positions/cope.py"
    count_cases, bias_cases = [], []
    for b, h, hkv, tq, tk, d, limit, offset, seed in [
        (1, 2, 2, 5, 5, 4, 8, 0, 31),
        (2, 4, 2, 3, 7, 4, 3, 4, 32),
        (1, 1, 1, 6, 6, 8, 63, 0, 33),
    ]:
        # times 3: scores of a few units, so that the gates spread over (0, 1) instead of all sitting near 1/2
        q = _f64(_inputs(b * h * tq, d, seed)).reshape(b, h, tq, d) * 3
        k = _f64(_inputs(b * hkv * tk, d, seed + 100)).reshape(b, hkv, tk, d) * 3
        qp, kp = list(range(offset, offset + tq)), list(range(tk))
        counts = cope.gated_counts(q, k, torch.tensor(qp), torch.tensor(kp), limit)
        inputs = {"q": q, "k": k, "q_positions": qp, "k_positions": kp, "limit": limit}
        count_cases.append({"inputs": inputs, "output": counts})
        table = _f64(_inputs(limit + 1, d, seed + 200))
        p = _exact(counts)  # the counts as the fixture stores them: both sides start from them
        # (a copy goes in: interpolated_bias overwrites its counts with their fractional parts)
        bias_cases.append(
            {
                "inputs": {"q": q, "table": table, "counts": p},
                "output": cope.interpolated_bias(q, table, p.clone()),
            }
        )
    add(
        "gated_counts",
        "p[b][h][i][j] = min(sum over keys t = j..i of sigmoid(q_i . k_t / sqrt(D)), limit); 0 for j > i; "
        "query head h reads key head h // (H / Hkv)",
        count_cases,
        src,
    )
    add(
        "interpolated_bias",
        "z = (1 - w) q . e[floor(p)] + w q . e[ceil(p)], w = p - floor(p)",
        bias_cases,
        src,
    )


def _attention_fixtures(add: Callable[..., None]) -> None:
    """The static math of the schemes that compute attention themselves (`PositionScheme.attend`): FoX's decay
    bias, stick-breaking's weights and PaTH's weights, each from its module's own functions."""
    import torch
    import torch.nn.functional as F

    from octlm.positions import forgetting, stick_breaking

    src = "octlm/positions/forgetting.py"
    decay_cases = []
    for b, h, tq, tk, seed, constant in [
        (1, 2, 6, 6, 41, None),
        (2, 1, 3, 7, 42, None),
        (1, 1, 5, 5, 43, -0.5),
    ]:
        if constant is None:
            # log σ of a few units: gates from near 0 (forget at once) to near 1 (keep everything)
            log_forget = _exact(F.logsigmoid(_f64(_inputs(b * h, tk, seed)).reshape(b, h, tk) * 4 + 1))
        else:  # every gate e^-0.5: the bias is ALiBi's with slope 0.5
            log_forget = torch.full((b, h, tk), constant, dtype=torch.float64)
        c = log_forget.cumsum(-1)  # every key's running sum, as ForgettingPositions.running_sums keeps it
        qp, kp = list(range(tk - tq, tk)), list(range(tk))
        bias = forgetting.decay_bias(c[..., tk - tq :], c, torch.tensor(qp), torch.tensor(kp), torch.float64)
        inputs = {"log_forget": log_forget, "q_positions": qp, "k_positions": kp}
        decay_cases.append({"inputs": inputs, "output": bias})
    add(
        "decay_bias",
        "output[b][h][i][j] = c_i - c_j, c_t = log_forget[b][h][0] + ... + log_forget[b][h][t] (the queries "
        "are the last Tq keys); null stands for -inf (key j after query i)",
        decay_cases,
        src,
    )

    src = "octlm/positions/stick_breaking.py"
    stick_cases = []
    for b, h, hkv, tq, tk, d, seed in [
        (1, 2, 2, 5, 5, 4, 51),
        (2, 4, 2, 3, 7, 4, 52),
        (1, 1, 1, 6, 6, 8, 53),
    ]:
        # times 3: scores of a few units, so that the shares β spread over (0, 1)
        q = _f64(_inputs(b * h * tq, d, seed)).reshape(b, h, tq, d) * 3
        k = _f64(_inputs(b * hkv * tk, d, seed + 100)).reshape(b, hkv, tk, d) * 3
        qp, kp = list(range(tk - tq, tk)), list(range(tk))
        weights = stick_breaking.stick_breaking_weights(q, k, torch.tensor(qp), torch.tensor(kp))
        inputs = {"q": q, "k": k, "q_positions": qp, "k_positions": kp}
        stick_cases.append({"inputs": inputs, "output": weights})
    add(
        "stick_breaking_weights",
        "A_ij = β_ij Π_{j < m < i} (1 - β_im), β_ij = sigmoid(q_i . k_j / sqrt(D)), keys j "
        "before query i only (0 otherwise); query head h reads key head h // (H / Hkv)",
        stick_cases,
        src,
    )

    add(
        "path_weights",
        "softmax over j <= i of q_i . H_i H_(i-1) ... H_(j+1) k_j / sqrt(D), H_s = I - β_s w_s w_s^T: "
        "the weights path_attention records (the queries are the last Tq tokens; with Tq < Tk the earlier "
        "keys come from a first call, as with a KV cache); query head h reads key head h // (H / Hkv)",
        _path_cases(),
        "octlm/positions/householder.py",
    )


def _path_cases() -> list[dict[str, Any]]:
    """PaTH's weights for small fixed q, k and w, β from `householder_factors` over fixed inputs and
    layers."""
    import torch
    from torch import nn

    from octlm.positions import householder

    cases = []
    for b, h, hkv, tq, tk, d, width, seed in [
        (1, 2, 2, 6, 6, 4, 6, 61),
        (2, 4, 2, 5, 5, 4, 8, 62),
        (1, 2, 1, 3, 7, 8, 6, 63),
    ]:
        x = _f64(_inputs(b * tk, width, seed)).reshape(b, tk, width)
        directions = nn.Linear(width, hkv * d, bias=False, dtype=torch.float64)
        strengths = nn.Linear(width, hkv, dtype=torch.float64)
        with torch.no_grad():
            directions.weight.copy_(_f64(_inputs(hkv * d, width, seed + 100)))
            strengths.weight.copy_(_f64(_inputs(hkv, width, seed + 200)) * 2)  # β spread over (0, 2)
            strengths.bias.copy_(_f64(_inputs(1, hkv, seed + 300)[0]))
            w, beta = householder.householder_factors(x, directions, strengths, hkv)
        w, beta = _exact(w), _exact(beta)  # as the fixture stores them: both sides start from these
        q = _f64(_inputs(b * h * tq, d, seed + 400)).reshape(b, h, tq, d) * 2
        k = _f64(_inputs(b * hkv * tk, d, seed + 500)).reshape(b, hkv, tk, d) * 2
        v = torch.zeros_like(k)  # the weights are the point; the values only fill the call
        earlier, cached = None, tk - tq
        # A first call over the earlier tokens leaves their keys transformed, as a KV cache keeps them.
        if cached:
            _, earlier = householder.path_attention(
                k.new_zeros(b, h, cached, d),
                k[:, :, :cached],
                v[:, :, :cached],
                w[:, :, :cached],
                beta[:, :, :cached],
            )
        record: list[torch.Tensor] = []
        householder.path_attention(q, k, v, w[:, :, cached:], beta[:, :, cached:], earlier, record=record)
        cases.append({"inputs": {"q": q, "k": k, "w": w, "beta": beta}, "output": record[0]})
    return cases


def _scaling_fixtures(add: Callable[..., None]) -> None:
    """`model.attention_scaling`'s query factors (octlm/model/decoder.py, `QueryScaling`) by their formulas in
    float64: QueryScaling computes them in float32, whose last bit (2.4e-7 at 4) would be above the site's
    1e-7, and which differs between CPUs' float32 log1p. tests/interop/test_site_fixtures.py checks
    QueryScaling against these values to float32 precision."""
    src = "octlm/model/decoder.py"
    ssmax = [
        ([0.43], list(range(1, 9))),
        ([0.43, 0.3, 1.7], [1, 2, 3, 64, 1000, 4096, 16384, 65536]),
        ([-0.2, 0.0], [5, 6, 7]),
    ]
    add(
        "ssmax_factors",
        "output[h][i] = s[h] * ln(n[i]): scalable softmax's factor on the query of head h that sees "
        "n[i] keys (QueryScaling, model.attention_scaling = 'ssmax')",
        [
            {"inputs": {"s": s, "n": n}, "output": [[sh * math.log(ni) for ni in n] for sh in s]}
            for s, n in ssmax
        ],
        src,
    )
    near = [0, 1, 5, 6, 7, 8, 9, 14, 15, 16, 100, 8190, 8191, 8192, 16382, 16383, 100000, 1048575]
    llama4 = [
        (near, 8192, 0.1),
        (near[:12], 8, 0.1),
        ([0, 1, 2, 3, 4, 5, 6, 7, 8, 1000], 3, 0.37),
        ([0, 50, 99], 1, 0.0),
    ]
    add(
        "llama4_temperature",
        "output[i] = 1 + temperature * ln(1 + floor((positions[i] + 1) / floor)): Llama 4's "
        "factor on the queries of the layers with no position signal (QueryScaling, "
        "model.attention_scaling = 'llama4')",
        [
            {
                "inputs": {"positions": p, "floor": f, "temperature": t},
                "output": [1 + t * math.log1p((i + 1) // f) for i in p],
            }
            for p, f, t in llama4
        ],
        src,
    )


def render(fixture: dict[str, Any]) -> str:
    return json.dumps(fixture, sort_keys=True, indent=1, allow_nan=False) + "\n"


def write_fixtures(out: Path, extra: Sequence[FixtureBuilder] = ()) -> list[Path]:
    """Write every fixture file into `out` (created if needed) and return the paths written."""
    check_output(out, "--out", folder=True)
    written = []
    for name, fixture in build_fixtures(extra).items():
        path = out / name
        with writing(path):  # atomic: a failed write leaves the old file, and a symlink is replaced
            write_atomic(path, render(fixture).encode("utf-8"))
        written.append(path)
    return written


def stale_fixtures(out: Path, extra: Sequence[FixtureBuilder] = ()) -> list[str]:
    """Names of fixture files in `out` that are missing or differ from what would be written now."""
    stale = []
    for name, fixture in build_fixtures(extra).items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != render(fixture):
            stale.append(name)
    return stale
