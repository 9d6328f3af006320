"""`octlm train`: the training loop, with evaluation in bits per byte, checkpoints, resume and DDP.

One run lives in one folder, `<train.out_dir>/<name>/` (`train.run_name`, or `<config name>-<position>`):

    tokenizer.json    a copy of the tokenizer the run was trained with
    metrics.jsonl     one JSON record per evaluation
    checkpoint/       weights, optimizer and config (see octlm.checkpoint), every checkpoint_interval steps

Choices, and why:

- AdamW with weight decay on the weight matrices only (2-D parameters of Linear layers). Biases and norm gains
  are never decayed (they are offsets and scales, not capacity). The embedding tables (token table = tied
  output head, learned position table, T5 bucket table) are not decayed either: decay shrinks every row each
  step, including rows of tokens the batch never contains, so a rare token's row would drift to zero instead
  of keeping what it learned or its initial random row. octlm studies these tables, so they stay undecayed.
- The learning rate warms up linearly over `warmup_steps`, then follows a cosine from `lr` down to `min_lr`
  at `steps`. The schedule is a pure function of the step, so a resumed run continues it exactly.
- Determinism: `torch.manual_seed(seed)` before the model is built, and batches drawn by a dedicated
  `torch.Generator` whose state is checkpointed together with the global RNG. A CPU run that is stopped and
  resumed ends bit-identical to an uninterrupted one (tests check this).
- Resume may change only bookkeeping (`RESUMABLE_FIELDS`: steps, evaluation and checkpoint intervals, devices,
  out_dir, run name, report, sample length, data_dir). Extending `steps` stretches the cosine from the resume
  point on; the tokenizer, the corpus and the token files must hash the same as when the run started.
- DDP: `torchrun --nproc_per_node=N -m octlm train ...`. Every rank draws the same global batch of N·B offsets
  from the shared generator and takes its own slice, so N processes with batch B follow the same trajectory as
  one process with batch N·B. Only rank 0 writes files and prints.
- A NaN or infinite loss (or gradient norm) stops before the optimizer step, so the weights and the last
  checkpoint stay good. Ctrl-C finishes the current step, writes a checkpoint and exits with status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from octlm.checkpoint import (
    CHECKPOINT,
    OLD_CHECKPOINT,
    TOKENIZER_FILE,
    Checkpoint,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
    sha256_array,
)
from octlm.config import (
    Config,
    add_config_arguments,
    config_from_args,
    config_from_dict,
    load_config,
    overrides_from_args,
)
from octlm.errors import UserError

if TYPE_CHECKING:
    from octlm.data import PreparedData

METRICS_FILE = "metrics.jsonl"
# Fields a resume may change: they do not change what the next step computes (steps only reshapes the tail
# of the cosine). Everything else must equal the checkpoint's config.
RESUMABLE_FIELDS = frozenset(
    {
        "train.steps",
        "train.eval_interval",
        "train.eval_batches",
        "train.checkpoint_interval",
        "train.out_dir",
        "train.run_name",
        "train.device",
        "train.compile",
        "train.report",
        "train.sample_tokens",
        "data.data_dir",  # where the cache lives; the token files themselves are checked by hash
    }
)
SAMPLE_TEMPERATURE = 0.7
SAMPLE_TOP_K = 40


@dataclass
class TrainResult:
    """What one call of `train` did. Validation figures are NaN when no evaluation ran (early interrupt)."""

    run_dir: Path
    step: int  # steps done in total (a resumed run counts the steps before the resume)
    val_loss: float
    val_bpb: float  # bits per byte of validation text
    val_perplexity: float
    tokens_per_second: float  # training throughput of this call, all ranks together
    wall_seconds: float
    metrics: list[dict[str, Any]] = field(default_factory=list)  # the records appended to metrics.jsonl
    train_losses: list[float] = field(default_factory=list)  # per step of this call, mean over all ranks
    start_step: int = 0
    interrupted: bool = False  # stopped early (Ctrl-C or stop_after); a checkpoint was written
    sample: str = ""  # prompt + generated text, from the final model
    report_path: Path | None = None
    checkpoint_path: Path | None = None
    rank: int = 0
    world_size: int = 1


# ------------------------------------------------------------------------------------------------------------
# Pieces


def lr_at(step: int, tc: Any) -> float:
    """Learning rate for the step with 0-based index `step`: linear warmup, then cosine from lr to min_lr."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    span = max(1, tc.steps - tc.warmup_steps)
    progress = min(1.0, (step - tc.warmup_steps) / span)
    return tc.min_lr + 0.5 * (tc.lr - tc.min_lr) * (1.0 + math.cos(math.pi * progress))


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay the 2-D Linear weights; not biases, norms or embedding tables (see the top)."""
    embedding_params = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    decay, no_decay = [], []
    for p in model.parameters():  # a tied head is the token table: one Parameter, listed once
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and id(p) not in embedding_params else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def resolve_device(name: str) -> torch.device:
    """`auto` picks CUDA when available; asking for CUDA without it is a UserError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"train.device = {name!r} but CUDA is not available here; use --device cpu or auto")
    return torch.device(name)


