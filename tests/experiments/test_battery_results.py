"""The task battery end to end (`octlm experiment tasks`) and its results
(octlm/experiments/battery_results.py): the files a tiny battery writes, the grid in cells collected to the one-command run byte for byte, missing and
mismatched cells, the claims section, and the summaries, baselines and marks behind the tables against
hand-made records."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tiny

from octlm.cli import main
from octlm.experiments import baselines, battery_results, cells
from octlm.experiments.battery_results import (
    Reading,
    Summary,
    readings,
    shown_records,
    split_seeds,
    summarize,
    task_table,
)
from octlm.experiments.evidence import PER_TOKEN, across_seeds
from octlm.experiments.tasks import Passkey
from octlm.inspect.render import Code, Strong

TASKS, ROWS, SEEDS = ["copy", "counting", "passkey"], ["learned", "rope+random", "nope"], [0, 1]
# passkey runs only on the rows a claim reads (battery.CLAIMED_ROWS): not on the learned table
KEPT = [(t, r) for t in TASKS for r in ROWS if (t, r) != ("passkey", "learned")]
GRID = [
    "experiment",
    "tasks",
    "--quick",
    "--tasks",
    *TASKS,
    "--schemes",
    *ROWS,
    "--seeds",
    "2",
    "--steps",
    "3",
    "--examples",
    "5",
    "--factors",
    "1",
    "2",
]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny battery in one command, in this process (`--jobs 1`), once for the tests below."""
    root = tmp_path_factory.mktemp("tasks")
    out, web = root / "one", root / "web" / "tasks.json"
    code, stdout, err = tiny.run_cli([*GRID, "--jobs", "1", "--out", str(out), "--export-web", str(web)])
    assert code == 0 and err == "", err
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {"out": out, "web": web, "records": records, "stdout": stdout}


def test_every_file_is_written(quick: dict[str, Any]) -> None:
    out = quick["out"]
    for name in ("results.jsonl", "results.md", "tasks.png", "passkey.png", "tasks.json", "claims.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for name in ("tasks.png", "passkey.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (out / "cells").glob("*.json")) == sorted(
        f"{t}-{r}-seed{s}.json" for t, r in KEPT for s in SEEDS
    )
    assert quick["web"].read_bytes() == (out / "tasks.json").read_bytes()


def test_records_cover_the_grid_and_learned_has_no_rows_past_its_table(quick: dict[str, Any]) -> None:
    records = quick["records"]
    keys = [(r["task"], r["scheme"], r["seed"], r["size"], r["depth"]) for r in records]
    assert len(set(keys)) == len(keys)
    sizes = {"copy": [8, 16], "counting": [16, 32], "passkey": [32, 64]}
    depths = {"passkey": [None, *Passkey.depths]}
    expected = {
        (t, r, s, n, d) for t, r in KEPT for s in SEEDS for n in sizes[t] for d in depths.get(t, [None])
    }
    assert set(keys) == expected
    for r in records:
        assert r["tokens"] > 0 and (r["steps"], r["learned_at"]) == (3, None)
        if r["scheme"] == "learned" and r["size"] == sizes[r["task"]][1]:
            assert (r["status"], r["hits"], r["accuracy"], r["token_hits"]) == ("no rows", None, None, None)
        else:
            assert (
                r["status"] == "ok"
                and 0 <= r["hits"] <= r["examples"]
                and r["accuracy"] == r["hits"] / r["examples"]
                and 0 <= r["token_hits"] <= r["tokens"]
            )


def test_results_md_has_a_table_per_task_and_says_what_it_took(quick: dict[str, Any]) -> None:
    md = (quick["out"] / "results.md").read_text()
    for task in TASKS:
        assert f"\n## {task}\n" in md
    assert "| row | 16 (trained) | 32 (2x) | learned at step, per seed (cap 3) |" in md
    assert "| row | 16 (trained) | 32 (2x) |\n" in md and "**Per token**" in md and "no rows" in md
    assert "| `learned` not learned |" in md and "| *chance* |" in md and "| *majority* |" in md
    assert "\n## Claims\n" in md and "| Ruoss et al. 2023 |" in md and "**inconclusive**" in md
    assert "16 cells in " in md and "with 1 worker process(es)" in md
    passkey = md[md.index("\n## passkey\n") :]
    assert "Run only on the rows a claim reads; not on learned (`--every-row` runs them" in passkey
    assert "| `learned`" not in passkey and "| `nope`" in passkey
    assert "Run only on" not in md[: md.index("\n## passkey\n")]
    assert "![Exact match against size" in md and "(tasks.png)" in md and "(passkey.png)" in md
    lines = [line for line in quick["stdout"].splitlines() if line.startswith("[")]
    first = {"copy": 8, "counting": 16, "passkey": 32}  # each task's largest training size
    assert len(lines) == 16 and all(f" exact match {first[line.split()[1]]}:" in line for line in lines)


