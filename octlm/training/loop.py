"""The training loop: evaluation in bits per byte, checkpoints, resume and DDP.

`train()` opens a run folder (`octlm.storage.run`), builds the training state, loops over `train_step`,
`evaluate` and `save`, and returns a `TrainResult`. Sampling and the report come after it returns, in the
command (`octlm.commands.train`), so this module imports neither.

Choices, and why (the optimizer's and the schedule's are in `octlm.training.optimizer`):

- Determinism: `torch.manual_seed(seed)` before the model is built, and batches drawn by a dedicated
  `torch.Generator` whose state is checkpointed together with the global RNG. A CPU run that is stopped and
  resumed ends bit-identical to an uninterrupted one (tests check this).
- Resume may change only bookkeeping (`octlm.training.resume.RESUMABLE_FIELDS`: steps, evaluation and
  checkpoint intervals, devices, out_dir, run name, report, sample length, log, data_dir). Extending `steps`
  stretches the cosine from the resume point on; the tokenizer, the corpus and the token files must hash the
  same as when the run started.
- DDP: `torchrun --nproc_per_node=N -m octlm train ...`. Every rank draws the same global batch of N·B offsets
  from the shared generator and takes its own slice. At dropout 0, N processes with batch B therefore follow
  one process with batch N·B, up to float rounding (gradients are averaged in another order). With dropout > 0
  each rank draws its own masks (`runtime.seed_rank_streams`), so the runs agree in distribution, not in
  numbers. A checkpoint holds every rank's stream, so a DDP resume with the same N is bit-identical. Only rank
  0 writes files, and only it holds the run folder's lock.
- One writer per run folder (`Run.lock`), taken before anything in it is written and held to the end; a new
  run in a folder that holds one sets the old run aside and deletes it only after its own first checkpoint
  (`Run.set_aside` / `Run.settle`), so a new run that fails earlier gives the old one back.
- A NaN or infinite loss (or gradient norm) stops before the optimizer step, so the weights and the last
  checkpoint stay good. SIGINT (Ctrl-C), SIGTERM or SIGHUP finishes the current step, writes a checkpoint and
  returns with `stop_signal` set; `octlm train` exits with 128 + its number (130, 143, 129). Under DDP the
  ranks agree on the step. A second signal aborts at once.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from octlm.config import Config, TrainConfig
from octlm.data.batches import eval_blocks, random_blocks
from octlm.data.cache import PreparedData
from octlm.errors import UserError, explain
from octlm.model.decoder import Decoder
from octlm.runtime import (
    Dist,
    init_distributed,
    rank_rng_states,
    resolve_device,
    restore_rng,
    rng_state,
    seed_rank_streams,
)
from octlm.signals import StopRequest
from octlm.storage.checkpoint import Checkpoint, save_checkpoint
from octlm.storage.run import Run
from octlm.training.optimizer import lr_at, make_optimizer, set_lr
from octlm.training.precision import Precision
from octlm.training.resume import checkpoint_to_resume, data_for_run, initial_weights
from octlm.training.scoring import evaluate
from octlm.training.tracking import make_tracker


@dataclass
class TrainResult:
    """What one call of `train` did. Validation figures are the last evaluation's: every call evaluates at
    least once (step 0 of a new run, every eval_interval steps, the last step, and a stop)."""

    run_dir: Path
    step: int  # steps done in total (a resumed run counts the steps before the resume)
    val_loss: float
    val_bpb: float  # bits per byte of validation text
    val_perplexity: float
    tokens_per_second: float  # training throughput of this call, all ranks together
    wall_seconds: float
    model: Decoder  # the trained model as the loop left it (train mode, float32, on its device)
    data: PreparedData  # the tokens and the tokenizer it trained on
    metrics: list[dict[str, Any]] = field(default_factory=list)  # the records appended to metrics.jsonl
    train_losses: list[float] = field(default_factory=list)  # per step of this call, mean over all ranks
    start_step: int = 0
    interrupted: bool = False  # stopped early (a signal or stop_after); a checkpoint was written
    stop_signal: int = 0  # the signal that stopped it (SIGINT, SIGTERM, SIGHUP); 0 for none
    checkpoint_path: Path | None = None
    rank: int = 0
    world_size: int = 1


@dataclass
class TrainState:
    """Everything the loop changes, in one place: what `save` writes and what `train` reports."""

    model: Decoder  # the plain module (checkpoints, evaluation)
    train_model: nn.Module  # the module the steps run through (DDP and/or torch.compile around `model`)
    precision: Precision  # train.dtype: the step's autocast, or the bf16 copy `train_model` wraps
    optimizer: torch.optim.Optimizer
    generator: torch.Generator  # draws the batches; checkpointed with the global RNG
    data: PreparedData
    hashes: dict[str, str]  # SHA-256 of tokenizer, corpus and token files, recorded in every checkpoint
    step: int
    start_step: int
    last_checkpoint: int | None = None
    checkpoint_path: Path | None = None
    since_eval: list[float] = field(default_factory=list)  # losses since the last evaluation record
    losses: list[float] = field(default_factory=list)  # every loss of this call
    records: list[dict[str, Any]] = field(default_factory=list)
    last_eval: dict[str, float] = field(default_factory=dict)
    train_seconds: float = 0.0


# ------------------------------------------------------------------------------------------------------------
# Pieces


def _kept(state: TrainState, run: Run) -> str:
    if state.last_checkpoint is None:
        if run.replaced_dir.is_dir():  # --overwrite: `settle` puts the old run back on the way out
            return "no checkpoint had been written yet, so the run it was replacing is put back"
        return "no checkpoint had been written yet"
    return f"the last good checkpoint (step {state.last_checkpoint}) is kept in {run.checkpoint_dir}"


def _nonfinite_error(state: TrainState, loss: float, grad_norm: float, config: Config, run: Run) -> UserError:
    lr = config.train.lr
    return UserError(
        f"step {state.step + 1}: the training loss is {loss} (gradient norm {grad_norm}); training stopped "
        f"before updating the weights and {_kept(state, run)}. Lower the learning rate (train.lr = {lr:g}; "
        f"try --lr {lr / 3:.2g}) or lengthen the warmup (--warmup-steps)"
    )


def _write_error(error: OSError, what: str, state: TrainState, run: Run) -> UserError:
    """A failed write as one line: the cause and its own fix (a permission is not a full disk), and the
    checkpoint that is kept."""
    if state.last_checkpoint is None:
        then = "no checkpoint had been written yet; fix that and train again"
    else:
        then = (
            f"the checkpoint of step {state.last_checkpoint} in {run.checkpoint_dir} is kept; fix that and "
            f"resume with `octlm train --resume {run.path}`"
        )
    return UserError(f"could not write {what} in {run.path}: {explain(error)}; {then}")


# ------------------------------------------------------------------------------------------------------------
# The training state


def build_state(
    config: Config,
    ckpt: Checkpoint | None,
    data: PreparedData,
    hashes: dict[str, str],
    device: torch.device,
    dist: Dist,
) -> TrainState:
    """Model, optimizer and batch generator: fresh, started from `train.init_from`'s weights, or as the
    checkpoint left them."""
    tc = config.train
    torch.manual_seed(tc.seed)  # before the model is built: the seed fixes the initial weights
    model = Decoder(config.model)
    seed_rank_streams(tc.seed, dist)  # the same weights on every rank, its own dropout masks
    generator = torch.Generator().manual_seed(tc.seed)
    if ckpt:
        model.load_state_dict(ckpt.model_state)
    elif (weights := initial_weights(config, data)) is not None:
        try:
            model.load_state_dict(weights)
        except RuntimeError as error:  # e.g. a learned table of another length: its rows cannot grow
            first = str(error).strip().splitlines()[-1].strip()[:300]
            raise UserError(
                f"the weights of train.init_from = {tc.init_from!r} do not fit this model ({first})"
            ) from None
    model.to(device)
    optimizer = make_optimizer(model, tc)
    precision = Precision(model, device, tc.dtype)  # after loading: a bf16 copy is made of the loaded weights
    state = TrainState(model, precision.step_model, precision, optimizer, generator, data, hashes, 0, 0)
    if ckpt:
        try:
            optimizer.load_state_dict(ckpt.optimizer_state)
        except (ValueError, KeyError, RuntimeError) as error:
            raise UserError(f"the checkpoint's optimizer state does not fit this model ({error})") from None
        restore_rng(ckpt.state.get("rng", {}), generator, device, dist, ckpt.state.get("rank_rng"))
        state.step = state.start_step = state.last_checkpoint = ckpt.step
        state.checkpoint_path = ckpt.path
        state.since_eval = [float(x) for x in ckpt.state.get("losses_since_eval", [])]
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        state.train_model = DistributedDataParallel(state.train_model, device_ids=ids)
    if tc.compile:
        state.train_model = torch.compile(state.train_model)  # type: ignore[assignment]
    return state


def prepare_folder(run: Run, ckpt: Checkpoint | None, data: PreparedData) -> None:
    """The run folder as the loop expects it: metrics cut back to the checkpoint, or a fresh start (an old
    run there, with --overwrite, is set aside until the new run's first checkpoint: `Run.settle`)."""
    run.path.mkdir(parents=True, exist_ok=True)
    if ckpt:
        run.truncate_metrics(ckpt.step)
    else:
        run.set_aside()
        run.reset_metrics()
    data.tokenizer.save(run.tokenizer_path)


@contextlib.contextmanager
def writing(run: Run, dist: Dist, device: torch.device) -> Iterator[None]:
    """The run folder's lock (rank 0) for the whole body; every rank learns whether it was refused.

    After locking, a replacement a crash interrupted is settled and symlinks are refused; on the way out
    (finished, failed or interrupted) `settle` drops the old run or, without a new checkpoint, restores it.
    """
    with contextlib.ExitStack() as stack:
        refusal: UserError | None = None
        if dist.main:
            try:
                stack.enter_context(run.lock())
                run.settle()
                run.refuse_links()
            except UserError as error:
                refusal = error
        if dist.any(refusal is not None, device):
            raise refusal or UserError(f"rank 0 could not lock the run folder {str(run.path)!r}")
        try:
            yield
        finally:
            if dist.main:
                run.settle()


# ------------------------------------------------------------------------------------------------------------
# Steps


def optimizer_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tc: TrainConfig,
    step: int,
    loss_of: Callable[[], torch.Tensor],
    refuse: Callable[[float, float], Exception],
    precision: Precision | None = None,
    dist: Dist | None = None,
) -> float:
    """octlm's one optimizer step (a main run's, a battery cell's): the schedule's rate for `step` (0-based),
    `loss_of()` (a scalar, batch drawn inside) backward, gradients clipped to `tc.grad_clip` (0: off), then
    the update. A non-finite loss or gradient norm raises `refuse(loss, norm)` before the weights change.
    Returns the loss (mean over `dist`'s ranks)."""
    set_lr(optimizer, lr_at(step, tc))
    loss = loss_of()
    loss.backward()
    if precision is not None:
        precision.gradients_to_master()
    loss_value = loss.detach().float()
    loss_value = float(dist.all_mean(loss_value) if dist is not None else loss_value)
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, tc.grad_clip if tc.grad_clip > 0 else math.inf))
    if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
        raise refuse(loss_value, grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if precision is not None:
        precision.weights_from_master()
    return loss_value


def train_step(state: TrainState, config: Config, device: torch.device, dist: Dist, run: Run) -> float:
    """One optimizer step on one global batch; returns the loss (mean over ranks). Refuses a non-finite
    one."""
    B, T = config.train.batch_size, config.model.context_length

    def loss_of() -> torch.Tensor:
        # One global batch drawn on every rank, each taking its slice: as one process with B * world.
        x, y = random_blocks(state.data.train, T, B * dist.world, state.generator)
        x = x[dist.rank * B : (dist.rank + 1) * B].to(device, non_blocking=True)
        y = y[dist.rank * B : (dist.rank + 1) * B].to(device, non_blocking=True)
        with state.precision.context():  # train.dtype (octlm.training.precision); master weights stay float32
            return state.train_model(x, y, return_logits=False)[1]  # chunked loss, no [B, T, V] logits

    def refuse(loss: float, grad_norm: float) -> UserError:
        return _nonfinite_error(state, loss, grad_norm, config, run)

    loss_value = optimizer_step(
        state.model, state.optimizer, config.train, state.step, loss_of, refuse, state.precision, dist
    )
    state.step += 1
    state.losses.append(loss_value)
    state.since_eval.append(loss_value)
    return loss_value


def evaluate_and_record(
    state: TrainState,
    config: Config,
    device: torch.device,
    dist: Dist,
    run: Run,
    started: float,
    stopped: bool = False,
) -> dict[str, Any]:
    """Score the validation blocks, append one record to the run's metrics (rank 0) and return it.

    Step 0 (before the first update) has no training loss, learning rate or speed yet: its record holds the
    validation figures alone. A record at a stop (`stopped`) is marked `"stopped": true` and leaves the
    evaluation window open, so the next scheduled record after a resume averages the same steps as an
    uninterrupted run's; the resume drops it (`Run.truncate_metrics`).
    """
    tc, B, T = config.train, config.train.batch_size, config.model.context_length
    # The same blocks whatever the world size: eval_batches global batches, split over the ranks.
    blocks = eval_blocks(state.data.val, T, tc.eval_batches * B * dist.world, B)
    score = evaluate(state.model, blocks, device, state.data.val_bytes_per_token, dist, tc.dtype)
    state.last_eval = {"val_loss": score.loss, "val_perplexity": score.perplexity, "val_bpb": score.bpb}
    tokens_per_step = B * T * dist.world
    record: dict[str, Any] = {"step": state.step, "tokens": state.step * tokens_per_step}
    if state.since_eval:  # some update since the last record (none at step 0)
        record["lr"] = lr_at(state.step - 1, tc)
        record["train_loss"] = sum(state.since_eval) / len(state.since_eval)
    record.update(state.last_eval)
    if state.step > state.start_step:
        record["tokens_per_second"] = _tokens_per_second(state, tokens_per_step)
    record["elapsed_seconds"] = round(time.perf_counter() - started, 3)
    if stopped:
        record["stopped"] = True
    else:
        state.since_eval = []
    state.records.append(record)
    if dist.main:
        try:
            run.append_metrics(record)
        except OSError as error:
            raise _write_error(error, run.metrics_path.name, state, run) from None
    return record


def save(state: TrainState, config: Config, device: torch.device, dist: Dist, run: Run) -> None:
    """Write a checkpoint of the current step (rank 0); every rank waits for it."""
    ranks = rank_rng_states(device, dist)  # every rank takes part: each has its own dropout stream
    if dist.main:
        extra = {
            "sha256": state.hashes,
            "rng": rng_state(state.generator, device),
            "world_size": dist.world,
            "tokens_seen": state.step * config.train.batch_size * config.model.context_length * dist.world,
            # so the next record averages the same steps after a resume
            "losses_since_eval": state.since_eval,
        }
        if ranks is not None:
            extra["rank_rng"] = ranks
        try:
            state.checkpoint_path = save_checkpoint(
                run.path, state.model, state.optimizer, config, state.step, extra
            )
            run.settle()  # this checkpoint is durable: a run it replaces (--overwrite) can go now
        except OSError as error:
            raise _write_error(error, f"the checkpoint of step {state.step}", state, run) from None
    state.last_checkpoint = state.step
    dist.barrier()


def _record_line(record: dict[str, Any]) -> str:
    """The line `train` prints for a metrics record."""
    if "train_loss" not in record:
        head = f"step {record['step']} (before training):"
    else:
        stopped = " (stopped)" if record.get("stopped") else ""
        head = f"step {record['step']}{stopped}: train loss {record['train_loss']:.4f},"
    return f"{head} val loss {record['val_loss']:.4f}, bits/byte {record['val_bpb']:.4f}"


def _tokens_per_second(state: TrainState, tokens_per_step: int) -> float:
    return (state.step - state.start_step) * tokens_per_step / max(state.train_seconds, 1e-9)


def _progress_bar(config: Config, run: Run, state: TrainState, show: bool) -> tqdm:
    return tqdm(
        total=config.train.steps,
        initial=state.start_step,
        disable=not show,
        unit="step",
        dynamic_ncols=True,
        mininterval=0.5 if sys.stderr.isatty() else 30.0,
        desc=run.name,
    )


def _describe(config: Config, run: Run, state: TrainState, device: torch.device, dist: Dist) -> str:
    B, T, world = config.train.batch_size, config.model.context_length, dist.world
    return (
        f"training {run.name} on {device}{f' x {world} processes' if world > 1 else ''}: "
        f"{state.model.num_parameters():,} parameters, position={config.model.position}, batch {B * world} x "
        f"{T} tokens, steps {state.start_step} -> {config.train.steps}, dtype {config.train.dtype}"
        + (f", {torch.get_num_threads()} CPU thread(s)" if device.type == "cpu" else "")
    )


# ------------------------------------------------------------------------------------------------------------
# The loop


def train(
    config: Config,
    run: Run | str | Path | None = None,
    resume: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
    overwrite: bool = False,
    notes: Sequence[str] = (),
) -> TrainResult:
    """Train `config` in the folder `run` (default `<out_dir>/<config name>-<position>`), or resume it.

    `stop_after=k` stops after step k as a signal would (checkpoint written, `interrupted=True`): for tests.
    `overwrite` starts afresh in a folder that already holds a run. `notes` (the command's, such as why it
    uses fewer threads) are said with the first progress line, once the run is ready to train: a run refused
    before then ends in its one error line alone. Raises UserError for every user mistake, among them a run
    folder another process is training.
    """
    started = time.perf_counter()
    device = resolve_device(config.train.device)
    dist = init_distributed(device)
    if dist.world > 1 and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
    run = Run.of(run) if run is not None else Run.default(config)
    try:
        with writing(run, dist, device):
            return _train(config, run, dist, device, resume, progress, stop_after, overwrite, started, notes)
    finally:
        dist.close()


def _train(
    config: Config,
    run: Run,
    dist: Dist,
    device: torch.device,
    resume: bool,
    progress: bool,
    stop_after: int | None,
    overwrite: bool,
    started: float,
    notes: Sequence[str] = (),
) -> TrainResult:
    show = progress and dist.main
    say = tqdm.write if show else (lambda *a, **k: None)
    tracker = make_tracker(config, run, dist)  # before any work: a missing package fails here
    ckpt = checkpoint_to_resume(config, run, resume, overwrite)
    data, hashes = data_for_run(config, ckpt, dist, show)
    state = build_state(config, ckpt, data, hashes, device, dist)
    if ckpt and ckpt.state.get("world_size", 1) != dist.world:
        say(
            f"note: the run was checkpointed with {ckpt.state.get('world_size', 1)} process(es) and "
            f"resumes with {dist.world}; the global batch changes, so it will not match an uninterrupted run"
        )
    tc, tokens_per_step = config.train, config.train.batch_size * config.model.context_length * dist.world
    signum = 0
    state.model.train()
    with StopRequest(announce=dist.main) as stop:  # from here on a signal is a request to stop after a step
        if dist.main:
            prepare_folder(run, ckpt, data)
        say(_describe(config, run, state, device, dist))
        for note in notes:
            say(note)
        with _progress_bar(config, run, state, show) as bar, tracker.writing(state.start_step) as track:
            if state.step == 0:  # the untrained model's figures, so that no run has an empty record
                record = evaluate_and_record(state, config, device, dist, run, started)
                track.record(record, state.model)
                say(_record_line(record))
            while state.step < tc.steps:
                t0 = time.perf_counter()
                loss = train_step(state, config, device, dist, run)
                state.train_seconds += time.perf_counter() - t0
                tok_s = _tokens_per_second(state, tokens_per_step)
                bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tok_s:,.0f}", refresh=False)
                bar.update(1)
                signum = _agreed_stop(stop, stop_after, state, device, dist)
                scheduled = state.step % tc.eval_interval == 0 or state.step == tc.steps
                if scheduled or signum:  # a stop records where it stopped, however early
                    record = evaluate_and_record(state, config, device, dist, run, started, not scheduled)
                    track.record(record, state.model)
                    say(_record_line(record))
                if state.step % tc.checkpoint_interval == 0 or state.step == tc.steps or signum:
                    save(state, config, device, dist, run)
                if signum and state.step < tc.steps:
                    break
    result = _result(state, run, dist, tokens_per_step, time.perf_counter() - started)
    result.interrupted = bool(signum) and state.step < tc.steps
    result.stop_signal = max(signum, 0)
    return result


def _agreed_stop(
    stop: StopRequest, stop_after: int | None, state: TrainState, device: torch.device, dist: Dist
) -> int:
    """The signal every rank stops for after this step (the largest number any rank received; -1 for
    `stop_after`, 0 to go on): one collective per step, so that all ranks stop on the same step."""
    after = stop_after is not None and state.step >= stop_after
    code = dist.max(stop.signum + 1 if stop.requested else int(after), device)  # 1: stop_after alone
    return code - 1 if code > 1 else -code


def _result(state: TrainState, run: Run, dist: Dist, tokens_per_step: int, seconds: float) -> TrainResult:
    return TrainResult(
        run_dir=run.path,
        step=state.step,
        val_loss=state.last_eval.get("val_loss", math.nan),
        val_bpb=state.last_eval.get("val_bpb", math.nan),
        val_perplexity=state.last_eval.get("val_perplexity", math.nan),
        tokens_per_second=_tokens_per_second(state, tokens_per_step),
        wall_seconds=seconds,
        model=state.model,
        data=state.data,
        metrics=state.records,
        train_losses=state.losses,
        start_step=state.start_step,
        checkpoint_path=state.checkpoint_path,
        rank=dist.rank,
        world_size=dist.world,
    )