def default_run_dir(config: Config) -> Path:
    name = config.train.run_name or f"{config.name}-{config.model.position}"
    return Path(config.train.out_dir) / name


def _flatten(config: Config) -> dict[str, Any]:
    return {
        f"{section}.{key}": value
        for section, table in config.to_dict().items()
        for key, value in table.items()
    }


def config_differences(old: Config, new: Config) -> list[str]:
    """`section.field new != old` for every field outside RESUMABLE_FIELDS that differs."""
    a, b = _flatten(old), _flatten(new)
    return [
        f"{k} {b.get(k)} != {a.get(k)}"
        for k in sorted(set(a) | set(b))
        if k not in RESUMABLE_FIELDS and a.get(k) != b.get(k)
    ]


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owned: bool = False  # this call initialized the process group and must destroy it

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()


def _init_distributed(device: torch.device) -> _Dist:
    """Join the process group torchrun describes in RANK / WORLD_SIZE (gloo on CPU, NCCL on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist()
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if device.type == "cuda":
        torch.cuda.set_device(local)
    owned = False
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        owned = True
    return _Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local, owned=owned)


class _StopRequest:
    """Turns the first Ctrl-C into a request to stop after the current step; a second one aborts at once."""

    def __init__(self, say) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False
        self._say = say

    def __enter__(self) -> _StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, self._previous)
        self._say("interrupt: finishing this step and writing a checkpoint (Ctrl-C again to abort now)")

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    tokens: Any,
    block: int,
    max_blocks: int,
    batch_size: int,
    device: torch.device,
    bytes_per_token: float,
    dist: _Dist | None = None,
) -> dict[str, float]:
    """Mean next-token loss over a fixed ordered set of validation blocks, as loss, perplexity, bits per byte.

    bits/byte = loss (nats/token) / ln 2 / bytes-per-token. Under DDP each rank takes every world-th batch and
    the sums are all-reduced, so every rank gets the same figures.
    """
    from octlm.data import eval_blocks

    dist = dist or _Dist()
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # [sum of token losses, token count]
    autocast = _autocast(device)
    for i, (x, y) in enumerate(eval_blocks(tokens, block, max_blocks, batch_size)):
        if i % dist.world != dist.rank:
            continue
        x, y = x.to(device), y.to(device)
        with autocast:
            logits, _ = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum")
        total[0] += loss.double()
        total[1] += y.numel()
    if dist.world > 1:
        torch.distributed.all_reduce(total)
    model.train(was_training)
    loss = float(total[0] / total[1])
    return {
        "val_loss": loss,
        "val_perplexity": math.exp(min(loss, 700.0)),
        "val_bpb": loss / math.log(2) / bytes_per_token,
    }


def _autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on CUDA; float32 on CPU (where bf16 matmuls are slow and resume must be exact)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _rng_state(generator: torch.Generator, device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "batches": generator.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _restore_rng(state: dict[str, Any], generator: torch.Generator, device: torch.device) -> None:
    try:
        torch.set_rng_state(state["torch"])
        generator.set_state(state["batches"])
        if device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], device)
    except (KeyError, TypeError, RuntimeError) as error:
        raise UserError(
            f"the checkpoint's random-generator states are missing or invalid ({error})"
        ) from None


def _rewrite_metrics(path: Path, up_to_step: int) -> None:
    """Keep the records of steps <= up_to_step: evaluations after the checkpoint are redone by the resume."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= up_to_step:
                kept.append(line)
        except ValueError:
            continue
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
    tmp.replace(path)


