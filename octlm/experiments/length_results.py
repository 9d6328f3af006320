"""The length experiment's results, collected from its cells: results.jsonl, summaries over seeds, tables,
results.md (with the paper claims checked, `octlm.experiments.claims`), claims.json, length.png and
length.json.

`collect` reads the cells `octlm.experiments.length` wrote; everything else works on their records (one per
scheme/variant, seed, length and mode) and measures nothing. Tables give mean ± sample standard deviation over
seeds; the best row of a column is bold and "≈" marks a cell within the spread of the best (|Δ| ≤ std + std of
the best).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from octlm.config import Config, config_from_dict
from octlm.experiments import cells, claims
from octlm.experiments.cells import CellsRun
from octlm.experiments.figures import STYLE_KEY, VARIANT_STYLES, row_style
from octlm.experiments.length import AXES, Settings
from octlm.inspect import probe
from octlm.inspect.figures import figure, save, scheme_colour
from octlm.inspect.render import Block, Code, Heading, Inline, Paragraph, Strong, Table, render_markdown
from octlm.positions import family_of, table_order
from octlm.positions.rope_scaling import LABELS, VARIANTS
from octlm.storage.jsonable import to_json

RECORDS_FILE, MD_FILE, FIGURE_FILE, WEB_FILE = "results.jsonl", "results.md", "length.png", "length.json"
WEB_DIGITS = 6  # decimals of the figures in length.json


@dataclass
class RunFacts:
    """How the experiment ran, as results.md reports it."""

    command: str
    seeds: list[int]
    scored_tokens: int
    scored_bytes: int
    workers: int | None  # None: collected from cells run separately (wall_seconds: their time in all)
    wall_seconds: float
    missing: list[str] = field(default_factory=list)  # cells of the grid left out, as scheme:seed
    probes: dict[str, dict] = field(
        default_factory=dict
    )  # scheme -> octlm.inspect.probe's result for one seed


# ----------------------------------------------------------------------------------------------------
# Summaries over seeds


def row_order(settings: Settings) -> list[tuple[str, str]]:
    """Table rows (scheme, variant): schemes in table order (each variant after its family, as p-RoPE after
    RoPE), RoPE followed by its extension variants."""
    rows: list[tuple[str, str]] = []
    for scheme in table_order(settings.schemes):
        rows += [(scheme, v) for v in VARIANTS] if scheme == "rope" else [(scheme, "")]
    return rows


def row_label(scheme: str, variant: str, settings: Settings) -> str:
    if not variant or variant == "plain":
        return scheme
    if variant == "dynamic":
        return "rope + dynamic NTK (s = L / train)"
    return f"rope + {LABELS[VARIANTS[variant]]} (s = {settings.factor:g})"


def summarize(records: list[dict], settings: Settings) -> list[dict]:
    """One summary per (scheme, variant, length, mode): bpb mean, sample std over seeds, ppl mean, status."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["scheme"], r["variant"], r["length"], r["mode"]), []).append(r)
    out = []
    for scheme, variant in row_order(settings):
        for mode in settings.modes:
            for length in settings.eval_lengths:
                group = groups.get((scheme, variant, length, mode), [])
                ok = [r for r in group if r["status"] == "ok"]
                bpbs = [r["bpb"] for r in ok]
                out.append(
                    {
                        "scheme": scheme,
                        "variant": variant,
                        "length": length,
                        "mode": mode,
                        "bpb_mean": statistics.fmean(bpbs) if ok else None,
                        "bpb_std": statistics.stdev(bpbs) if len(ok) > 1 else None,
                        "ppl_mean": statistics.fmean(r["ppl"] for r in ok) if ok else None,
                        "n_seeds": len({r["seed"] for r in group}),
                        "status": "ok" if ok else "no rows",
                        "tokens": ok[0]["tokens"] if ok else 0,
                    }
                )
    return out


