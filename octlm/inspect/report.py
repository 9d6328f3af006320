"""`octlm inspect runs/<name>` (or `--hf NAME_OR_PATH`): what the token table and the position scheme learned.

A trained run is compared with an untrained model of the same config and seed (its starting point), because an
embedding space only means something next to one that has not learned anything. A pretrained Hugging Face
model (GPT-2, Llama, GPT-NeoX; loaded by octlm/inspect/pretrained.py) gets the same report, beside a freshly
initialised model of its config and without training counts. The report holds:

- nearest neighbours by cosine similarity of chosen tokens (default: token 0 and the most frequent training
  tokens), trained and untrained;
- for schemes with position vectors (learned, sinusoidal), the nearest positions of a few positions and the
  position x position similarity map; for RoPE, ALiBi, T5 and NoPE, what they have instead;
- the token table's frequent rows in 2-D (PCA), and each row's norm against its training count: tokens
  never seen in training are never looked up, so only a tied output head moves their rows (an untied table
  leaves them exactly at their initial values).

The stage is four modules: octlm/inspect/analysis.py computes every number (`analyze`, one JSON-able dict),
octlm/inspect/figures.py draws them, octlm/inspect/render.py renders blocks to Markdown and HTML, and this
module writes the report's text, the files (`write_report`, `write_pretrained_report`) and the CLI.

    runs/<name>/report/ (--hf: reports/<name>/)
        report.md  report.html  report.json  embeddings.json  positions.png  tokens_pca.png  norms.png
        [position_scheme.png for RoPE, ALiBi and T5]
        [attention.png: attention by distance, octlm/inspect/attention.py]
        [gates.png: FoX's forget gates against distance, octlm/inspect/gates.py]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import torch
from tqdm import tqdm

from octlm.errors import UserError, writing
from octlm.files import write_atomic
from octlm.inspect.analysis import (
    DEFAULT_FREQUENT,
    DEFAULT_TOP,
    INIT_STD,
    Tables,
    analyze,
    resolve_tokens,
    to_json,
    token_counts,
)
from octlm.inspect.attention import attention_blocks, report_attention
from octlm.inspect.figures import draw_figures, web_export
from octlm.inspect.gates import gate_blocks, report_gates
from octlm.inspect.probe import inspect_probe, report_probe_blocks
from octlm.inspect.render import (
    Block,
    Code,
    Heading,
    Image,
    Inline,
    Paragraph,
    Table,
    render_html,
    render_markdown,
)
from octlm.inspect.similarity import Neighbours
from octlm.storage.run import Run

if TYPE_CHECKING:
    from octlm.config import Config
    from octlm.data.tokenizer import Tokenizer
    from octlm.model.decoder import Decoder


# ------------------------------------------------------------------------------------------------------------
# The document: the report's text, in reading order (octlm/inspect/render.py renders it)


def _neighbour_cells(nb: Neighbours, labels: dict[int, str]) -> list[str | Code]:
    cells: list[str | Code] = []
    for n, (j, sim) in enumerate(nb):
        cells += [", " if n else "", Code(labels[j]), f" {sim:.2f}"]
    return cells


def report_blocks(report: dict[str, Any], figures: dict[str, Path]) -> list[Block]:
    """The report as blocks, in reading order."""
    m, source = report["model"], report.get("source")
    shape = (
        f"Position scheme {m['position']}, vocabulary V = {m['vocab_size']:,}, width C = {m['d_model']}, "
        f"context T = {m['context_length']}, layers {m['n_layers']}, heads {m['n_heads']}"
        f"{', output head tied to the token table' if m['tie_embeddings'] else ''}."
    )
    if source is None:
        intro = (f"After {report['step']:,} training steps. " if report.get("step") is not None else "") + (
            shape + " Every table compares the trained model with an untrained one of the same config and "
            "seed: its starting point."
        )
    else:
        intro = f"{source['summary']} {shape}"
    blocks: list[Block] = [
        Heading(f"What the embeddings learned: {report['run'] or 'model'}", 1),
        Paragraph(intro),
    ]
    blocks += [Paragraph(note) for note in report["notes"]]
    blocks += _token_blocks(report) + _position_blocks(report, figures)
    pca = f"The {len(report['trained']['pca']['ids'])} most frequent tokens' rows"
    norms = "Row norm against training count"
    if source is not None:  # no training counts: the lowest ids, norms by id
        pca, norms = (
            f"The rows of the first {len(report['trained']['pca']['ids'])} token ids",
            "Row norm by token id",
        )
    blocks.append(Heading("The token table"))
    blocks.append(
        Image(
            figures["tokens_pca"],
            f"{pca} projected on their first two principal components, trained and untrained.",
        )
    )
    blocks.append(Image(figures["norms"], f"{norms}, trained and untrained."))
    if "unseen" in report:
        blocks += _unseen_blocks(report["unseen"], m)
    blocks += gate_blocks(report.get("gates"), figures.get("gates"))
    return blocks + attention_blocks(report.get("attention"), figures.get("attention"))


def _token_blocks(report: dict[str, Any]) -> list[Block]:
    """Nearest tokens, trained and untrained."""
    labels, counts = report["labels"], report["counts"]
    blocks: list[Block] = [Heading("Nearest tokens")]
    blocks.append(
        Paragraph(
            f"The {report['k']} rows of the token table closest to each chosen token by cosine similarity. "
            "Mean similarity of the nearest neighbour: trained "
            f"{report['trained']['mean_top1_similarity']:.3f}, "
            f"untrained {report['untrained']['mean_top1_similarity']:.3f} (chance: the closest of V - 1 "
            "random directions)."
        )
    )
    for name in ("trained", "untrained"):
        rows: list[list[Inline]] = []
        for i in report["tokens"]:
            count = f"{int(counts[i]):,}" if counts is not None else "?"
            rows.append(
                [Code(labels[i]), str(i), count, _neighbour_cells(report[name]["neighbours"][i], labels)]
            )
        blocks += [Paragraph(f"{name.capitalize()} model:"), Table(["token", "id", "count", "nearest"], rows)]
    return blocks


def _position_blocks(report: dict[str, Any], figures: dict[str, Path]) -> list[Block]:
    """What the position scheme shows: its vectors' neighbours and similarity, its frequencies, its bias."""
    m, pos = report["model"], report["positions"]
    blocks: list[Block] = [Heading("Positions"), Paragraph(pos["summary"])]
    if pos["has_vectors"]:
        blocks += _vector_blocks(pos)
    blocks += _frequency_blocks(pos) + _bias_blocks(pos)
    if "untrained" in pos:
        caption = (
            f"Position x position cosine similarity: the {m['position']} vectors after and before "
            "training, beside the sinusoidal table of the same width."
        )
    elif pos["has_vectors"]:
        caption = (
            f"Position x position cosine similarity of the {m['position']} vectors "
            "(fixed: trained = untrained)."
        )
    else:
        caption = (
            f"For reference only: the sinusoidal table of width {m['d_model']}. A {m['position']} model "
            "adds no position vectors to its input, so it has no similarity map of its own."
        )
    blocks.append(Image(figures["positions"], caption))
    if "position_scheme" in figures:
        blocks.append(
            Image(figures["position_scheme"], f"What {m['position']} shows besides position vectors.")
        )
    return blocks


