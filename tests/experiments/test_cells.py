"""Cell files read back through typed records (octlm/experiments/cells.py): a hand-edited value ends
`--collect` in one line naming the file and the value, exit 2, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tiny

from octlm.experiments import battery, cells, extend, length

GRIDS: dict[str, Any] = {
    "length": {
        "train_length": 16,
        "eval_lengths": [16, 32],
        "eval_windows": 4,
        "modes": ["windows"],
        "rope_factor": 2.0,
        "schemes": ["rope"],
        "seeds": [0],
        "config_sha256": "a",
        "eval_sha256": "b",
    },
    "tasks": {
        "tasks": ["copy"],
        "schemes": ["rope"],
        "seeds": [0],
        "steps": 3,
        "target": 0.99,
        "check_every": 1,
        "batch_size": 2,
        "examples": 4,
        "model": {},
        "factors": [1],
    },
    "extend": {
        "train_length": 16,
        "extend_length": 32,
        "eval_lengths": [16],
        "eval_windows": 4,
        "steps": 2,
        "curve_interval": 1,
        "passkey_per_depth": 1,
        "passkey_format": "mohtashami-jaggi",
        "rows": ["pi"],
        "seeds": [0],
        "config_sha256": "a",
        "eval_sha256": "b",
    },
}
FACTS: dict[str, Any] = {
    "length": {
        "command": "c",
        "config": {},
        "config_name": "n",
        "scored_tokens": 4,
        "scored_bytes": 9,
        "info": {"reused": False, "train_wall": 1.0, "eval_seconds": 1.0},
    },
    "tasks": {
        "command": "c",
        "info": {"train_seconds": 1.0, "score_seconds": 1.0, "first_loss": 2.0, "final_loss": 1.0},
    },
    "extend": {
        "command": "c",
        "config": {},
        "config_name": "n",
        "scored_tokens": 4,
        "info": {
            "base_run": "r",
            "base_trained": True,
            "base_seconds": 1.0,
            "before_seconds": 1.0,
            "fine_tune_seconds": 1.0,
            "after_seconds": 1.0,
            "curve": [{"step": 0, "val_bpb": 2.0}],
        },
    },
}
RECORDS: dict[str, Any] = {
    "length": {
        "scheme": "rope",
        "variant": "",
        "seed": 0,
        "length": 16,
        "mode": "windows",
        "status": "ok",
        "bpb": 2.5,
        "tokens": 4,
        "bytes": 9,
    },
    "tasks": {
        "task": "copy",
        "scheme": "rope",
        "seed": 0,
        "size": 4,
        "depth": None,
        "examples": 4,
        "hits": 2,
        "tokens": 16,
        "token_hits": 9,
        "steps": 3,
        "learned_at": None,
        "status": "ok",
        "accuracy": 0.5,
    },
    "extend": {
        "row": "pi",
        "scheme": "rope",
        "seed": 0,
        "phase": "before",
        "length": 16,
        "bpb": 2.5,
        "tokens": 4,
        "bytes": 9,
        "passkey": None,
        "retrieval_bits": None,
    },
}
AXES = {"length": length.AXES, "tasks": battery.AXES, "extend": extend.AXES}
KEYS = {"length": ("rope", 0), "tasks": ("copy", "rope", 0), "extend": ("pi", 0)}


def a_cell(out: Path, experiment: str) -> Path:
    """A cell file that reads back as a cell of `experiment`."""
    grid, facts, record = GRIDS[experiment], FACTS[experiment], RECORDS[experiment]
    path = cells.write_cell(out, AXES[experiment], KEYS[experiment], grid, facts, [record])
    assert cells.read_cells(out, AXES[experiment])[0].records == [record]
    return path


@pytest.mark.parametrize(
    ("experiment", "where", "key", "value", "said"),
    [
        ("tasks", "records", "hits", "many", 'records[0].hits is "many"'),
        ("length", "grid", "seeds", 0, "grid.seeds is 0"),
        ("extend", "grid", "seeds", 0, "grid.seeds is 0"),
        ("length", "records", "bpb", "low", 'records[0].bpb is "low"'),
    ],
)
def test_a_hand_edited_value_ends_collect_in_one_line_and_writes_nothing(
    tmp_path: Path, experiment: str, where: str, key: str, value: Any, said: str
) -> None:
    out = tmp_path / "out"
    path = a_cell(out, experiment)
    cell = json.loads(path.read_text())
    (cell["records"][0] if where == "records" else cell[where])[key] = value
    path.write_text(json.dumps(cell))
    code, stdout, err = tiny.run_cli(
        ["experiment", experiment, "--collect", "--out", str(out), "--no-progress"]
    )
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert str(path) in err and said in err
    assert sorted(p.name for p in out.iterdir()) == ["cells"]  # no results.jsonl, no table, no figure
