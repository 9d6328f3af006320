"""The extension experiment: --quick end to end on a tiny corpus, each cell's base and fine-tuning as designed,
the base runs shared and reused from a length experiment, and its option checks."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import tiny
from processes import stopped_in_training

from octlm.cli import main
from octlm.config import config_from_dict
from octlm.experiments import cells, extend, extend_results
from octlm.experiments.evidence import Extend, Verdict, curve_records
from octlm.experiments.lengths_scorer import make_eval_text, score
from octlm.inspect.render import Strong
from octlm.positions.rope_scaling import scaled_frequencies
from octlm.storage.checkpoint import load_checkpoint, load_model
from octlm.storage.run import Run

WORDS = ["def", "class", "return", "import", "self", "value", "data", "print", "if", "else", "for", "while"]
ROWS = ["plain", "pi", "yarn", "alibi"]
LENGTHS = [16, 32, 64, 128]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`octlm experiment extend --quick` on four rows, scored up to 128 tokens (passkey from 128 on)."""
    root = tmp_path_factory.mktemp("extend")
    corpus = tiny.write_corpus(root / "text", 12, 120, words=WORDS, per_line=10)
    out = root / "out"
    argv = [
        "experiment",
        "extend",
        "--quick",
        "--text",
        str(corpus),
        "--data-dir",
        str(root / "data"),
        "--out",
        str(out),
        "--rows",
        *ROWS,
        "--eval-lengths",
        *map(str, LENGTHS),
        "--jobs",
        "1",
        "--no-progress",
    ]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {"root": root, "out": out, "records": records, "corpus": corpus, "argv": argv}


def test_every_row_seed_phase_and_length_is_recorded(quick: dict[str, Any]) -> None:
    keys = {(r["row"], r["seed"], r["phase"], r["length"]) for r in quick["records"]}
    assert keys == {
        (row, seed, phase, n)
        for row in ROWS
        for seed in (1337, 1338)
        for phase in ("before", "after")
        for n in LENGTHS
    }
    assert len(keys) == len(quick["records"])
    for r in quick["records"]:
        assert 0 < r["bpb"] < 20 and r["tokens"] == 4 * 128
        if r["length"] == 128:  # the only length that holds the needle and the question
            assert 0 <= r["passkey"] <= 1 and r["passkey_windows"] == 10  # 2 per depth
            assert set(r["passkey_by_depth"]) == {"0.0", "0.25", "0.5", "0.75", "1.0"}
            assert isinstance(r["retrieval_bits"], float)
        else:
            assert r["passkey"] is None and r["retrieval_bits"] is None
    for name in ("results.md", "results.jsonl", "extend.png", "extend.json"):
        assert (quick["out"] / name).stat().st_size > 0


def test_rope_rows_share_one_base_and_fine_tune_with_their_frequencies(quick: dict[str, Any]) -> None:
    runs = quick["out"] / "runs"
    assert sorted(p.name for p in runs.iterdir()) == sorted(
        [f"{s}-seed{k}" for s in ("rope", "alibi") for k in (1337, 1338)]
        + [f"{r}-seed{k}-extended" for r in ROWS for k in (1337, 1338)]
    )
    base = load_checkpoint(runs / "rope-seed1337", load_optimizer=False).config
    assert base.model.context_length == 16 and base.train.steps == 15 and base.model.rope_scaling == "none"
    expected = {"plain": ("none", 1.0, 0), "pi": ("linear", 2.0, 16), "yarn": ("yarn", 2.0, 16)}
    for row, scaling in expected.items():
        tuned = load_checkpoint(runs / f"{row}-seed1337-extended", load_optimizer=False).config
        mc, tc = tuned.model, tuned.train
        assert (mc.rope_scaling, mc.rope_factor, mc.rope_original_length) == scaling
        assert (
            mc.context_length == 32 and tc.batch_size == 4 and tc.steps == 4
        )  # 8 × 16 tokens per step, as the base
        assert tc.init_from == str(runs / "rope-seed1337") and tc.lr == extend.FINE_TUNE["train.lr"]
    cells = {c.name: json.loads(c.read_text()) for c in (quick["out"] / "cells").glob("*.json")}
    trained = [name for name, c in cells.items() if c["facts"]["info"]["base_trained"]]
    assert sorted(trained) == [
        "alibi-seed1337.json",
        "alibi-seed1338.json",
        "plain-seed1337.json",
        "plain-seed1338.json",
    ]