def test_the_site_json_holds_sizes_rows_and_seeds(quick: dict[str, Any]) -> None:
    web = json.loads(quick["web"].read_text())
    assert web["schema"] == 1 and web["rows"] == ROWS and web["seeds"] == SEEDS
    assert web["tasks"]["passkey"]["rows"] == ["rope+random", "nope"] and web["tasks"]["copy"]["rows"] == ROWS
    assert not any(r["task"] == "passkey" and r["scheme"] == "learned" for r in web["results"])
    copy = web["tasks"]["copy"]
    assert {k: copy[k] for k in ("train_sizes", "counts", "test_sizes")} == {
        "train_sizes": [1, 8],
        "counts": "items",
        "test_sizes": [8, 16],
    }
    expected = baselines.baselines(["copy"], factors=(1, 2))
    assert [(b["size"], b["chance"], b["majority"]) for b in copy["baselines"]] == [  # four decimals, as all
        (b.size, pytest.approx(vars(b.chance), abs=1e-4), pytest.approx(vars(b.majority), abs=1e-4))
        for b in expected
    ]
    assert set(copy["not_learned"]) == set(ROWS) and copy["learned_at"] == {r: [None, None] for r in ROWS}
    assert [c["key"] for c in web["claims"]][:2] == ["kazemnejad-nope", "ruoss-rope"]
    written = json.loads((quick["out"] / "claims.json").read_text())
    assert written["experiment"] == "tasks"
    assert [(c["key"], c["verdict"], c["reason"]) for c in written["claims"]] == [
        (c["key"], c["verdict"], c["reason"]) for c in web["claims"]
    ]
    assert web["depths"] == list(Passkey.depths)
    copy_rope = next(
        r for r in web["results"] if (r["task"], r["scheme"], r["size"]) == ("copy", "rope+random", 16)
    )
    assert len(copy_rope["seeds"]) == 2 and copy_rope["examples"] == 10
    assert copy_rope["mean"] == pytest.approx(sum(copy_rope["seeds"]) / 2, abs=1e-4)
    assert copy_rope["tokens"] == 10 * 16 and len(copy_rope["token_seeds"]) == 2
    token_hits = round(sum(copy_rope["token_seeds"]) * 5 * 16)  # 5 examples of 16 tokens per seed
    pooled = baselines.token_interval(token_hits, 10 * 16, 10)  # n: the 10 examples, not the 160 tokens
    expected = across_seeds(pooled, copy_rope["token_seeds"])
    # the seeds are written to 4 decimals, which t(1) = 12.7 multiplies in the spread: 1e-3
    assert copy_rope["token_interval"] == [pytest.approx(bound, abs=1e-3) for bound in expected]
    learned = next(
        r for r in web["results"] if (r["task"], r["scheme"], r["size"]) == ("copy", "learned", 16)
    )
    assert learned["mean"] is None and learned["interval"] is None and learned["seeds"] == []


def test_worker_processes_write_the_cells_one_process_does(quick: dict[str, Any], tmp_path: Path) -> None:
    argv = [
        *GRID,
        "--tasks",
        "copy",
        "--schemes",
        "rope+random",
        "nope",
        "--jobs",
        "2",
        "--out",
        str(tmp_path),
    ]
    code, stdout, err = tiny.run_cli(argv)
    assert code == 0 and err == "" and "4 cells in " in stdout and "with 2 worker process(es)" in stdout
    for cell in (tmp_path / "cells").glob("*.json"):
        mine, theirs = (json.loads(p.read_text()) for p in (cell, quick["out"] / "cells" / cell.name))
        assert mine["records"] == theirs["records"], cell.name


def timeless(md: str) -> str:
    """results.md without its line on time, the one thing a run in cells may differ in."""
    return "\n".join(line for line in md.splitlines() if "min of cell time" not in line)