def _vector_blocks(pos: dict[str, Any]) -> list[Block]:
    """Nearest positions, trained (and untrained), and the mean similarity by distance beside the
    sinusoidal."""
    versions = [("trained", pos["trained"])] + (
        [("untrained", pos["untrained"])] if "untrained" in pos else []
    )
    blocks: list[Block] = []
    for name, data in versions:
        rows = [[str(p), ", ".join(f"{q} ({s:.2f})" for q, s in nb)] for p, nb in data["neighbours"].items()]
        blocks += [Paragraph(f"Nearest positions, {name}:"), Table(["position", "nearest"], rows)]
    sources = [data for _, data in versions] + [pos["sinusoidal_reference"]]
    headers = ["distance"] + [name for name, _ in versions] + ["sinusoidal"]
    rows = [[str(d)] + [f"{s['similarity_by_distance'][d]:.3f}" for s in sources] for d in pos["distances"]]
    return blocks + [Paragraph("Mean cosine similarity of positions t and t + d:"), Table(headers, rows)]


def _frequency_blocks(pos: dict[str, Any]) -> list[Block]:
    """θ, wavelength and turns within the context of each rotated channel pair."""
    if "frequencies" not in pos:
        return []
    f = pos["frequencies"]
    rows = [
        [str(i), f"{t:.6g}", f"{w:,.1f}" if t > 0 else "not rotated", f"{n:.3g}"]
        for i, (t, w, n) in enumerate(zip(f["theta"], f["wavelength"], f["turns_in_context"], strict=True))
    ]
    return [Table(["pair i", "θ_i (radians per position)", "wavelength 2π/θ_i", "turns within T"], rows)]


