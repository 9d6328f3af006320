"""One colour per scheme in every figure, and reference panels titled as references (octlm/inspect/figures.py).

Read back from the matplotlib artists (each line's colour and style, each panel's title), not from the PNG:
`_save` is wrapped to keep every figure it writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from matplotlib.colors import to_hex

import octlm.inspect.figures as figures
from octlm.config import ModelConfig
from octlm.data.sources import Document
from octlm.data.tokenizer import train_tokenizer
from octlm.experiments.battery import default_rows
from octlm.experiments.length import Settings
from octlm.experiments.length_results import plot, row_label, row_order
from octlm.inspect import analysis
from octlm.model.decoder import Decoder
from octlm.positions import scheme_names

# The built-in schemes' colours in registration order, fixed (a reader learns them once): tab10 for the ten of
# 2024, three dark tab20b hues for FoX, PaTH and stick-breaking (registered before NoPE).
TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
         "#393b79", "#637939", "#7b4173", "#17becf"]  # fmt: skip


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every figure `_save` is given, by its file name, kept after it is written."""
    kept: dict[str, Any] = {}
    real = figures._save

    def keeping(fig: Any, path: Path) -> Path:
        kept[Path(path).name] = fig
        return real(fig, path)

    monkeypatch.setattr(figures, "_save", keeping)
    return kept


def lines_by_label(fig: Any) -> list[tuple[str, str, tuple[str, str]]]:
    """(label, colour as hex, (line style, marker)) of every labelled line of every panel."""
    return [(line.get_label(), to_hex(line.get_color()), (line.get_linestyle(), line.get_marker()))
            for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")]  # fmt: skip


def test_every_built_in_scheme_has_its_own_fixed_colour() -> None:
    assert scheme_names() == ("learned", "sinusoidal", "rope", "p-rope", "xpos", "alibi", "t5", "fire", "cope",
                              "fox", "path", "stick-breaking", "nope")  # fmt: skip
    assert [figures.scheme_colour(s) for s in scheme_names()] == TAB10
    assert len(set(TAB10)) == len(TAB10)  # no two share one
    assert figures.scheme_colour("no-such-scheme") == "#000000"
    assert figures.row_style("rope") == ("#2ca02c", ("-", "o"))
    assert figures.row_style("rope+random") == ("#2ca02c", ("--", "s"))
    assert figures.row_style("rope+nope0") == ("#2ca02c", ("-.", "^"))
    assert figures.row_style("learned+nope1+random") == ("#1f77b4", (":", "v"))


def test_a_scheme_has_one_colour_in_every_panel_and_figure(tmp_path: Path, drawn: dict[str, Any]) -> None:
    settings = Settings(eval_lengths=[64, 128])
    summary = [{"scheme": s, "variant": v, "length": n, "mode": m, "bpb_mean": 1.0 + 0.01 * i, "bpb_std": 0.01,
                "status": "ok"} for i, (s, v) in enumerate(row_order(settings)) for m in settings.modes
               for n in settings.eval_lengths]  # fmt: skip
    assert plot(summary, settings, tmp_path / "length.png") is not None
    rows = default_rows()
    panels = {task: ([1, 2, 4], {row: [0.5, 0.4, None] for row in rows}) for task in ("copy", "sort")}
    figures.plot_accuracy(panels, {"copy": 2, "sort": 2}, tmp_path / "tasks.png")
    length_fig, tasks_fig = drawn["length.png"], drawn["tasks.png"]
    assert len(length_fig.axes) == 4  # every scheme, and RoPE's variants; two window modes each

    seen: dict[str, set[str]] = {}
    label_of = {row_label(s, v, settings): (s, v) for s, v in row_order(settings)}
    for label, colour, style in lines_by_label(length_fig):
        scheme, variant = label_of[label]
        seen.setdefault(scheme.split("+")[0], set()).add(colour)  # rope+ssmax: RoPE's colour, its own style
        plain = variant in ("", "plain")
        assert style == (figures.row_style(scheme)[1] if plain else figures.VARIANT_STYLES[variant])
    for label, colour, _style in lines_by_label(tasks_fig):
        seen.setdefault(label.split("+")[0], set()).add(colour)
    # Pink was T5 in one panel and xPos in the other; now each scheme is one colour everywhere, its own.
    assert seen == {s: {TAB10[i]} for i, s in enumerate(scheme_names())}
    rope = {label_of[label][1]: style for label, _, style in lines_by_label(length_fig)
            if label_of[label][0] == "rope"}  # fmt: skip
    assert sorted(rope) == ["dynamic", "ntk", "pi", "plain", "yarn"]
    assert len(set(rope.values())) == 5  # RoPE's variants: RoPE's colour, a line style and marker each
    assert all(ax.get_legend() is None or ax.get_legend().get_title().get_text() == figures.STYLE_KEY
               for ax in length_fig.axes) and tasks_fig.legends[0].get_title().get_text() == figures.STYLE_KEY  # fmt: skip


def test_compared_runs_take_their_schemes_colour_and_seeds_a_line_style_each(
    tmp_path: Path, drawn: dict[str, Any]
) -> None:
    curves = [("a", "rope", [0, 10], [2.0, 1.5]), ("b", "alibi", [0, 10], [2.1, 1.4]),
              ("c", "rope", [0, 10], [2.0, 1.6])]  # fmt: skip
    figures.plot_learning_curves(curves, tmp_path / "curves.png")
    assert lines_by_label(drawn["curves.png"]) == [
        ("a", TAB10[2], ("-", "o")), ("b", TAB10[5], ("-", "o")), ("c", TAB10[2], ("--", "o"))
    ]  # fmt: skip


def tiny_model(position: str, seed: int) -> Decoder:
    torch.manual_seed(seed)
    return Decoder(ModelConfig(vocab_size=300, d_model=32, context_length=16, n_layers=1, n_heads=2, d_ff=64,
                               position=position))  # fmt: skip


@pytest.mark.parametrize(
    ("position", "titles"),
    [
        ("rope", ["reference: the sinusoidal table, C = 32\n(rope has no position vectors)"]),
        ("nope", ["reference: the sinusoidal table, C = 32\n(nope has no position vectors)"]),
        ("sinusoidal", ["sinusoidal (fixed, C = 32)"]),  # the run's own table, not a reference
        (
            "learned",
            ["learned, trained", "learned, untrained", "reference: the sinusoidal table\n(fixed, C = 32)"],
        ),
    ],
)
def test_the_sinusoidal_reference_is_titled_as_one(position: str, titles: list[str], tmp_path: Path,
                                                   drawn: dict[str, Any]) -> None:  # fmt: skip
    docs = [Document(f"d{i}", f"def f{i}(self, x):\n    return x + {i}\n") for i in range(30)]
    tokenizer = train_tokenizer(docs, 300)
    counts = analysis.token_counts(np.concatenate([tokenizer.encode(d.text) for d in docs]), 300)
    rep = analysis.analyze(tiny_model(position, 1), tiny_model(position, 2), tokenizer, counts, run="tiny")
    figures.draw_figures(rep, tmp_path)
    fig = drawn["positions.png"]
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == titles
