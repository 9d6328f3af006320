"""The extension experiment's results, collected from its cells: results.jsonl, tables, results.md (with the
paper claims checked, `octlm.experiments.claims`), claims.json, extend.png and extend.json.

`collect` reads the cells `octlm.experiments.extend` wrote and measures nothing. Figures are means ± sample
standard deviation over seeds; the best row of a column is bold. "Steps to extend" is the first evaluation of
the fine-tuning at which a row's validation bits per byte at L' is within `NEAR` of where its fine-tuning ends
(the mean curve over seeds): how quickly a method settles, read beside how low it settles.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from octlm.config import config_from_dict
from octlm.experiments import cells, claims
from octlm.experiments.cells import CellsRun
from octlm.experiments.evidence import curve_records
from octlm.experiments.extend import AXES, PHASES, ROPE_ROWS, ROWS, Settings, scheme_of
from octlm.experiments.figures import VARIANT_STYLES
from octlm.experiments.passkey import WINDOW_ACCURACY
from octlm.files import write_atomic
from octlm.inspect.figures import figure, save, scheme_colour
from octlm.inspect.render import Block, Code, Heading, Inline, Paragraph, Strong, Table, render_markdown
from octlm.storage.jsonable import to_json

RECORDS_FILE, MD_FILE, FIGURE_FILE, WEB_FILE = "results.jsonl", "results.md", "extend.png", "extend.json"
NEAR = 0.02  # bits per byte: "within this of the end of the fine-tuning"
LABELS = {"plain": "rope, plain", "pi": "rope + PI", "ntk": "rope + NTK-aware", "yarn": "rope + YaRN"}


def label(row: str) -> str:
    return LABELS.get(row, row)


def style(row: str) -> tuple[str, tuple[str, str]]:
    """A row's colour (its scheme's) and (line style, marker): RoPE's rows drawn as the length
    experiment's."""
    return scheme_colour(scheme_of(row)), VARIANT_STYLES.get(row if row in ROPE_ROWS else "", ("-", "o"))