@pytest.mark.slow
def test_cells_in_separate_processes_collect_to_the_one_command_run(
    quick: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "cells-out"
    halves = [[f"{t}:{r}:{s}" for t, r in KEPT for s in SEEDS][i::2] for i in (0, 1)]
    procs = [
        subprocess.Popen(
            [
                tiny.PYTHON,
                "-m",
                "octlm",
                *GRID,
                "--out",
                str(out),
                "--no-progress",
                *[a for cell in half for a in ("--only", cell)],
            ],
            cwd=tmp_path,
            env=tiny.quiet_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for half in halves
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    assert not (out / "results.md").exists()  # --only writes cells, nothing else
    code, _, err = tiny.run_cli(["experiment", "tasks", "--collect", "--out", str(out), "--no-progress"])
    assert code == 0 and err == ""
    one = quick["out"]
    for name in ("results.jsonl", "tasks.json", "claims.json"):
        assert (out / name).read_bytes() == (one / name).read_bytes(), name
    assert timeless((out / "results.md").read_text()) == timeless((one / "results.md").read_text())
    assert "\n## Claims\n" in (out / "results.md").read_text()
    assert "Collected from 16 cells run separately" in (out / "results.md").read_text()


def test_collect_names_the_missing_cells(quick: dict[str, Any], tmp_path: Path) -> None:
    shutil.copytree(quick["out"] / "cells", tmp_path / "cells")
    (tmp_path / "cells" / "counting-nope-seed1.json").unlink()
    code, _, err = tiny.run_cli(["experiment", "tasks", "--collect", "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    assert err.splitlines() == [
        "octlm experiment tasks: 1 cell(s) of the grid missing, collected without them: counting:nope:1"
    ]
    assert "Missing cells, left out: counting:nope:1." in (tmp_path / "results.md").read_text()


def test_every_row_runs_passkey_on_every_row_and_a_claimless_passkey_is_refused(tmp_path: Path) -> None:
    argv = [*GRID, "--tasks", "passkey", "--schemes", "learned", "--seeds", "1", "--no-progress"]
    code, _, err = tiny.run_cli([*argv, "--out", str(tmp_path / "refused")])
    assert code == 2 and err.splitlines() == [
        "octlm experiment tasks: error: passkey runs only on the rows a claim reads (rope alibi nope rope+random rope+ft4 "
        "rope+pi4 rope+yarn4), "
        "none of them in --schemes: add --every-row to run it on learned"
    ]
    assert not (tmp_path / "refused").exists()
    code, _, err = tiny.run_cli([*argv, "--every-row", "--out", str(tmp_path / "all")])
    assert code == 0 and err == ""
    assert [p.name for p in (tmp_path / "all" / "cells").glob("*.json")] == ["passkey-learned-seed0.json"]
    cell = json.loads((tmp_path / "all" / "cells" / "passkey-learned-seed0.json").read_text())
    assert cell["grid"]["task_rows"] == {} and " --every-row" in cell["facts"]["command"]
    assert "Run only on" not in (tmp_path / "all" / "results.md").read_text()


def test_an_only_outside_the_kept_rows_is_not_a_cell(tmp_path: Path) -> None:
    code, _, err = tiny.run_cli([*GRID, "--out", str(tmp_path), "--only", "passkey:learned:0"])
    assert code == 2 and "--only passkey:learned:0 is not a cell of this grid" in err
    assert "not every cell of their product is run" in err


def test_cells_from_before_rows_per_task_collect_as_every_row_on_every_task(
    quick: dict[str, Any], tmp_path: Path
) -> None:
    shutil.copytree(quick["out"] / "cells", tmp_path / "cells")
    for path in (tmp_path / "cells").glob("*.json"):
        cell = json.loads(path.read_text())
        del cell["grid"]["task_rows"]  # as cells written before the grid had it
        path.write_text(json.dumps(cell))
    code, _, err = tiny.run_cli(["experiment", "tasks", "--collect", "--out", str(tmp_path), "--no-progress"])
    assert code == 0 and err.splitlines() == [
        "octlm experiment tasks: 2 cell(s) of the grid missing, collected without them: passkey:learned:0 "
        "passkey:learned:1"
    ]


def test_collect_refuses_cells_made_with_other_settings(quick: dict[str, Any], tmp_path: Path) -> None:
    # a run refuses a folder of other settings, so the odd cell is made apart and copied in by hand
    argv = [*GRID, "--out", str(tmp_path / "other"), "--no-progress", "--only", "copy:nope:0"]
    assert main([*argv[: argv.index("--steps") + 1], "4", *argv[argv.index("--steps") + 2 :]]) == 0
    shutil.copytree(quick["out"] / "cells", tmp_path / "cells")
    shutil.copy(tmp_path / "other" / "cells" / "copy-nope-seed0.json", tmp_path / "cells")
    code, _, err = tiny.run_cli(["experiment", "tasks", "--collect", "--out", str(tmp_path)])
    assert code == 2 and len(err.splitlines()) == 1
    assert "copy-nope-seed0.json was made with a different --steps (4)" in err
    assert not (tmp_path / "results.md").exists()


# ------------------------------------------------------------------------------------------------------------
# Summaries and tables from hand-made records


def record(scheme: str, seed: int, size: int, hits: int | None, examples: int = 10) -> dict[str, Any]:
    """`hits` of `examples` right; per token, each example's answer (`size` tokens) right in full or not at
    all, so the per-token score is the exact one."""
    base = {"task": "copy", "scheme": scheme, "seed": seed, "size": size, "depth": None, "examples": examples}
    counts = {"hits": hits, "tokens": size * examples, "token_hits": None if hits is None else hits * size}
    status = {
        "accuracy": None if hits is None else hits / examples,
        "status": "ok" if hits is not None else "no rows",
    }
    return base | counts | status | {"steps": 100, "learned_at": None}


RECORDS = [
    record("rope", 0, 8, 10),
    record("rope", 1, 8, 0),
    record("alibi", 0, 8, 9),
    record("alibi", 1, 8, 9),
    record("rope", 0, 16, 2),
    record("rope", 1, 16, 2),
    record("learned", 0, 16, None),
    record("learned", 1, 16, None),
    record("alibi", 0, 16, 0),
    record("alibi", 1, 16, 0),
]


def test_summaries_average_seeds_and_pool_their_examples() -> None:
    summary = summarize(RECORDS)
    rope = summary[("copy", "rope", 8, None)]
    assert rope.accuracies == [1.0, 0.0] and rope.mean == 0.5 and (rope.hits, rope.examples) == (10, 20)
    assert rope.interval == (0.0, 1.0)  # seeds of 100 and 0 %: their t-interval, not Wilson's on 10/20
    alibi = summary[("copy", "alibi", 8, None)]  # seeds that agree (90, 90 %): Wilson's on the 18 of 20
    assert alibi.interval == pytest.approx((0.6990, 0.9721), abs=1e-4)
    learned = summary[("copy", "learned", 16, None)]
    assert learned.mean is None and learned.interval is None and learned.examples == 0
    # per token (80 of 160 tokens, in 20 examples): the interval of 20 trials, not of 160, widened
    assert alibi.interval_in(PER_TOKEN) == baselines.token_interval(144, 160, 20) == alibi.interval
    assert rope.interval_in(PER_TOKEN) == (0.0, 1.0)
    assert learned.interval_in(PER_TOKEN) is None
    assert Summary("copy", "x", 1, None).mean is None


def test_the_table_bolds_the_best_row_per_size_and_says_no_rows() -> None:
    table = task_table("copy", ["rope", "alibi", "learned"], summarize(RECORDS), [1, 2])
    assert table.headers == ["row", "8 (trained)", "16 (2x)"]
    rope, alibi, learned = table.rows
    # rope's seeds at 8 score 100 and 0 %: the t-interval of the two, not the 20 examples' [30, 70]
    assert rope[1:] == ["50 [0, 100]", Strong("20 [8, 42]")]
    assert alibi[1:] == [Strong("90 [70, 97]"), "0 [0, 16]"]
    assert learned[1:] == ["no rows", "no rows"]


def test_nothing_is_bold_where_every_row_scores_zero() -> None:
    zeros = [record("rope", 0, 8, 0), record("alibi", 0, 8, 0)]
    table = task_table("copy", ["rope", "alibi"], summarize(zeros), [1])
    assert [row[1] for row in table.rows] == ["0 [0, 28]", "0 [0, 28]"]


def test_split_seeds_names_where_one_seed_learned_and_another_did_not() -> None:
    assert split_seeds("copy", ["rope", "alibi", "learned"], summarize(RECORDS), [1, 2]) == [
        "rope at 8: 0-100 %"
    ]


def test_the_tables_show_the_seeds_that_learned_or_every_seed_of_a_row_that_did_not() -> None:
    shown = shown_records(RECORDS)
    # rope: seed 0 learned (100 % at 8), seed 1 (0 %) is left out at every size; alibi: neither seed learned,
    # both shown; learned: no record at 8, nothing learned, its records shown
    assert [(r["scheme"], r["seed"], r["size"]) for r in shown] == [
        (r["scheme"], r["seed"], r["size"]) for r in RECORDS if (r["scheme"], r["seed"]) != ("rope", 1)
    ]
    rope = summarize(shown)[("copy", "rope", 16, None)]
    assert rope.accuracies == [0.2] and (rope.hits, rope.examples) == (2, 10)


def test_the_tables_hold_the_baselines_mark_scores_under_majority_and_rows_not_learned() -> None:
    reading = readings(RECORDS, ["copy"], {"copy": ["rope", "alibi", "learned"]}, [1, 2], 100)["copy"]
    assert isinstance(reading, Reading) and reading.learned_at["rope"] == [None, None]
    # rope's seed 0 learned (100 % at 8), its seed 1 did not; no seed of alibi did (90 and 90 %); learned has
    # no record at 8 (missing, not judged)
    assert set(reading.not_learned) == {"alibi"}
    assert (
        reading.not_learned["alibi"]
        == "not learned: alibi copy, no seed at 95 % exact match at 8 in 100 steps (seeds: 90 %, 90 %)"
    )
    table = task_table("copy", ["rope", "alibi", "learned"], summarize(RECORDS), [1, 2], reading=reading)
    assert table.headers == ["row", "8 (trained)", "16 (2x)", "learned at step, per seed (cap 100)"]
    rope, alibi, learned, chance, majority = table.rows
    assert rope[0] == Code("rope") and rope[1:] == ["50 [0, 100]°", Strong("20 [8, 42]"), "– / –"]
    assert alibi[0] == [Code("alibi"), " not learned"]
    assert alibi[2] == "(0 [0, 16]°)"  # past the training size: bracketed; 0 of 20 does not clear 0
    assert learned == [Code("learned"), "no rows", "no rows", "– / –"]
    assert chance == ["*chance*", "<1", "<1", ""] and majority == ["*majority*", "0", "0", ""]
    per_token = task_table("copy", ["rope"], summarize(RECORDS), [1, 2], PER_TOKEN, reading)
    assert per_token.headers == ["row", "8 (trained)", "16 (2x)"] and per_token.rows[-2][1:] == ["6", "6"]
    # per token the seeds' spread again: 100 and 0 %
    assert per_token.rows[0][1] == Strong("50 [0, 100]°")
    # a score whose interval clears the majority baseline is not marked; one that does not is
    floor = Reading({8: baselines.Baseline("copy", 8, 1, *[baselines.Score(0.3, 0.3)] * 2)}, {}, {}, 1)
    marks = task_table("copy", ["rope", "alibi"], summarize(RECORDS), [1], reading=floor).rows
    assert [marks[0][1], marks[1][1]] == ["50 [0, 100]°", Strong("90 [70, 97]")]


def test_an_extension_rows_records_carry_its_fine_tuning_checks_and_no_other_row_does() -> None:
    checks = [[0, 0.1], [100, 0.8]]
    extension = cells.Cell(
        Path("x.json"),
        ("passkey", "rope+pi4", 0),
        {},
        {"command": "c", "info": {"extend_checks": checks}},
        [{"size": 32, "extended_at": None}, {"size": 64, "extended_at": None}],
    )
    assert [r["extend_checks"] for r in battery_results.cell_records(extension)] == [checks, checks]
    plain = cells.Cell(
        Path("y.json"), ("passkey", "rope", 0), {}, {"command": "c", "info": {}}, [{"size": 32}]
    )
    assert battery_results.cell_records(plain) == [{"size": 32}]


def test_a_cells_time_counts_its_fine_tuning() -> None:
    assert battery_results.cell_seconds({"train_seconds": 2.0, "score_seconds": 0.5}) == 2.5
    info = {"train_seconds": 2.0, "extend_seconds": 4.0, "score_seconds": 0.5}
    assert battery_results.cell_seconds(info) == 6.5