def _bias_blocks(pos: dict[str, Any]) -> list[Block]:
    """The bias each head adds to the key d positions back, at the report's distances."""
    if "bias" not in pos:
        return []
    at, distances = pos["bias"]["bias_at_distance"], pos["distances"]
    heads = len(next(iter(at.values())))
    rows = [[str(h)] + [f"{at[d][h]:+.3f}" for d in distances if d in at] for h in range(heads)]
    return [
        Paragraph("Bias added to the score of the key d positions back from the last position, per head:"),
        Table(["head"] + [f"d = {d}" for d in distances if d in at], rows),
    ]


def _unseen_blocks(unseen: dict[str, Any], m: dict[str, Any]) -> list[Block]:
    u, s = unseen["unseen"], unseen["seen"]
    expected = unseen["expected_init_norm"]
    text = (
        f"{u['tokens']:,} of {m['vocab_size']:,} tokens never occur in the training tokens. A fresh row has "
        f"norm about init std·√C = {INIT_STD}·√{m['d_model']} = {expected:.3f}."
    )
    if u["tokens"]:
        text += (
            f" The unseen rows' mean norm is {u['mean_norm']:.3f} (it was {u['mean_initial_norm']:.3f} at "
            f"the start); they moved by {u['mean_relative_change']:.0%} of their initial norm on average and "
            f"keep a cosine of {u['mean_cosine_to_initial']:.2f} with their initial rows, against "
            f"{s['mean_relative_change']:.0%} and {s['mean_cosine_to_initial']:.2f} for the seen rows."
        )
        if m["tie_embeddings"]:
            text += (
                " The input lookup never touches an unseen row, but the output head is the same table: every "
                "softmax pushes unseen tokens' logits down, so these rows move too (Adam scales each update "
                "to the gradient's typical size, so a small but consistent push adds up). Only an untied "
                "table keeps unseen rows exactly at their initial values."
            )
        else:
            text += (
                " The table is not tied to the output head, so nothing updates an unseen row: it should "
                "still equal its initial value (relative change 0%)."
            )
    return [Paragraph(text)]


# ------------------------------------------------------------------------------------------------------------
# Putting it together


class Progress:
    """The steps of a report as they start (`start`), in `steps`; with `show`, also one tqdm line on stderr
    ("inspect: probing layer 1 (4/9 done, 00:07)") that is gone when the report is done. `octlm inspect` shows
    it on a terminal only: a pipe or a file gets nothing, as with the data cache's encoding bar."""

    def __init__(self, show: bool = False, file: TextIO | None = None) -> None:
        self.steps: list[str] = []
        self._bar = tqdm(
            disable=not show,
            file=file or sys.stderr,
            leave=False,
            dynamic_ncols=True,
            bar_format="inspect: {desc} ({n_fmt}/{total_fmt} done, {elapsed})",
        )

    def plan(self, total: int) -> None:
        """The number of steps, once the model is known (its layers are probed one by one)."""
        self._bar.total = total
        self._bar.refresh()

    def start(self, name: str) -> None:
        """Step `name` starts; the one before it is done."""
        if self.steps:
            self._bar.update()
        self.steps.append(name)
        self._bar.set_description_str(name)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()