def test_before_and_after_are_the_models_scored_again(quick: dict[str, Any]) -> None:
    """A record is the score of the model it names: before = the base with the method's frequencies, after =
    the fine-tuned run."""
    from octlm.data.cache import prepare_data

    runs = quick["out"] / "runs"
    base, config, tokenizer = load_model(runs / "rope-seed1338")
    data = prepare_data(config.data, config.model.vocab_size, progress=False)
    text = make_eval_text(data.val, tokenizer, LENGTHS, 4)
    at = {(r["row"], r["phase"], r["length"]): r["bpb"] for r in quick["records"] if r["seed"] == 1338}
    base.positions.set_frequencies(*scaled_frequencies("yarn", 16, 10000.0, 2.0, 16))
    assert score(base, text, 64, "windows").bpb == pytest.approx(at[("yarn", "before", 64)], abs=1e-9)
    tuned, _, _ = load_model(runs / "pi-seed1338-extended")
    assert score(tuned, text, 128, "windows").bpb == pytest.approx(at[("pi", "after", 128)], abs=1e-9)
    assert at[("pi", "before", 16)] != at[("plain", "before", 16)]  # PI's frequencies change even short text


def test_the_curve_is_the_fine_tunings_validation(quick: dict[str, Any]) -> None:
    cell = json.loads((quick["out"] / "cells" / "yarn-seed1337.json").read_text())
    curve = cell["facts"]["info"]["curve"]
    metrics = Run.of(quick["out"] / "runs" / "yarn-seed1337-extended").read_metrics()
    assert [p["step"] for p in curve] == [0, 2, 4]
    assert [p["val_bpb"] for p in curve] == [m["val_bpb"] for m in metrics]
    data = json.loads((quick["out"] / "extend.json").read_text())
    assert data["curves"]["yarn"]["steps"] == [0, 2, 4] and data["extend_length"] == 32


def test_results_md_tables(quick: dict[str, Any]) -> None:
    text = (quick["out"] / "results.md").read_text()
    tables = [b for b in text.split("\n\n") if b.startswith("| row | L = ")]
    # bits per byte after and before; passkey accuracy after; retrieval bits after and before
    assert len(tables) == 5
    for table in tables:
        lines = table.splitlines()
        assert lines[0] == "| row | L = 16 | L = 32 | L = 64 | L = 128 |"
        assert [line.split("|")[1].strip() for line in lines[2:]] == [
            "rope, plain",
            "rope + PI",
            "rope + YaRN",
            "alibi",
        ]
    curve = next(b for b in text.split("\n\n") if b.startswith("| row | step 0"))
    assert curve.splitlines()[0] == "| row | step 0 | step 2 | step 4 | steps to within 0.02 of the end |"


def test_steps_to_extend_and_the_summary() -> None:
    assert extend_results.steps_to_extend([0, 10, 20, 30], [3.0, 2.5, 2.41, 2.4]) == 20
    assert extend_results.steps_to_extend([0, 10], [2.0, 2.0]) == 0
    records = [
        {"row": "pi", "phase": "after", "length": 64, "bpb": b, "passkey": p, "retrieval_bits": None}
        for b, p in ((1.0, 0.5), (2.0, 1.0))
    ]
    settings = extend.Settings(eval_lengths=[64], rows=["pi"])
    summary = extend_results.summarize(records, ["pi"], settings)
    after = next(s for s in summary if s["phase"] == "after")
    assert after["bpb_mean"] == 1.5 and after["bpb_std"] == pytest.approx(0.5**0.5, abs=1e-15)
    assert after["passkey_mean"] == 0.75 and after["retrieval_bits_mean"] is None and after["n_seeds"] == 2


