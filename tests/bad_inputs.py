"""What the bad-input catalogue's files share (tests/test_cli_bad_inputs.py, test_cli_bad_inputs_direct.py): one
trained tiny run, made once per module in a workspace whose config paths are all relative to it, and where the
run lies in that workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from tiny import tiny_raw, write_corpus

from octlm.config import config_from_dict
from octlm.training.loop import train

RUN = "runs/tiny"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace holding a finished tiny run; every path in its config is relative to the workspace."""
    root = tmp_path_factory.mktemp("template")
    before = Path.cwd()
    os.chdir(root)
    try:
        write_corpus(Path("text"))
        config = config_from_dict(
            tiny_raw(Path("."), Path("text"), steps=6, eval_interval=6, run_name="tiny"), name="tiny"
        )
        torch.set_num_threads(1)
        train(config, progress=False)
    finally:
        os.chdir(before)
    return root
