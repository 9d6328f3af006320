"""The length experiment: the --quick pipeline end to end, the grid in cells, its option checks and --long's
settings (the scoring pieces that make its numbers comparable are in tests/experiments/test_length_scoring.py)."""

from __future__ import annotations

import json
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import tiny
from processes import stopped_in_training

from octlm.cli import main
from octlm.experiments.claims import CLAIMS
from octlm.experiments.evidence import Length, Verdict
from octlm.experiments.length import AXES, Settings, default_rows, finished_run, unfinished
from octlm.experiments.lengths_scorer import MODES
from octlm.positions.rope_scaling import VARIANTS

SCHEMES = default_rows()  # every registered scheme, and rope+ssmax, nope+ssmax

WORDS = ["def", "class", "return", "import", "self", "value", "data", "print", "if", "else", "for", "while"]
LENGTHS = [16, 32, 64]  # --quick's evaluation lengths; it trains at 16 with two seeds


def write_corpus(folder: Path, files: int = 8, lines: int = 80) -> Path:
    """Small deterministic pseudo-code files: enough validation text for 4 windows of 64 plus context."""
    return tiny.write_corpus(folder, files, lines, words=WORDS, per_line=10)


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`octlm experiment length --quick` on a tiny local corpus, once for every test below."""
    root = tmp_path_factory.mktemp("length")
    corpus = write_corpus(root / "text")
    out, web = root / "out", root / "web" / "length.json"
    argv = [
        "experiment",
        "length",
        "--quick",
        "--text",
        str(corpus),
        "--data-dir",
        str(root / "data"),
        "--out",
        str(out),
        "--export-web",
        str(web),
        "--no-progress",
    ]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {"out": out, "web": web, "records": records, "root": root, "argv": argv}


def test_quick_writes_every_file(quick: dict[str, Any]) -> None:
    out = quick["out"]
    for name in ("results.jsonl", "results.md", "length.png", "length.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for scheme in SCHEMES:
        for seed in (1337, 1338):
            assert (out / "runs" / f"{scheme}-seed{seed}" / "checkpoint" / "model.safetensors").is_file()
    assert quick["web"].read_bytes() == (out / "length.json").read_bytes()


def test_quick_records_cover_every_scheme_variant_seed_length_and_mode(quick: dict[str, Any]) -> None:
    records = quick["records"]
    keys = {(r["scheme"], r["variant"], r["seed"], r["length"], r["mode"]) for r in records}
    assert len(keys) == len(records)
    expected = {
        (s, v, seed, n, m)
        for s in SCHEMES
        for v in (VARIANTS if s == "rope" else [""])
        for seed in (1337, 1338)
        for n in LENGTHS
        for m in MODES
    }
    assert keys == expected
    for r in records:
        assert set(r) >= {"bpb", "ppl", "loss", "tokens", "mode", "status"}
        if r["scheme"] == "learned" and r["length"] > 16:
            assert r["status"] == "no rows" and r["bpb"] is None and r["tokens"] == 0
        else:
            assert r["status"] == "ok" and 0 < r["bpb"] < 20 and r["ppl"] > 1


def test_every_length_scores_the_same_tokens(quick: dict[str, Any]) -> None:
    ok = [r for r in quick["records"] if r["status"] == "ok"]
    assert {(r["tokens"], r["bytes"]) for r in ok} == {(4 * 64, ok[0]["bytes"])}


def test_rope_rows_at_the_training_length(quick: dict[str, Any]) -> None:
    at = {
        (r["variant"], r["seed"], r["mode"]): r["bpb"]
        for r in quick["records"]
        if r["scheme"] == "rope" and r["length"] == 16
    }
    for seed in (1337, 1338):
        for mode in MODES:
            # Dynamic NTK changes nothing up to the training length; the static factor s = 4 does.
            assert at[("dynamic", seed, mode)] == at[("plain", seed, mode)]
            assert at[("pi", seed, mode)] != at[("plain", seed, mode)]


def test_results_md_tables(quick: dict[str, Any]) -> None:
    text = (quick["out"] / "results.md").read_text()
    assert "## Non-overlapping windows" in text and "## Sliding windows" in text
    tables = [block for block in text.split("\n\n") if block.startswith("| scheme | L = ")]
    assert len(tables) == 2
    training = [block for block in text.split("\n\n") if block.startswith("| scheme | final train loss")]
    assert len(training) == 1 and len(training[0].splitlines()) == 2 + len(SCHEMES)
    for table in tables:
        lines = table.splitlines()
        assert lines[0] == "| scheme | L = 16 | L = 32 | L = 64 |"
        body = lines[2:]
        labels = [line.split("|")[1].strip() for line in body]
        assert len(body) == len(SCHEMES) + len(VARIANTS) - 1  # every scheme, plus four RoPE extensions
        assert labels[:2] == ["learned", "sinusoidal"] and labels[2] == "rope"
        assert [label.split(" + ")[1].split(" (")[0] for label in labels[3:7]] == [
            "PI",
            "NTK-aware",
            "dynamic NTK",
            "YaRN",
        ]
        for line in body:
            assert line.count("|") == 5  # label + three lengths
        learned = body[0].split("|")[2:5]
        assert "no rows" not in learned[0] and [c.strip() for c in learned[1:]] == ["no rows", "no rows"]
        assert sum(line.count("**") for line in body) == 2 * 3  # one best per column
        assert "±" in body[1]  # two seeds: a spread


def test_length_json_matches_web_schema(quick: dict[str, Any]) -> None:
    data = json.loads((quick["out"] / "length.json").read_text())
    assert set(data) == {"schema", "command", "train_length", "eval_lengths", "rows"}
    assert data["schema"] == 1 and data["train_length"] == 16 and data["eval_lengths"] == LENGTHS
    assert data["command"].startswith("octlm experiment length --quick")
    keys = {"scheme", "variant", "length", "bpb_mean", "bpb_std", "ppl_mean", "n_seeds", "status"}
    rows = data["rows"]
    assert len(rows) == (len(SCHEMES) + len(VARIANTS) - 1) * len(LENGTHS)
    for row in rows:
        assert set(row) == keys
        assert row["n_seeds"] == 2 and row["status"] in ("ok", "no rows")
        assert row["variant"] == ("" if row["scheme"] != "rope" else row["variant"])
        if row["status"] == "ok":
            assert all(isinstance(row[k], float) for k in ("bpb_mean", "bpb_std", "ppl_mean"))
        else:
            assert row["scheme"] == "learned" and row["length"] > 16
            assert row["bpb_mean"] is None and row["bpb_std"] is None and row["ppl_mean"] is None
    assert {r["variant"] for r in rows if r["scheme"] == "rope"} == {"plain", "pi", "ntk", "dynamic", "yarn"}


def test_a_second_run_reuses_the_trained_models(quick: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    argv = [a for a in quick["argv"] if a != "--no-progress"]
    argv[argv.index("--out") + 1] = str(quick["root"] / "again")
    (quick["root"] / "again" / "runs").parent.mkdir(parents=True, exist_ok=True)
    (quick["root"] / "again" / "runs").symlink_to(quick["out"] / "runs")
    assert main(argv + ["--jobs", "1", "--schemes", "learned", "alibi"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("reused") == 4 and "trained in" not in printed
    again = [json.loads(x) for x in (quick["root"] / "again" / "results.jsonl").read_text().splitlines()]
    first = {(r["scheme"], r["seed"], r["length"], r["mode"]): r["bpb"] for r in quick["records"]}
    assert again and all(first[(r["scheme"], r["seed"], r["length"], r["mode"])] == r["bpb"] for r in again)


# ---------------------------------------------------------------------------------------------------------------
# The grid in cells: --only in separate processes, --collect


def test_only_a_run_trained_to_its_last_step_is_reused(tmp_path: Path) -> None:
    """A run stopped at step 10 of 20 has the same config as a finished one: it is trained again, not scored;
    `unfinished` says why a run is not reused (what `experiment extend --base` reports)."""
    from octlm.training.loop import train

    corpus = tiny.write_train_corpus(tmp_path / "text")
    config = tiny.tiny_config(tmp_path, corpus, steps=20)
    run_dir = tmp_path / "runs" / "stopped"
    assert train(config, run_dir, progress=False, stop_after=10).interrupted
    assert finished_run(run_dir, config) is None and unfinished(run_dir, config) == "stopped at step 10 of 20"
    train(config, run_dir, progress=False, resume=True)
    assert finished_run(run_dir, config) is not None and unfinished(run_dir, config) is None
    assert finished_run(tmp_path / "runs" / "absent", config) is None
    assert unfinished(tmp_path / "runs" / "absent", config) == "no run there"
    (tmp_path / "runs" / "empty").mkdir()
    assert unfinished(tmp_path / "runs" / "empty", config) == "no checkpoint there"
    longer = tiny.tiny_config(tmp_path, corpus, steps=30, lr=0.002, run_name="elsewhere", out_dir="x")
    assert unfinished(run_dir, longer) == (
        f"trained with another config (train.lr {config.train.lr} there, 0.002 here; train.steps 20 there, "
        "30 here)"
    )


def bpb_tables(out: Path) -> list[str]:
    return [
        block
        for block in (out / "results.md").read_text().split("\n\n")
        if block.startswith("| scheme | L = ")
    ]


def timeless(out: Path) -> list[dict]:
    """results.jsonl without its wall-time field."""
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "train_seconds"} for r in records]


def test_cells_in_separate_processes_collect_to_the_one_command_run(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "text")
    grid = [
        "experiment",
        "length",
        "--quick",
        "--schemes",
        "learned",
        "rope",
        "alibi",
        "--seeds",
        "1",
        "--text",
        str(corpus),
        "--data-dir",
        str(tmp_path / "data"),
        "--no-progress",
    ]
    cells, one = tmp_path / "cells-out", tmp_path / "one-out"
    started = time.perf_counter()
    # Three processes at once into one folder, on a fresh token cache (the first to get the lock builds it).
    procs = [
        subprocess.Popen(
            [tiny.PYTHON, "-m", "octlm", *grid, "--out", str(cells), "--only", cell],
            cwd=tmp_path,
            env=tiny.quiet_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for cell in ("rope:1337", "alibi:1337", "learned:1337")
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    spread = time.perf_counter() - started
    assert sorted(p.name for p in (cells / "cells").iterdir()) == [
        ".lock",
        "alibi-seed1337.json",
        "learned-seed1337.json",
        "rope-seed1337.json",
    ]
    assert not (cells / "results.md").exists()  # --only writes cells, nothing else
    code, _, err = tiny.run_cli(["experiment", "length", "--collect", "--out", str(cells), "--no-progress"])
    assert code == 0 and err == ""  # nothing missing
    started = time.perf_counter()
    assert main(grid + ["--out", str(one)]) == 0
    print(
        f"3 cells as 3 processes: {spread:.1f} s; the one-command run: {time.perf_counter() - started:.1f} s"
    )

    # learned, five RoPE rows and alibi × three lengths × two modes; wall time is the one field that may differ
    assert timeless(cells) == timeless(one) and len(timeless(one)) == (1 + 5 + 1) * 3 * 2
    assert bpb_tables(cells) == bpb_tables(one) and len(bpb_tables(one)) == 2
    assert (cells / "length.json").read_bytes() == (one / "length.json").read_bytes()
    assert "Collected from cells run separately" in (cells / "results.md").read_text()
    assert "worker process(es)" in (one / "results.md").read_text()


def test_collect_names_the_missing_cells(quick: dict[str, Any], tmp_path: Path) -> None:
    shutil.copytree(quick["out"] / "cells", tmp_path / "cells")
    (tmp_path / "cells" / "rope-seed1338.json").unlink()
    (tmp_path / "cells" / "learned-seed1337.json").unlink()
    code, out, err = tiny.run_cli(["experiment", "length", "--collect", "--out", str(tmp_path)])
    assert code == 0
    assert err.splitlines() == [
        "octlm experiment length: 2 cell(s) of the grid missing, collected without them: learned:1337 rope:1338"
    ]
    assert "Missing cells, left out: learned:1337, rope:1338." in (tmp_path / "results.md").read_text()
    assert f"from {2 * len(SCHEMES) - 2} cell(s)" in out
    records = timeless(tmp_path)
    assert {(r["scheme"], r["seed"]) for r in records} == {
        (s, k) for s in SCHEMES for k in (1337, 1338) if (s, k) not in (("rope", 1338), ("learned", 1337))
    }
    assert records == [r for r in timeless(quick["out"]) if r in records]  # the same, in the same order
    rows = json.loads((tmp_path / "length.json").read_text())["rows"]
    assert {r["n_seeds"] for r in rows if r["scheme"] in ("rope", "learned")} == {1}


def collect_error(out: Path) -> str:
    """`--collect` of `out`, which must fail with one line on stderr and write no results; that line."""
    code, _, err = tiny.run_cli(["experiment", "length", "--collect", "--out", str(out)])
    assert code == 2 and len(err.splitlines()) == 1, err
    assert not (out / "results.md").exists()
    return err


def test_a_cell_of_other_settings_is_refused_by_a_run_and_by_collect(
    quick: dict[str, Any], tmp_path: Path
) -> None:
    shutil.copytree(quick["out"] / "cells", tmp_path / "cells")
    argv = [a for a in quick["argv"] if a != "--export-web" and a != str(quick["web"])]
    argv[argv.index("--out") + 1] = str(tmp_path)
    other = argv + ["--only", "alibi:1337", "--eval-windows", "2"]
    code, _, err = tiny.run_cli(other)
    tiny.check_one_line(code, err, f"{str(tmp_path)!r} already holds a finished run (30 cell(s)); collect it")
    code, _, err = tiny.run_cli([*other, "--overwrite"])
    tiny.check_one_line(
        code, err, f"{tmp_path} holds cells made with a different --eval-windows (4, here 2; "
    )
    cells_in = {
        folder: {p.name: p.read_bytes() for p in (folder / "cells").glob("*.json")}
        for folder in [tmp_path, quick["out"]]
    }
    assert cells_in[tmp_path] == cells_in[quick["out"]]  # nothing rewritten
    # The cell made elsewhere and copied in: collect refuses it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "runs").symlink_to(quick["out"] / "runs")  # the trained models are reused: only scoring runs
    other[other.index("--out") + 1] = str(elsewhere)
    assert main(other) == 0
    shutil.copy(elsewhere / "cells" / "alibi-seed1337.json", tmp_path / "cells")
    err = collect_error(tmp_path)
    assert "alibi-seed1337.json was made with a different --eval-windows (2) from" in err


@pytest.mark.parametrize("key, value", [("train_length", 32), ("config_sha256", "0" * 64)])
def test_collect_names_the_cell_and_the_setting_that_differ(
    key: str, value: Any, quick: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "cells").mkdir()
    shutil.copy(quick["out"] / "cells" / "alibi-seed1337.json", tmp_path / "cells")
    cell = json.loads((quick["out"] / "cells" / "t5-seed1338.json").read_text())
    cell["grid"][key] = value
    (tmp_path / "cells" / "t5-seed1338.json").write_text(json.dumps(cell))
    err = collect_error(tmp_path)
    assert "t5-seed1338.json" in err and AXES.settings[key] in err and "alibi-seed1337.json" in err


# ---------------------------------------------------------------------------------------------------------------
# Bad options


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--schemes", "rope", "bogus"], "bogus"),
        (["--seeds", "0"], "--seeds 0"),
        (["--train-length", "1"], "--train-length 1"),
        (["--eval-lengths", "0", "16"], "--eval-lengths"),
        (["--rope-factor", "0.5"], "--rope-factor"),
        (["--only", "rope"], "must look like SCHEME:SEED"),
        (["--only", "rope:1339"], "rope:1339 is not a cell"),
        (["--schemes", "alibi", "--only", "rope:1337"], "rope:1337 is not a cell"),
    ],
)
def test_bad_options_are_user_errors(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # The options are checked before any data is read or model trained (the corpus path does not even exist).
    argv = ["experiment", "length", "--quick", "--text", str(tmp_path / "missing"), "--out", str(tmp_path)]
    assert main(argv + flags) == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------------
# --long: evaluation to 16k tokens


def long_settings(*flags: str) -> tuple[Settings, str]:
    import argparse

    from octlm.commands import experiment, experiment_length

    parser = argparse.ArgumentParser()
    experiment_length.add_arguments(parser)
    args = parser.parse_args(list(flags))
    settings = experiment.settings_from_args(Settings, args)
    return settings, experiment.command_line("length", settings, args, {})


def test_long_evaluates_from_64_to_16384_tokens() -> None:
    settings, command = long_settings("--long")
    assert settings.eval_lengths == [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    assert (settings.train_length, settings.eval_windows, settings.seeds) == (64, 2, 3)
    assert "--long" in command and "--eval-lengths 64 128 256 512 1024 2048 4096 8192 16384" in command
    quick, _ = long_settings("--quick", "--long", "--eval-windows", "1")  # the user's flags still win
    assert (quick.train_length, quick.eval_windows, max(quick.eval_lengths)) == (16, 1, 16384)


def test_results_md_has_a_probe_table_for_every_scheme(quick: dict[str, Any]) -> None:
    text = (quick["out"] / "results.md").read_text()
    probe = text[text.index("## What each layer knows of position") :]
    rows = [line for line in probe.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    # --quick: one layer, so the embedding output and block 1 for each scheme, in table order
    assert [r.split("|")[1].strip() for r in rows] == [s for s in SCHEMES for _ in range(2)]
    assert [r.split("|")[2].strip() for r in rows] == ["embedding", "block 1"] * len(SCHEMES)
    cell = json.loads((quick["out"] / "cells" / "learned-seed1337.json").read_text())
    layers = cell["facts"]["info"]["probe"]["layers"]
    # The learned table writes position into the embedding output: the probe reads it far above its control.
    assert layers[0]["ridge"]["r2"] > 0.5 > layers[0]["ridge_control"]["r2"]
    # Only the first seed's models are probed: the table shows one model per scheme.
    later = json.loads((quick["out"] / "cells" / "learned-seed1338.json").read_text())
    assert "probe" not in later["facts"]["info"]


def test_progress_reaches_a_pipe_while_the_experiment_runs(tmp_path: Path) -> None:
    """Redirected, stdout is block-buffered: unflushed, every progress line would arrive only at the end."""
    corpus = write_corpus(tmp_path / "text")
    out = tmp_path / "out"
    argv = [
        "experiment",
        "length",
        "--quick",
        "--schemes",
        "rope",
        "alibi",
        "--seeds",
        "1",
        "--jobs",
        "1",
        "--text",
        str(corpus),
        "--data-dir",
        str(tmp_path / "data"),
        "--out",
        str(out),
    ]
    env = {k: v for k, v in tiny.quiet_env().items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(
        [tiny.PYTHON, "-m", "octlm", *argv],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        lines = [proc.stdout.readline()]  # the data preparation's lines, then the experiment's first two
        while lines[-1] and not lines[-1].startswith("1 worker") and len(lines) < 20:
            lines.append(proc.stdout.readline())
        # Read before the first training ends: no cell (let alone results.md) is written yet.
        assert not (out / "results.md").exists() and not list(out.glob("cells/*.json"))
        assert lines[-2].startswith("length experiment: 2 of 2 trainings") and lines[-1].startswith(
            "1 worker"
        )
    finally:
        proc.kill()
        proc.communicate()


def claims_of(out: Path, experiment: str) -> tuple[list[str], dict[str, Any]]:
    """results.md's claims table (its body lines) and claims.json: every claim of `experiment`, a verdict
    each."""
    text = (out / "results.md").read_text()
    section = text.split("\n## Claims\n\n", 1)[1]
    table = next(b for b in section.split("\n\n") if b.startswith("| paper | claim |")).splitlines()[2:]
    data = json.loads((out / "claims.json").read_text())
    keys = [c.key for c in CLAIMS if c.experiment == experiment]
    assert data["experiment"] == experiment and [c["key"] for c in data["claims"]] == keys
    assert len(table) == len(keys)
    for line, claim in zip(table, data["claims"], strict=True):
        assert claim["verdict"] in {v.value for v in Verdict} and f"| **{claim['verdict']}** |" in line
    return table, {c["key"]: c for c in data["claims"]}


def test_collect_writes_the_claims_of_a_few_cells(quick: dict[str, Any], tmp_path: Path) -> None:
    flags = [
        "experiment",
        "length",
        "--quick",
        "--schemes",
        "rope",
        "alibi",
        "sinusoidal",
        "--seeds",
        "1",
        "--text",
        str(write_corpus(tmp_path / "text")),
        "--data-dir",
        str(quick["root"] / "data"),
        "--out",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    for cell in ("rope:1337", "alibi:1337"):
        assert main([*flags, "--only", cell]) == 0
    assert main(["experiment", "length", "--collect", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    _, found = claims_of(tmp_path / "out", "length")
    # One seed: no interval, so nothing is decided; sinusoidal has no cell; rope and alibi are read.
    assert found["alibi-flat"]["reason"] == (
        "alibi rise in bpb 16 -> 64's interval holds near (0.02); missing rows: sinusoidal at 16 tokens; "
        "rope rise in bpb 16 -> 64's interval holds near (0.02)"
    )
    assert found["xpos-length"]["reason"] == "missing rows: xpos at 64 tokens"


def test_the_claims_read_the_records_as_the_experiment_writes_them(quick: dict[str, Any]) -> None:
    _, found = claims_of(quick["out"], "length")
    n = Length(quick["records"])
    assert (n.train_length, n.longest) == (16, 64)
    rise = n.rise("alibi")
    assert rise.seeds == (1337, 1338) and rise.n == 2
    alibi = [r for r in quick["records"] if (r["scheme"], r["mode"]) == ("alibi", "windows")]
    at = {(r["seed"], r["length"]): r["bpb"] for r in alibi}
    assert rise.value == pytest.approx(((at[1337, 64] - at[1337, 16]) + (at[1338, 64] - at[1338, 16])) / 2)
    plain = ("rope", "plain", "windows", 64)
    at_64 = [
        r["bpb"] for r in quick["records"] if (r["scheme"], r["variant"], r["mode"], r["length"]) == plain
    ]
    assert n.bpb("rope", 64).value == pytest.approx(statistics.fmean(at_64)) and len(at_64) == 2
    assert {e["label"] for e in found["xpos-length"]["estimates"]} == {"xpos bpb at 64", "rope bpb at 64"}


# Stopping: a signal during a training finishes its step and ends the command as the signal would, no cell


@pytest.mark.slow  # a real process (~5-10 s)
@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM")],
)
def test_a_signal_stops_the_training_after_its_step_and_ends_as_the_signal_would(
    signum: int, code: int, line: str, tmp_path: Path
) -> None:
    experiment = [
        "length",
        "--schemes",
        "rope",
        "--steps",
        "2000",
        "--text",
        str(write_corpus(tmp_path / "text")),
    ]
    rc, last, out = stopped_in_training(signum, experiment, False, tmp_path)
    assert rc == code and last == f"octlm experiment length: {line}"
    assert (out / "runs" / "rope-seed1337" / "checkpoint").is_dir()  # the step it was in, saved