def test_the_best_of_a_column_is_bold_and_a_column_of_ties_has_none() -> None:
    """Passkey accuracy 0 for every row (no model retrieves) bolds nothing; bits per byte bolds the lowest."""
    settings = extend.Settings(eval_lengths=[64, 128], rows=["plain", "pi"])
    summary = [
        {"row": row, "phase": "after", "length": n, "bpb_mean": bpb, "bpb_std": 0.0, "passkey_mean": 0.0}
        | {"passkey_std": 0.0}
        for row, n, bpb in (("plain", 64, 1.5), ("pi", 64, 1.6), ("plain", 128, 1.7), ("pi", 128, 1.7))
    ]
    bpb = extend_results.metric_table(summary, "after", "bpb", ["plain", "pi"], settings)
    assert bpb.rows == [
        ["rope, plain", Strong("1.500 ± 0.000"), "1.700 ± 0.000"],
        ["rope + PI", "1.600 ± 0.000", "1.700 ± 0.000"],
    ]
    key = extend_results.metric_table(
        summary, "after", "passkey", ["plain", "pi"], settings, lower_is_better=False, digits=0, scale=100
    )
    assert key.rows == [["rope, plain", "0 ± 0", "0 ± 0"], ["rope + PI", "0 ± 0", "0 ± 0"]]


def test_base_runs_are_reused_from_a_length_experiment(tmp_path: Path, quick: dict[str, Any]) -> None:
    length_out = tmp_path / "length"
    assert (
        main(
            [
                "experiment",
                "length",
                "--quick",
                "--schemes",
                "rope",
                "--seeds",
                "1",
                "--text",
                str(quick["corpus"]),
                "--data-dir",
                str(quick["root"] / "data"),
                "--out",
                str(length_out),
                "--no-progress",
            ]
        )
        == 0
    )
    before = tiny.snapshot(length_out / "runs")
    out = tmp_path / "extend"
    argv = [
        "experiment",
        "extend",
        "--quick",
        "--rows",
        "ntk",
        "alibi",
        "--seeds",
        "1",
        "--base",
        str(length_out),
        "--text",
        str(quick["corpus"]),
        "--data-dir",
        str(quick["root"] / "data"),
        "--out",
        str(out),
        "--no-progress",
    ]
    code, _, err = tiny.run_cli(argv)
    assert code == 0 and err == (  # the length experiment trained no alibi: said, and trained here
        f"octlm experiment extend: note: --base {length_out}: 1 of 2 base models trained here, as its runs/ "
        "holds no finished run of their config (alibi-seed1337: no run there)\n"
    )
    cell = json.loads((out / "cells" / "ntk-seed1337.json").read_text())
    assert cell["facts"]["info"]["base_run"] == str(length_out / "runs" / "rope-seed1337")
    assert not cell["facts"]["info"]["base_trained"] and not (out / "runs" / "rope-seed1337").exists()
    assert f" --rows ntk alibi --base {length_out} --set " in cell["facts"]["command"]
    alibi = json.loads((out / "cells" / "alibi-seed1337.json").read_text())["facts"]["info"]
    assert alibi["base_trained"] and alibi["base_run"] == str(out / "runs" / "alibi-seed1337")
    assert tiny.snapshot(length_out / "runs") == before  # the other experiment's runs untouched
    tuned = load_checkpoint(out / "runs" / "ntk-seed1337-extended", load_optimizer=False).config
    assert tuned.train.init_from == str(length_out / "runs" / "rope-seed1337")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--rows", "pi", "learned"], "--rows learned unknown; choose from plain pi ntk yarn alibi"),
        (["--extend-length", "16"], "--extend-length 16 must be longer than --train-length 16"),
        (["--curve-interval", "9"], "--curve-interval 9 must be from 1 to --steps 4"),
        (["--set", "model.position=rope"], "octlm experiment extend trains the scheme of each of --rows"),
    ],
)
def test_bad_options_are_one_line(tmp_path: Path, flags: list[str], needle: str) -> None:
    code, _, err = tiny.run_cli(["experiment", "extend", "--quick", "--out", str(tmp_path / "o"), *flags])
    tiny.check_one_line(code, err, needle)
    assert not (tmp_path / "o" / "runs").exists()