def _nonfinite_error(
    step: int, loss: float, grad_norm: float, config: Config, last_checkpoint: int | None, run_dir: Path
) -> UserError:
    kept = (
        f"the last good checkpoint (step {last_checkpoint}) is kept in {run_dir / CHECKPOINT}"
        if last_checkpoint is not None
        else "no checkpoint had been written yet"
    )
    lr = config.train.lr
    return UserError(
        f"step {step}: the training loss is {loss} (gradient norm {grad_norm}); training stopped before "
        f"updating the weights and {kept}. Lower the learning rate (train.lr = {lr:g}; "
        f"try --lr {lr / 3:.2g}) or lengthen the warmup (--warmup-steps)"
    )


def _write_error(error: OSError, what: str, last_checkpoint: int | None, run_dir: Path) -> UserError:
    """A failed write (full disk, lost permissions) as one line naming the checkpoint that is kept."""
    reason = error.strerror or str(error)
    if last_checkpoint is None:
        then = "no checkpoint had been written yet; free space and train again"
    else:
        then = (
            f"the checkpoint of step {last_checkpoint} in {run_dir / CHECKPOINT} is kept; free space and "
            f"resume with `octlm train --resume {run_dir}`"
        )
    return UserError(f"could not write {what} in {run_dir}: {reason}; {then}")


# ------------------------------------------------------------------------------------------------------------
# Opening a run: the checkpoint to resume and the data, both checked


def _checkpoint_to_resume(config: Config, run_dir: Path, resume: bool, overwrite: bool) -> Checkpoint | None:
    """The checkpoint a resume continues (checked against `config` and the corpus), or None for a new run.

    A new run refuses a folder that already holds one unless `overwrite` is set.
    """
    tc = config.train
    if not resume:
        if not overwrite and ((run_dir / CHECKPOINT).is_dir() or (run_dir / OLD_CHECKPOINT).is_dir()):
            raise UserError(
                f"{str(run_dir)!r} already holds a run; resume it with `octlm train --resume {run_dir}`, "
                "choose another --name, or pass --overwrite to start it again"
            )
        return None
    ckpt = load_checkpoint(run_dir, map_location="cpu")
    diffs = config_differences(ckpt.config, config)
    if diffs:
        raise UserError(
            f"config differs from the checkpoint's: {'; '.join(diffs)}; a resume keeps the run's settings "
            f"(only {', '.join(sorted(RESUMABLE_FIELDS))} may change)"
        )
    if ckpt.optimizer_state is None:
        raise UserError(f"{str(run_dir)!r} has no optimizer state, so it cannot be resumed exactly")
    if ckpt.step >= tc.steps:
        raise UserError(
            f"run {str(run_dir)!r} already finished its {ckpt.step} steps; to train further, resume with "
            f"a larger --steps (e.g. octlm train --resume {run_dir} --steps {2 * ckpt.step})"
        )
    # Refuse edited text before prepare_data writes a cache for it.
    from octlm.corpus import corpus_sha256, load_documents

    corpus_now, recorded = corpus_sha256(load_documents(config.data)), ckpt.meta["sha256"].get("corpus")
    if recorded and corpus_now != recorded:
        raise UserError(
            f"corpus differs from the checkpoint's: SHA-256 {corpus_now[:12]} != {str(recorded)[:12]}; "
            "the text changed since the run started, so it cannot be resumed"
        )
    return ckpt


def _data_for_run(
    config: Config, ckpt: Checkpoint | None, dist: _Dist, show: bool
) -> tuple[PreparedData, dict[str, str]]:
    """The token files and their SHA-256 table; on resume they must be the ones the checkpoint recorded."""
    from octlm.data import prepare_data

    vocab = config.model.vocab_size
    # Rank 0 builds the cache first, so that ranks never write the same files at once.
    if dist.main:
        data = prepare_data(config.data, vocab, progress=show)
    dist.barrier()
    if not dist.main:
        data = prepare_data(config.data, vocab, progress=False)
    if data.tokenizer.vocab_size > vocab:
        raise UserError(
            f"the tokenizer has {data.tokenizer.vocab_size} entries but model.vocab_size is {vocab}"
        )
    hashes = {
        "tokenizer": data.tokenizer_sha256,
        "corpus": data.corpus_sha256,
        "train_tokens": sha256_array(data.train),
        "val_tokens": sha256_array(data.val),
    }
    recorded = ckpt.meta["sha256"] if ckpt else {}
    for key, value in hashes.items():
        if ckpt and recorded.get(key) != value:
            raise UserError(
                f"{key} differs from the checkpoint's: SHA-256 {value[:12]} != {str(recorded.get(key))[:12]}; "
                "the corpus or tokenizer changed since the run started, so it cannot be resumed"
            )
    return data, hashes


