"""The experiments' shared styles: a row's line style and marker by its variant, in its scheme's colour
(`octlm.inspect.figures.scheme_colour`), and the legends' title. Each experiment's figure is beside its
results (`length_results`, `battery_results`, `extend_results`)."""

from __future__ import annotations

from octlm.inspect.figures import scheme_colour

# How a variant of a scheme is drawn: in its scheme's colour, with a (line style, marker) of its own. RoPE's
# inference-time extensions (octlm.positions.rope_scaling.VARIANTS) and the battery's row options (+random,
# +nopeK); "" and "plain" are the scheme as trained.
VARIANT_STYLES: dict[str, tuple[str, str]] = {
    "": ("-", "o"),
    "plain": ("-", "o"),
    "pi": ("--", "s"),
    "ntk": ("-.", "^"),
    "dynamic": (":", "v"),
    "yarn": ("--", "D"),
    "random": ("--", "s"),
    "nope": ("-.", "^"),
    "random+nope": (":", "v"),
    "ssmax": (":", "P"),
}
STYLE_KEY = "colour: scheme; line and marker: variant"  # the legends' title


def row_style(row: str) -> tuple[str, tuple[str, str]]:
    """(colour, (line style, marker)) of a figure row: a scheme, or a battery row `scheme+random`,
    `scheme+nopeK`."""
    scheme, *extras = row.split("+")
    kinds = ["nope" if e.startswith("nope") else e for e in extras]
    return scheme_colour(scheme), VARIANT_STYLES.get("+".join(sorted(kinds, reverse=True)), ("--", "x"))
