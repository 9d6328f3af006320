"""`octlm experiment length`: train short, test long, for every position scheme.

One model per position scheme (learned, sinusoidal, rope, alibi, t5, nope) and seed is trained with the same
data, budget and seeds at a short context (`--train-length`, default 64 tokens), then each is scored at
several evaluation lengths on **the same held-out tokens**:

- The evaluation text is a fixed slice of the validation stream: a context prefix of `S` tokens, then
  `N = --eval-windows × max(eval lengths)` scored targets. Every length, mode and model predicts exactly these
  N tokens, so bits per byte are comparable down a column and along a row. Bits per byte = (summed loss in
  nats) / ln 2 / (UTF-8 bytes of the scored tokens, counted exactly; EOT counts 0 bytes).
- Mode `windows`: the N targets cut into non-overlapping windows of L tokens, every token scored. Early
  tokens of each window have little context, so a longer window also means more context on average.
- Mode `sliding`: windows of L tokens every L/2 tokens (stride h = L // 2), scoring only the last h targets
  of each window; the previous L - h tokens (from the prefix S for the first window) are context only. Every
  scored token sees between L - h and L - 1 earlier tokens, so this tells "early tokens had little context"
  apart from real use of long context.
- A learned table has no row past `--train-length`: those cells read "no rows" (the model is never run
  there).
- The trained RoPE models also get the inference-time context-extension rows of `octlm.rope_scaling`:
  position interpolation (`pi`), NTK-aware base scaling (`ntk`) and YaRN (`yarn`) with one fixed factor s =
  max(eval lengths) / train length (as a deployed model is configured once; `--rope-factor` sets it), so at
  short lengths they pay for over-scaling; and dynamic NTK (`dynamic`), whose NTK factor is L / train length
  for each window length L (no change at or below the training length).

Seeds: `--seeds n` trains with seeds `train.seed + 0 .. n-1`. Tables give mean ± sample standard deviation
over seeds; "≈" marks a cell whose difference to the best row of its column is within the spread (|Δ| ≤ std
+ std of the best), and the best is in bold.

Outputs, in `runs/length-<date>/` (or `--out`): `runs/<scheme>-seed<k>/` (the trained runs; reused when a
finished one with the same config is there), `results.jsonl` (one record per scheme/variant, seed, length
and mode), `results.md` (both tables), `length.png` (bits per byte against length), `length.json` (the web
site's schema, web/DATA.md: the `windows` mode), and with `--export-web PATH` a copy of length.json there.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import os
import shlex
import shutil
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from octlm.config import (
    POSITIONS,
    Config,
    add_config_arguments,
    config_from_dict,
    load_config,
    overrides_from_args,
)
from octlm.errors import UserError

SCHEMES = POSITIONS  # learned, sinusoidal, rope, alibi, t5, nope
MODES = ("windows", "sliding")
# RoPE rows: web/DATA.md's variant names -> octlm.rope_scaling methods ("plain": the model as trained).
ROPE_VARIANTS = {"plain": None, "pi": "linear", "ntk": "ntk", "dynamic": "dynamic", "yarn": "yarn"}
VARIANT_LABELS = {"plain": "", "pi": "PI", "ntk": "NTK-aware", "dynamic": "dynamic NTK", "yarn": "YaRN"}

# The default experiment: the day1 shape at context 64, sized to train 18 models and evaluate them in
# under 30 minutes on 2 CPU cores (see docs/LOG.md, "Length experiment").
FULL_DEFAULTS: dict[str, Any] = {
    "train.steps": 600,
    "train.batch_size": 32,
    "train.warmup_steps": 60,
    "train.eval_batches": 4,
}
# --quick: the whole pipeline in about a minute (tests); every scheme and RoPE row, two seeds.
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
FULL = {"train_length": 64, "eval_lengths": [64, 128, 256, 512, 1024], "seeds": 3, "eval_windows": 16}


@dataclass
class Settings:
    """What the experiment varies and measures (the per-run training config comes from `Config`)."""

    train_length: int = 64
    eval_lengths: list[int] = field(default_factory=lambda: list(FULL["eval_lengths"]))
    seeds: int = 3
    schemes: list[str] = field(default_factory=lambda: list(SCHEMES))
    eval_windows: int = 16  # N = eval_windows × max(eval_lengths) scored tokens
    rope_factor: float | None = None  # None: max(eval_lengths) / train_length
    batch_tokens: int = 8192  # tokens per evaluation forward pass
    retrain: bool = False
    jobs: int = 0  # worker processes; 0: one per CPU core (at most one per training)
    threads: int = 1  # torch threads per worker

    def problems(self) -> list[str]:
        p = []
        if self.train_length < 2:
            p.append(f"--train-length {self.train_length} must be at least 2")
        if not self.eval_lengths or min(self.eval_lengths) < 2:
            p.append(f"--eval-lengths {self.eval_lengths} must be lengths of at least 2 tokens")
        if self.seeds < 1:
            p.append(f"--seeds {self.seeds} must be at least 1")
        unknown = [s for s in self.schemes if s not in SCHEMES]
        if unknown or not self.schemes:
            p.append(f"--schemes {' '.join(unknown)} unknown; choose from {', '.join(SCHEMES)}")
        if self.eval_windows < 1:
            p.append(f"--eval-windows {self.eval_windows} must be at least 1")
        if self.jobs < 0 or self.threads < 1:
            p.append(
                f"--jobs {self.jobs} must be 0 (one per core) or more, --threads {self.threads} at least 1"
            )
        if self.rope_factor is not None and self.rope_factor < 1:
            p.append(f"--rope-factor {self.rope_factor} must be at least 1")
        return p

    @property
    def factor(self) -> float:
        """The static RoPE extension factor s."""
        return self.rope_factor or max(1.0, max(self.eval_lengths) / self.train_length)

    def seed_list(self, base_seed: int) -> list[int]:
        return [base_seed + i for i in range(self.seeds)]


# ----------------------------------------------------------------------------------------------------
# The evaluation text and scoring


@dataclass
class EvalText:
    """The held-out slice every length is scored on.

    `tokens[start + 1 : start + count + 1]` are the scored targets; the `start` tokens before them are context
    for the sliding windows. `token_bytes[id]` is the UTF-8 length of token `id` (EOT: 0).
    """

    tokens: np.ndarray  # [start + count + 1] int64
    start: int
    count: int
    token_bytes: np.ndarray  # [V] int64

    def bytes_of(self, targets: np.ndarray) -> int:
        return int(self.token_bytes[targets].sum())


def sliding_part(length: int) -> int:
    """How many final targets of a sliding window of `length` tokens are scored (also the stride): L // 2."""
    return max(1, length // 2)


def make_eval_text(val: np.ndarray, tokenizer: Any, lengths: Sequence[int], windows: int) -> EvalText:
    """The first `S + N + 1` validation tokens; S: the longest sliding context, N: windows × max(lengths)."""
    start = max(length - sliding_part(length) for length in lengths)
    count = windows * max(lengths)
    if len(val) < start + count + 1:
        raise UserError(
            f"the validation split has {len(val):,} tokens, fewer than the {start + count + 1:,} the "
            f"evaluation needs ({windows} windows of {max(lengths)} plus {start} of context); use fewer "
            "--eval-windows, shorter --eval-lengths or a bigger corpus"
        )
    sizes = np.array(
        [0 if i == tokenizer.eot_id else len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)]
    )
    return EvalText(
        np.asarray(val[: start + count + 1]).astype(np.int64), start, count, sizes.astype(np.int64)
    )


