"""DDP through torchrun: two CPU processes (gloo) with batch B follow one process with batch 2B (at dropout 0);
with dropout each rank draws its own masks, a resume stays bit-identical, and ranks stop together on a signal."""

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
from octlm.training.loop import train

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
        "--out",
        str(tmp_path / "runs" / "ddp"),
        "--set",
        "train.batch_size=4",
        "--no-progress",
    ]
    for key, value in {**model, **settings}.items():
        flags += ["--set", f"{'model' if key in model else 'train'}.{key}={value}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
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
    assert [r["step"] for r in records] == list(range(0, STEPS + 1))  # step 0: the untrained model
    losses = [r["train_loss"] for r in records[1:]]  # eval_interval 1: each record is one step's loss
    assert losses == pytest.approx(reference.train_losses, abs=1e-5)
    assert [r["val_loss"] for r in records] == pytest.approx(
        [r["val_loss"] for r in reference.metrics], abs=1e-5
    )
    a = load_file(str(tmp_path / "runs" / "ddp" / "checkpoint" / "model.safetensors"))
    b = load_file(str(tmp_path / "runs" / "single" / "checkpoint" / "model.safetensors"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# Dropout under DDP: each rank its own masks, the same weights, and a resume that is still exact

WORKER = """
import json, os, signal, sys
from pathlib import Path
import torch, torch.distributed as dist
import octlm.training.loop as train_module
from octlm.config import config_from_dict
from octlm.runtime import Dist

dist.init_process_group("gloo")  # held across the train() calls below, which then leave it open
rank, out = dist.get_rank(), Path(sys.argv[2])
config = config_from_dict(json.loads(sys.argv[1]), name="ddp")
stop_at, signal_at = int(sys.argv[3]), int(sys.argv[4])

def gathered(t):
    parts = [torch.empty_like(t) for _ in range(2)]
    dist.all_gather(parts, t)
    return parts

state = train_module.build_state(config, None, None, {}, torch.device("cpu"), Dist(rank=rank, world=2))
masks = gathered((torch.nn.functional.dropout(torch.ones(256), 0.5) > 0).float())  # the dropout stream
weights = gathered(torch.cat([p.detach().flatten() for p in state.model.parameters()]))

full = train_module.train(config, out / "full", progress=False)
train_module.train(config, out / "split", progress=False, stop_after=stop_at)
train_module.train(config, out / "split", resume=True, progress=False)

real_step = train_module.train_step
def step(state, *args, **kwargs):
    loss = real_step(state, *args, **kwargs)
    if rank == 1 and state.step == signal_at:
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, to rank 1 alone
    return loss
train_module.train_step = step
stopped = train_module.train(config, out / "signal", progress=False)
(out / f"rank{rank}.json").write_text(json.dumps({
    "masks_differ": not torch.equal(masks[0], masks[1]), "weights_equal": torch.equal(weights[0], weights[1]),
    "stopped_step": stopped.step, "stop_signal": stopped.stop_signal, "interrupted": stopped.interrupted,
}))
dist.destroy_process_group()
"""


def _torchrun(script: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(script),
    ]
    return subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="needs torch.distributed with gloo",
)
def test_ranks_draw_their_own_dropout_masks_and_resume_exactly(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "text")
    raw = {
        "model": {
            "vocab_size": 300,
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "d_ff": 64,
            "context_length": 16,
            "dropout": 0.1,
        },
        "data": {"source": "text", "text": [str(corpus)], "data_dir": str(tmp_path / "data")},
        "train": {
            "steps": 8,
            "batch_size": 4,
            "eval_interval": 2,
            "eval_batches": 1,
            "checkpoint_interval": 100,
            "warmup_steps": 2,
            "report": False,
            "sample_tokens": 0,
            "device": "cpu",
            "seed": 11,
        },
    }
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    done = _torchrun(script, json.dumps(raw), str(tmp_path), "3", "5")
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["masks_differ"] and ranks[0]["weights_equal"]  # own masks, one model
    for result in ranks:  # rank 1 alone got SIGTERM after step 5: both stopped there, for it
        assert (result["stopped_step"], result["stop_signal"], result["interrupted"]) == (5, 15, True)

    full = load_file(str(tmp_path / "full" / "checkpoint" / "model.safetensors"))
    split = load_file(str(tmp_path / "split" / "checkpoint" / "model.safetensors"))
    for key in full:  # stopped at step 3 and resumed: bit-identical, each rank's dropout stream restored
        assert torch.equal(full[key], split[key]), key
    records = [(tmp_path / run / "metrics.jsonl").read_text().splitlines() for run in ("full", "split")]
    drop = ("tokens_per_second", "elapsed_seconds")
    clean = [[{k: v for k, v in json.loads(r).items() if k not in drop} for r in rs] for rs in records]
    assert clean[0] == clean[1]


# ---------------------------------------------------------------------------------------------------------------
# A run trained by one process, resumed by two: the checkpoint holds one dropout stream, and rank 1 must not
# simply continue it (its masks would repeat rank 0's)

RESUME_WORKER = """
import json, sys
from pathlib import Path
import torch, torch.distributed as dist
import octlm.training.loop as train_module
from octlm.config import config_from_dict

dist.init_process_group("gloo")
rank, out = dist.get_rank(), Path(sys.argv[2])
config = config_from_dict(json.loads(sys.argv[1]), name="ddp")
first = []
real_step = train_module.train_step
def step(state, *args, **kwargs):
    if not first:
        first.append(torch.get_rng_state())  # the dropout stream the first resumed step draws from
    return real_step(state, *args, **kwargs)
train_module.train_step = step
train_module.train(config, out / "run", resume=True, progress=False)
parts = [torch.empty_like(first[0]) for _ in range(2)]
dist.all_gather(parts, first[0])
(out / f"resumed{rank}.json").write_text(json.dumps({"streams_differ": not torch.equal(parts[0], parts[1])}))
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="needs torch.distributed with gloo",
)
def test_a_one_process_run_resumed_by_two_draws_two_dropout_streams(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "text")
    raw = {
        "model": {
            "vocab_size": 300,
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "d_ff": 64,
            "context_length": 16,
            "dropout": 0.1,
        },
        "data": {"source": "text", "text": [str(corpus)], "data_dir": str(tmp_path / "data")},
        "train": {
            "steps": 6,
            "batch_size": 4,
            "eval_interval": 3,
            "eval_batches": 1,
            "checkpoint_interval": 100,
            "warmup_steps": 2,
            "report": False,
            "sample_tokens": 0,
            "device": "cpu",
            "seed": 11,
        },
    }
    stopped = train(config_from_dict(raw, name="ddp"), tmp_path / "run", progress=False, stop_after=3)
    assert stopped.interrupted and stopped.step == 3
    script = tmp_path / "worker.py"
    script.write_text(RESUME_WORKER, encoding="utf-8")
    done = _torchrun(script, json.dumps(raw), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert json.loads((tmp_path / f"resumed{rank}.json").read_text()) == {"streams_differ": True}
