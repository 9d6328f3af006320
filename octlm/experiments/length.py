"""`octlm experiment length`: train short, test long, for every position scheme.

One model per position scheme (learned, sinusoidal, rope, alibi, t5, nope) and seed (`--seeds n`: `train.seed
+ 0 .. n-1`) is trained with the same data and budget at a short context (`--train-length`, default 64), then
scored at several evaluation lengths on **the same held-out tokens**: a context prefix of S validation tokens,
then N = `--eval-windows` × max(eval lengths) scored targets, so bits per byte (nats / ln 2 / UTF-8 bytes of
the scored tokens, EOT 0 bytes) compare down a column and along a row.

- Mode `windows`: non-overlapping windows of L tokens, every token scored (early ones have little context).
- Mode `sliding`: windows of L tokens every h = L // 2 tokens, only the last h targets scored, so every scored
  token sees L - h to L - 1 earlier tokens: this tells "little context" apart from real use of long context.
- A learned table has no row past `--train-length`: those cells read "no rows" (the model is not run there).
- RoPE models also get the inference-time extensions of `octlm.positions.rope_scaling`: `pi`, `ntk` and `yarn`
  with one fixed factor s = max(eval lengths) / train length (`--rope-factor`; a deployed model is configured
  once, so short lengths pay for over-scaling), and `dynamic`, whose NTK factor is L / train length per
  length L.

The grid (scheme × seed) is independent cells: `run_cells` trains and scores some or all of them, writing each
to its own file (`octlm.experiments.cells`), and `octlm.experiments.length_results.collect` builds the outputs
from whatever cells are there; the one-command run is both. Outputs in `runs/length-<date>/` (or `--out`):
`runs/<scheme>-seed<k>/` (reused when a finished run with the same config is there),
`cells/<scheme>-seed<k>.json`, and from the collection `results.jsonl` (one record per scheme/variant, seed,
length and mode), `results.md`, `length.png` and `length.json` (web/DATA.md), and claims.json (the paper
claims checked, `octlm.experiments.claims`). The command line is `octlm.commands.experiment_length`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from octlm.config import Config, config_from_dict
from octlm.errors import UserError
from octlm.experiments import cells
from octlm.experiments.lengths_scorer import MODES, EvalText, make_eval_text, score
from octlm.experiments.rows import Row, spelt
from octlm.experiments.settings import Presets, flag, sorted_unique
from octlm.hashing import CONFIG_BOOKKEEPING
from octlm.inspect import probe
from octlm.positions import scheme_names, table_order
from octlm.positions.formulas import rope_frequencies
from octlm.positions.rope_scaling import VARIANTS, scaled_frequencies
from octlm.runtime import torch_threads
from octlm.signals import stopping
from octlm.storage.jsonable import to_json
from octlm.storage.run import Run

# The default experiment: the day1 shape at context 64, sized to train 18 models and evaluate them in
# under 30 minutes on 2 CPU cores (see docs/LOG.md, "Length experiment").
FULL_DEFAULTS: dict[str, Any] = {
    "train.steps": 600,
    "train.batch_size": 32,
    "train.warmup_steps": 60,
    "train.eval_batches": 4,
}
# --quick: a smoke test of the whole pipeline (commands/experiment_length.QUICK: its time); every scheme and
# RoPE row, two seeds.
QUICK_DEFAULTS: dict[str, Any] = {
    "model.d_model": 32,
    "model.n_layers": 1,
    "model.n_heads": 2,
    "model.d_ff": 64,
    "train.steps": 15,
    "train.batch_size": 8,
    "train.warmup_steps": 3,
    "train.eval_batches": 2,
}
QUICK = {"train_length": 16, "eval_lengths": [16, 32, 64], "seeds": 2, "eval_windows": 4}


# The grid's cells (octlm.experiments.cells): one per scheme and seed, and the settings every cell must share.
# What a cell file holds (octlm.experiments.cells reads it through these before collecting).
class LengthGrid(cells.Record):
    train_length: cells.Positive
    eval_lengths: list[cells.Positive]
    eval_windows: cells.Positive
    modes: list[str]
    rope_factor: float
    schemes: list[str]
    seeds: cells.Seeds
    config_sha256: str
    eval_sha256: str


class LengthRecord(cells.Record):
    scheme: str
    variant: str
    seed: int
    length: cells.Positive
    mode: str
    status: str
    bpb: cells.Number
    tokens: cells.Count
    bytes: cells.Count


class LengthInfo(cells.Record):
    reused: bool
    train_wall: float
    eval_seconds: float
    probe: dict[str, Any] | None = None


class LengthFacts(cells.Facts):
    config: dict[str, Any]
    config_name: str
    scored_tokens: cells.Count
    scored_bytes: cells.Count
    info: LengthInfo


AXES = cells.Axes(
    ("scheme", "seed"),
    "octlm experiment length",
    {
        "train_length": "--train-length",
        "eval_lengths": "--eval-lengths",
        "eval_windows": "--eval-windows",
        "modes": "evaluation modes",
        "rope_factor": "RoPE factor (--rope-factor)",
        "schemes": "--schemes",
        "seeds": "seeds (--seed, --seeds)",
        "config_sha256": "base training config (SHA-256)",
        "eval_sha256": "evaluation tokens (SHA-256)",
    },
    grid=LengthGrid,
    record=LengthRecord,
    facts=LengthFacts,
)
# Upper bounds where the numbers enter: past them a run would exhaust memory rather than finish.
MAX_LENGTH, MAX_WINDOWS = 1 << 20, 100_000
FULL = {"train_length": 64, "eval_lengths": [64, 128, 256, 512, 1024], "seeds": 3, "eval_windows": 16}
# --long: the same trainings scored from 64 up to 16,384 tokens. ALiBi and T5 build their bias per query chunk
# there (octlm/model/decoder.py), in memory linear in the length; 2 windows of the longest length keep the
# validation text needed (40k tokens with the sliding context) and the scoring time (benchmarks/README.md)
# in bounds.
LONG = {"eval_lengths": [64 << i for i in range(9)], "eval_windows": 2}


@dataclass
class Settings:
    """What the experiment varies and measures (the per-run training config comes from `Config`)."""

    presets: ClassVar[Presets] = {
        "quick": (
            QUICK,
            "a tiny model, a few steps, 2 seeds, lengths 16 32 64",
        ),
        "long": (LONG, "evaluation lengths 64 128 ... 16384 and 2 windows (with --quick: the tiny model)"),
    }
    train_length: int = flag(64, "--train-length", "training context length (default 64)")
    eval_lengths: list[int] = flag(
        None,
        "--eval-lengths",
        "evaluation lengths (default 64 128 256 512 1024)",
        metavar="L",
        parse=sorted_unique,
        factory=lambda: list(FULL["eval_lengths"]),
    )
    seeds: int = flag(3, "--seeds", "seeds per scheme (default 3)")
    schemes: list[str] = flag(
        None,
        "--schemes",
        lambda: (
            "position schemes, each alone or as SCHEME+ssmax (queries scaled by s log n) "
            f"(default: {' '.join(default_rows())})"
        ),
        str,
        "SCHEME",
        parse=lambda rows: [spelt(row) for row in rows],  # `ROPE` is `rope`
        recorded="changed",
        factory=lambda: default_rows(),
    )
    # N = eval_windows × max(eval_lengths) scored tokens
    eval_windows: int = flag(
        16, "--eval-windows", "scored tokens = this × the longest evaluation length (default 16)"
    )
    modes: tuple[str, ...] = MODES  # how each length is cut into windows (see windows_for)
    rope_factor: float | None = flag(  # None: max(eval_lengths) / train_length
        None,
        "--rope-factor",
        "static RoPE extension factor for PI, NTK and YaRN (default: longest / train length)",
        float,
        recorded="changed",
    )
    batch_tokens: int = 8192  # tokens per evaluation forward pass
    retrain: bool = flag(False, "--retrain", "train again even where a run is reused", bool, recorded="never")
    jobs: int = 0  # worker processes; 0: one per CPU core (at most one per training)
    # The seed whose models are probed (octlm.inspect.probe; results.md shows one model per scheme);
    # None: every seed.
    probe_seed: int | None = None
    threads: int = 1  # torch threads per worker

    def problems(self) -> list[str]:
        unknown = [s for s in self.schemes if row_overrides(s) is None]
        known = ", ".join(scheme_names()) + f" (each may add {', '.join('+' + o for o in ROW_OPTIONS)})"
        checks = [
            (
                not 2 <= self.train_length <= MAX_LENGTH,
                f"--train-length {self.train_length} must be from 2 to {MAX_LENGTH:,}",
            ),
            (
                not self.eval_lengths
                or not 2 <= min(self.eval_lengths) <= max(self.eval_lengths) <= MAX_LENGTH,
                f"--eval-lengths {self.eval_lengths} must be lengths from 2 to {MAX_LENGTH:,} tokens",
            ),
            (self.seeds < 1, f"--seeds {self.seeds} must be at least 1"),
            (unknown or not self.schemes, f"--schemes {' '.join(unknown)} unknown; choose from {known}"),
            (
                not 1 <= self.eval_windows <= MAX_WINDOWS,
                f"--eval-windows {self.eval_windows} must be from 1 to {MAX_WINDOWS:,}",
            ),
            (
                self.jobs < 0 or self.threads < 1,
                f"--jobs {self.jobs} must be 0 (one per core) or more, --threads {self.threads} at least 1",
            ),
            (
                self.rope_factor is not None and not 1 <= self.rope_factor < math.inf,
                f"--rope-factor {self.rope_factor} must be a finite number of at least 1",
            ),
        ]
        return [message for failed, message in checks if failed]

    @property
    def factor(self) -> float:
        """The static RoPE extension factor s."""
        return self.rope_factor or max(1.0, max(self.eval_lengths) / self.train_length)


def set_rope_variant(model: torch.nn.Module, variant: str, length: int, settings: Settings) -> None:
    """Give a RoPE model the frequencies of `variant` (rope_scaling.VARIANTS) for windows of `length`
    tokens."""
    method, mc, dims = (
        VARIANTS[variant],
        model.config,
        model.positions.rotary_dims,
    )  # rotated channels per head
    if method is None:
        freqs = rope_frequencies(dims, mc.rope_base), 1.0
    else:
        # Dynamic: Hugging Face's formula with factor 1, so the NTK factor is exactly L / train length.
        factor = 1.0 if method == "dynamic" else settings.factor
        freqs = scaled_frequencies(method, dims, mc.rope_base, factor, settings.train_length, length)
    model.positions.set_frequencies(*freqs)


def evaluate_run(
    model: torch.nn.Module, scheme: str, seed: int, text: EvalText, settings: Settings
) -> list[dict]:
    """Every (variant, length, mode) record for one trained model."""
    records = []
    limit = model.positions.max_length  # a learned table's rows; None for the other schemes
    variants = list(VARIANTS) if scheme == "rope" else [""]
    model.eval()
    for variant in variants:
        for length in settings.eval_lengths:
            for mode in settings.modes:
                record: dict[str, Any] = {
                    "scheme": scheme,
                    "variant": variant,
                    "seed": seed,
                    "length": length,
                    "mode": mode,
                    "train_length": settings.train_length,
                }
                if variant not in ("", "plain", "dynamic"):
                    record["rope_factor"] = settings.factor
                if limit is not None and length > limit:
                    record.update(status="no rows", bpb=None, ppl=None, loss=None, tokens=0, bytes=0)
                    records.append(record)
                    continue
                if scheme == "rope":
                    set_rope_variant(model, variant, length, settings)
                s = score(model, text, length, mode, settings.batch_tokens)
                record.update(
                    status="ok", bpb=s.bpb, ppl=s.perplexity, loss=s.loss, tokens=s.tokens, bytes=s.bytes
                )
                records.append(record)
    if scheme == "rope":
        set_rope_variant(model, "plain", settings.train_length, settings)
    return records


# ----------------------------------------------------------------------------------------------------
# Training


def default_rows() -> list[str]:
    """Every registered scheme, and scalable softmax on RoPE and on NoPE (Nakanishi's claim is about both)."""
    return table_order([*scheme_names(), "rope+ssmax", "nope+ssmax"])


# What a row `scheme+option` (`--schemes rope+ssmax`) sets besides the scheme: queries scaled with the length.
ROW_OPTIONS = {"ssmax": {"model.attention_scaling": "ssmax"}}


def row_overrides(row: str) -> dict[str, Any] | None:
    """The config fields a row of the grid sets (`rope`, `nope+ssmax`), or None if it names no known scheme or
    option (this experiment's rows take ROW_OPTIONS only)."""
    try:
        parsed = Row.parse(row)
    except UserError:
        return None
    return None if parsed.randomized or parsed.nope_layers or parsed.extension else parsed.config_fields()


def row_of(config: Config) -> str:
    """The row a training's config is in (`row_overrides` read backwards): `rope`, `nope+ssmax`."""
    chosen = config.to_dict()
    options = [
        o
        for o, fields in ROW_OPTIONS.items()
        if all(chosen[k.split(".")[0]][k.split(".")[1]] == v for k, v in fields.items())
    ]
    return "+".join([config.model.position, *options])


def run_config(base: Config, scheme: str, seed: int, settings: Settings, runs_dir: Path) -> Config:
    """One training's config: `base` with this row's scheme (and options), seed and short context; one
    evaluation at the end."""
    steps = base.train.steps
    overrides = {
        **row_overrides(scheme),
        "model.context_length": settings.train_length,
        "train.seed": seed,
        "train.out_dir": str(runs_dir),
        "train.run_name": cells.cell_name((scheme, seed)),
        "train.eval_interval": steps,
        "train.checkpoint_interval": steps,
        "train.sample_tokens": 0,
        "train.report": False,
    }
    return config_from_dict(base.to_dict(), name=base.name, overrides=overrides)


def unfinished(run_dir: Path, config: Config) -> str | None:
    """Why `run_dir` holds no finished training of `config` (None: it does): no run there, a run of another
    config (the fields that differ named), or one stopped before its last step (its last checkpoint is not of
    `train.steps`). Only the checkpoint's description is read."""
    from octlm.storage.checkpoint import read_meta, validate_meta

    run = Run.of(run_dir)
    if not run.has_checkpoint():
        return "no run there" if not run_dir.exists() else "no checkpoint there"
    try:
        folder = run.find_checkpoint()
        meta = read_meta(folder)
        old = validate_meta(meta, folder)
    except UserError as error:
        return f"not readable ({error})"
    if old.hash() != config.hash() or old.train.steps != config.train.steps:
        theirs, mine = old.flat(), config.flat()
        differ = [
            f"{key} {theirs.get(key)} there, {mine.get(key)} here"
            for key in sorted(set(theirs) | set(mine))
            if theirs.get(key) != mine.get(key) and key.removeprefix("train.") not in CONFIG_BOOKKEEPING
        ]
        shown = "; ".join(differ[:3]) + ("; ..." if len(differ) > 3 else "")
        return f"trained with another config ({shown})" if shown else "trained with another config"
    if meta["step"] != config.train.steps:
        return f"stopped at step {meta['step']} of {config.train.steps}"
    return None


def finished_run(run_dir: Path, config: Config) -> torch.nn.Module | None:
    """The model of a run in `run_dir` that finished training `config` (`unfinished` says why not), else
    None."""
    from octlm.storage.checkpoint import load_model

    if unfinished(run_dir, config) is not None:
        return None
    try:
        model, _, _ = load_model(run_dir)
    except UserError:
        return None
    return model


def trained_model(
    config: Config, run_dir: Path, retrain: bool, progress: bool
) -> tuple[torch.nn.Module, dict]:
    """Train `config` in `run_dir`, or reuse a finished run there with the same config; (model, info)."""
    from octlm.storage.checkpoint import load_model
    from octlm.training.loop import train

    if not retrain and (model := finished_run(run_dir, config)) is not None:
        return model, {"reused": True}
    result = train(config, run_dir, progress=progress, overwrite=True)
    if result.interrupted:
        raise stopping(result.stop_signal)  # as the signal would: 130, 143, 129
    model, _, _ = load_model(run_dir)
    info = {"reused": False, "seconds": result.wall_seconds, "tokens_per_second": result.tokens_per_second}
    return model, info


def train_and_score(config: Config, text: EvalText, settings: Settings) -> tuple[list[dict], dict[str, Any]]:
    """One job (a worker process's unit): train (or reuse) one run, then score it everywhere.

    Returns the records of `evaluate_run` and timing info. Runs with `settings.threads` torch threads: on a
    small CPU machine one thread per job is fastest, and two OpenMP threads on a busy core thrash.
    """
    run = Run.default(config)
    with torch_threads(settings.threads):
        t0 = time.perf_counter()
        model, info = trained_model(config, run.path, settings.retrain, progress=False)
        t1 = time.perf_counter()
        records = evaluate_run(model, row_of(config), config.train.seed, text, settings)
        t2 = time.perf_counter()
        # What each layer knows of absolute position, at the training length, on the same held-out tokens.
        if settings.probe_seed in (None, config.train.seed):
            info["probe"] = to_json(probe.probe_model(model, text.tokens, seed=config.train.seed), 6)
    info.update(train_wall=t1 - t0, eval_seconds=t2 - t1, probe_seconds=time.perf_counter() - t2)
    final = run.last_metrics()
    for r in records:
        r["train_seconds"] = final.get("elapsed_seconds")  # train.py's clock at its last evaluation
        r["final_train_loss"] = final.get("train_loss")  # mean over the steps since the last evaluation
        r["final_val_bpb"] = final.get("val_bpb")  # train.py's own validation figure at the training length
    return records, info


def length_cell(
    key: cells.Key, base: Config, text: EvalText, settings: Settings, runs_dir: Path
) -> tuple[list[dict], dict[str, Any]]:
    """One cell (a worker process's unit): `train_and_score` of the row and seed `key`."""
    scheme, seed = key
    return train_and_score(run_config(base, scheme, seed, settings, runs_dir), text, settings)


# ----------------------------------------------------------------------------------------------------
# The experiment: cells of the grid, each written to its file (octlm.experiments.cells), then collected


def grid_of(config: Config, settings: Settings, seeds: list[int], text: EvalText) -> dict[str, Any]:
    """The settings that define the grid (AXES.settings), recorded with every cell."""
    normal = run_config(config, settings.schemes[0], 0, settings, Path("runs"))  # nothing of any one cell
    return {
        "train_length": settings.train_length,
        "eval_lengths": list(settings.eval_lengths),
        "eval_windows": settings.eval_windows,
        "modes": list(settings.modes),
        "rope_factor": settings.factor,
        "schemes": table_order(settings.schemes),
        "seeds": seeds,
        "config_sha256": normal.hash(),
        "eval_sha256": text.sha256,
    }


def run_cells(
    config: Config,
    settings: Settings,
    out_dir: Path,
    command: str = "octlm experiment length",
    progress: bool = True,
    only: Sequence[str] = (),
) -> cells.CellsRun:
    """Train and score the grid's cells (every scheme × seed, or the `--only SCHEME:SEED` ones) at the short
    length, each written to `out_dir/cells/` as it finishes.

    `config` is the base training config (model shape, data, optimisation); position, context length, seed and
    run folder are set here per training. `command` (the whole experiment's) is recorded with each cell.
    """
    from octlm.data.cache import prepare_data

    problems = settings.problems()
    if problems:
        raise UserError("; ".join(problems))
    started, say = time.perf_counter(), cells.saying(progress)
    seeds = [config.train.seed + i for i in range(settings.seeds)]
    settings = dataclasses.replace(settings, probe_seed=seeds[0])  # the seed results.md's probe table shows
    schemes = table_order(settings.schemes)
    jobs = cells.chosen(only, AXES, [schemes, seeds])
    with cells.locked(out_dir):  # cells started together: the first builds the token cache
        data = prepare_data(
            config.data, config.model.vocab_size, progress=progress, block=settings.train_length
        )
    text = make_eval_text(data.val, data.tokenizer, settings.eval_lengths, settings.eval_windows)
    grid = grid_of(config, settings, seeds, text)
    say(
        f"length experiment: {len(jobs)} of {len(schemes) * len(seeds)} trainings ({len(schemes)} schemes × "
        f"{len(seeds)} seeds) at length {settings.train_length}, {config.train.steps} steps each; scoring "
        f"{text.count:,} tokens at lengths {', '.join(map(str, settings.eval_lengths))} -> {out_dir}"
    )

    workers = cells.workers_for(settings.jobs, len(jobs))
    say(f"{workers} worker process(es), {settings.threads} torch thread(s) each")
    scored_bytes = text.bytes_of(text.tokens[text.start + 1 : text.start + text.count + 1])
    facts = {
        "command": command,
        "config": config.to_dict(),
        "config_name": config.name,
        "scored_tokens": text.count,
        "scored_bytes": scored_bytes,
    }
    work = functools.partial(
        length_cell, base=config, text=text, settings=settings, runs_dir=out_dir / "runs"
    )
    return cells.run(
        out_dir, AXES, jobs, work, grid, facts, workers=workers, started=started, say=say, line=progress_line
    )


def progress_line(key: cells.Key, records: list[dict], info: dict[str, Any]) -> str:
    """`scheme seed k: trained in ... (or reused), scored in ...; bits/byte at the first length`."""
    first = records[0]
    trained = (
        "reused"
        if info["reused"]
        else (f"trained in {info['train_wall']:.0f} s ({info['tokens_per_second']:,.0f} tok/s)")
    )
    return (
        f"{first['scheme']} seed {first['seed']}: {trained}, scored in "
        f"{info['eval_seconds']:.0f} s; bits/byte at {first['length']}: {first['bpb']:.3f}"
    )
