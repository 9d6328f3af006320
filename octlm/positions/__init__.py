"""Position schemes: the interface every scheme implements and its registry (`scheme`), the formulas the site
mirrors (`formulas`), one module per family (`absolute`: learned, sinusoidal; `rotary`: RoPE and its variants;
`xpos`; `bias`: ALiBi, T5; `fire`; `cope`; the schemes that compute attention themselves: `forgetting` (FoX),
`householder` (PaTH), `stick_breaking`), and RoPE's context extensions (`rope_scaling`).

Importing the package registers the built-in schemes in the order tables list them, NoPE last. A scheme of
your own is a `PositionScheme` subclass decorated with `register`, imported before the model is built
(docs/ARCHITECTURE.md shows one).
May import: config and the ground modules.
"""

from octlm.config.registry import SCHEMES
from octlm.positions.scheme import (
    NoPositions,
    PositionScheme,
    build_positions,
    family_of,
    register,
    scheme_names,
    table_order,
    unbounded_schemes,
)

# Each module registers its schemes as it is imported, so this order is the order tables list them in.
from octlm.positions import absolute  # isort: skip
from octlm.positions import rotary  # isort: skip
from octlm.positions import xpos  # isort: skip
from octlm.positions import bias  # isort: skip
from octlm.positions import fire  # isort: skip
from octlm.positions import cope  # isort: skip
from octlm.positions import forgetting  # isort: skip
from octlm.positions import householder  # isort: skip
from octlm.positions import stick_breaking  # isort: skip

register(NoPositions)  # registered last: tables end with the scheme that has no position signal

__all__ = [
    "SCHEMES",
    "NoPositions",
    "PositionScheme",
    "absolute",
    "bias",
    "build_positions",
    "cope",
    "family_of",
    "fire",
    "forgetting",
    "householder",
    "register",
    "rotary",
    "scheme_names",
    "stick_breaking",
    "table_order",
    "unbounded_schemes",
    "xpos",
]
