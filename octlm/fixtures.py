"""`octlm export fixtures`: the JSON files that the web site's TypeScript math is tested against.

The explainer site (web/) recomputes the position math in the browser, in `web/src/math.ts`. So that the two
never drift, this command evaluates the functions of `octlm/positions.py` on small fixed inputs and writes one
JSON file per function into `web/fixtures/`, inputs included. `web/tests/unit/parity.test.ts` runs every
TypeScript twin on the same inputs and fails when any value differs by more than 1e-5, and
`tests/test_fixtures.py` fails when the committed files are not what this command writes today.

The files are stable byte for byte: keys sorted, values converted to float64 and rounded to 12 significant
digits: far below the 1e-5 tolerance, far above the last-bit noise by which one CPU's `sin` may differ from
another's.
A masked entry (an ALiBi bias of minus infinity) is written as `null`, because JSON has no infinity.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from octlm.corpus import write_atomic
from octlm.errors import UserError, check_output, writing
from octlm.jsonable import to_json

DEFAULT_OUT = Path("web") / "fixtures"
SCHEMA = 1
DIGITS = 12


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=str(DEFAULT_OUT),
        help=f"folder for the JSON files (default: {DEFAULT_OUT}, from the repo root)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the files in --out differ from a fresh export",
    )


def _clean(value: Any) -> Any:
    """Plain JSON values: tensors to nested lists, floats to DIGITS significant digits, -inf (masked) to None."""
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


def build_fixtures() -> dict[str, dict[str, Any]]:
    """Every fixture file by name: {"function", "source", "schema", "note", "cases": [{inputs, output}]}."""
    import torch

    from octlm import positions as P

    def f64(rows: list[list[float]]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.float64)

    files: dict[str, dict[str, Any]] = {}

    def add(name: str, note: str, cases: list[dict[str, Any]]) -> None:
        files[f"{name}.json"] = {"function": name, "source": "octlm/positions.py", "schema": SCHEMA,
                                 "note": note, "cases": _clean(cases)}  # fmt: skip

    add("sinusoidal_table", "output[t][2i] = sin(t / base^(2i/width)), output[t][2i+1] = cos(same)", [
        {"inputs": {"length": n, "width": w, "base": b}, "output": P.sinusoidal_table(n, w, b)}
        for n, w, b in [(8, 8, 10000.0), (16, 6, 10000.0), (5, 32, 10000.0), (12, 10, 100.0), (1, 2, 10000.0)]
    ])  # fmt: skip

    similarity_inputs = [_clean(P.sinusoidal_table(12, 16)), _inputs(6, 5, seed=7), [[3.0, 4.0], [-4.0, 3.0]]]
    add("cosine_similarity_matrix", "output[i][j] = cosine of the angle between rows i and j of x", [
        {"inputs": {"x": x}, "output": P.cosine_similarity_matrix(f64(x))} for x in similarity_inputs
    ])  # fmt: skip

    add("rope_frequencies", "output[i] = base^(-2i/head_dim)", [
        {"inputs": {"head_dim": d, "base": b}, "output": P.rope_frequencies(d, b)}
        for d, b in [(8, 10000.0), (16, 500.0), (64, 10000.0), (2, 10000.0)]
    ])  # fmt: skip

    rope_cases = []
    for layout in ("half", "interleaved"):
        for rows, dim, positions, base, seed in [
            (5, 8, [0, 1, 2, 7, 100], 10000.0, 1),
            (3, 4, [3, 3, 250], 100.0, 2),
        ]:
            x = _inputs(rows, dim, seed)
            pos = torch.tensor(positions, dtype=torch.float64)
            out = P.rope_rotate(f64(x), pos, base=base, layout=layout)
            rope_cases.append({"inputs": {"x": x, "positions": positions, "base": base, "layout": layout},
                               "output": out})  # fmt: skip
    add("rope_rotate", "row r of x rotated as position positions[r]: pair i turns by positions[r] * theta_i",
        rope_cases)  # fmt: skip

    add("alibi_slopes", "Press et al.'s head slopes, with their recipe for head counts that are not 2^k", [
        {"inputs": {"n_heads": n}, "output": P.alibi_slopes(n)} for n in [1, 2, 3, 4, 5, 6, 8, 12, 16, 24]
    ])  # fmt: skip

    bias_cases = []
    for heads, q, k in [(4, list(range(6)), list(range(6))), (3, [4, 5], [0, 1, 2, 3, 4, 5, 6])]:
        slopes = P.alibi_slopes(heads).double()
        bias = P.alibi_bias(slopes, torch.tensor(q), torch.tensor(k))
        bias_cases.append({"inputs": {"slopes": slopes, "q_positions": q, "k_positions": k}, "output": bias})
    add("alibi_bias", "output[h][q][k] = -slope_h * (q - k) for k <= q; null stands for -inf (k > q, masked)",
        bias_cases)  # fmt: skip

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
    add("add_positions", "the error add_positions raises for [B, T, C] + [T', C'] (null: the shapes fit)",
        shape_cases)  # fmt: skip
    return files


def render(fixture: dict[str, Any]) -> str:
    return json.dumps(fixture, sort_keys=True, indent=1, allow_nan=False) + "\n"


def write_fixtures(out: Path) -> list[Path]:
    """Write every fixture file into `out` (created if needed) and return the paths written."""
    check_output(out, "--out", folder=True)
    written = []
    for name, fixture in build_fixtures().items():
        path = out / name
        with writing(path):  # atomic: a failed write leaves the old file, and a symlink is replaced
            write_atomic(path, render(fixture).encode("utf-8"))
        written.append(path)
    return written


def stale_fixtures(out: Path) -> list[str]:
    """Names of fixture files in `out` that are missing or differ from what would be written now."""
    stale = []
    for name, fixture in build_fixtures().items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != render(fixture):
            stale.append(name)
    return stale


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.out == str(DEFAULT_OUT) and not out.parent.is_dir():
        raise UserError(
            f"there is no {out.parent}/ folder here; run from the octlm repository root or pass --out DIR"
        )
    if args.check:
        stale = stale_fixtures(out)
        if stale:
            names = ", ".join(stale)
            print(f"{len(stale)} fixture file(s) in {out} are stale ({names}); run `octlm export fixtures`")
            return 1
        print(f"fixtures in {out} are up to date")
        return 0
    written = write_fixtures(out)
    print(f"wrote {len(written)} fixture files to {out}")
    return 0