def untrained_like(config: Config) -> Decoder:
    """The model a run started from: same config, initialised under the run's seed."""
    from octlm.model.decoder import Decoder

    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(config.train.seed)
        return Decoder(config.model).eval()


def training_counts(
    config: Config, tokenizer: Tokenizer, recorded: dict[str, str] | None = None
) -> tuple[np.ndarray | None, str | None]:
    """Training token counts `[V]` from the run's data cache (rebuilt if missing), or (None, why not).

    `recorded`: the checkpoint's SHA-256 table; when it names the training tokens, the files must match it.
    """
    try:
        from octlm.data.cache import prepare_data

        data = prepare_data(config.data, config.model.vocab_size, progress=False)
    except (UserError, OSError) as error:
        return None, f"the training data could not be loaded ({error})"
    if data.tokenizer_sha256 != tokenizer.sha256:
        return None, "the data cache was made with another tokenizer than this run's"
    expected = (recorded or {}).get("train_tokens")
    if expected and data.hashes["train_tokens"] != expected:
        return None, f"the training tokens in {data.folder} are not the ones this run was trained on"
    return token_counts(data.train, config.model.vocab_size), None


@dataclass(frozen=True)
class Trained:
    """A trained run's model and what its report reads: loaded from the run folder (`load`), or handed over by
    `octlm train` as the loop left it."""

    run: Run
    model: Decoder  # eval mode, on the CPU
    config: Config
    tokenizer: Tokenizer
    step: int | None  # the checkpoint's step (None: unreadable)
    counts: np.ndarray | None = None  # [V] training token counts; None: counted from the data cache
    sha256: dict[str, str] | None = None  # the checkpoint's SHA-256 table, which that cache must match

    @classmethod
    def load(cls, run_dir: str | Path | Run) -> Trained:
        from octlm.storage.checkpoint import load_model, read_meta

        run = Run.of(run_dir)
        model, config, tokenizer = load_model(run.path)  # a clear UserError for a folder that is not a run
        try:
            meta = read_meta(run.find_checkpoint())
        except UserError:
            meta = {}
        return cls(run, model, config, tokenizer, meta.get("step"), sha256=meta.get("sha256"))


