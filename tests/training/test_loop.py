"""Training (octlm/training/loop.py): the run folder, exact resume, refusals, NaN stop and Ctrl-C, compiled and
bf16 training. The schedule and the optimizer's groups are tests/training/test_optimizer.py; which config changes
a resume accepts, tests/training/test_resume.py."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from tiny import tiny_config
from tiny import write_train_corpus as write_corpus

import octlm.data.cache
import octlm.training.loop
from octlm.cli import main
from octlm.commands.train import finish
from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.storage.checkpoint import load_checkpoint
from octlm.storage.run import Run
from octlm.training.loop import train


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "text")


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoint" / "model.safetensors"))


def assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


# ------------------------------------------------------------------------------------------------------------
# A run


def test_train_writes_the_run_folder(tmp_path: Path, corpus: Path) -> None:
    config = tiny_config(tmp_path, corpus, steps=20)
    result = train(config, progress=False)
    run_dir = tmp_path / "runs" / "tiny-learned"
    assert result.run_dir == run_dir and result.step == 20 and not result.interrupted
    assert {p.name for p in run_dir.iterdir()} == {"checkpoint", "metrics.jsonl", "tokenizer.json"}
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 10, 20] and records == result.metrics
    # Step 0 scores the untrained model: no update yet, so no training loss, learning rate or speed.
    assert sorted(records[0]) == [
        "elapsed_seconds",
        "step",
        "tokens",
        "val_bpb",
        "val_loss",
        "val_perplexity",
    ]
    assert records[0]["tokens"] == 0 and records[0]["val_loss"] > records[-1]["val_loss"]
    data = octlm.data.cache.prepare_data(config.data, 300, progress=False)
    last = records[-1]
    assert last["val_bpb"] == pytest.approx(last["val_loss"] / math.log(2) / data.val_bytes_per_token)
    assert last["val_perplexity"] == pytest.approx(math.exp(last["val_loss"]))
    assert result.val_bpb == last["val_bpb"] and result.tokens_per_second > 0
    assert len(result.train_losses) == 20 and all(math.isfinite(x) for x in result.train_losses)
    assert result.train_losses[-1] < result.train_losses[0]
    sample, report = finish(config, result)  # what `octlm train` does once the loop returns
    assert sample.startswith("The") and report is None  # the prompt for a non-stdlib corpus, then more
    ckpt = load_checkpoint(run_dir)
    assert ckpt.step == 20 and ckpt.config.to_dict() == config.to_dict()
    for key in (
        "config",
        "tokenizer",
        "corpus",
        "train_tokens",
        "val_tokens",
        "model.safetensors",
        "optimizer.pt",
    ):
        assert len(ckpt.meta["sha256"][key]) == 64, key
    assert ckpt.meta["schema_version"] == 1
    assert not any(p.name.startswith(".checkpoint") for p in run_dir.iterdir())

    with pytest.raises(UserError, match="already holds a run"):
        train(config, progress=False)


def test_resume_after_stop_is_bit_identical(tmp_path: Path, corpus: Path) -> None:
    full = train(tiny_config(tmp_path, corpus, run_name="full"), progress=False)
    config = tiny_config(tmp_path, corpus, run_name="split")
    first = train(config, progress=False, stop_after=25)
    assert first.interrupted and first.step == 25
    assert load_checkpoint(first.run_dir).step == 25
    second = train(config, first.run_dir, resume=True, progress=False)
    assert second.start_step == 25 and second.step == 40
    assert_identical(weights(full.run_dir), weights(second.run_dir))
    assert first.train_losses + second.train_losses == full.train_losses

    def records(run_dir: Path) -> list[dict[str, Any]]:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        timing = ("tokens_per_second", "elapsed_seconds")
        return [{k: v for k, v in json.loads(line).items() if k not in timing} for line in lines]

    # The stop at step 25 recorded its evaluation, marked, without closing the evaluation window.
    stopped = first.metrics[-1]
    assert [r["step"] for r in first.metrics] == [0, 10, 20, 25] and stopped["stopped"] is True
    assert stopped["train_loss"] == pytest.approx(sum(full.train_losses[20:25]) / 5, rel=1e-12)
    # The resume drops the stop's record and writes no second step 0; the record after it averages steps
    # 21-30, as the uninterrupted run's does.
    assert [r["step"] for r in records(second.run_dir)] == [0, 10, 20, 30, 40]
    assert records(second.run_dir) == records(full.run_dir)


def test_resume_after_crash_is_bit_identical(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed between checkpoints resumes from the last one (step 20) and catches up exactly."""
    full = train(tiny_config(tmp_path, corpus, run_name="full", model={"position": "rope"}), progress=False)
    config = tiny_config(tmp_path, corpus, run_name="crash", model={"position": "rope"})
    real, calls = octlm.training.loop.random_blocks, []

    def crashing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 26:
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(octlm.training.loop, "random_blocks", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        train(config, progress=False)
    monkeypatch.setattr(octlm.training.loop, "random_blocks", real)
    run_dir = tmp_path / "runs" / "crash"
    assert load_checkpoint(run_dir).step == 20
    resumed = train(config, run_dir, resume=True, progress=False)
    assert resumed.start_step == 20
    assert_identical(weights(full.run_dir), weights(run_dir))


def test_resume_refusals(tmp_path: Path, corpus: Path) -> None:
    config = tiny_config(tmp_path, corpus, steps=10)
    run_dir = train(config, progress=False).run_dir
    with pytest.raises(
        UserError, match="config differs from the checkpoint's: model.position rope != learned"
    ):
        train(tiny_config(tmp_path, corpus, steps=20, model={"position": "rope"}), run_dir, resume=True)
    with pytest.raises(UserError, match=r"train.lr 0.001 != 0.003"):
        train(tiny_config(tmp_path, corpus, steps=20, lr=1e-3), run_dir, resume=True)
    with pytest.raises(UserError, match="already finished its 10 steps"):
        train(config, run_dir, resume=True, progress=False)
    with pytest.raises(UserError, match="not an octlm run"):
        train(config, tmp_path, resume=True, progress=False)

    # Same config, but the files it names were edited after the run started.
    changed = write_corpus(tmp_path / "changed", lines=61)
    other = tiny_config(tmp_path, changed, steps=20)
    stopped = train(other, tmp_path / "runs" / "edited", progress=False, stop_after=5)
    write_corpus(changed, lines=62)
    with pytest.raises(UserError, match=r"(tokenizer|corpus) differs from the checkpoint's: SHA-256"):
        train(other, stopped.run_dir, resume=True, progress=False)


def test_resume_may_extend_steps(tmp_path: Path, corpus: Path) -> None:
    run_dir = train(tiny_config(tmp_path, corpus, steps=10), progress=False).run_dir
    result = train(
        tiny_config(tmp_path, corpus, steps=15, eval_interval=5), run_dir, resume=True, progress=False
    )
    assert result.start_step == 10 and result.step == 15 and load_checkpoint(run_dir).step == 15


def test_nan_loss_stops_and_keeps_the_last_checkpoint(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, calls = Decoder.forward, []

    def poisoned(
        self: Decoder, ids: torch.Tensor, targets: torch.Tensor | None = None, cache: Any = None, **kw: Any
    ) -> Any:
        logits, loss = real(self, ids, targets, cache, **kw)
        if targets is not None and self.training:
            calls.append(1)
            if len(calls) == 13:
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(Decoder, "forward", poisoned)
    config = tiny_config(tmp_path, corpus)
    with pytest.raises(
        UserError, match=r"step 13: the training loss is nan.*step 10.*Lower the learning rate"
    ):
        train(config, progress=False)
    monkeypatch.setattr(Decoder, "forward", real)
    ckpt = load_checkpoint(tmp_path / "runs" / "tiny-learned")
    assert ckpt.step == 10 and all(torch.isfinite(t).all() for t in ckpt.model_state.values())


def test_absurd_learning_rate_is_a_clear_error(tmp_path: Path, corpus: Path) -> None:
    config = tiny_config(
        tmp_path, corpus, lr=1e30, min_lr=1e30, warmup_steps=0, grad_clip=0.0, weight_decay=0.0, steps=30
    )
    with pytest.raises(UserError, match=r"the training loss is (nan|inf)|gradient norm (nan|inf)"):
        train(config, progress=False)


def test_sigint_finishes_the_step_and_checkpoints(
    tmp_path: Path,
    corpus: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    real, calls = octlm.training.loop.random_blocks, []
    # Ctrl-C as a terminal delivers it: pytest run as a background job inherits SIGINT ignored, and octlm keeps
    # an ignored signal ignored. Whatever handler is there, training puts it back.
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, outer))
    before = signal.getsignal(signal.SIGINT)

    def interrupting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 7:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(octlm.training.loop, "random_blocks", interrupting)
    toml = tmp_path / "tiny.toml"
    cfg = tiny_config(tmp_path, corpus).to_dict()
    toml.write_text(
        "\n".join(
            f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
            for section, table in cfg.items()
        )
        + "\n"
    )
    assert main(["train", "--config", str(toml), "--name", "sig", "--no-progress"]) == 130
    out = capsys.readouterr().out
    run_dir = tmp_path / "runs" / "sig"
    assert "stopped at step 7" in out and f"octlm train --resume {run_dir}" in out
    assert load_checkpoint(run_dir).step == 7
    assert signal.getsignal(signal.SIGINT) is before
    steps = [(r["step"], r.get("stopped", False)) for r in Run.of(run_dir).read_metrics()]
    assert steps == [(0, False), (7, True)]  # stopped before the first scheduled evaluation (step 10)

    monkeypatch.setattr(octlm.training.loop, "random_blocks", real)
    assert main(["train", "--resume", str(run_dir), "--steps", "12", "--no-progress"]) == 0
    assert load_checkpoint(run_dir).step == 12
    assert [r["step"] for r in Run.of(run_dir).read_metrics()] == [0, 10, 12]  # the stop's record is dropped
    assert "bits per byte" in capsys.readouterr().out
    assert main(["train", "--resume", str(run_dir), "--steps", "14", "--position", "rope"]) == 2
    assert "model.position rope != learned" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("position", ["learned", "rope"])
def test_compiled_training_matches_eager(tmp_path: Path, corpus: Path, position: str) -> None:
    """`train.compile = true` goes through torch.compile (inductor, C++ on the CPU) and must train the same
    model: the same losses step by step to 1e-4 (fused kernels reorder float additions, so not bit-identical)."""
    runs = {}
    for compiled in (False, True):
        config = tiny_config(
            tmp_path,
            corpus,
            steps=4,
            eval_interval=4,
            checkpoint_interval=4,
            compile=compiled,
            run_name=f"{position}-{compiled}",
            model={"position": position},
        )
        runs[compiled] = train(config, progress=False)
    eager, compiled = runs[False].train_losses, runs[True].train_losses
    assert len(eager) == len(compiled) == 4
    assert max(abs(a - b) for a, b in zip(eager, compiled, strict=True)) < 1e-4, (eager, compiled)
    assert abs(runs[False].val_loss - runs[True].val_loss) < 1e-4


def test_training_steps_never_build_the_full_logits(tmp_path: Path, corpus: Path, monkeypatch) -> None:
    """A spy on every module's output: inside `train_step`, no module returns a [B, T, V] (or [B*T, V])
    logits tensor; the loss goes through the head's weight in chunks. Evaluation does build them, which
    shows the spy sees the head when it runs."""
    config = tiny_config(tmp_path, corpus, steps=4, eval_interval=2, checkpoint_interval=4, sample_tokens=0)
    vocab = config.model.vocab_size
    seen = {"steps": 0, "in_step": 0, "outside": 0}
    in_step = False
    real_step = octlm.training.loop.train_step

    def step(*args: Any, **kwargs: Any) -> float:
        nonlocal in_step
        in_step = True
        try:
            return real_step(*args, **kwargs)
        finally:
            in_step = False
            seen["steps"] += 1

    def spy(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor) and output.dim() >= 2 and output.shape[-1] == vocab:
            seen["in_step" if in_step else "outside"] += 1

    monkeypatch.setattr(octlm.training.loop, "train_step", step)
    handle = torch.nn.modules.module.register_module_forward_hook(spy)
    try:
        result = train(config, progress=False)
    finally:
        handle.remove()
    assert result.step == 4 and seen["steps"] == 4
    assert seen["in_step"] == 0
    assert seen["outside"] > 0  # the evaluations at steps 2 and 4 ran the head on full logits


@pytest.mark.slow  # tokenizes the whole standard library once (~20 s on a busy 2-core machine)
def test_train_on_the_built_in_corpus_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`octlm train` with no --text: the stdlib corpus, tiny dims, a few steps; the run records that corpus."""
    from octlm.config import DataConfig
    from octlm.data.corpus import corpus_sha256, describe_source
    from octlm.data.sources import stdlib_documents

    argv = [
        "train",
        "--data-dir",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "runs" / "day1-learned"),
        "--vocab-size",
        "300",
        "--d-model",
        "32",
        "--n-layers",
        "1",
        "--n-heads",
        "2",
        "--d-ff",
        "64",
        "--context-length",
        "16",
        "--steps",
        "6",
        "--batch-size",
        "4",
        "--eval-interval",
        "3",
        "--checkpoint-interval",
        "6",
        "--warmup-steps",
        "2",
        "--report",
        "false",
        "--sample-tokens",
        "4",
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "runs" / "day1-learned"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 3, 6] and all(math.isfinite(r["val_bpb"]) for r in records)
    assert "bits per byte" in out and "class" in out  # the stdlib's sample prompt is code
    ckpt = load_checkpoint(run_dir)
    assert ckpt.step == 6 and ckpt.config.data.source == "stdlib" and ckpt.config.data.text == []
    # The corpus identity recorded is the interpreter's standard library, recomputed here from its files.
    expected = corpus_sha256([d for d in stdlib_documents() if d.text])
    assert ckpt.meta["sha256"]["corpus"] == expected
    (folder,) = (tmp_path / "data").glob(f"{expected[:12]}-v300-*")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["corpus_sha256"] == expected
    assert meta["manifest"]["source"] == describe_source(DataConfig())  # "stdlib of Python 3.x at <root>"
    assert meta["manifest"]["source"].startswith("stdlib of Python ")


@pytest.mark.parametrize("dtype", ["bf16", "bf16-autocast"])
def test_bf16_training_learns_and_resumes_bit_identically(tmp_path: Path, corpus: Path, dtype: str) -> None:
    """`--dtype bf16` (bf16 weights, fp32 masters) and `bf16-autocast`: the loss falls, a stopped-and-resumed
    run equals an uninterrupted one bit for bit, the checkpoint holds float32 weights, and the run generates."""
    full = train(tiny_config(tmp_path, corpus, run_name="full", dtype=dtype), progress=False)
    fp32 = train(tiny_config(tmp_path, corpus, run_name="fp32", dtype="fp32"), progress=False)
    assert sum(full.train_losses[-5:]) / 5 < full.train_losses[0] - 2.0  # measured 5.696 -> 3.076
    assert full.train_losses != fp32.train_losses  # bf16 really ran: its rounding changes every loss
    config = tiny_config(tmp_path, corpus, run_name="split", dtype=dtype)
    first = train(config, progress=False, stop_after=25)
    second = train(config, first.run_dir, resume=True, progress=False)
    assert_identical(weights(full.run_dir), weights(second.run_dir))
    assert first.train_losses + second.train_losses == full.train_losses
    assert {t.dtype for t in weights(second.run_dir).values()} == {torch.float32}
    assert second.val_bpb == full.val_bpb and math.isfinite(full.val_bpb)  # evaluation under bf16 too
    sample, _ = finish(config, second)
    assert sample
