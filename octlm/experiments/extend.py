"""`octlm experiment extend`: train short, fine-tune a little at a longer length, with each way of extending
a context (Chen et al., 2023; Peng et al., 2023).

For every row and seed: the base model is the length experiment's training at L = `--train-length` (found in
`--base DIR`'s runs when that experiment ran with the same config, else trained here); it is scored
**before** fine-tuning, then fine-tuned `--steps-to-extend` steps at L' = `--extend-length` from its weights
(`train.init_from`), its validation bits per byte at L' recorded every `--curve-interval` steps (how many
steps a method needs), and scored **after**. Scoring: bits per byte at every length of `--eval-lengths`
(non-overlapping windows of the held-out text, `octlm.experiments.lengths_scorer.score`), and passkey
retrieval in Mohtashami & Jaggi's format at each length that holds it, with the effective window it gives
(`octlm.experiments.passkey`).

Rows: `plain`, `pi`, `ntk` and `yarn` are the RoPE base model fine-tuned with each method's frequencies for
the factor s = L' / L (`model.rope_scaling`; plain: none); before fine-tuning they are the base model with
those frequencies at inference. `alibi`, `fire`, `nope`, `fox`, `path` and `stick-breaking` need no
rescaling: they are fine-tuned the same way as controls.

The grid (row × seed) is cells as in the other experiments (`octlm.experiments.cells`);
`octlm.experiments.extend_results.collect` builds results.md (with the paper claims checked), results.jsonl,
claims.json, extend.png and extend.json.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from octlm.config import Config, config_from_dict
from octlm.errors import UserError
from octlm.experiments import cells, length, passkey
from octlm.experiments.length import finished_run, run_config, trained_model, unfinished
from octlm.experiments.lengths_scorer import EvalText, make_eval_text, score
from octlm.experiments.settings import Presets, flag, sorted_unique
from octlm.positions import scheme_names
from octlm.positions.rope_scaling import scaled_frequencies
from octlm.runtime import torch_threads
from octlm.signals import stopping
from octlm.storage.run import Run

# Row -> (the scheme it fine-tunes, RoPE's rescaling for it: a rope_scaling method or "none").
ROPE_ROWS = {"plain": "none", "pi": "linear", "ntk": "ntk", "yarn": "yarn"}
CONTROLS = ("alibi", "fire", "nope", "fox", "path", "stick-breaking")
ROWS = (*ROPE_ROWS, *CONTROLS)


# What a cell file holds (octlm.experiments.cells reads it through these before collecting).
class ExtendGrid(cells.Record):
    train_length: cells.Positive
    extend_length: cells.Positive
    eval_lengths: list[cells.Positive]
    eval_windows: cells.Positive
    steps: cells.Positive
    curve_interval: cells.Positive
    passkey_per_depth: cells.Positive
    passkey_format: str
    rows: list[str]
    seeds: cells.Seeds
    config_sha256: str
    eval_sha256: str


class ExtendRecord(cells.Record):
    row: str
    scheme: str
    seed: int
    phase: str
    length: cells.Positive
    bpb: float
    tokens: cells.Count
    bytes: cells.Count
    passkey: cells.Number
    retrieval_bits: cells.Number
    effective_window: cells.Count | None = None  # the same in every record of a row, seed and phase


class CurvePoint(cells.Record):
    step: cells.Count
    val_bpb: float


class ExtendInfo(cells.Record):
    base_run: str
    base_trained: bool
    base_seconds: float
    before_seconds: float
    fine_tune_seconds: float
    after_seconds: float
    curve: list[CurvePoint]


class ExtendFacts(cells.Facts):
    config: dict[str, Any]
    config_name: str
    scored_tokens: cells.Count
    info: ExtendInfo


AXES = cells.Axes(
    ("row", "seed"),
    "octlm experiment extend",
    {
        "train_length": "--train-length",
        "extend_length": "--extend-length",
        "eval_lengths": "--eval-lengths",
        "eval_windows": "--eval-windows",
        "steps": "fine-tuning --steps",
        "curve_interval": "--curve-interval",
        "passkey_per_depth": "--passkey-windows",
        "passkey_format": "passkey format",
        "rows": "--rows",
        "seeds": "seeds (--seed, --seeds)",
        "config_sha256": "base training config (SHA-256)",
        "eval_sha256": "evaluation tokens (SHA-256)",
    },
    grid=ExtendGrid,
    record=ExtendRecord,
    facts=ExtendFacts,
)
PHASES = ("before", "after")

# The base trainings are the length experiment's (its FULL_DEFAULTS, at 64 tokens): `--base` reuses them.
QUICK = {
    "train_length": 16,
    "extend_length": 32,
    "eval_lengths": [16, 32, 64],
    "seeds": 2,
    "eval_windows": 4,
    "steps": 4,
    "curve_interval": 2,
    "passkey_per_depth": 2,
}
# The fine-tuning's optimisation: a tenth of the base run's peak rate, a short warm-up, the same tokens per
# step.
FINE_TUNE = {"train.lr": 3e-4, "train.min_lr": 3e-5, "train.warmup_steps": 10}


@dataclass
class Settings:
    """What the experiment varies and measures (the base training config comes from `Config`)."""

    presets: ClassVar[Presets] = {
        "quick": (
            QUICK,
            "a tiny model, a few steps, 2 seeds, lengths 16 -> 32",
        )
    }
    train_length: int = flag(64, "--train-length", "base training length L (default 64)")
    extend_length: int = flag(256, "--extend-length", "fine-tuning length L' (default 256)")
    eval_lengths: list[int] = flag(
        None,
        "--eval-lengths",
        "evaluation lengths (default 64 128 256 512 1024)",
        metavar="L",
        parse=sorted_unique,
        factory=lambda: [64, 128, 256, 512, 1024],
    )
    seeds: int = flag(3, "--seeds", "seeds per row (default 3)")
    rows: list[str] = flag(
        None,
        "--rows",
        f"rows (default: {' '.join(ROWS)}): RoPE fine-tuned plain or with PI, NTK or YaRN, and schemes that "
        "need no rescaling",
        str,
        "ROW",
        recorded="changed",
        factory=lambda: list(ROWS),
    )
    steps: int = flag(
        100, "--steps-to-extend", "fine-tuning steps at the extended length (default 100)", metavar="N"
    )
    curve_interval: int = flag(
        10, "--curve-interval", "fine-tuning steps between evaluations at the extended length (default 10)"
    )
    eval_windows: int = flag(
        8, "--eval-windows", "scored tokens = this × the longest evaluation length (default 8)"
    )
    passkey_per_depth: int = flag(8, "--passkey-windows", "passkey windows per depth and length (default 8)")
    base: Path | None = flag(  # a length experiment's output folder whose base runs are reused
        None,
        "--base",
        "a length experiment's output folder (it holds runs/): its runs of the same config are the base "
        "models, the others are trained here",
        str,
        "DIR",
        parse=lambda text: Path(text) if text else None,
        recorded="changed",
    )
    batch_tokens: int = 8192
    retrain: bool = flag(False, "--retrain", "train again even where a run is reused", bool, recorded="never")
    jobs: int = 0
    threads: int = 1

    def problems(self) -> list[str]:
        unknown = [r for r in self.rows if r not in ROWS or (r in CONTROLS and r not in scheme_names())]
        checks = [
            (
                not 2 <= self.train_length <= length.MAX_LENGTH,
                f"--train-length {self.train_length} must be from 2 to {length.MAX_LENGTH:,}",
            ),
            (
                not self.train_length < self.extend_length <= length.MAX_LENGTH,
                f"--extend-length {self.extend_length} must be longer than "
                f"--train-length {self.train_length}",
            ),
            (
                not self.eval_lengths
                or not 2 <= min(self.eval_lengths) <= max(self.eval_lengths) <= length.MAX_LENGTH,
                f"--eval-lengths {self.eval_lengths} must be lengths from 2 to {length.MAX_LENGTH:,} tokens",
            ),
            (self.seeds < 1, f"--seeds {self.seeds} must be at least 1"),
            (unknown or not self.rows, f"--rows {' '.join(unknown)} unknown; choose from {' '.join(ROWS)}"),
            (
                not 1 <= self.eval_windows <= length.MAX_WINDOWS,
                f"--eval-windows {self.eval_windows} must be from 1 to {length.MAX_WINDOWS:,}",
            ),
            (
                not 1 <= self.curve_interval <= self.steps,
                f"--curve-interval {self.curve_interval} must be from 1 to --steps {self.steps}",
            ),
            (self.passkey_per_depth < 1, f"--passkey-windows {self.passkey_per_depth} must be at least 1"),
            (
                self.jobs < 0 or self.threads < 1,
                f"--jobs {self.jobs} must be 0 (one per core) or more, --threads {self.threads} at least 1",
            ),
        ]
        return [message for failed, message in checks if failed] + [p for p in [base_problem(self.base)] if p]

    @property
    def factor(self) -> float:
        """The extension factor s = L' / L every RoPE method uses."""
        return self.extend_length / self.train_length


