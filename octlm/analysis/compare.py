"""`octlm compare RUN RUN [RUN ...]`: trained runs side by side in one report.

Per run: scheme, seed, steps, parameters, the final validation loss and bits per byte (the run's last metrics
record, which `octlm train` writes at its last evaluation), its learning curve, and how its attention spreads
over distance (octlm/inspect/attention.py, on its own validation windows). Above the table the report names
every difference between the runs beyond their scheme, one line each (steps trained, tokens seen, each config
field, tokenizer and corpus), or says they are comparable: only the scheme differs. Runs of other tokenizers or
data may be compared, but their bits per byte then come from different texts.

    --out DIR (default reports/compare-<run>-<run>...):
        compare.md  compare.json  curves.png  attention-<i>-<run>.png (one per run)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from octlm.errors import UserError, writing
from octlm.hashing import CONFIG_BOOKKEEPING
from octlm.inspect.attention import DEFAULT_WINDOWS, inspect_attention
from octlm.inspect.figures import plot_attention_distance, plot_learning_curves
from octlm.inspect.render import Block, Heading, Image, Paragraph, Table, render_markdown
from octlm.inspect.validation import validation_tokens
from octlm.storage.jsonable import to_json
from octlm.storage.run import Run

# Config fields that are not differences between runs: the scheme (what is compared), the steps (a line of their
# own, with the steps trained), and what changes nothing a run learns or is measured on (left out of its hash).
NOT_COMPARED = frozenset(
    {"model.position", "train.steps", "data.data_dir", *(f"train.{key}" for key in CONFIG_BOOKKEEPING)}
)
SAME_SCHEME_ONLY = "comparable: only the scheme differs"


def run_facts(run_dir: Path, windows: int = DEFAULT_WINDOWS) -> dict[str, Any]:
    """One run's row: its config, checkpoint step and hashes, metrics and attention-by-distance numbers."""
    from octlm.storage.checkpoint import load_model, read_meta

    model, config, tokenizer = load_model(run_dir)  # a one-line UserError for a folder that is not a run
    run = Run.of(run_dir)
    meta = read_meta(run.find_checkpoint())
    records = run.read_metrics()
    metrics = [r for r in records if "val_bpb" in r and "step" in r]
    final = metrics[-1] if metrics else {}
    # The tokens of the steps the checkpoint holds, as the training counted them (every process's batches).
    seen = [r["tokens"] for r in records if r.get("step") == meta["step"] and "tokens" in r]
    try:
        attention = inspect_attention(model, validation_tokens(config, tokenizer), windows)
    except (UserError, OSError) as error:
        attention = {"skipped": str(error)}
    return {
        "run": run_dir.name,
        "path": str(run_dir),
        "scheme": config.model.position,
        "seed": config.train.seed,
        "steps": meta["step"],
        "planned_steps": config.train.steps,
        "tokens": seen[-1] if seen else None,
        "parameters": model.num_parameters(),
        "context_length": config.model.context_length,
        "val_loss": final.get("val_loss"),
        "val_bpb": final.get("val_bpb"),
        "val_step": final.get("step"),
        "curve": {"step": [r["step"] for r in metrics], "val_bpb": [r["val_bpb"] for r in metrics]},
        "tokenizer_sha256": meta["sha256"].get("tokenizer"),
        "corpus_sha256": meta["sha256"].get("corpus"),
        "config": config.flat(),
        "attention": attention,
    }


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def differences(runs: list[dict[str, Any]]) -> list[str]:
    """Every way the runs differ beyond their scheme, one line each naming every run's value: the steps
    trained (and planned, where a run stopped early), the tokens seen, each config field (NOT_COMPARED
    aside), the tokenizer and the corpus."""
    lines = []

    def differ(what: str, values: list[str], why: str = "") -> None:
        if len(set(values)) > 1:
            named = ", ".join(f"{r['label']} {v}" for r, v in zip(runs, values, strict=True))
            lines.append(f"{what}: {named}{why}")

    differ(
        "steps",
        [
            f"{r['steps']:,}"
            + (f" (of {r['planned_steps']:,} planned)" if r["steps"] != r["planned_steps"] else "")
            for r in runs
        ],
    )
    differ("tokens seen", ["n/a" if r["tokens"] is None else f"{r['tokens']:,}" for r in runs])
    for key in sorted({k for r in runs for k in r["config"]} - NOT_COMPARED):
        differ(key, [_shown(r["config"].get(key)) for r in runs])
    text = "; their losses and bits per byte are not measured on the same text"
    differ("tokenizer", [str(r["tokenizer_sha256"])[:12] for r in runs], text)
    differ("corpus", [str(r["corpus_sha256"])[:12] for r in runs], text)
    return lines


def verdict(runs: list[dict[str, Any]], lines: list[str]) -> str:
    """Whether the runs compare the scheme alone (`lines`: their other differences)."""
    if lines:
        return f"not comparable on the scheme alone: {len(lines)} other difference(s)"
    return SAME_SCHEME_ONLY if len({r["scheme"] for r in runs}) > 1 else "comparable: nothing differs"