def _stats(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def summarize(records: list[dict], rows: list[str], settings: Settings) -> list[dict]:
    """One summary per (row, phase, length): bpb, passkey accuracy, retrieval bits and the effective window
    (the same at every length), mean and std over seeds."""
    out = []
    for row in rows:
        for phase in PHASES:
            for n in settings.eval_lengths:
                group = [r for r in records if (r["row"], r["phase"], r["length"]) == (row, phase, n)]
                entry: dict[str, Any] = {"row": row, "phase": phase, "length": n, "n_seeds": len(group)}
                for key in ("bpb", "passkey", "retrieval_bits", "effective_window"):
                    entry[f"{key}_mean"], entry[f"{key}_std"] = _stats(
                        [r[key] for r in group if r.get(key) is not None]
                    )
                out.append(entry)
    return out


def mean_curves(
    found: list[cells.Cell], rows: list[str]
) -> dict[str, tuple[list[int], list[float], list[float]]]:
    """Row -> (steps, mean val bpb at L', std) over the seeds whose curves share those steps."""
    curves: dict[str, tuple[list[int], list[float], list[float]]] = {}
    for row in rows:
        runs = [c.facts["info"]["curve"] for c in found if c.key[0] == row]
        if not runs:
            continue
        steps = [p["step"] for p in runs[0]]
        same = [r for r in runs if [p["step"] for p in r] == steps]
        values = np.array([[p["val_bpb"] for p in r] for r in same])  # [seeds, points]
        spread = values.std(0, ddof=1) if len(same) > 1 else np.zeros(len(steps))
        curves[row] = (steps, values.mean(0).tolist(), spread.tolist())
    return curves


def steps_to_extend(steps: list[int], bpb: list[float]) -> int:
    """The first step whose bits per byte is within NEAR of the last (the end of the fine-tuning)."""
    return next(s for s, b in zip(steps, bpb, strict=True) if b <= bpb[-1] + NEAR)


# ----------------------------------------------------------------------------------------------------
# Tables and results.md


def _cell(mean: float | None, std: float | None, digits: int, scale: float = 1.0) -> str:
    if mean is None:
        return "n/a"
    return f"{mean * scale:.{digits}f}" + (f" ± {std * scale:.{digits}f}" if std is not None else "")


def metric_table(
    summary: list[dict],
    phase: str,
    key: str,
    rows: list[str],
    settings: Settings,
    lower_is_better: bool = True,
    digits: int = 3,
    scale: float = 1.0,
) -> Table:
    """Rows × lengths of one metric in one phase; the best of each column bold (none where all tie: a column
    of equal scores has no best row)."""
    at = {(s["row"], s["length"]): s for s in summary if s["phase"] == phase}
    best = {}
    for n in settings.eval_lengths:
        values = [
            at[(r, n)][f"{key}_mean"] for r in rows if at.get((r, n), {}).get(f"{key}_mean") is not None
        ]
        tie = len(set(values)) < 2
        best[n] = None if tie else (min(values) if lower_is_better else max(values))
    body: list[list[Inline]] = []
    for row in rows:
        line: list[Inline] = [label(row)]
        for n in settings.eval_lengths:
            s = at.get((row, n), {})
            text = _cell(s.get(f"{key}_mean"), s.get(f"{key}_std"), digits, scale)
            line.append(
                Strong(text) if s.get(f"{key}_mean") is not None and s[f"{key}_mean"] == best[n] else text
            )
        body.append(line)
    headers = ["row"] + [f"L = {n}" for n in settings.eval_lengths]
    return Table(headers, body, align="l" + "r" * len(settings.eval_lengths))


def window_table(summary: list[dict], rows: list[str]) -> Table:
    """Per row: the effective window (tokens) before and after fine-tuning, mean ± std over seeds."""
    at = {(s["row"], s["phase"]): s for s in summary}  # any length's: the window is the phase's
    body: list[list[Inline]] = []
    for row in rows:
        phases = [at.get((row, phase), {}) for phase in PHASES]
        windows = [_cell(s.get("effective_window_mean"), s.get("effective_window_std"), 0) for s in phases]
        body.append([label(row), *windows])
    return Table(["row", *(f"{p} fine-tuning" for p in PHASES)], body, align="lrr")


def curve_table(curves: dict[str, tuple[list[int], list[float], list[float]]]) -> Table:
    """Per row: validation bpb at L' at a few steps of the fine-tuning, and the steps it needs."""
    steps = next(iter(curves.values()))[0]
    shown = sorted({steps[0], steps[1] if len(steps) > 1 else steps[0], steps[len(steps) // 2], steps[-1]})
    body: list[list[Inline]] = []
    for row, (s, bpb, _) in curves.items():
        values = dict(zip(s, bpb, strict=True))
        body.append(
            [
                label(row),
                *(f"{values[k]:.3f}" if k in values else "n/a" for k in shown),
                str(steps_to_extend(s, bpb)),
            ]
        )
    headers = ["row", *(f"step {k}" for k in shown), f"steps to within {NEAR} of the end"]
    return Table(headers, body, align="l" + "r" * (len(shown) + 1))


def results_blocks(
    summary: list[dict], curves: dict, rows: list[str], settings: Settings, facts: dict[str, Any]
) -> list[Block]:
    config = config_from_dict(facts["config"], name=facts["config_name"])
    tc = config.train
    how = (
        f"Base models: the length experiment's, trained at L = {settings.train_length} for {tc.steps} "
        f"steps of {tc.batch_size} × {settings.train_length} tokens, "
        f"seeds {', '.join(map(str, facts['seeds']))}; corpus "
    )
    tune = (
        f". Each fine-tuned {settings.steps} steps at L' = {settings.extend_length} with the same tokens "
        f"per step, from its weights; RoPE's rows with the method's frequencies for s = {settings.factor:g} "
        "(before: the "
        "base model with those frequencies at inference). "
        f"{facts['wall']}"
    )
    passkey = (
        f"Passkey (Mohtashami & Jaggi's): {settings.passkey_per_depth} windows per depth (0, ¼, ½, ¾, 1) and "
        "length, their digit-free filler around a 5-digit key; accuracy = every key token the model's argmax "
        "(teacher-forced, the same as greedy decoding). Retrieval bits: the key's bits when the needle holds "
        "another key minus its bits when the needle holds it (0 for a model that ignores the needle). "
        "Effective window (Chen et al.'s): the longest length up to which accuracy stays at or above "
        f"{100 * WINDOW_ACCURACY:.0f} % (0: not even the shortest; n/a: no length holds the needle)."
    )
    return [
        Heading("Context extension by fine-tuning", level=1),
        Paragraph(Code(facts["command"])),
        Paragraph([how, Code(config.data.source), tune]),
        Paragraph(
            f"Bits per byte on the same {facts['scored_tokens']:,} held-out tokens at every length "
            "(non-overlapping windows); mean ± std over seeds, the best of a column bold."
        ),
        Heading("Bits per byte after fine-tuning"),
        metric_table(summary, "after", "bpb", rows, settings),
        Heading("Bits per byte before fine-tuning"),
        metric_table(summary, "before", "bpb", rows, settings),
        Heading(f"Steps to extend (validation bits per byte at L' = {settings.extend_length})"),
        curve_table(curves),
        Heading("Passkey retrieval"),
        Paragraph(passkey),
        Paragraph("Effective window (tokens):"),
        window_table(summary, rows),
        Paragraph("Accuracy (%) after fine-tuning:"),
        metric_table(summary, "after", "passkey", rows, settings, lower_is_better=False, digits=0, scale=100),
        Paragraph("Retrieval bits after fine-tuning:"),
        metric_table(summary, "after", "retrieval_bits", rows, settings, lower_is_better=False, digits=2),
        Paragraph("Retrieval bits before fine-tuning:"),
        metric_table(summary, "before", "retrieval_bits", rows, settings, lower_is_better=False, digits=2),
    ]


# ----------------------------------------------------------------------------------------------------
# extend.png and extend.json


def plot(summary: list[dict], curves: dict, rows: list[str], settings: Settings, path: Path) -> Path:
    """extend.png: bits per byte against length before and after, the fine-tuning curves, retrieval bits."""

    def series(phase: str, key: str) -> list[tuple[str, str, tuple[str, str], list[int], list[float]]]:
        out = []
        for row in rows:
            pts = [
                s for s in summary if (s["row"], s["phase"]) == (row, phase) and s[f"{key}_mean"] is not None
            ]
            if pts:
                colour, line = style(row)
                out.append(
                    (label(row), colour, line, [p["length"] for p in pts], [p[f"{key}_mean"] for p in pts])
                )
        return out

    tuned = [(label(r), *style(r), s, b) for r, (s, b, _) in curves.items()]
    return plot_extend(
        series("before", "bpb"),
        series("after", "bpb"),
        tuned,
        series("after", "retrieval_bits"),
        settings.train_length,
        settings.extend_length,
        path,
    )


def web_json(summary: list[dict], curves: dict, settings: Settings, command: str) -> dict[str, Any]:
    return to_json(
        {
            "schema": 1,
            "command": command,
            "train_length": settings.train_length,
            "extend_length": settings.extend_length,
            "eval_lengths": list(settings.eval_lengths),
            "rows": summary,
            "curves": {r: {"steps": s, "bpb_mean": b, "bpb_std": d} for r, (s, b, d) in curves.items()},
        },
        6,
    )


# ----------------------------------------------------------------------------------------------------
# Collecting the cells


@dataclass
class ExtendResult:
    """What `collect` wrote and measured."""

    out_dir: Path
    records: list[dict]
    summary: list[dict]
    curves: dict[str, tuple[list[int], list[float], list[float]]]
    markdown: str
    missing: list[str] = field(default_factory=list)


def collect(out_dir: Path, progress: bool = True, ran: CellsRun | None = None) -> ExtendResult:
    """results.jsonl, results.md, extend.png and extend.json from the cells in `out_dir/cells/` (whichever are
    there, or those `ran` wrote); they must share their settings, and the grid's missing cells are named."""
    found, grid, missing = cells.gathered(out_dir, AXES, ran.names if ran else None)
    present = {c.key[0] for c in found}
    rows = [r for r in ROWS if r in grid["rows"] and r in present]
    settings = Settings(
        train_length=grid["train_length"],
        extend_length=grid["extend_length"],
        eval_lengths=list(grid["eval_lengths"]),
        seeds=len(grid["seeds"]),
        rows=rows,
        eval_windows=grid["eval_windows"],
        steps=grid["steps"],
        curve_interval=grid["curve_interval"],
        passkey_per_depth=grid["passkey_per_depth"],
    )
    records = [r for c in found for r in c.records]
    write_atomic(out_dir / RECORDS_FILE, "".join(json.dumps(r) + "\n" for r in records).encode())
    info = [c.facts["info"] for c in found]
    seconds = sum(
        i["base_seconds"] + i["before_seconds"] + i["fine_tune_seconds"] + i["after_seconds"] for i in info
    )
    if ran:
        minutes = (time.perf_counter() - ran.started) / 60
        wall = f"Wall time {minutes:.1f} min ({ran.workers} worker process(es))."
    else:
        wall = f"Collected from cells run separately ({seconds / 60:.1f} min of training and scoring in all)."
    if missing:
        wall += f" Missing cells, left out: {', '.join(missing)}."
    summary = summarize(records, rows, settings)
    curves = mean_curves(found, rows)
    first = found[0].facts
    facts = {**first, "seeds": grid["seeds"], "wall": wall}
    found_claims = claims.findings("extend", records + curve_records(found), grid)
    blocks = results_blocks(summary, curves, rows, settings, facts) + claims.claims_blocks(found_claims)
    markdown = render_markdown(blocks, out_dir)
    write_atomic(out_dir / MD_FILE, markdown.encode())
    claims.write_claims(out_dir, "extend", found_claims)
    web = web_json(summary, curves, settings, first["command"])
    write_atomic(out_dir / WEB_FILE, (json.dumps(web, indent=1) + "\n").encode())
    plot(summary, curves, rows, settings, out_dir / FIGURE_FILE)
    if progress:
        files = [MD_FILE, RECORDS_FILE, FIGURE_FILE, WEB_FILE, claims.CLAIMS_FILE]
        print(f"wrote {out_dir}/{', '.join(files)} from {len(found)} cell(s)")
    return ExtendResult(out_dir, records, summary, curves, markdown, missing)


# ----------------------------------------------------------------------------------------------------
# The figure (the drawing helpers are octlm.inspect.figures')


# A line of `plot_extend`: (label, colour, (line style, marker), x values, y values).
Series = tuple[str, str, tuple[str, str], list[int], list[float]]


def plot_extend(
    before: list[Series],
    after: list[Series],
    tuning: list[Series],
    retrieval: list[Series],
    train_length: int,
    extend_length: int,
    path: Path,
) -> Path:
    """The extension experiment in four panels: bits per byte against length before and after fine-tuning
    (shared y), the fine-tuning's validation bits per byte at the extended length against step, and the bits
    the passkey's needle saves against length after fine-tuning. Dotted lines: the two training lengths."""
    fig = figure(18.0, 4.6)
    fig.subplots_adjust(left=0.04, right=0.88, bottom=0.13, top=0.88, wspace=0.22)
    axes = fig.subplots(1, 4)
    axes[1].sharey(axes[0])
    titles = (
        f"before fine-tuning (trained at {train_length})",
        f"after fine-tuning at {extend_length}",
        f"fine-tuning: validation at {extend_length}",
        "passkey after fine-tuning",
    )
    ylabels = (
        "bits per byte",
        "bits per byte",
        "validation bits per byte",
        "bits the needle saves on the key",
    )
    for ax, lines, title, ylabel in zip(
        axes, (before, after, tuning, retrieval), titles, ylabels, strict=True
    ):
        for name, colour, (line, marker), x, y in lines:
            ax.plot(x, y, color=colour, linestyle=line, marker=marker, ms=3, linewidth=1.3, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
    for ax in (axes[0], axes[1], axes[3]):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("evaluation length (tokens)")
        lengths = sorted({x for _, _, _, xs, _ in after for x in xs})
        ax.set_xticks(lengths, [str(n) for n in lengths])
        for n in (train_length, extend_length):
            ax.axvline(n, color="grey", linestyle=":", linewidth=1)
    axes[2].set_xlabel("fine-tuning step")
    axes[3].axhline(0, color="grey", linewidth=0.8)
    if not retrieval:
        axes[3].text(
            0.5,
            0.5,
            "no evaluation length holds\nthe needle and the question",
            ha="center",
            va="center",
            transform=axes[3].transAxes,
            fontsize=8,
        )
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(0.89, 0.88),
        title="colour: scheme; line: method",
        title_fontsize=7,
    )
    fig.suptitle("Context extension by fine-tuning: mean over seeds", fontsize=10)
    return save(fig, path)
