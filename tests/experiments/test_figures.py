"""The experiments' shared styles (octlm/experiments/figures.py): a row in its scheme's colour, with its
variant's line style and marker, the same in the length experiment's figure and the task battery's.

Read back from the matplotlib artists (tests/drawn.py): `save` is wrapped to keep every figure it writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from drawn import TAB10, keeping, lines_by_label

from octlm.experiments import battery_figures, length_results
from octlm.experiments.battery import default_rows
from octlm.experiments.figures import STYLE_KEY, VARIANT_STYLES, row_style
from octlm.experiments.length import Settings
from octlm.experiments.length_results import plot, row_label, row_order
from octlm.positions import scheme_names


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return keeping(monkeypatch, length_results, battery_figures)


def test_the_legend_keys_every_panels_rows_when_the_first_panel_has_fewer(
    drawn: dict[str, Any], tmp_path: Path
) -> None:
    panels = {
        "passkey": ([32, 64], {"rope": [1.0, 0.5], "nope": [1.0, 0.9]}),
        "copy": ([8, 16], {"learned": [1.0, None], "rope": [1.0, 0.0], "nope": [0.9, 0.1]}),
    }
    battery_figures.plot_accuracy(panels, {"passkey": 32, "copy": 8}, tmp_path / "tasks.png")
    keyed = [t.get_text() for t in drawn["tasks.png"].legends[0].get_texts()]
    assert keyed == ["rope", "nope", "learned"]


def test_a_row_takes_its_schemes_colour_and_its_options_style() -> None:
    assert row_style("rope") == ("#2ca02c", ("-", "o"))
    assert row_style("rope+random") == ("#2ca02c", ("--", "s"))
    assert row_style("rope+nope0") == ("#2ca02c", ("-.", "^"))
    assert row_style("learned+nope1+random") == ("#1f77b4", (":", "v"))


def test_a_scheme_has_one_colour_in_every_panel_and_figure(tmp_path: Path, drawn: dict[str, Any]) -> None:
    settings = Settings(eval_lengths=[64, 128])
    summary = [
        {
            "scheme": s,
            "variant": v,
            "length": n,
            "mode": m,
            "bpb_mean": 1.0 + 0.01 * i,
            "bpb_std": 0.01,
            "status": "ok",
        }
        for i, (s, v) in enumerate(row_order(settings))
        for m in settings.modes
        for n in settings.eval_lengths
    ]
    assert plot(summary, settings, tmp_path / "length.png") is not None
    rows = default_rows()
    panels = {task: ([1, 2, 4], {row: [0.5, 0.4, None] for row in rows}) for task in ("copy", "sort")}
    battery_figures.plot_accuracy(panels, {"copy": 2, "sort": 2}, tmp_path / "tasks.png")
    length_fig, tasks_fig = drawn["length.png"], drawn["tasks.png"]
    assert len(length_fig.axes) == 4  # every scheme, and RoPE's variants; two window modes each

    seen: dict[str, set[str]] = {}
    label_of = {row_label(s, v, settings): (s, v) for s, v in row_order(settings)}
    for label, colour, style in lines_by_label(length_fig):
        scheme, variant = label_of[label]
        seen.setdefault(scheme.split("+")[0], set()).add(colour)  # rope+ssmax: RoPE's colour, its own style
        plain = variant in ("", "plain")
        assert style == (row_style(scheme)[1] if plain else VARIANT_STYLES[variant])
    for label, colour, _style in lines_by_label(tasks_fig):
        seen.setdefault(label.split("+")[0], set()).add(colour)
    # Pink was T5 in one panel and xPos in the other; now each scheme is one colour everywhere, its own.
    assert seen == {s: {TAB10[i]} for i, s in enumerate(scheme_names())}
    rope = {
        label_of[label][1]: style
        for label, _, style in lines_by_label(length_fig)
        if label_of[label][0] == "rope"
    }
    assert sorted(rope) == ["dynamic", "ntk", "pi", "plain", "yarn"]
    assert len(set(rope.values())) == 5  # RoPE's variants: RoPE's colour, a line style and marker each
    assert (
        all(
            ax.get_legend() is None or ax.get_legend().get_title().get_text() == STYLE_KEY
            for ax in length_fig.axes
        )
        and tasks_fig.legends[0].get_title().get_text() == STYLE_KEY
    )