def within_spread(a: dict, best: dict) -> bool:
    """|mean − best mean| ≤ std + std of the best (their ±1 std intervals overlap); never with one seed."""
    if a["bpb_std"] is None or best["bpb_std"] is None:
        return False
    return abs(a["bpb_mean"] - best["bpb_mean"]) <= a["bpb_std"] + best["bpb_std"]


# ----------------------------------------------------------------------------------------------------
# Tables and results.md


def bpb_table(summary: list[dict], mode: str, settings: Settings) -> Table:
    """Rows: schemes (+ RoPE variants); columns: evaluation lengths; cells: bpb mean ± std."""
    cells = {(s["scheme"], s["variant"], s["length"]): s for s in summary if s["mode"] == mode}
    best = {}
    for length in settings.eval_lengths:
        ok = [c for (_, _, n), c in cells.items() if n == length and c["status"] == "ok"]
        best[length] = min(ok, key=lambda c: c["bpb_mean"]) if ok else None
    rows: list[list[Inline]] = []
    for scheme, variant in row_order(settings):
        row: list[Inline] = [row_label(scheme, variant, settings)]
        for length in settings.eval_lengths:
            c = cells.get((scheme, variant, length))
            if c is None or c["status"] != "ok":
                row.append("no rows")
                continue
            text = f"{c['bpb_mean']:.3f}" + (f" ± {c['bpb_std']:.3f}" if c["bpb_std"] is not None else "")
            if c is best[length]:
                row.append(Strong(text))
            else:
                row.append(f"≈ {text}" if within_spread(c, best[length]) else text)
        rows.append(row)
    headers = ["scheme"] + [f"L = {n}" for n in settings.eval_lengths]
    return Table(headers, rows, align="l" + "r" * len(settings.eval_lengths))


