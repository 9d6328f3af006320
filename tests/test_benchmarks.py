"""Smoke test for benchmarks/bench.py: every section runs end to end on a tiny shape and writes its report.

No speed is asserted (the machine is shared); only that the command works and its outputs are well formed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from octlm.config import ModelConfig
from octlm.model.decoder import Decoder

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def benchmarks() -> Iterator[None]:
    """benchmarks/ on sys.path, as `python benchmarks/bench.py` has it (Python puts a script's folder first),
    so that bench.py and decode_breakdown.py find their sibling modules (measure.py, render.py, ...)."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def bench(benchmarks):
    return importlib.import_module("bench")


@pytest.fixture(scope="module")
def measure(benchmarks):
    return importlib.import_module("measure")


@pytest.fixture(scope="module")
def measure_decode(benchmarks):
    return importlib.import_module("measure_decode")


@pytest.mark.slow  # about 15 s of CPU; over 30 s of wall time when the machine is busy
def test_every_section_runs_and_writes_json_and_markdown(bench, measure_decode, tmp_path, monkeypatch):
    tiny = dict(vocab_size=300, d_model=32, n_layers=1, n_heads=2, context_length=16, batch=2)
    monkeypatch.setitem(bench.CONFIGS, "tiny", tiny)
    s = bench.settings(quick=True)
    s.update(
        peak_sizes=[64],
        train=["tiny"],
        context="tiny",
        lengths=[16, 32],
        generation="tiny",
        new_tokens=4,
        embedding="tiny",
        tokenizer_bytes=20_000,
        tokenizer_reps=1,
        reps=1,
        context_reps=1,
        warmup=0,
        task_cells=["copy"],
    )
    r = bench.run_benchmarks(s, tmp_path, log=lambda msg: None)

    data = json.loads((tmp_path / f"{r['machine']['device']}-quick.json").read_text())
    md = (tmp_path / f"{r['machine']['device']}-quick.md").read_text()
    rows = data["training"]["tiny"]["rows"]
    assert {"octlm learned", "octlm alibi", "HF GPT2LMHeadModel", "HF LlamaForCausalLM"} <= set(rows)
    assert all(row["tokens_per_s"]["median"] > 0 for row in rows.values())
    # learned has 16 rows: length 32 is reported as "no rows", every other scheme has a latency and a memory figure
    ctx = {(row["scheme"], row["length"]): row for row in data["context"]["rows"]}
    assert ctx[("learned", 32)].get("no_rows")
    assert ctx[("rope", 32)]["latency_ms"]["median"] > 0
    assert ctx[("alibi", 32)]["peak_memory_bytes"] is not None
    assert data["generation"]["rows"]["octlm learned, KV cache"]["tokens_per_s"]["median"] > 0
    # the decoding floor times the tiny model's own weights: qkv, proj, fc, proj and the head, 4 bytes each
    assert data["generation"]["rows"][measure_decode.FLOOR]["tokens_per_s"]["median"] > 0
    # `octlm generate`'s table: each CLI row's share of both floors, from the medians of the same run
    gen = data["generation"]["rows"]
    med = {k: gen[k]["tokens_per_s"]["median"] for k in data["generation"]["cli_rows"]}
    greedy, floors = measure_decode.CLI_GREEDY, (measure_decode.FLOOR_1, measure_decode.FLOOR_DENSE_1)
    shares = " | ".join(f"{100 * med[greedy] / med[f]:.0f}%" for f in floors)
    assert f"| {shares} | {med[greedy] / med[measure_decode.HF_GREEDY]:.2f}× |" in md
    weights = (32 * 3 * 32 + 32 * 32 + 2 * 32 * 4 * 32) + 300 * 32  # one layer, C 32, V 300
    assert data["generation"]["weight_megabytes_per_token"] == pytest.approx(4 * weights / 1e6)
    assert data["embedding"]["ratios"]["one-hot / lookup"] > 0
    assert data["tokenizer"]["rows"]["1024"]["train_s"]["median"] > 0
    cell = data["task_cells"]["copy"]["steps_per_s"]
    assert set(cell) == {"octlm", "octlm, drawing its batches", "HF GPT2LMHeadModel"}
    assert all(row["median"] > 0 for row in cell.values())
    headings = (
        "Matmul peak",
        "Training tokens/s",
        "FLOPs/token",
        "no rows",
        "Generation",
        "Tokenizer",
        "Task battery cell",
    )
    for heading in headings:
        assert heading in md


def test_hf_labels_score_exactly_the_answer_tokens_octlm_scores(benchmarks):
    """measure_tasks.hf_batch: HF drops the first label and shifts the rest by one, so after its shift the
    labels are octlm's targets where the answer mask is set and -100 elsewhere, on the same inputs. Copy's
    inputs are its tokens; MQAR's are not (its answers are read as `<pad>`), which HF's shifted labels cannot
    express, so the benchmark times no MQAR cell."""
    import numpy as np

    from octlm.experiments.task_batches import batch_of
    from octlm.experiments.tasks import TASKS

    hf_batch = importlib.import_module("measure_tasks").hf_batch
    rng = np.random.default_rng(0)
    ids, targets, mask = batch_of([TASKS["copy"].example(rng, n) for n in (1, 3, 8)])
    full, labels = hf_batch(ids, targets, mask)
    assert torch.equal(full[:, :-1], ids) and torch.equal(full[:, 1:], targets)
    assert torch.equal(labels[:, 1:], targets.masked_fill(~mask, -100))
    assert (labels[:, 0] == -100).all() and mask.any()


@pytest.mark.parametrize("name", ["a", "b", "c"])
def test_flops_per_token_matches_the_closed_form_for_octlm_and_hf_gpt2(measure, name):
    # Written out by hand: per layer qkv 3C² + 3C, out proj C² + C, MLP 8C² + 5C, two LayerNorms 4C; the final
    # norm 2C; the tied head V·C. Config b is the trap: its MLP width 4·C equals V, so a shape test drops fc.
    c = measure.CONFIGS[name]
    V, C, L, T = c["vocab_size"], c["d_model"], c["n_layers"], c["context_length"]
    expected = 6 * (L * (12 * C * C + 13 * C) + 2 * C + V * C) + 12 * L * T * C
    octlm = Decoder(measure.octlm_config(name, "learned"))
    assert measure.flops_per_token(octlm, name) == expected
    assert measure.flops_per_token(measure.hf_gpt2(name), name) == expected
    # Position schemes add no matmul: T5's bucket table is a lookup, RoPE and ALiBi have no parameters.
    for position in ("t5", "rope", "alibi"):
        assert measure.flops_per_token(Decoder(measure.octlm_config(name, position)), name) == expected


@pytest.mark.slow  # five timings of config b, 128 tokens each, one round after the warm-up
def test_decode_breakdown_runs_and_its_parts_are_consistent(benchmarks, capsys):
    module = load_breakdown()
    ms = module.main(["--threads", "1", "--rounds", "1"])
    assert list(ms) == [
        "step",
        "floor (GEMVs alone)",
        "no GEMV (every other op)",
        "GEMVs inside the step",
        "floor, paused",
    ]
    assert all(v > 0 for v in ms.values())
    # The printout is the returned figures, in order, then their sum and the ratio (which timing is smaller
    # than which is the machine's business: a wall-clock comparison would flake on a busy runner).
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "config b, learned, batch 1, 128 new tokens, 1 thread(s); median ms per new token"
    assert lines[1:6] == [f"  {k:40s} {v:.3f}" for k, v in ms.items()]
    total = ms["floor (GEMVs alone)"] + ms["no GEMV (every other op)"]
    assert lines[6] == f"  {'floor + no GEMV':40s} {total:.3f}  (step / that = {ms['step'] / total:.2f})"
    assert len(lines) == 7


def load_breakdown():
    spec = importlib.util.spec_from_file_location("decode_breakdown", BENCHMARKS / "decode_breakdown.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hollow_step_has_no_gemv_and_the_timed_one_computes_the_same(benchmarks):
    """decode_breakdown's stand-ins: `Ready` layers give zero logits of the right shape; `Timed` layers give
    the step's own logits and clock every call (4 per block and the head, per step)."""
    module = load_breakdown()
    config = ModelConfig(vocab_size=64, d_model=16, n_layers=2, n_heads=2, d_ff=32, context_length=8)
    model = Decoder(config).eval()
    prompt = torch.tensor([[1, 2, 3]])
    outputs = []
    clock = [0.0]
    calls = []
    for wrap in (None, module.Ready, lambda d: module.Timed(d, clock)):
        step = module.DecodeStep(model)
        if wrap is not None:
            module.swap_dense(step, wrap)
        with torch.inference_mode():
            cache = model.new_cache(1, 8)
            model(prompt, cache=cache)
            before = clock[0]
            outputs.append(step(torch.tensor([4]), cache))
            calls.append(clock[0] - before)
    plain, hollow, timed = outputs
    assert hollow.shape == plain.shape == (1, 64) and not hollow.any() and plain.any()
    assert torch.equal(timed, plain) and calls[2] > 0 and calls[0] == calls[1] == 0


class SteppingClock:
    """A stand-in for `time` in decode_breakdown: every `perf_counter()` call moves it on by `step` seconds, so
    what the breakdown counts follows from its calls alone, not from how busy the machine is."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_the_paused_floor_counts_only_its_gemvs(benchmarks, monkeypatch):
    """`floor(..., pause)` spins `pause` seconds after each round, outside the count."""
    module = load_breakdown()
    clock = SteppingClock(0.001)
    monkeypatch.setattr(module, "time", clock)
    layers, inputs = [module.Dense(torch.nn.Linear(8, 4))], [torch.randn(1, 8)]
    assert module.floor(layers, inputs, 5) == pytest.approx(5 * 0.001)  # one tick per round: start to end
    clock.now = 0.0
    counted = module.floor(layers, inputs, 5, pause=0.01)
    assert counted == pytest.approx(5 * 0.001)  # the same count: the pauses are not in it
    assert clock.now >= 5 * 0.01  # but the clock went through five pauses of 10 ms


@pytest.mark.slow  # the documented smoke command itself: config a, 3 repetitions, every section (~15-60 s)
def test_the_quick_command_runs_as_documented(tmp_path):
    import subprocess

    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (md,) = tmp_path.glob("*-quick.md")
    (js,) = tmp_path.glob("*-quick.json")
    data = json.loads(js.read_text())
    assert data["training"]["a"]["rows"]["octlm learned"]["tokens_per_s"]["n"] == 3
    assert "| octlm learned |" in md.read_text() and "Generation" in done.stdout


@pytest.mark.slow  # the decoding section alone at config a, 16 new tokens, 2 repetitions (~10-30 s)
def test_only_decode_takes_its_repetitions_and_reports_both_floors(tmp_path, measure_decode):
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "bench.py"),
            "--only",
            "decode",
            "--quick",
            "--reps",
            "2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (js,) = tmp_path.glob("*-decode.json")
    rows = json.loads(js.read_text())["generation"]["rows"]
    for row in (measure_decode.CLI_GREEDY, measure_decode.FLOOR_1, measure_decode.FLOOR_DENSE_1):
        assert rows[row]["tokens_per_s"]["n"] == 2 and rows[row]["tokens_per_s"]["median"] > 0
    assert "% of the [in, out] floor" in done.stdout


def test_reps_below_one_is_a_usage_error(bench, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["--reps", "0"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "bench.py: error: --reps 0: give at least 1 repetition"


def test_a_memory_worker_past_its_time_is_one_log_line_and_no_rows(benchmarks, monkeypatch):
    """The worker is a real process (a fresh Python importing torch); 0.05 s is not enough for it to start."""
    measure_forward = importlib.import_module("measure_forward")
    monkeypatch.setattr(measure_forward, "MEMORY_WORKER_SECONDS", 0.05)
    lines: list[str] = []
    assert measure_forward.memory_rows("a", [16], lines.append, ["rope"]) == {}
    assert lines == ["memory worker stopped after 0.05 s (lengths [16]); its rows are left out"]


def test_the_threads_section_runs_octlm_train_and_reads_its_speed_and_threads(
    benchmarks, tmp_path, monkeypatch
):
    measure_threads = importlib.import_module("measure_threads")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the default must be octlm's, as a user gets it
    speed, used = measure_threads.train_speed(1, 2, str(tmp_path))
    assert speed > 0 and used == 1
    render = importlib.import_module("render")
    row = {"median": 2000.0, "min": 1000.0, "max": 3000.0, "n": 1, "threads": [1, 2]}
    rows = {name: row for name in measure_threads.CHOICES}
    lines = render.threads_section({"steps": 5, "quiet": rows, "one competing process": rows})
    assert lines[4] == "| quiet | octlm default | 1/2 | 2,000 (1,000–3,000) | 1.00× |"
    assert len(lines) == 4 + 2 * len(measure_threads.CHOICES) + 1


def test_the_schemes_section_trains_the_length_experiments_models(benchmarks, tmp_path):
    """Every row's model is the one `octlm experiment length` trains (day1 with its FULL_DEFAULTS at context
    64), field for field, and the training batch is its batch: d_model 128, 2 layers, 4 heads, V 1024, B 32."""
    from octlm.config import load_config
    from octlm.experiments import length

    measure_schemes = importlib.import_module("measure_schemes")
    base = load_config(None, length.FULL_DEFAULTS)
    rows = length.default_rows()
    assert {"fox", "path", "stick-breaking", "rope+ssmax", "nope+ssmax", "nope"} <= set(rows)
    for row in rows:
        trained = length.run_config(base, row, 0, length.Settings(), tmp_path)
        assert measure_schemes.row_config(measure_schemes.LENGTH, row) == trained.model, row
    shape = dict(vocab_size=1024, d_model=128, n_layers=2, n_heads=4, context_length=64, batch=32)
    assert measure_schemes.CONFIGS[measure_schemes.LENGTH] == shape


def test_the_memory_worker_builds_rows_only_inside_the_patch(benchmarks):
    measure_forward = importlib.import_module("measure_forward")
    measure_schemes = importlib.import_module("measure_schemes")
    with measure_schemes.rows_in_memory_worker():
        scaled = measure_forward.octlm_config("a", "nope+ssmax")
        plain = measure_forward.octlm_config("a", "rope")
    assert (scaled.position, scaled.attention_scaling) == ("nope", "ssmax")
    assert plain == measure_forward.octlm_config("a", "rope")  # a scheme's config as before the patch
    assert measure_forward.octlm_config("a", "nope+ssmax").position == "nope+ssmax"  # restored: no row names


def test_the_schemes_section_measures_every_row_against_nope(benchmarks, monkeypatch):
    """A tiny shape, 2 rounds, a fresh worker process per row (about 5 s): the learned table stops at 16 rows,
    so at 32 tokens it has "no rows"; the ssmax row reaches the worker (which would fail on its name without
    `rows_in_memory_worker`); every ratio is over the NoPE row of the same run."""
    measure_schemes = importlib.import_module("measure_schemes")
    render = importlib.import_module("render")
    tiny = dict(vocab_size=300, d_model=32, n_layers=1, n_heads=2, context_length=16, batch=2)
    monkeypatch.setitem(measure_schemes.CONFIGS, "tiny", tiny)
    rows = ["learned", "rope", "nope", "nope+ssmax"]
    sc = measure_schemes.bench_schemes("tiny", 32, 0, 2, lambda msg: None, rows)
    out = sc["rows"]
    assert list(out) == rows and sc["length"] == 32 and sc["threads"] == 1
    assert out["learned"]["no_rows"] and out["learned"]["peak_memory_bytes"] is None
    nope = out["nope"]
    for name in ("rope", "nope+ssmax"):
        row = out[name]
        assert row["peak_memory_bytes"] > 0 and row["forward_s"] > 0
        assert row["memory_over_nope"] == row["peak_memory_bytes"] / nope["peak_memory_bytes"]
        assert row["forward_over_nope"] == row["forward_s"] / nope["forward_s"]
    for row in out.values():
        assert row["tokens_per_s"]["n"] == 2 and len(row["samples"]) == 2
        assert row["train_over_nope"] == row["tokens_per_s"]["median"] / nope["tokens_per_s"]["median"]
        # per round: this row's tokens/s over NoPE's in the same round, so the ratio's range holds both rounds'
        per_round = [a / b for a, b in zip(row["samples"], nope["samples"], strict=True)]
        assert row["train_over_nope_per_round"]["min"] == pytest.approx(min(per_round), rel=1e-12)
        assert row["train_over_nope_per_round"]["max"] == pytest.approx(max(per_round), rel=1e-12)
    assert nope["train_over_nope"] == nope["memory_over_nope"] == 1.0
    lines = render.schemes_section(sc)
    table = lines[lines.index("|---|---|---|---|---|---|") + 1 : -1]
    assert [line.split(" | ")[0] for line in table] == [f"| {name}" for name in rows]

    def train(row: dict) -> str:
        spread = row["train_over_nope_per_round"]
        return (
            f"{render.fmt_range(row['samples'])} | {row['train_over_nope']:.2f}× "
            f"({spread['min']:.2f}–{spread['max']:.2f})"
        )

    rope = out["rope"]
    assert table[0] == f"| learned | {train(out['learned'])} | no rows | | no rows |"
    assert table[1] == (
        f"| rope | {train(rope)} | {rope['peak_memory_bytes'] / 2**20:,.1f} | "
        f"{rope['memory_over_nope']:.2f}× | {rope['forward_s']:.2f} ({rope['forward_over_nope']:.2f}×) |"
    )