def windows_for(text: EvalText, length: int, mode: str) -> tuple[np.ndarray, int]:
    """Window start offsets `[n]` into `text.tokens`, and how many final targets of each window are scored.

    windows: non-overlapping, covering the N targets (a remainder shorter than `length` is dropped).
    sliding: every h = L // 2 tokens, window ends at start + h, start + 2h, ...; the last h targets scored.
    """
    if mode == "windows":
        return text.start + length * np.arange(text.count // length), length
    if mode == "sliding":
        h = sliding_part(length)
        ends = text.start + h * np.arange(1, text.count // h + 1)
        return ends - length, h
    raise UserError(f"unknown evaluation mode {mode!r}; choose one of {', '.join(MODES)}")


@torch.inference_mode()
def score(
    model: torch.nn.Module, text: EvalText, length: int, mode: str, batch_tokens: int = 8192
) -> dict[str, float]:
    """Summed next-token loss over the scored targets of every window of `length` tokens.

    Returns {"nats", "tokens", "bytes"}: nats summed in float64, tokens and UTF-8 bytes of the scored targets.
    """
    starts, scored = windows_for(text, length, mode)
    rows = max(1, batch_tokens // length)
    offsets = np.arange(length + 1)
    nats, tokens, nbytes = 0.0, 0, 0
    for first in range(0, len(starts), rows):
        chunk = text.tokens[starts[first : first + rows, None] + offsets]  # [b, L + 1]
        x = torch.from_numpy(chunk[:, :-1])
        y = torch.from_numpy(chunk[:, 1:])
        logits, _ = model(x)  # [b, L, V]
        losses = F.cross_entropy(
            logits[:, -scored:].flatten(0, 1).float(), y[:, -scored:].flatten(), reduction="none"
        )
        nats += float(losses.double().sum())
        tokens += losses.numel()
        nbytes += text.bytes_of(chunk[:, -scored:])
    return {"nats": nats, "tokens": tokens, "bytes": nbytes}


def set_rope_variant(model: torch.nn.Module, variant: str, length: int, settings: Settings) -> None:
    """Give a RoPE model the frequencies of `variant` (see ROPE_VARIANTS) for windows of `length` tokens."""
    from octlm.positions import rope_frequencies
    from octlm.rope_scaling import scaled_frequencies

    rope, mc = model.positions, model.config
    method = ROPE_VARIANTS[variant]
    if method is None:
        inv_freq, scaling = rope_frequencies(mc.head_dim, mc.rope_base), 1.0
    elif method == "dynamic":
        # Hugging Face's dynamic formula with factor 1: the NTK factor is exactly L / train length.
        inv_freq, scaling = scaled_frequencies(
            method, mc.head_dim, mc.rope_base, 1.0, settings.train_length, length
        )
    else:
        inv_freq, scaling = scaled_frequencies(
            method, mc.head_dim, mc.rope_base, settings.factor, settings.train_length
        )
    rope.set_frequencies(inv_freq, scaling)


def evaluate_run(
    model: torch.nn.Module, scheme: str, seed: int, text: EvalText, settings: Settings
) -> list[dict]:
    """Every (variant, length, mode) record for one trained model."""
    records = []
    limit = model.positions.max_length  # a learned table's rows; None for the other schemes
    variants = list(ROPE_VARIANTS) if scheme == "rope" else [""]
    model.eval()
    for variant in variants:
        for length in settings.eval_lengths:
            for mode in MODES:
                record: dict[str, Any] = {"scheme": scheme, "variant": variant, "seed": seed,
                                          "length": length, "mode": mode,
                                          "train_length": settings.train_length}  # fmt: skip
                if variant not in ("", "plain", "dynamic"):
                    record["rope_factor"] = settings.factor
                if limit is not None and length > limit:
                    record.update(status="no rows", bpb=None, ppl=None, loss=None, tokens=0, bytes=0)
                    records.append(record)
                    continue
                if scheme == "rope":
                    set_rope_variant(model, variant, length, settings)
                s = score(model, text, length, mode, settings.batch_tokens)
                loss = s["nats"] / s["tokens"]
                bpb = s["nats"] / math.log(2) / s["bytes"]
                record.update(status="ok", bpb=bpb, ppl=math.exp(min(loss, 700.0)), loss=loss,
                              tokens=s["tokens"], bytes=s["bytes"])  # fmt: skip
                records.append(record)
    if scheme == "rope":
        set_rope_variant(model, "plain", settings.train_length, settings)
    return records


# ----------------------------------------------------------------------------------------------------
# Training


def run_config(base: Config, scheme: str, seed: int, settings: Settings, runs_dir: Path) -> Config:
    """One training's config: `base` with this scheme, seed and short context; one evaluation at the end."""
    steps = base.train.steps
    overrides = {
        "model.position": scheme,
        "model.context_length": settings.train_length,
        "train.seed": seed,
        "train.out_dir": str(runs_dir),
        "train.run_name": f"{scheme}-seed{seed}",
        "train.eval_interval": steps,
        "train.checkpoint_interval": steps,
        "train.sample_tokens": 0,
        "train.report": False,
    }
    return config_from_dict(base.to_dict(), name=base.name, overrides=overrides)


def trained_model(
    config: Config, run_dir: Path, retrain: bool, progress: bool
) -> tuple[torch.nn.Module, dict]:
    """Train `config` in `run_dir`, or reuse a finished run there with the same config; (model, info)."""
    from octlm.checkpoint import load_model
    from octlm.train import train

    if not retrain and (run_dir / "checkpoint").is_dir():
        try:
            model, old, _ = load_model(run_dir)
            if old.hash() == config.hash() and old.train.steps == config.train.steps:
                return model, {"reused": True}
        except UserError:
            pass
    result = train(config, run_dir, progress=progress, overwrite=True)
    if result.interrupted:
        raise KeyboardInterrupt
    model, _, _ = load_model(run_dir)
    info = {"reused": False, "seconds": result.wall_seconds, "tokens_per_second": result.tokens_per_second}
    return model, info


def train_and_score(config: Config, text: EvalText, settings: Settings) -> tuple[list[dict], dict[str, Any]]:
    """One job (a worker process's unit): train (or reuse) one run, then score it everywhere.

    Returns the records of `evaluate_run` and timing info. Runs with `settings.threads` torch threads: on a
    small CPU machine one thread per job is fastest, and two OpenMP threads on a busy core thrash.
    """
    torch.set_num_threads(settings.threads)
    run_dir = Path(config.train.out_dir) / config.train.run_name
    t0 = time.perf_counter()
    model, info = trained_model(config, run_dir, settings.retrain, progress=False)
    t1 = time.perf_counter()
    records = evaluate_run(model, config.model.position, config.train.seed, text, settings)
    info.update(train_wall=t1 - t0, eval_seconds=time.perf_counter() - t1)
    final = last_metrics(run_dir)
    for r in records:
        r["train_seconds"] = final.get("elapsed_seconds")  # train.py's clock at its last evaluation
        r["final_train_loss"] = final.get("train_loss")  # mean over the steps since the last evaluation
        r["final_val_bpb"] = final.get("val_bpb")  # train.py's own validation figure at the training length
    return records, info


def last_metrics(run_dir: Path) -> dict[str, Any]:
    """The last record of the run's metrics.jsonl (empty if there is none)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return {}


# ----------------------------------------------------------------------------------------------------
# Summaries: mean and spread over seeds, tables, figure, web export


def row_key(record: dict) -> tuple[str, str]:
    return record["scheme"], record["variant"]


def row_order(settings: Settings) -> list[tuple[str, str]]:
    """Table rows: schemes in SCHEMES order, RoPE followed by its extension variants."""
    rows: list[tuple[str, str]] = []
    for scheme in SCHEMES:
        if scheme in settings.schemes:
            rows += [(scheme, v) for v in ROPE_VARIANTS] if scheme == "rope" else [(scheme, "")]
    return rows


def summarize(records: list[dict], settings: Settings) -> list[dict]:
    """One summary per (scheme, variant, length, mode): bpb mean, sample std over seeds, ppl mean, status."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["scheme"], r["variant"], r["length"], r["mode"]), []).append(r)
    out = []
    for scheme, variant in row_order(settings):
        for mode in MODES:
            for length in settings.eval_lengths:
                group = groups.get((scheme, variant, length, mode), [])
                ok = [r for r in group if r["status"] == "ok"]
                bpbs = [r["bpb"] for r in ok]
                out.append({
                    "scheme": scheme, "variant": variant, "length": length, "mode": mode,
                    "bpb_mean": statistics.fmean(bpbs) if ok else None,
                    "bpb_std": statistics.stdev(bpbs) if len(ok) > 1 else None,
                    "ppl_mean": statistics.fmean(r["ppl"] for r in ok) if ok else None,
                    "n_seeds": len({r["seed"] for r in group}),
                    "status": "ok" if ok else "no rows",
                    "tokens": ok[0]["tokens"] if ok else 0,
                })  # fmt: skip
    return out


def row_label(scheme: str, variant: str, settings: Settings) -> str:
    if not variant or variant == "plain":
        return scheme
    if variant == "dynamic":
        return "rope + dynamic NTK (s = L / train)"
    return f"rope + {VARIANT_LABELS[variant]} (s = {settings.factor:g})"


def within_spread(a: dict, best: dict) -> bool:
    """|mean − best mean| ≤ std + std of the best (their ±1 std intervals overlap); never with one seed."""
    if a["bpb_std"] is None or best["bpb_std"] is None:
        return False
    return abs(a["bpb_mean"] - best["bpb_mean"]) <= a["bpb_std"] + best["bpb_std"]


def markdown_table(summary: list[dict], mode: str, settings: Settings) -> str:
    """Rows: schemes (+ RoPE variants); columns: evaluation lengths; cells: bpb mean ± std."""
    cells = {(s["scheme"], s["variant"], s["length"]): s for s in summary if s["mode"] == mode}
    header = "| scheme | " + " | ".join(f"L = {n}" for n in settings.eval_lengths) + " |"
    lines = [header, "|---|" + "---:|" * len(settings.eval_lengths)]
    best = {}
    for length in settings.eval_lengths:
        ok = [c for (_, _, n), c in cells.items() if n == length and c["status"] == "ok"]
        best[length] = min(ok, key=lambda c: c["bpb_mean"]) if ok else None
    for scheme, variant in row_order(settings):
        row = []
        for length in settings.eval_lengths:
            c = cells.get((scheme, variant, length))
            if c is None or c["status"] != "ok":
                row.append("no rows")
                continue
            text = f"{c['bpb_mean']:.3f}" + (f" ± {c['bpb_std']:.3f}" if c["bpb_std"] is not None else "")
            if c is best[length]:
                text = f"**{text}**"
            elif within_spread(c, best[length]):
                text = f"≈ {text}"
            row.append(text)
        lines.append(f"| {row_label(scheme, variant, settings)} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def training_table(records: list[dict], settings: Settings) -> str:
    """Per scheme: final training loss, train.py's validation bpb and seconds per training (means over seeds).

    A scheme whose final loss is more than 1 nat/token above the best did not learn in this budget; it is
    flagged, since its length rows then say nothing about extrapolation.
    """
    header = "| scheme | final train loss | val bits/byte (train.py) | seconds per training |"
    lines = [header, "|---|---:|---:|---:|"]
    schemes = [s for s in SCHEMES if s in settings.schemes]
    runs = {
        scheme: list({r["seed"]: r for r in records if r["scheme"] == scheme}.values()) for scheme in schemes
    }

    def mean(scheme: str, key: str) -> float | None:
        values = [r[key] for r in runs[scheme] if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    losses = [v for v in (mean(s, "final_train_loss") for s in schemes) if v is not None]
    for scheme in schemes:
        loss, bpb, seconds = (
            mean(scheme, "final_train_loss"),
            mean(scheme, "final_val_bpb"),
            mean(scheme, "train_seconds"),
        )
        flag = " (did not learn in this budget)" if loss is not None and loss > min(losses) + 1.0 else ""
        cells = [f"{loss:.3f}{flag}" if loss is not None else "n/a", f"{bpb:.3f}" if bpb is not None else "n/a",
                 f"{seconds:.0f}" if seconds is not None else "n/a"]  # fmt: skip
        lines.append(f"| {scheme} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_markdown(summary: list[dict], records: list[dict], settings: Settings, config: Config, command: str,
                     seeds: list[int], text: EvalText, wall_seconds: float, info: dict[str, Any]) -> str:  # fmt: skip
    mc, tc = config.model, config.train
    n = text.count
    lines = [
        "# Length experiment: train short, test long",
        "",
        f"`{command}`",
        "",
        f"Each scheme trained at context {settings.train_length} for {tc.steps} steps of {tc.batch_size} × "
        f"{settings.train_length} tokens (d_model {mc.d_model}, {mc.n_layers} layers, {mc.n_heads} heads, "
        f"vocabulary {mc.vocab_size}), seeds {', '.join(map(str, seeds))}; corpus `{config.data.source}`. "
        f"Wall time {wall_seconds / 60:.1f} min ({info['workers']} worker process(es)).",
        "",
        f"Every cell scores the same {n:,} validation tokens ({info['bytes']:,} bytes). Cells: bits per "
        "byte, mean ± sample standard deviation over seeds. **Bold**: the best row of the column; ≈: within "
        'the spread of the best (|Δ| ≤ std + std of the best). "no rows": the learned table ends at the '
        "training length.",
        "",
        "## Non-overlapping windows",
        "",
        "Windows of L tokens, every token scored (early tokens of each window have little context).",
        "",
        markdown_table(summary, "windows", settings),
        "",
        "## Sliding windows",
        "",
        "Windows of L tokens every L/2 tokens, scoring only the last L/2 (each scored token sees at least "
        "L/2 earlier tokens).",
        "",
        markdown_table(summary, "sliding", settings),
        "",
        "RoPE extension rows reuse the trained RoPE models unchanged except for their frequencies: PI, "
        f"NTK-aware and YaRN with the fixed factor s = {settings.factor:g}, dynamic NTK with "
        f"s = L / {settings.train_length} per length (`octlm/rope_scaling.py`).",
        "",
        "## Training",
        "",
        "How well each scheme trained, at the training length (mean over seeds): the last training loss "
        "(nats/token, mean since the previous evaluation) and train.py's own validation bits per byte "
        "(a spread-out sample of the validation split, so not the same tokens as the tables above).",
        "",
        training_table(records, settings),
    ]
    return "\n".join(lines) + "\n"


def web_json(summary: list[dict], settings: Settings, command: str) -> dict[str, Any]:
    """length.json in web/DATA.md's schema 1 (the non-overlapping-window figures)."""
    keys = ("scheme", "variant", "length", "bpb_mean", "bpb_std", "ppl_mean", "n_seeds", "status")
    rows = [{k: s[k] for k in keys}
            for s in summary if s["mode"] == "windows"]  # fmt: skip
    for r in rows:
        for k in ("bpb_mean", "bpb_std", "ppl_mean"):
            if r[k] is not None:
                r[k] = round(r[k], 6)
    return {"schema": 1, "command": command, "train_length": settings.train_length,
            "eval_lengths": list(settings.eval_lengths), "rows": rows}  # fmt: skip


def plot(summary: list[dict], settings: Settings, path: Path, off_scale: float = 1.4) -> None:
    """Bits per byte against evaluation length (log x): a line per row, a band for mean ± std; both modes.

    A row whose best value is above `off_scale` × the lowest value of the figure (a model that never learned,
    say) would squash every other line into a strip; it is left out and named in a note instead.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [s for s in summary if s["status"] == "ok"]
    if not ok:
        return
    cap = off_scale * min(s["bpb_mean"] for s in ok)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5), sharey=True)
    colors = plt.get_cmap("tab10")
    left_out: dict[str, float] = {}
    for ax, mode in zip(axes, MODES, strict=True):
        for i, (scheme, variant) in enumerate(row_order(settings)):
            pts = [s for s in ok if (s["scheme"], s["variant"], s["mode"]) == (scheme, variant, mode)]
            label = row_label(scheme, variant, settings)
            if not pts or min(p["bpb_mean"] for p in pts) > cap:
                if pts:
                    left_out[label] = min(p["bpb_mean"] for p in pts)
                continue
            x = np.array([p["length"] for p in pts])
            y = np.array([p["bpb_mean"] for p in pts])
            sd = np.array([p["bpb_std"] or 0.0 for p in pts])
            style = "--" if variant not in ("", "plain") else "-"
            line = ax.plot(x, y, style, marker="o", ms=3, color=colors(i % 10), label=label)
            ax.fill_between(x, y - sd, y + sd, color=line[0].get_color(), alpha=0.15, linewidth=0)
        ax.axvline(settings.train_length, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(settings.eval_lengths, [str(n) for n in settings.eval_lengths])
        ax.set_xlabel("evaluation length (tokens)")
        title = "non-overlapping windows" if mode == "windows" else "sliding windows (last L/2 scored)"
        ax.set_title(f"{title}; trained at {settings.train_length}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("bits per byte (the same tokens at every length)")
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if left_out:
        note = "off scale: " + ", ".join(f"{k} (≥ {v:.2f})" for k, v in left_out.items())
        fig.text(0.01, 0.01, note, fontsize=8)
    fig.suptitle("Train short, test long: mean over seeds, band = ± 1 std")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------
# The experiment


@dataclass
class LengthResult:
    """What `run_experiment` wrote and measured."""

    out_dir: Path
    records: list[dict]
    summary: list[dict]
    wall_seconds: float
    markdown: str


def run_experiment(
    config: Config,
    settings: Settings,
    out_dir: Path,
    command: str = "octlm experiment length",
    progress: bool = True,
) -> LengthResult:
    """Train every scheme × seed at the short length, score each at every length and mode, write the outputs.

    `config` is the base training config (model shape, data, optimisation); position, context length, seed and
    run folder are set here per training.
    """
    from octlm.data import prepare_data

    problems = settings.problems()
    if problems:
        raise UserError("; ".join(problems))
    started = time.perf_counter()
    say = print if progress else (lambda *a, **k: None)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = prepare_data(config.data, config.model.vocab_size, progress=progress)
    text = make_eval_text(data.val, data.tokenizer, settings.eval_lengths, settings.eval_windows)
    scored_bytes = text.bytes_of(text.tokens[text.start + 1 : text.start + text.count + 1])
    seeds = settings.seed_list(config.train.seed)
    jobs = [(scheme, seed) for seed in seeds for scheme in SCHEMES if scheme in settings.schemes]
    say(f"length experiment: {len(jobs)} trainings ({len(settings.schemes)} schemes × {len(seeds)} seeds) at "
        f"length {settings.train_length}, {config.train.steps} steps each; scoring {text.count:,} tokens at "
        f"lengths {', '.join(map(str, settings.eval_lengths))} -> {out_dir}")  # fmt: skip

    records: list[dict] = []
    results_path = out_dir / "results.jsonl"
    results_path.write_text("", encoding="utf-8")
    configs = [run_config(config, scheme, seed, settings, out_dir / "runs") for scheme, seed in jobs]
    workers = max(1, min(settings.jobs or os.cpu_count() or 1, len(jobs)))
    say(f"{workers} worker process(es), {settings.threads} torch thread(s) each")

    def collect(i: int, run_records: list[dict], info: dict[str, Any]) -> None:
        records.extend(run_records)
        with open(results_path, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in run_records)
        first = run_records[0]
        trained = (
            "reused"
            if info["reused"]
            else f"trained in {info['train_wall']:.0f} s ({info['tokens_per_second']:,.0f} tok/s)"
        )
        say(f"[{i}/{len(jobs)}] {first['scheme']} seed {first['seed']}: {trained}, scored in "
            f"{info['eval_seconds']:.0f} s; bits/byte at {first['length']}: {first['bpb']:.3f}")  # fmt: skip

    if workers == 1:
        for i, cfg in enumerate(configs, 1):
            collect(i, *train_and_score(cfg, text, settings))
    else:
        context = multiprocessing.get_context("spawn")  # fork after torch has started threads can hang
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = [pool.submit(train_and_score, cfg, text, settings) for cfg in configs]
            for i, future in enumerate(as_completed(futures), 1):
                collect(i, *future.result())
    order = {(scheme, seed): i for i, (scheme, seed) in enumerate(jobs)}
    records.sort(key=lambda r: order[(r["scheme"], r["seed"])])  # the same order however the workers finished

    summary = summarize(records, settings)
    wall = time.perf_counter() - started
    markdown = results_markdown(
        summary,
        records,
        settings,
        config,
        command,
        seeds,
        text,
        wall,
        {"bytes": scored_bytes, "workers": workers},
    )
    (out_dir / "results.md").write_text(markdown, encoding="utf-8")
    (out_dir / "length.json").write_text(json.dumps(web_json(summary, settings, command), indent=1) + "\n",
                                         encoding="utf-8")  # fmt: skip
    plot(summary, settings, out_dir / "length.png")
    say(f"wrote {out_dir}/results.md, results.jsonl, length.png, length.json in {wall / 60:.1f} min")
    return LengthResult(out_dir, records, summary, wall, markdown)


# ----------------------------------------------------------------------------------------------------
# `octlm experiment length`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)  # --steps, --d-model, --text, --data-dir, --seed (the first seed), ...
    parser.add_argument("--train-length", type=int, default=None, help="training context length (default 64)")
    parser.add_argument("--eval-lengths", type=int, nargs="+", default=None, metavar="L",
                        help="evaluation lengths (default 64 128 256 512 1024)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=None, help="seeds per scheme (default 3)")
    parser.add_argument("--schemes", nargs="+", default=None, metavar="SCHEME",
                        help=f"position schemes (default all: {' '.join(SCHEMES)})")  # fmt: skip
    parser.add_argument("--eval-windows", type=int, default=None,
                        help="scored tokens = this × the longest evaluation length (default 16)")  # fmt: skip
    parser.add_argument(
        "--rope-factor",
        type=float,
        default=None,
        help="static RoPE extension factor for PI, NTK and YaRN (default: longest / train length)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny model, a few steps, 2 seeds, lengths 16 32 64: the pipeline in about a minute",
    )
    parser.add_argument("--jobs", type=int, default=0,
                        help="trainings run at once, in worker processes (default: one per CPU core)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    parser.add_argument("--retrain", action="store_true", help="train again even where a run is reused")
    parser.add_argument("--out", default=None, help="output folder (default runs/length-<YYYY-MM-DD>)")
    parser.add_argument("--export-web", default=None, metavar="PATH",
                        help="also copy length.json here, e.g. web/public/data/length.json")  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="print nothing but errors")


def settings_from_args(args: argparse.Namespace) -> Settings:
    base = QUICK if args.quick else FULL

    def given(value: Any, default: Any) -> Any:
        return default if value is None else value

    return Settings(
        train_length=given(args.train_length, base["train_length"]),
        eval_lengths=sorted(set(given(args.eval_lengths, base["eval_lengths"]))),
        seeds=given(args.seeds, base["seeds"]),
        schemes=given(args.schemes, list(SCHEMES)),
        eval_windows=given(args.eval_windows, base["eval_windows"]),
        rope_factor=args.rope_factor,
        retrain=args.retrain,
        jobs=args.jobs,
        threads=args.threads,
    )


def command_line(args: argparse.Namespace, settings: Settings, overrides: dict[str, Any]) -> str:
    """A command that reproduces this experiment: every experiment option spelled out, config as --set."""
    parts = ["octlm", "experiment", "length"]
    if args.quick:
        parts.append("--quick")
    if args.config:
        parts += ["--config", args.config]
    parts += ["--train-length", str(settings.train_length),
              "--eval-lengths", *map(str, settings.eval_lengths),
              "--seeds", str(settings.seeds), "--eval-windows", str(settings.eval_windows)]  # fmt: skip
    if settings.schemes != list(SCHEMES):
        parts += ["--schemes", *settings.schemes]
    if settings.rope_factor is not None:
        parts += ["--rope-factor", f"{settings.rope_factor:g}"]
    for key, value in overrides.items():
        value = " ".join(value) if isinstance(value, list) else value
        parts += ["--set", f"{key}={value}"]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    overrides = overrides_from_args(args)
    defaults = QUICK_DEFAULTS if args.quick else FULL_DEFAULTS
    config = load_config(args.config, {**defaults, **overrides})  # the user's flags win over the budget
    out = (
        Path(args.out)
        if args.out
        else Path(config.train.out_dir) / f"length-{datetime.date.today():%Y-%m-%d}"
    )
    command = command_line(args, settings, overrides)
    result = run_experiment(config, settings, out, command, progress=not args.no_progress)
    if args.export_web:
        target = Path(args.export_web)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "length.json", target)
        if not args.no_progress:
            print(f"copied length.json to {target}")
    if not args.no_progress:
        print()
        print(result.markdown)
    return 0
