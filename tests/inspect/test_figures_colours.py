"""One colour per scheme in every figure, and reference panels titled as references (octlm/inspect/figures.py).

Read back from the matplotlib artists (tests/drawn.py): `save` is wrapped to keep every figure it writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from drawn import TAB10, keeping, lines_by_label

import octlm.inspect.figures as figures
from octlm.config import ModelConfig
from octlm.data.sources import Document
from octlm.data.tokenizer import train_tokenizer
from octlm.inspect import analysis
from octlm.model.decoder import Decoder
from octlm.positions import scheme_names


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return keeping(monkeypatch, figures)


def test_every_built_in_scheme_has_its_own_fixed_colour() -> None:
    assert scheme_names() == (
        "learned",
        "sinusoidal",
        "rope",
        "p-rope",
        "xpos",
        "alibi",
        "t5",
        "fire",
        "cope",
        "fox",
        "path",
        "stick-breaking",
        "nope",
    )
    assert [figures.scheme_colour(s) for s in scheme_names()] == TAB10
    assert len(set(TAB10)) == len(TAB10)  # no two share one
    assert figures.scheme_colour("no-such-scheme") == "#000000"


def test_compared_runs_take_their_schemes_colour_and_seeds_a_line_style_each(
    tmp_path: Path, drawn: dict[str, Any]
) -> None:
    curves = [
        ("a", "rope", [0, 10], [2.0, 1.5]),
        ("b", "alibi", [0, 10], [2.1, 1.4]),
        ("c", "rope", [0, 10], [2.0, 1.6]),
    ]
    figures.plot_learning_curves(curves, tmp_path / "curves.png")
    assert lines_by_label(drawn["curves.png"]) == [
        ("a", TAB10[2], ("-", "o")),
        ("b", TAB10[5], ("-", "o")),
        ("c", TAB10[2], ("--", "o")),
    ]


def tiny_model(position: str, seed: int) -> Decoder:
    torch.manual_seed(seed)
    return Decoder(
        ModelConfig(
            vocab_size=300, d_model=32, context_length=16, n_layers=1, n_heads=2, d_ff=64, position=position
        )
    )


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
def test_the_sinusoidal_reference_is_titled_as_one(
    position: str, titles: list[str], tmp_path: Path, drawn: dict[str, Any]
) -> None:
    docs = [Document(f"d{i}", f"def f{i}(self, x):\n    return x + {i}\n") for i in range(30)]
    tokenizer = train_tokenizer(docs, 300)
    counts = analysis.token_counts(np.concatenate([tokenizer.encode(d.text) for d in docs]), 300)
    rep = analysis.analyze(tiny_model(position, 1), tiny_model(position, 2), tokenizer, counts, run="tiny")
    figures.draw_figures(rep, tmp_path)
    fig = drawn["positions.png"]
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == titles