def attention_summary(attention: dict[str, Any]) -> list[dict[str, Any]]:
    """Per layer, means over heads: distance attended, entropy, and the lift at distance 1 (attention.py)."""
    if "skipped" in attention:
        return []
    spread, entropy, lift = (np.asarray(attention[k]) for k in ("mean_distance", "entropy", "lift"))
    return [
        {
            "layer": layer,
            "mean_distance": float(spread[layer].mean()),
            "entropy": float(entropy[layer].mean()),
            "lift_1": float(lift[layer, :, 1].mean()) if attention["length"] > 1 else None,
        }
        for layer in range(len(entropy))
    ]


def compare_runs(run_dirs: Sequence[str | Path], windows: int = DEFAULT_WINDOWS) -> dict[str, Any]:
    """Every run's facts, labelled (the folder name, or the path where two names collide), and the flags."""
    paths = [Path(p) for p in run_dirs]
    if len(paths) < 2:
        raise UserError(f"compare needs at least two runs, got {len(paths)}; give RUN RUN [RUN ...]")
    resolved = [p.resolve() for p in paths]
    if len(set(resolved)) < len(resolved):
        twice = next(str(p) for p, r in zip(paths, resolved, strict=True) if resolved.count(r) > 1)
        raise UserError(f"run {twice!r} is given twice; give each run once")
    names = [p.name for p in paths]
    runs = [run_facts(p, windows) for p in paths]
    for r, path, name in zip(runs, paths, names, strict=True):
        r["label"] = name if names.count(name) == 1 else str(path)
        r["attention_summary"] = attention_summary(r["attention"])
    lines = differences(runs)
    return {"runs": runs, "verdict": verdict(runs, lines), "differences": lines}


def default_out(run_dirs: Sequence[str | Path]) -> Path:
    return Path("reports") / ("compare-" + "-".join(Path(p).name for p in run_dirs))[:120]


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def compare_blocks(result: dict[str, Any], figures: dict[str, Path]) -> list[Block]:
    """The report: the runs' table, the flags, the learning curves and the attention summary."""
    runs = result["runs"]
    rows = [
        [
            r["label"],
            r["scheme"],
            str(r["seed"]),
            f"{r['steps']:,}",
            f"{r['parameters']:,}",
            str(r["context_length"]),
            _fmt(r["val_loss"], ".4f"),
            _fmt(r["val_bpb"], ".4f"),
        ]
        for r in runs
    ]
    blocks: list[Block] = [
        Heading(f"Comparison of {len(runs)} runs", 1),
        Paragraph(result["verdict"] + (":" if result["differences"] else ".")),
    ]
    if result["differences"]:
        blocks.append(Paragraph("\n".join(f"- {line}" for line in result["differences"])))
    blocks += [
        Paragraph(
            "Validation loss (nats per token) and bits per byte: each run's last evaluation in its metrics."
        ),
        Table(
            ["run", "scheme", "seed", "steps", "parameters", "context", "val loss", "val bits/byte"],
            rows,
            "llrrrrrr",
        ),
    ]
    blocks += [
        Heading("Learning curves"),
        Image(figures["curves"], "Validation bits per byte against training step."),
    ]
    blocks.append(Heading("Attention by distance"))
    blocks.append(
        Paragraph(
            "Per layer, the mean over heads of: the distance i - j attended (sum of p × distance), "
            "each row's entropy (nats), and the lift at distance 1 (mean probability of the previous token "
            "over uniform attention's; 1 = no preference). Measured on each run's validation windows "
            "(octlm inspect's section has the per-head table)."
        )
    )
    table = [
        [
            r["label"],
            str(s["layer"]),
            f"{s['mean_distance']:.2f}",
            f"{s['entropy']:.3f}",
            _fmt(s["lift_1"], ".3f"),
        ]
        for r in runs
        for s in r["attention_summary"]
    ]
    blocks.append(Table(["run", "layer", "mean distance", "entropy", "lift d = 1"], table, "lrrrr"))
    for r in runs:
        if "skipped" in r["attention"]:
            blocks.append(Paragraph(f"{r['label']}: attention not measured ({r['attention']['skipped']})."))
        elif f"attention-{r['label']}" in figures:
            blocks.append(
                Image(
                    figures[f"attention-{r['label']}"],
                    f"{r['label']} ({r['scheme']}): mean attention by distance.",
                )
            )
    return blocks


def write_compare(result: dict[str, Any], folder: str | Path) -> Path:
    """compare.md, compare.json and the figures into `folder`; returns it."""
    folder = Path(folder)
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
        figures = {
            "curves": plot_learning_curves(
                [
                    (r["label"], r["scheme"], r["curve"]["step"], r["curve"]["val_bpb"])
                    for r in result["runs"]
                ],
                folder / "curves.png",
            )
        }
        for i, r in enumerate(result["runs"]):
            if "mean" in r["attention"]:
                # Labels may be paths; the index keeps the names apart.
                name = f"attention-{i}-{Path(r['label']).name}.png"
                figures[f"attention-{r['label']}"] = plot_attention_distance(
                    r["attention"]["mean"],
                    folder / name,
                    f"{r['label']} ({r['scheme']}): attention against distance",
                )
        (folder / "compare.md").write_text(
            render_markdown(compare_blocks(result, figures), folder), encoding="utf-8"
        )
        numbers = to_json(result, 6, significant=True)
        numbers["figures"] = {key: path.name for key, path in figures.items()}
        (folder / "compare.json").write_text(json.dumps(numbers) + "\n", encoding="utf-8")
    return folder