@pytest.mark.parametrize("given", ["a file", "a missing folder", "an empty folder", "a folder without runs"])
def test_a_base_that_is_no_length_experiment_is_refused_in_one_line(tmp_path: Path, given: str) -> None:
    """Not silently replaced by training every base model here (an hour at full size): refused, nothing
    written."""
    base = tmp_path / "base"
    if given == "a file":
        base.write_text("runs\n")
    elif given != "a missing folder":
        (base / ("runs" if given == "an empty folder" else "cells")).mkdir(parents=True)
    said = {
        "a file": f"--base {base} is a file, not a length experiment's folder of base models",
        "a missing folder": f"--base {base}: no such folder",
        "an empty folder": f"--base {base} holds no length experiment (no runs in {base}/runs/)",
        "a folder without runs": f"--base {base} holds no length experiment (no runs in {base}/runs/)",
    }[given]
    fix = "give the folder `octlm experiment length --out DIR` wrote, or leave --base out to train the base models"
    out = tmp_path / "out"
    code, stdout, err = tiny.run_cli(
        ["experiment", "extend", "--quick", "--base", str(base), "--out", str(out)]
    )
    tiny.check_one_line(
        code, err, f"{said} to take base models from; {fix} here" if "holds" in said else said
    )
    assert fix in err and stdout == "" and not out.exists()


def test_fine_tune_config_keeps_the_tokens_per_step(tmp_path: Path) -> None:
    base = config_from_dict(
        {
            "model": {"position": "rope", "context_length": 64},
            "train": {"batch_size": 32, "seed": 5, "out_dir": str(tmp_path)},
        }
    )
    tune = extend.fine_tune_config(base, "yarn", tmp_path / "b", extend.Settings(), tmp_path / "runs")
    assert tune.train.batch_size * tune.model.context_length == 32 * 64 and tune.model.context_length == 256
    assert (tune.model.rope_scaling, tune.model.rope_factor, tune.model.rope_original_length) == (
        "yarn",
        4.0,
        64,
    )
    assert tune.train.run_name == "yarn-seed5-extended" and tune.train.eval_interval == 10
    control = extend.fine_tune_config(base, "alibi", tmp_path / "b", extend.Settings(), tmp_path / "runs")
    assert control.model.rope_scaling == "none"


