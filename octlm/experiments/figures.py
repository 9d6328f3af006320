"""The experiments' shared styles: a row's line style and marker by its variant, in its scheme's colour
(`octlm.inspect.figures.scheme_colour`), and the legends' title. Each experiment's figure is beside its
results (`length_results`, `battery_results`, `extend_results`)."""

from __future__ import annotations

from octlm.errors import UserError
from octlm.experiments.rows import Row
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
    "ft": (":", "X"),  # the battery's extension rows: +ft plain fine-tuning, +pi/+ntk/+yarn as above
}
UNKNOWN_STYLE = ("--", "x")  # options no variant style is for
STYLE_KEY = "colour: scheme; line and marker: variant"  # the legends' title


def row_style(row: str) -> tuple[str, tuple[str, str]]:
    """(colour, (line style, marker)) of a figure row (`Row`): a scheme, or a row with options
    `scheme+random`, `scheme+nopeK`. A row this process cannot parse (a plug-in scheme not imported) is black,
    dashed."""
    try:
        parsed = Row.parse(row)
    except UserError:
        return scheme_colour(""), UNKNOWN_STYLE
    on = (("random", parsed.randomized), ("nope", parsed.nope_layers), ("ssmax", parsed.ssmax))
    variant = "+".join([*(name for name, present in on if present), *filter(None, [parsed.extension])])
    return scheme_colour(parsed.scheme), VARIANT_STYLES.get(variant, UNKNOWN_STYLE)
