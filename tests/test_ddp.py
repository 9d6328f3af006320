"""DDP through torchrun: two CPU processes (gloo) with batch B follow one process with batch 2B."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from octlm.config import config_from_dict
from octlm.train import train

STEPS = 6


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i in range(5):
        (folder / f"m{i}.py").write_text(
            f"def f{i}(x):\n    return x * {i} + {i * i}\n" * 30, encoding="utf-8"
        )
    return folder


@pytest.mark.slow
@pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="needs torch.distributed with gloo",
)
def test_two_processes_match_one_with_the_global_batch(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "text")
    model = {"vocab_size": 300, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "context_length": 16}
    settings: dict[str, Any] = {
        "steps": STEPS,
        "eval_interval": 1,
        "eval_batches": 2,
        "checkpoint_interval": 100,
        "warmup_steps": 2,
        "out_dir": str(tmp_path / "runs"),
        "report": False,
        "sample_tokens": 0,
        "device": "cpu",
    }
    data = {"source": "text", "text": [str(corpus)], "data_dir": str(tmp_path / "data")}
    single = config_from_dict(
        {"model": model, "data": data, "train": {**settings, "batch_size": 8}}, name="one"
    )
    reference = train(single, tmp_path / "runs" / "single", progress=False)  # also builds the data cache

    flags = [
        "--text",
        str(corpus),
        "--data-dir",
        str(tmp_path / "data"),
        "--out-dir",
        str(tmp_path / "runs"),
        "--set",
        "train.batch_size=4",
        "--name",
        "ddp",
        "--no-progress",
    ]
    for key, value in {**model, **settings}.items():
        flags += ["--set", f"{'model' if key in model else 'train'}.{key}={value}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "octlm",
        "train",
        *flags,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("bits per byte") == 1  # only rank 0 prints

    records = [
        json.loads(line) for line in (tmp_path / "runs" / "ddp" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    losses = [r["train_loss"] for r in records]  # eval_interval 1: each record is one step's loss
    assert losses == pytest.approx(reference.train_losses, abs=1e-5)
    assert [r["val_loss"] for r in records] == pytest.approx(
        [r["val_loss"] for r in reference.metrics], abs=1e-5
    )
    a = load_file(str(tmp_path / "runs" / "ddp" / "checkpoint" / "model.safetensors"))
    b = load_file(str(tmp_path / "runs" / "single" / "checkpoint" / "model.safetensors"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
