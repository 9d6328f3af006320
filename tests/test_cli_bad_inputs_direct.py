"""Bad inputs checked outside the catalogue of tests/test_cli_bad_inputs.py: the real exit code of real processes,
and the mistakes the CLI cannot express (bad token ids), refused through the library with a UserError that names
the value. The trained tiny run is the catalogue's `template` fixture (tests/bad_inputs.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import bad_inputs
import pytest
import torch
from bad_inputs import RUN
from tiny import PYTHON, ROOT, check_one_line, quiet_env

from octlm.config import config_from_dict
from octlm.errors import UserError
from octlm.model.decoder import Decoder

template = bad_inputs.template  # its module-scoped fixture, which pytest finds here by this name

# ---------------------------------------------------------------------------------------------------------------
# The real exit code, from real processes (commands that do not import torch, so they start fast)


def test_real_process_exit_codes(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x00binary")
    cases = [
        (["frobnicate"], "'frobnicate'"),
        (["corpus", "--text", "blob.bin"], "looks binary"),
        (["corpus", "--text", "missing.txt"], "'missing.txt'"),
    ]
    procs = [
        subprocess.Popen(
            [PYTHON, "-m", "octlm", *argv],
            cwd=tmp_path,
            env=quiet_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for argv, _ in cases
    ]
    for proc, (_argv, needle) in zip(procs, cases, strict=True):
        _out, err = proc.communicate(timeout=60)
        check_one_line(proc.returncode, err, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.bin"]
    assert ROOT.is_dir()


# ---------------------------------------------------------------------------------------------------------------
# Mistakes the CLI cannot express, through the library: a UserError that names the value


@pytest.mark.parametrize(
    ("ids", "needle"),
    [
        ([[0, 5, 260]], "token id 260 is outside the vocabulary [0, 260)"),
        ([[3, -1, 4]], "token id -1 is outside the vocabulary"),
        ([list(range(17))], "length 17 is longer than the learned position table (16 rows)"),
        ([[1.5, 2.0]], "integer tensor"),
        ([[]], "T >= 1"),
    ],
    ids=["id too large", "negative id", "longer than learned table", "float ids", "empty"],
)
def test_decoder_refuses_bad_ids(ids: list[list[float]], needle: str) -> None:
    config = config_from_dict(
        {
            "model": {
                "vocab_size": 260,
                "d_model": 32,
                "n_layers": 1,
                "n_heads": 2,
                "d_ff": 64,
                "context_length": 16,
            }
        }
    )
    model = Decoder(config.model)
    tensor = torch.tensor(ids) if ids != [[]] else torch.zeros((1, 0), dtype=torch.long)
    with pytest.raises(UserError) as info:
        model(tensor)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_generate_refuses_prompt_ids_outside_the_vocabulary(template: Path) -> None:
    from octlm.generation.generate import generate
    from octlm.storage.checkpoint import load_model

    model, _config, tokenizer = load_model(template / RUN)
    with pytest.raises(UserError, match=r"prompt token id 999 is outside the model's vocabulary \[0, 260\)"):
        generate(model, tokenizer, [1, 999], 3)
    with pytest.raises(UserError, match="prompt token id -2"):
        generate(model, tokenizer, [-2], 3)