def run_report(
    trained: Trained,
    tokens: list[str] | None = None,
    ids: list[int] | None = None,
    top: int = DEFAULT_TOP,
    frequent: int = DEFAULT_FREQUENT,
    probe: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The numbers of a trained run's report: `analyze`'s, the step, and the probe, attention and gates.

    `tokens` (texts, each one token) and `ids` choose the tokens whose neighbours are listed (default: token 0
    and the `frequent` most frequent). `progress` hears of each step as it starts.
    """
    model, config, tokenizer = trained.model, trained.config, trained.tokenizer
    progress = progress or Progress()
    # Then: counts, tables, a probe per layer (the token table and each block's output), attention, files.
    progress.plan(len(progress.steps) + 4 + (config.model.n_layers + 1 if probe else 0))
    chosen = resolve_tokens(tokenizer, tokens or []) + list(ids or []) if tokens or ids else None
    counts, notes = trained.counts, []
    progress.start("counting the training tokens")
    if counts is None:
        counts, why = training_counts(config, tokenizer, trained.sha256)
        notes += [f"No training token counts: {why}."] if why else []
    progress.start("comparing the tables with an untrained model")
    with torch.no_grad():
        report = analyze(
            model, untrained_like(config), tokenizer, counts, chosen, top, frequent, trained.run.name, notes
        )
    report["step"] = trained.step

    def probing(layer: str) -> None:
        progress.start(f"position probe: {layer}")

    report["probe"] = inspect_probe(model, config, tokenizer, probing) if probe else None  # inspect/probe.py
    progress.start("attention by distance")
    report["attention"] = report_attention(model, config, tokenizer)  # octlm/inspect/attention.py
    report["gates"] = report_gates(model, config, tokenizer)  # octlm/inspect/gates.py: FoX's, else None
    return report


def write_report(
    run: str | Path | Trained,
    tokens: list[str] | None = None,
    ids: list[int] | None = None,
    top: int = DEFAULT_TOP,
    frequent: int = DEFAULT_FREQUENT,
    out: str | Path | None = None,
    export_web: str | Path | None = None,
    probe: bool = False,
    progress: Progress | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Write the report of a trained run (a folder, or a `Trained`) into `out` (default `<run>/report/`):
    that folder and report.json's numbers. `export_web` also copies embeddings.json there (e.g.
    web/public/data/embeddings.json). `progress` hears of each step as it starts."""
    progress = progress or Progress()
    if not isinstance(run, Trained):
        progress.start("loading the run")
        run = Trained.load(run)
    report = run_report(run, tokens, ids, top, frequent, probe, progress)
    folder = Path(out) if out is not None else run.run.report_dir
    progress.start("drawing the figures, writing the report")
    return write_files(report, run.model, run.tokenizer, folder, export_web)


def write_pretrained_report(
    name: str,
    tokens: list[str] | None = None,
    ids: list[int] | None = None,
    top: int = DEFAULT_TOP,
    frequent: int = DEFAULT_FREQUENT,
    out: str | Path | None = None,
    export_web: str | Path | None = None,
    progress: Progress | None = None,
) -> tuple[Path, dict[str, Any]]:
    """The report of a pretrained Hugging Face model (`octlm inspect --hf`) in `out` (default
    reports/<name>/).

    `name`: a local folder or a Hub name (see octlm/inspect/pretrained.py); UserError when it is refused.
    """
    from octlm.inspect.pretrained import default_out, load_pretrained

    progress = progress or Progress()
    progress.plan(3)
    progress.start("loading the model")
    loaded = load_pretrained(name)
    chosen = resolve_tokens(loaded.tokenizer, tokens or []) + list(ids or []) if tokens or ids else None
    progress.start("comparing the tables with an untrained model")
    report = analyze(
        loaded.trained, loaded.initial, loaded.tokenizer, None, chosen, top, frequent, name, loaded.notes
    )
    report["step"] = None
    folder = Path(out) if out is not None else default_out(name)
    progress.start("drawing the figures, writing the report")
    return write_files(report, loaded.trained, loaded.tokenizer, folder, export_web)


def write_files(
    report: dict[str, Any],
    model: Decoder | Tables,
    tokenizer: Tokenizer | None,
    folder: Path,
    export_web: str | Path | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Figures, report.md, report.html, report.json and embeddings.json of an `analyze` result: the folder,
    and report.json's numbers."""
    with writing(folder):  # a failed write names no file of its own: name the folder
        folder.mkdir(parents=True, exist_ok=True)
        figures = draw_figures(report, folder)
        blocks = report_blocks(report, figures) + report_probe_blocks(report.get("probe"), folder)
        (folder / "report.md").write_text(render_markdown(blocks, folder), encoding="utf-8")
        (folder / "report.html").write_text(render_html(blocks), encoding="utf-8")
        numbers = to_json(report)
        numbers["figures"] = {name: path.name for name, path in figures.items()}
        (folder / "report.json").write_text(json.dumps(numbers) + "\n", encoding="utf-8")
        web = (json.dumps(web_export(report, model, tokenizer), separators=(",", ":")) + "\n").encode("utf-8")
        (folder / "embeddings.json").write_bytes(web)
    if export_web is not None:
        with writing(export_web):  # atomic: a failed copy leaves the old file, and a symlink is replaced
            write_atomic(export_web, web)
    return folder, numbers