def test_collect_writes_the_claims_of_a_few_cells(quick: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    data_flags = ["--text", str(quick["corpus"]), "--data-dir", str(quick["root"] / "data")]
    flags = ["experiment", "extend", "--quick", "--rows", "plain", "pi", "yarn", "ntk", "--seeds", "1"]
    for cell in ("plain:1337", "pi:1337", "yarn:1337"):  # not ntk:1337
        assert main([*flags, *data_flags, "--out", str(out), "--no-progress", "--only", cell]) == 0
    assert main(["experiment", "extend", "--collect", "--out", str(out), "--no-progress"]) == 0
    text = (out / "results.md").read_text()
    table = next(b for b in text.split("\n## Claims\n\n")[1].split("\n\n") if b.startswith("| paper |"))
    data = json.loads((out / "claims.json").read_text())
    assert [c["key"] for c in data["claims"]] == ["pi-passkey", "yarn-steps-pi", "yarn-steps-plain"]
    for line, claim in zip(table.splitlines()[2:], data["claims"], strict=True):
        assert claim["verdict"] in {v.value for v in Verdict} and f"| **{claim['verdict']}** |" in line
    found = {c["key"]: c for c in data["claims"]}
    # One seed: no interval, so the steps are read and nothing is decided.
    for key, other in (("yarn-steps-pi", "pi"), ("yarn-steps-plain", "plain")):
        reason = found[key]["reason"]  # a curve that never reaches PI's end is named "(not reached ...)"
        assert reason.startswith("yarn steps to pi's end") and reason.endswith(" overlap")
        assert f" and {other} steps to pi's end" in reason
    assert [e["seeds"] for e in found["yarn-steps-plain"]["estimates"]] == [[1337], [1337]]
    # --quick's passkey windows do not fit at its training length: the base's retrieval cannot be read.
    assert found["pi-passkey"]["reason"] == "missing rows: plain passkey before fine-tuning at 16"


def test_cells_of_another_passkey_format_are_refused(quick: dict[str, Any], tmp_path: Path) -> None:
    """A cell scored on the earlier passkey (hidden in corpus text) is not collected beside Mohtashami &
    Jaggi's: its grid names its format, and collecting refuses the odd one out, or one that names none."""
    shutil.copytree(quick["out"] / "cells", tmp_path / "cells")
    path = tmp_path / "cells" / "pi-seed1337.json"
    cell = json.loads(path.read_text())
    assert cell["grid"]["passkey_format"] == "mohtashami-jaggi"
    path.write_text(json.dumps(cell | {"grid": cell["grid"] | {"passkey_format": "corpus-filler"}}))
    code, _, err = tiny.run_cli(["experiment", "extend", "--collect", "--out", str(tmp_path)])
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "pi-seed1337.json was made with a different passkey format (corpus-filler) from " in err
    assert err.rstrip().split("from ")[1].split(" (")[1].startswith("mohtashami-jaggi)")
    del cell["grid"]["passkey_format"]
    path.write_text(json.dumps(cell))
    code, _, err = tiny.run_cli(["experiment", "extend", "--collect", "--out", str(tmp_path)])
    assert code == 2 and "pi-seed1337.json is not a cell file of `octlm experiment extend`" in err
    assert not (tmp_path / "results.md").exists()


def test_the_claims_read_the_records_as_the_experiment_writes_them(quick: dict[str, Any]) -> None:
    """Each row from its own start: YaRN's and plain's steps to PI's end, seed by seed, from the cells'
    curves (step 0 first); the effective windows per seed from the records."""
    found, grid, _ = cells.gathered(quick["out"], extend.AXES)
    e = Extend(quick["records"] + curve_records(found), grid["train_length"])
    ends = {seed: e.curve("pi")[seed][-1][1] for seed in (1337, 1338)}
    for row in ("yarn", "plain"):
        assert e.steps(row, ends, "pi").seeds == (1337, 1338)
        assert {points[0][0] for points in e.curve(row).values()} == {0}  # counted from its own step 0
    for row in ROWS:
        for phase in ("before", "after"):
            windows = {
                r["seed"]: r["effective_window"]
                for r in quick["records"]
                if (r["row"], r["phase"]) == (row, phase)
            }
            window = e.window(row, phase)
            assert window.seeds == (1337, 1338) and set(windows.values()) <= {0, 128}
            assert window.value == sum(windows.values()) / 2
    data = json.loads((quick["out"] / "claims.json").read_text())
    assert [c["key"] for c in data["claims"]] == ["pi-passkey", "yarn-steps-pi", "yarn-steps-plain"]
    assert "| row | before fine-tuning | after fine-tuning |" in (quick["out"] / "results.md").read_text()


@pytest.mark.slow  # a real process (~5-10 s)
@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM")],
)
def test_a_signal_stops_the_fine_tuning_after_its_step_and_ends_as_the_signal_would(
    signum: int, code: int, line: str, tmp_path: Path
) -> None:
    corpus = tiny.write_corpus(tmp_path / "text", 12, 120, words=WORDS, per_line=10)
    experiment = ["extend", "--rows", "pi", "--steps-to-extend", "2000", "--curve-interval", "1000", "--text"]
    rc, last, out = stopped_in_training(signum, [*experiment, str(corpus)], True, tmp_path)
    assert rc == code and last == f"octlm experiment extend: {line}"
    assert (out / "runs" / "pi-seed1337-extended" / "checkpoint").is_dir()  # the step it was in, saved
