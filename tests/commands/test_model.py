"""`octlm model`: a scheme whose cost grows faster than softmax attention's says so, with `--dry-run` too."""

from __future__ import annotations

import pytest

from octlm import cli


@pytest.mark.parametrize("position", ["path", "fox", "rope"])
def test_dry_run_names_a_cost_that_grows_faster(position: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["model", "--dry-run", "--position", position, "--set", "model.context_length=16"])
    out = capsys.readouterr().out
    assert code in (0, None) and "ids [2, 16] -> logits [2, 16, 1024]" in out
    costs = [line for line in out.splitlines() if " cost: " in line]
    if position == "path":
        assert costs == [
            "path cost: time T²(D + 64); memory linear in T at inference, T² in training; "
            "sequential over 64-token chunks"
        ]
    else:
        assert costs == []