def base_problem(base: Path | None) -> str | None:
    """Why `--base` is no length experiment's folder (a file, a missing folder, one without runs/<run>/), else
    None: such a folder is refused, not silently replaced by training every base model here (an hour)."""
    if base is None:
        return None
    fix = (
        "give the folder `octlm experiment length --out DIR` wrote, or leave --base out to train the base "
        "models here"
    )
    runs = base / "runs"
    try:
        if not base.exists():
            return f"--base {base}: no such folder; {fix}"
        if not base.is_dir():
            return f"--base {base} is a file, not a length experiment's folder of base models; {fix}"
        if not runs.is_dir() or not any(p.is_dir() for p in runs.iterdir()):
            return f"--base {base} holds no length experiment (no runs in {runs}/) to take base models from; {fix}"
    except OSError as error:
        return f"--base {base} cannot be read ({error.strerror}); {fix}"
    return None


def scheme_of(row: str) -> str:
    return "rope" if row in ROPE_ROWS else row


# ----------------------------------------------------------------------------------------------------
# The configs: the base training (the length experiment's), and its fine-tuning


def base_config(config: Config, row: str, seed: int, settings: Settings, runs_dir: Path) -> Config:
    """The length experiment's training of this row's scheme and seed at the short length."""
    return run_config(
        config, scheme_of(row), seed, length.Settings(train_length=settings.train_length), runs_dir
    )


