"""`octlm score` and `octlm compare` from the command line: what they print and write equals the library's
numbers (octlm/analysis/scores_by_length.py and compare.py), and every mistake is one stderr line with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analysis_runs import train_tiny
from tiny import check_one_line, run_cli

from octlm.analysis.scores_by_length import score_run
from octlm.experiments import lengths_scorer
from octlm.inspect.validation import validation_tokens
from octlm.storage.checkpoint import load_model


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("analysis")
    return {scheme: train_tiny(root, scheme) for scheme in ("alibi", "learned")}


def test_score_prints_and_writes_the_length_experiments_numbers(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "score.json"
    code, stdout, err = run_cli(
        [
            "score",
            str(runs["alibi"]),
            "--lengths",
            "16",
            "8",
            "--windows",
            "4",
            "--sliding",
            "--out",
            str(out),
            "--threads",
            "1",
        ]
    )
    assert (code, err) == (0, "")
    written = json.loads(out.read_text(encoding="utf-8"))
    model, config, tokenizer = load_model(runs["alibi"])
    text = lengths_scorer.make_eval_text(validation_tokens(config, tokenizer), tokenizer, [8, 16], 4)
    assert [(r["length"], r["mode"]) for r in written["records"]] == [
        (8, "windows"),
        (8, "sliding"),
        (16, "windows"),
        (16, "sliding"),
    ]
    for record in written["records"]:
        direct = lengths_scorer.score(model, text, record["length"], record["mode"])
        assert (record["nats"], record["tokens"], record["bytes"], record["bpb"]) == (
            direct.nats,
            direct.tokens,
            direct.bytes,
            direct.bpb,
        )
    assert written == json.loads(json.dumps(score_run(runs["alibi"], [8, 16], None, 4, True)))
    lines = stdout.splitlines()
    assert lines[0].startswith(
        f"tiny-alibi-0 (alibi, trained at 16): 64 tokens ({written['scored_bytes']:,} bytes)"
    )
    r = written["records"][3]
    assert lines[5] == (
        f"  {16:>7} {'sliding':<8} {64:>9,} {r['loss']:7.4f} {r['perplexity']:9.2f} {r['bpb']:9.4f}"
    )
    assert lines[-1] == f"numbers: {out}"


def test_score_refuses_in_one_line(runs: dict[str, Path], tmp_path: Path) -> None:
    binary = tmp_path / "latin1.txt"
    binary.write_bytes(b"caf\xe9 " * 100)
    cases = [
        (["--lengths", "8", "32"], runs["learned"], "--lengths 32 is past the learned position table"),
        (["--lengths", "16", "--windows", "99999"], runs["alibi"], "not --windows 99999; use --windows"),
        (["--lengths", "8", "--text", str(binary)], runs["alibi"], "is not UTF-8 text (byte 3)"),
        (["--lengths", "1"], runs["alibi"], "argument --lengths: 1 is outside [2, "),
        (["--lengths", "8", "--threads", "0"], runs["alibi"], "argument --threads: 0 is outside [1, 4096]"),
        (["--lengths", "8", "--out", str(tmp_path)], runs["alibi"], "--out"),
        (["--lengths", "8"], tmp_path, "is not an octlm run folder"),
    ]
    for flags, run, needle in cases:
        code, stdout, err = run_cli(["score", str(run), *flags])
        check_one_line(code, err, needle)


def test_compare_writes_the_report_and_prints_the_table(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(
        [
            "compare",
            str(runs["alibi"]),
            str(runs["learned"]),
            "--out",
            str(out),
            "--windows",
            "2",
            "--threads",
            "1",
        ]
    )
    assert (code, err) == (0, "")
    numbers = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    assert [r["scheme"] for r in numbers["runs"]] == ["alibi", "learned"] and numbers["differences"] == []
    assert numbers["runs"][0]["attention"]["windows"] == 2
    lines = stdout.splitlines()
    alibi = numbers["runs"][0]
    assert lines[0] == numbers["verdict"] == "comparable: only the scheme differs"
    assert lines[2] == (
        f"  {'tiny-alibi-0':<24} {'alibi':<11} {0:>5} {10:>7,} {alibi['parameters']:>10,} "
        f"{alibi['val_loss']:>9.4f} {alibi['val_bpb']:>9.4f}"
    )
    assert lines[-1].startswith(f"report: {out / 'compare.md'}")
    assert {"compare.md", "curves.png"} <= {p.name for p in out.iterdir()}


def test_compare_refuses_in_one_line(runs: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    cases = [
        ([str(runs["alibi"])], "compare needs at least two runs, got 1"),
        ([str(runs["alibi"]), str(runs["alibi"])], "is given twice"),
        ([str(runs["alibi"]), str(runs["learned"]), "--out", str(tmp_path / "file")], "--out"),
        ([str(runs["alibi"]), str(tmp_path)], "is not an octlm run folder"),
    ]
    for argv, needle in cases:
        code, stdout, err = run_cli(["compare", *argv])
        check_one_line(code, err, needle)