def _seed_mean(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.fmean(values) if values else None


def training_table(records: list[dict], settings: Settings) -> Table:
    """Per scheme: final training loss, train.py's validation bpb and seconds per training (means over seeds).

    A scheme whose final loss is more than 1 nat/token above the best did not learn in this budget; it is
    flagged, since its length rows then say nothing about extrapolation.
    """
    schemes = table_order(settings.schemes)
    runs = {  # one record per seed: the training figures are the same in all of a run's records
        scheme: list({r["seed"]: r for r in records if r["scheme"] == scheme}.values()) for scheme in schemes
    }
    losses = [v for v in (_seed_mean(runs[s], "final_train_loss") for s in schemes) if v is not None]
    rows: list[list[Inline]] = []
    for scheme in schemes:
        loss = _seed_mean(runs[scheme], "final_train_loss")
        bpb = _seed_mean(runs[scheme], "final_val_bpb")
        seconds = _seed_mean(runs[scheme], "train_seconds")
        flag = " (did not learn in this budget)" if loss is not None and loss > min(losses) + 1.0 else ""
        rows.append(
            [
                scheme,
                f"{loss:.3f}{flag}" if loss is not None else "n/a",
                f"{bpb:.3f}" if bpb is not None else "n/a",
                f"{seconds:.0f}" if seconds is not None else "n/a",
            ]
        )
    headers = ["scheme", "final train loss", "val bits/byte (train.py)", "seconds per training"]
    return Table(headers, rows, align="lrrr")


def results_blocks(
    summary: list[dict],
    records: list[dict],
    settings: Settings,
    config: Config,
    facts: RunFacts,
    found: Sequence[claims.Finding] = (),
) -> list[Block]:
    """results.md: how the models were trained, both bpb tables, the RoPE note, the claims `found`, the
    training table and the probes."""
    mc, tc = config.model, config.train
    seeds = ", ".join(map(str, facts.seeds))
    trained = (
        f"Each scheme trained at context {settings.train_length} for {tc.steps} steps of {tc.batch_size} × "
        f"{settings.train_length} tokens (d_model {mc.d_model}, {mc.n_layers} layers, {mc.n_heads} heads, "
        f"vocabulary {mc.vocab_size}), seeds {seeds}; corpus "
    )
    wall = f". Wall time {facts.wall_seconds / 60:.1f} min ({facts.workers} worker process(es))."
    if facts.workers is None:
        minutes = facts.wall_seconds / 60
        wall = f". Collected from cells run separately ({minutes:.1f} min of training and scoring in all)."
    if facts.missing:
        wall += f" Missing cells, left out: {', '.join(facts.missing)}."
    cells = (
        f"Every cell scores the same {facts.scored_tokens:,} validation tokens ({facts.scored_bytes:,} "
        "bytes). Cells: bits per byte, mean ± sample standard deviation over seeds. "
    )
    marks = (
        ": the best row of the column; ≈: within the spread of the best (|Δ| ≤ std + std of the best). "
        '"no rows": the learned table ends at the training length.'
    )
    rope = (
        "RoPE extension rows reuse the trained RoPE models unchanged except for their frequencies: PI, "
        f"NTK-aware and YaRN with the fixed factor s = {settings.factor:g}, dynamic NTK with "
        f"s = L / {settings.train_length} per length ("
    )
    return [
        Heading("Length experiment: train short, test long", level=1),
        Paragraph(Code(facts.command)),
        Paragraph([trained, Code(config.data.source), wall]),
        Paragraph([cells, Strong("Bold"), marks]),
        Heading("Non-overlapping windows"),
        Paragraph(
            "Windows of L tokens, every token scored (early tokens of each window have little context)."
        ),
        bpb_table(summary, "windows", settings),
        Heading("Sliding windows"),
        Paragraph(
            "Windows of L tokens every L/2 tokens, scoring only the last L/2 (each scored token sees at "
            "least L/2 earlier tokens)."
        ),
        bpb_table(summary, "sliding", settings),
        Paragraph([rope, Code("octlm/positions/rope_scaling.py"), ")."]),
        *(claims.claims_blocks(found) if found else []),
        Heading("Training"),
        Paragraph(
            "How well each scheme trained, at the training length (mean over seeds): the last training loss "
            "(nats/token, mean since the previous evaluation) and train.py's own validation bits per byte "
            "(a spread-out sample of the validation split, so not the same tokens as the tables above)."
        ),
        training_table(records, settings),
        *probe_blocks(facts.probes, settings),
    ]


def probe_blocks(probes: dict[str, dict], settings: Settings) -> list[Block]:
    """The position probe of every scheme's first-seed model, layer by layer (octlm/inspect/probe.py)."""
    if not probes:
        return []
    first = next(iter(probes.values()))
    about = (
        "A linear probe of each token's absolute position from the residual stream (the embedding output, "
        f"then after each block), at the training length {settings.train_length}, on "
        f"{first['tokens']['test']:,} held-out tokens of the evaluation text: ridge regression (R², mean "
        "absolute error in positions) and a classifier over "
        f"{first['buckets']} position buckets, each beside the same probe on shuffled positions (control). "
        "One model per scheme, its first seed."
    )
    ordered = {s: probes[s] for s in table_order(list(probes))}
    return [Heading("What each layer knows of position"), Paragraph(about), probe.comparison_table(ordered)]


# ----------------------------------------------------------------------------------------------------
# length.json and length.png


def web_json(summary: list[dict], settings: Settings, command: str) -> dict[str, Any]:
    """length.json in web/DATA.md's schema 1 (the non-overlapping-window figures)."""
    keys = ("scheme", "variant", "length", "bpb_mean", "bpb_std", "ppl_mean", "n_seeds", "status")
    rows = [{k: s[k] for k in keys} for s in summary if s["mode"] == "windows"]
    return to_json(
        {
            "schema": 1,
            "command": command,
            "train_length": settings.train_length,
            "eval_lengths": list(settings.eval_lengths),
            "rows": rows,
        },
        WEB_DIGITS,
    )


def plot(summary: list[dict], settings: Settings, path: Path, off_scale: float = 1.4) -> Path | None:
    """length.png: bits per byte against length, a line per row and a band for mean ± std; both modes.

    A row whose best value is above `off_scale` × the lowest value of the figure (a model that never learned,
    say) would squash every other line into a strip; it is left out and named in a note instead. Nothing is
    drawn (None) when no cell has a value.
    """
    ok = [s for s in summary if s["status"] == "ok"]
    if not ok:
        return None
    cap = off_scale * min(s["bpb_mean"] for s in ok)
    left_out: dict[str, float] = {}
    rows = row_order(settings)
    # Top: every scheme as trained, a colour each. Below (when there are any): RoPE and its variants, in
    # RoPE's colour with a line style each, with ALiBi for reference: 14 lines in one panel were unreadable. A
    # scheme has the same colour in every panel and figure (`scheme_colour`).
    groups = [("every scheme", [r for r in rows if r[1] in ("", "plain")])]
    rope = [r for r in rows if family_of(r[0]) == "rope"]
    if len(rope) > 1:
        groups.append(("RoPE and its variants", rope + [r for r in rows if r[0] == "alibi"]))
    panels = []
    for group, members in groups:
        row = []
        for mode in settings.modes:
            curves = []
            for scheme, variant in members:
                pts = [s for s in ok if (s["scheme"], s["variant"], s["mode"]) == (scheme, variant, mode)]
                label = row_label(scheme, variant, settings)
                # a row `rope+ssmax` in RoPE's colour, drawn as its option; RoPE's variants each their own way
                colour, style = (
                    row_style(scheme)
                    if variant in ("", "plain")
                    else (scheme_colour(scheme), VARIANT_STYLES[variant])
                )
                if pts and min(p["bpb_mean"] for p in pts) > cap:
                    left_out[label] = min(p["bpb_mean"] for p in pts)
                elif pts:
                    curves.append(
                        Curve(
                            label,
                            np.array([p["length"] for p in pts]),
                            np.array([p["bpb_mean"] for p in pts]),
                            np.array([p["bpb_std"] or 0.0 for p in pts]),
                            color=colour,
                            style=style,
                        )
                    )
            title = "non-overlapping windows" if mode == "windows" else "sliding windows (last L/2 scored)"
            row.append((f"{group}: {title}; trained at {settings.train_length}", curves))
        panels.append(row)
    note = "off scale: " + ", ".join(f"{k} (≥ {v:.2f})" for k, v in left_out.items()) if left_out else ""
    return plot_length(panels, settings.train_length, settings.eval_lengths, note, path)


def write_results(
    out_dir: Path,
    summary: list[dict],
    records: list[dict],
    settings: Settings,
    config: Config,
    facts: RunFacts,
) -> str:
    """Write results.md (with the claims checked on `records`), claims.json, length.json and length.png into
    `out_dir`; returns the Markdown."""
    found = claims.findings("length", records)
    markdown = render_markdown(results_blocks(summary, records, settings, config, facts, found), out_dir)
    (out_dir / MD_FILE).write_text(markdown, encoding="utf-8")
    claims.write_claims(out_dir, "length", found)
    web = web_json(summary, settings, facts.command)
    (out_dir / WEB_FILE).write_text(json.dumps(web, indent=1) + "\n", encoding="utf-8")
    plot(summary, settings, out_dir / FIGURE_FILE)
    return markdown


# ----------------------------------------------------------------------------------------------------
# Collecting the cells


@dataclass
class LengthResult:
    """What `collect` wrote and measured."""

    out_dir: Path
    records: list[dict]
    summary: list[dict]
    wall_seconds: float
    markdown: str
    missing: list[str] = field(default_factory=list)  # the grid's cells with no file, as scheme:seed


def collect(out_dir: Path, progress: bool = True, ran: CellsRun | None = None) -> LengthResult:
    """results.jsonl, results.md, length.png and length.json from the cells in `out_dir/cells/`: whichever are
    there, or those `ran` wrote. They must share their settings; the grid's missing cells are left out (named
    in results.md and `missing`), and a scheme with no cell has no rows.
    """
    found, grid, missing = cells.gathered(out_dir, AXES, ran.names if ran else None)
    present = {cell.key[0] for cell in found}
    settings = Settings(
        train_length=grid["train_length"],
        eval_lengths=list(grid["eval_lengths"]),
        seeds=len(grid["seeds"]),
        schemes=[s for s in grid["schemes"] if s in present],
        eval_windows=grid["eval_windows"],
        modes=tuple(grid["modes"]),
        rope_factor=grid["rope_factor"],
    )
    first = found[0].facts
    config = config_from_dict(first["config"], name=first["config_name"])
    records = [record for cell in found for record in cell.records]
    (out_dir / RECORDS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    workers = ran.workers if ran else None  # None: cells run separately, and `wall` is their time in all
    seconds = sum(c.facts["info"]["train_wall"] + c.facts["info"]["eval_seconds"] for c in found)
    wall = time.perf_counter() - ran.started if ran else seconds
    summary = summarize(records, settings)
    probes = {}  # scheme -> the probe of its first seed's model (cells written before the probe have none)
    for cell in found:
        scheme, seed = cell.key
        if "probe" in cell.facts["info"] and scheme not in probes:
            probes[scheme] = cell.facts["info"]["probe"] | {"seed": seed}
    facts = RunFacts(
        first["command"],
        grid["seeds"],
        first["scored_tokens"],
        first["scored_bytes"],
        workers,
        wall,
        missing,
        probes,
    )
    markdown = write_results(out_dir, summary, records, settings, config, facts)
    if progress:
        files = [MD_FILE, RECORDS_FILE, FIGURE_FILE, WEB_FILE, claims.CLAIMS_FILE]
        print(f"wrote {out_dir}/{', '.join(files)} from {len(found)} cell(s) in {wall / 60:.1f} min")
    return LengthResult(out_dir, records, summary, wall, markdown, missing)


# ------------------------------------------------------------------------------------------------------------
# The figure (the drawing helpers are octlm.inspect.figures')


@dataclass
class Curve:
    """One line of `plot_length`: `mean` `[n]` at `lengths` `[n]`, a band of ± `spread` `[n]` around it."""

    label: str
    lengths: np.ndarray
    mean: np.ndarray
    spread: np.ndarray
    color: str = "#000000"  # `scheme_colour` of its scheme: the same in every panel and figure
    style: tuple[str, str] = ("-", "o")  # its variant's (line style, marker): VARIANT_STYLES


def plot_length(
    panels: list[list[tuple[str, list[Curve]]]], train_length: int, lengths: list[int], note: str, path: Path
) -> Path:
    """Bits per byte against evaluation length (log x): rows of panels, each (title, curves); shared y axis.

    A dotted line marks the training length; each row has its legend on the right; `note` (e.g. the rows left
    off the scale) goes under the panels.
    """
    n_rows, n_cols = len(panels), max(len(row) for row in panels)
    fig = figure(14.0, 1.0 + 4.5 * n_rows)
    fig.subplots_adjust(
        left=0.05, right=0.83, bottom=0.1 / n_rows, top=1 - 0.14 / n_rows, wspace=0.06, hspace=0.3
    )
    grid = fig.subplots(n_rows, n_cols, squeeze=False, sharey=True)
    for row, axes in zip(panels, grid, strict=True):
        _length_row(row, axes, train_length, lengths)
    if note:
        fig.text(0.01, 0.01, note, fontsize=8)
    fig.suptitle("Train short, test long: mean over seeds, band = ± 1 std", fontsize=10)
    return save(fig, path)


def _length_row(row: list[tuple[str, list[Curve]]], axes: Any, train_length: int, lengths: list[int]) -> None:
    for ax, (title, curves) in zip(axes, row, strict=False):
        for c in curves:
            line = ax.plot(
                c.lengths, c.mean, linestyle=c.style[0], marker=c.style[1], ms=3, color=c.color, label=c.label
            )[0]
            ax.fill_between(
                c.lengths,
                c.mean - c.spread,
                c.mean + c.spread,
                color=line.get_color(),
                alpha=0.15,
                linewidth=0,
            )
        ax.axvline(train_length, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("bits per byte (the same tokens at every length)")
    axes[len(row) - 1].legend(
        fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), title=STYLE_KEY, title_fontsize=7
    )