def fine_tune_config(base: Config, row: str, base_dir: Path, settings: Settings, runs_dir: Path) -> Config:
    """`base` continued from its weights at the extended length: the same tokens per step (fewer, longer
    rows), FINE_TUNE's rates, an evaluation every `curve_interval` steps, and RoPE's rescaling for this
    row."""
    seed = base.train.seed
    batch = max(1, base.train.batch_size * settings.train_length // settings.extend_length)
    scaling = ROPE_ROWS.get(row, "none")
    overrides: dict[str, Any] = {
        **FINE_TUNE,
        "model.context_length": settings.extend_length,
        "train.init_from": str(base_dir),
        "train.steps": settings.steps,
        "train.batch_size": batch,
        "train.eval_interval": settings.curve_interval,
        "train.checkpoint_interval": settings.steps,
        "train.out_dir": str(runs_dir),
        "train.run_name": f"{cells.cell_name((row, seed))}-extended",
        "train.warmup_steps": min(FINE_TUNE["train.warmup_steps"], settings.steps),
    }
    if scaling != "none":
        overrides |= {
            "model.rope_scaling": scaling,
            "model.rope_factor": settings.factor,
            "model.rope_original_length": settings.train_length,
        }
    return config_from_dict(base.to_dict(), name=base.name, overrides=overrides)


def base_model(config: Config, settings: Settings, out_dir: Path) -> tuple[torch.nn.Module, Path, bool]:
    """The trained base model, its run folder, and whether it was trained just now.

    A finished run of the same config in `--base`'s runs is reused as it is (never written to); otherwise the
    run is trained (or reused) in this experiment's own runs, under a lock, since the four RoPE rows share it.
    """
    name = config.train.run_name
    if settings.base is not None and not settings.retrain:
        found = finished_run(settings.base / "runs" / name, config)
        if found is not None:
            return found, settings.base / "runs" / name, False
    with cells.locked(out_dir, f"base-{name}"):
        model, info = trained_model(
            config, Path(config.train.out_dir) / name, settings.retrain, progress=False
        )
    return model, Path(config.train.out_dir) / name, not info["reused"]


# ----------------------------------------------------------------------------------------------------
# Scoring


@dataclass
class Probe:
    """What every model is scored on: the held-out text, and the passkey windows at each length."""

    text: EvalText
    windows: dict[int, passkey.PasskeyWindows]


def make_probe(val: np.ndarray, tokenizer: Any, settings: Settings) -> Probe:
    """The length experiment's held-out text, and passkey windows (Mohtashami & Jaggi's, in this tokenizer) at
    every length that holds the needle and the question."""
    text = make_eval_text(val, tokenizer, settings.eval_lengths, settings.eval_windows)
    shortest = passkey.shortest_window(tokenizer)
    windows = {
        n: passkey.passkey_windows(tokenizer, n, per_depth=settings.passkey_per_depth, seed=n)
        for n in settings.eval_lengths
        if n >= shortest
    }
    return Probe(text, windows)


def use_inference_scaling(model: torch.nn.Module, row: str, settings: Settings) -> None:
    """Before fine-tuning, a RoPE row is the base model with its method's frequencies (factor L' / L)."""
    method = ROPE_ROWS.get(row, "none")
    if method != "none":
        rope, mc = model.positions, model.config
        model.positions.set_frequencies(
            *scaled_frequencies(
                method, rope.rotary_dims, mc.rope_base, settings.factor, settings.train_length
            )
        )


def scored(
    model: torch.nn.Module, row: str, seed: int, phase: str, probe: Probe, settings: Settings
) -> list[dict]:
    """One record per length: bits per byte, and passkey accuracy (overall and by depth) where it fits; each
    with the phase's effective window (`passkey.effective_window` over the lengths asked; None: none fits)."""
    model.eval()
    records = []
    for n in settings.eval_lengths:
        s = score(model, probe.text, n, "windows", settings.batch_tokens)
        record: dict[str, Any] = {
            "row": row,
            "scheme": scheme_of(row),
            "seed": seed,
            "phase": phase,
            "length": n,
            "bpb": s.bpb,
            "tokens": s.tokens,
            "bytes": s.bytes,
        }
        if n in probe.windows:
            asked = passkey.retrieval(model, probe.windows[n], settings.batch_tokens)
            record |= {
                "passkey": asked.accuracy,
                "retrieval_bits": asked.retrieval_bits,
                "passkey_by_depth": passkey.accuracy_by_depth(probe.windows[n], asked.hits),
                "passkey_windows": int(asked.hits.size),
            }
        else:  # the window cannot hold the needle and the question
            record |= {"passkey": None, "retrieval_bits": None}
        records.append(record)
    asked = {r["length"]: r["passkey"] for r in records if r["passkey"] is not None}
    window = passkey.effective_window(asked) if asked else None
    return [r | {"effective_window": window} for r in records]


def curve_of(run_dir: Path) -> list[dict]:
    """The fine-tuning's validation bits per byte at the extended length, by step (step 0: before any)."""
    return [
        {"step": r["step"], "val_bpb": r["val_bpb"]} for r in Run.of(run_dir).read_metrics() if "val_bpb" in r
    ]


# ----------------------------------------------------------------------------------------------------
# One cell, and the grid


def extend_cell(
    key: tuple[str, int], config: Config, probe: Probe, settings: Settings, out_dir: Path
) -> tuple[list[dict], dict[str, Any]]:
    """Score the base model before, fine-tune it, score it after; (records, info). One worker's unit."""
    from octlm.storage.checkpoint import load_model
    from octlm.training.loop import train

    row, seed = key
    runs = out_dir / "runs"
    with torch_threads(settings.threads):
        t0 = time.perf_counter()
        base = base_config(config, row, seed, settings, runs)
        model, base_dir, trained = base_model(base, settings, out_dir)
        t1 = time.perf_counter()
        use_inference_scaling(model, row, settings)
        records = scored(model, row, seed, "before", probe, settings)
        t2 = time.perf_counter()
        tune = fine_tune_config(base, row, base_dir, settings, runs)
        tuned_dir = runs / tune.train.run_name
        # A base trained again makes its old fine-tuning stale, though the config (a path) is the same.
        reuse = finished_run(tuned_dir, tune) if not (settings.retrain or trained) else None
        if reuse is None:
            result = train(tune, tuned_dir, progress=False, overwrite=True)
            if result.interrupted:
                raise stopping(result.stop_signal)  # as the signal would: 130, 143, 129
            reuse, _, _ = load_model(tuned_dir)
        t3 = time.perf_counter()
        records += scored(reuse, row, seed, "after", probe, settings)
        t4 = time.perf_counter()
    info = {
        "base_run": str(base_dir),
        "base_trained": trained,
        "base_seconds": t1 - t0,
        "before_seconds": t2 - t1,
        "fine_tune_seconds": t3 - t2,
        "after_seconds": t4 - t3,
        "curve": curve_of(tuned_dir),
    }
    return records, info


def grid_of(config: Config, settings: Settings, seeds: list[int], text: EvalText) -> dict[str, Any]:
    """The settings that define the grid (AXES.settings), recorded with every cell."""
    normal = base_config(config, settings.rows[0], 0, settings, Path("runs"))  # nothing of any one cell
    return {
        "train_length": settings.train_length,
        "extend_length": settings.extend_length,
        "eval_lengths": list(settings.eval_lengths),
        "eval_windows": settings.eval_windows,
        "steps": settings.steps,
        "curve_interval": settings.curve_interval,
        "passkey_per_depth": settings.passkey_per_depth,
        "passkey_format": passkey.FORMAT,
        "rows": list(settings.rows),
        "seeds": seeds,
        "config_sha256": normal.hash(),
        "eval_sha256": text.sha256,
    }


def run_cells(
    config: Config,
    settings: Settings,
    out_dir: Path,
    command: str = "octlm experiment extend",
    progress: bool = True,
    only: Sequence[str] = (),
) -> cells.CellsRun:
    """Every row × seed cell (or the `--only ROW:SEED` ones), each written to `out_dir/cells/` as it
    finishes."""
    from octlm.data.cache import prepare_data

    problems = settings.problems()
    if problems:
        raise UserError("; ".join(problems))
    started, say = time.perf_counter(), cells.saying(progress)
    seeds = [config.train.seed + i for i in range(settings.seeds)]
    rows = [r for r in ROWS if r in settings.rows]
    jobs = cells.chosen(only, AXES, [rows, seeds])
    if note := base_note(config, settings, jobs, out_dir / "runs"):
        sys.stderr.write(f"{AXES.command}: note: {note}\n")
    with cells.locked(out_dir):  # cells started together: the first builds the token cache
        data = prepare_data(
            config.data, config.model.vocab_size, progress=progress, block=settings.extend_length
        )
    probe = make_probe(data.val, data.tokenizer, settings)
    grid = grid_of(config, settings, seeds, probe.text)
    say(
        f"extend experiment: {len(jobs)} of {len(rows) * len(seeds)} cells "
        f"({len(rows)} rows × {len(seeds)} seeds): trained at {settings.train_length}, "
        f"fine-tuned {settings.steps} steps at {settings.extend_length}, "
        f"scored at {', '.join(map(str, settings.eval_lengths))} -> {out_dir}"
    )
    facts = {
        "command": command,
        "config": config.to_dict(),
        "config_name": config.name,
        "scored_tokens": probe.text.count,
    }
    job = functools.partial(
        extend_cell,
        config=config,
        probe=probe,
        settings=dataclasses.replace(settings, rows=rows),
        out_dir=out_dir,
    )
    workers = cells.workers_for(settings.jobs, len(jobs))
    return cells.run(
        out_dir, AXES, jobs, job, grid, facts, workers=workers, started=started, say=say, line=progress_line
    )


def base_note(config: Config, settings: Settings, jobs: list[cells.Key], runs: Path) -> str | None:
    """One line naming the base models `--base` does not hold a finished run of (trained here instead), each
    with why; None when it holds them all (or there is no --base, or --retrain trains them all anyway)."""
    if settings.base is None or settings.retrain:
        return None
    why: dict[str, str | None] = {}
    for row, seed in jobs:
        base = base_config(config, row, seed, settings, runs)
        name = base.train.run_name
        if name not in why:
            why[name] = unfinished(settings.base / "runs" / name, base)
    grouped: dict[str, list[str]] = {}
    for name, reason in why.items():
        if reason is not None:
            grouped.setdefault(reason, []).append(name)
    if not grouped:
        return None
    count = sum(map(len, grouped.values()))
    reasons = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in grouped.items())
    return (
        f"--base {settings.base}: {count} of {len(why)} base models trained here, as its runs/ holds no "
        f"finished run of their config ({reasons})"
    )


def progress_line(key: cells.Key, records: list[dict], info: dict[str, Any]) -> str:
    """`row seed k: fine-tuned in ... s; bits/byte at the longest length before -> after`."""
    before = [r for r in records if r["phase"] == "before"][-1]
    after = [r for r in records if r["phase"] == "after"][-1]
    base = "base trained" if info["base_trained"] else "base reused"
    return (
        f"{before['row']} seed {before['seed']}: {base}, fine-tuned in "
        f"{info['fine_tune_seconds']:.0f} s; bits/byte at {before['length']}: {before['bpb']:.3f} -> "
        f"{after['bpb']:.3f}"
    )