# ------------------------------------------------------------------------------------------------------------
# The loop


def train(
    config: Config,
    run_dir: Path | None = None,
    resume: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train `config` in `run_dir` (default `<out_dir>/<config name>-<position>`), or resume it.

    `stop_after=k` stops after step k as Ctrl-C would (checkpoint written, `interrupted=True`): for tests.
    `overwrite` starts afresh in a folder that already holds a run. Raises UserError for every user mistake.
    """
    device = resolve_device(config.train.device)
    dist = _init_distributed(device)
    if dist.world > 1 and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
    try:
        return _train(
            config,
            Path(run_dir) if run_dir else default_run_dir(config),
            resume,
            progress,
            stop_after,
            overwrite,
            device,
            dist,
        )
    finally:
        if dist.owned:
            torch.distributed.destroy_process_group()


def _train(
    config: Config,
    run_dir: Path,
    resume: bool,
    progress: bool,
    stop_after: int | None,
    overwrite: bool,
    device: torch.device,
    dist: _Dist,
) -> TrainResult:
    from octlm.data import random_blocks
    from octlm.model import Decoder

    started = time.perf_counter()
    tc, mc = config.train, config.model
    show = progress and dist.main
    say = tqdm.write if show else (lambda *a, **k: None)

    ckpt = _checkpoint_to_resume(config, run_dir, resume, overwrite)
    start_step = ckpt.step if ckpt else 0
    data, hashes = _data_for_run(config, ckpt, dist, show)

    # --- model, optimizer, generator (in this order: the seed fixes the initial weights)
    torch.manual_seed(tc.seed)
    model = Decoder(mc)
    generator = torch.Generator().manual_seed(tc.seed)
    if ckpt:
        model.load_state_dict(ckpt.model_state)
    model.to(device)
    optimizer = torch.optim.AdamW(
        param_groups(model, tc.weight_decay),
        lr=tc.lr,
        betas=(tc.beta1, tc.beta2),
        fused=True,  # one kernel for every parameter: on CPU 5-6x faster than foreach (docs/LOG.md)
    )
    if ckpt:
        try:
            optimizer.load_state_dict(ckpt.optimizer_state)
        except (ValueError, KeyError, RuntimeError) as error:
            raise UserError(f"the checkpoint's optimizer state does not fit this model ({error})") from None
        _restore_rng(ckpt.state.get("rng", {}), generator, device)
        if ckpt.state.get("world_size", 1) != dist.world:
            say(
                f"note: the run was checkpointed with {ckpt.state.get('world_size', 1)} process(es) and resumes "
                f"with {dist.world}; the global batch changes, so it will not match an uninterrupted run exactly"
            )

    # --- files (rank 0)
    metrics_path = run_dir / METRICS_FILE
    if dist.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if ckpt:
            _rewrite_metrics(metrics_path, ckpt.step)
        else:
            for stale in (run_dir / CHECKPOINT, run_dir / OLD_CHECKPOINT):  # --overwrite
                if stale.is_dir():
                    shutil.rmtree(stale)
            metrics_path.write_text("", encoding="utf-8")
        data.tokenizer.save(run_dir / TOKENIZER_FILE)

    train_model: nn.Module = model
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        train_model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    if tc.compile:
        train_model = torch.compile(train_model)  # type: ignore[assignment]
    autocast = _autocast(device)

    B, T, world = tc.batch_size, mc.context_length, dist.world
    tokens_per_step = B * T * world
    params = [p for p in model.parameters() if p.requires_grad]
    if show:
        say(
            f"training {run_dir.name} on {device}{f' x {world} processes' if world > 1 else ''}: "
            f"{model.num_parameters():,} parameters, position={mc.position}, batch {B * world} x {T} tokens, "
            f"steps {start_step} -> {tc.steps}"
        )

    step = start_step
    last_checkpoint = ckpt.step if ckpt else None
    checkpoint_path = ckpt.path if ckpt else None
    losses: list[float] = []
    since_eval: list[float] = [float(x) for x in ckpt.state.get("losses_since_eval", [])] if ckpt else []
    records: list[dict[str, Any]] = []
    last_eval: dict[str, float] = {}
    train_seconds = 0.0
    interrupted = False

    def checkpoint() -> None:
        nonlocal last_checkpoint, checkpoint_path
        if dist.main:
            state = {
                "sha256": hashes,
                "rng": _rng_state(generator, device),
                "world_size": world,
                "tokens_seen": step * tokens_per_step,
                "losses_since_eval": since_eval,  # so the next record averages the same steps after a resume
            }
            try:
                checkpoint_path = save_checkpoint(run_dir, model, optimizer, config, step, state)
            except OSError as error:
                raise _write_error(
                    error, f"the checkpoint of step {step}", last_checkpoint, run_dir
                ) from None
        last_checkpoint = step
        dist.barrier()

    interactive = sys.stderr.isatty()
    bar = tqdm(
        total=tc.steps,
        initial=start_step,
        disable=not show,
        unit="step",
        dynamic_ncols=True,
        mininterval=0.5 if interactive else 30.0,
        desc=run_dir.name,
    )
    model.train()
    with _StopRequest(say) as stop, bar:
        while step < tc.steps:
            t0 = time.perf_counter()
            lr = lr_at(step, tc)
            for group in optimizer.param_groups:
                group["lr"] = lr
            # One global batch drawn on every rank, each taking its slice: as one process with B * world.
            x, y = random_blocks(data.train, T, B * world, generator)
            x = x[dist.rank * B : (dist.rank + 1) * B].to(device, non_blocking=True)
            y = y[dist.rank * B : (dist.rank + 1) * B].to(device, non_blocking=True)
            with autocast:
                _, loss = train_model(x, y, return_logits=False)  # chunked loss, no [B, T, V] logits
            loss.backward()
            reported = loss.detach().float()
            if world > 1:
                torch.distributed.all_reduce(reported)
                reported /= world
            grad_norm = float(
                torch.nn.utils.clip_grad_norm_(params, tc.grad_clip if tc.grad_clip > 0 else math.inf)
            )
            loss_value = float(reported)
            if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
                raise _nonfinite_error(step + 1, loss_value, grad_norm, config, last_checkpoint, run_dir)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            train_seconds += time.perf_counter() - t0
            losses.append(loss_value)
            since_eval.append(loss_value)
            tok_s = (step - start_step) * tokens_per_step / max(train_seconds, 1e-9)
            bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{tok_s:,.0f}", refresh=False)
            bar.update(1)

            stop_now = stop.requested or (stop_after is not None and step >= stop_after)
            if world > 1:  # ranks must agree, or one would wait forever in the next all-reduce
                flag = torch.tensor([float(stop_now)], device=device)
                torch.distributed.all_reduce(flag)
                stop_now = bool(flag.item() > 0)
            if step % tc.eval_interval == 0 or step == tc.steps:
                # The same blocks whatever the world size: eval_batches global batches, split over the ranks.
                last_eval = evaluate(
                    model, data.val, T, tc.eval_batches * B * world, B, device, data.val_bytes_per_token, dist
                )
                record = {
                    "step": step,
                    "tokens": step * tokens_per_step,
                    "lr": lr,
                    "train_loss": sum(since_eval) / len(since_eval),
                    **last_eval,
                    "tokens_per_second": tok_s,
                    "elapsed_seconds": round(time.perf_counter() - started, 3),
                }
                since_eval = []
                records.append(record)
                if dist.main:
                    try:
                        with open(metrics_path, "a", encoding="utf-8") as f:
                            f.write(json.dumps(record) + "\n")
                    except OSError as error:
                        raise _write_error(error, metrics_path.name, last_checkpoint, run_dir) from None
                say(
                    f"step {step}: train loss {record['train_loss']:.4f}, "
                    f"val loss {last_eval['val_loss']:.4f}, bits/byte {last_eval['val_bpb']:.4f}"
                )
            if step % tc.checkpoint_interval == 0 or step == tc.steps or stop_now:
                checkpoint()
            if stop_now and step < tc.steps:
                interrupted = True
                break

    result = TrainResult(
        run_dir=run_dir,
        step=step,
        val_loss=last_eval.get("val_loss", math.nan),
        val_bpb=last_eval.get("val_bpb", math.nan),
        val_perplexity=last_eval.get("val_perplexity", math.nan),
        tokens_per_second=(step - start_step) * tokens_per_step / max(train_seconds, 1e-9),
        wall_seconds=0.0,
        metrics=records,
        train_losses=losses,
        start_step=start_step,
        interrupted=interrupted,
        checkpoint_path=checkpoint_path,
        rank=dist.rank,
        world_size=world,
    )
    if not interrupted and dist.main:
        if tc.sample_tokens > 0:
            result.sample = sample_text(
                model, data.tokenizer, sample_prompt(config), tc.sample_tokens, tc.seed
            )
        if tc.report:
            from octlm.report import write_report

            result.report_path = Path(write_report(run_dir))
    result.wall_seconds = time.perf_counter() - started
    return result


def sample_prompt(config: Config) -> str:
    """A fixed prompt that suits the corpus: code for the stdlib, prose otherwise."""
    # A whole word with no trailing space: BPE merges a space into the next word (" self"), so a prompt ending
    # in a lone " " token starts from a context the model rarely saw, and samples from it degenerate.
    return "class" if config.data.source == "stdlib" else "The"


def sample_text(model: nn.Module, tokenizer: Any, prompt: str, max_new_tokens: int, seed: int) -> str:
    """Prompt plus a low-temperature continuation (fixed seed, so the same weights give the same sample)."""
    from octlm.generate import encode_prompt, generate

    ids = list(
        generate(
            model,
            tokenizer,
            encode_prompt(tokenizer, prompt),
            max_new_tokens,
            temperature=SAMPLE_TEMPERATURE,
            top_k=SAMPLE_TOP_K,
            top_p=1.0,
            seed=seed,
        )
    )
    if ids and ids[-1] == tokenizer.eot_id:
        ids = ids[:-1]  # the document ended; EOT is not text
    return prompt + tokenizer.decode(ids)


# ------------------------------------------------------------------------------------------------------------
# `octlm train`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    # `--compile` and `--report` work as plain switches too (`--compile` = `--compile true`).
    for action in parser._actions:
        if action.option_strings and action.option_strings[0] in ("--compile", "--report"):
            action.nargs, action.const = "?", "true"
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue the run in RUN_DIR (e.g. runs/day1-learned) from its last checkpoint; "
        "its config is reused, and only bookkeeping such as --steps may change",
    )
    parser.add_argument("--name", default=None, help="run name: the run lives in <out_dir>/<name>/")
    parser.add_argument(
        "--overwrite", action="store_true", help="start again in a run folder that holds a run"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; 1 is often fastest on a busy machine)",
    )


def config_for_resume(args: argparse.Namespace, run_dir: Path) -> Config:
    """The run's own config plus the given overrides (or, with --config, that file plus overrides)."""
    overrides = overrides_from_args(args)
    if args.config is not None:
        return load_config(args.config, overrides)
    meta_path = find_checkpoint(run_dir) / "config.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        raw, name = meta["config"], str(meta.get("config_name", "custom"))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        raise UserError(f"{str(meta_path)!r} is unreadable; the checkpoint is corrupt") from None
    return config_from_dict(raw, name=name, overrides=overrides)


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run with `count` torch CPU threads (None: torch's choice), then restore the previous count."""
    if count is not None and count < 1:
        raise UserError(f"--threads {count} must be at least 1")
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run(args: argparse.Namespace) -> int:
    with torch_threads(args.threads):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.name:
        args.set.append(f"train.run_name={args.name}")
    if args.resume:
        run_dir = Path(args.resume)
        config = config_for_resume(args, run_dir)
    else:
        config = config_from_args(args)
        run_dir = default_run_dir(config)
    result = train(
        config, run_dir, resume=bool(args.resume), progress=not args.no_progress, overwrite=args.overwrite
    )
    if result.rank != 0:
        return 130 if result.interrupted else 0
    if result.interrupted:
        print(
            f"stopped at step {result.step} of {config.train.steps}; checkpoint saved in "
            f"{run_dir / CHECKPOINT}"
        )
        print(f"resume with: octlm train --resume {run_dir}")
        return 130
    print(
        f"validation   loss {result.val_loss:.4f}, perplexity {result.val_perplexity:.2f}, "
        f"bits per byte {result.val_bpb:.4f} (step {result.step})"
    )
    print(f"speed        {result.tokens_per_second:,.0f} tokens/s, {result.wall_seconds:.1f} s in all")
    if result.sample:
        print("sample       " + result.sample.replace("\n", "\n             "))
    print(f'run          {run_dir}  (generate: octlm generate --run {run_dir} --prompt "class")')
    if result.report_path is not None:
        print(f"report       {result.report_path}")
    return 0
