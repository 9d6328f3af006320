"""Every built-in position scheme, registered in the order tables list them.

Importing this package fills `octlm.positions.scheme.SCHEMES`. A scheme of your own needs no change here: subclass
`PositionScheme`, decorate it with `@register`, and import its module before building a model
(docs/ARCHITECTURE.md shows one).
"""

from octlm.positions.scheme import NoPositions, build_positions, register, scheme_class, scheme_names

# Each module registers its schemes as it is imported, so this order is the order tables list them in.
from octlm.positions import absolute  # isort: skip
from octlm.positions import rotary  # isort: skip
from octlm.positions import xpos  # isort: skip
from octlm.positions import bias  # isort: skip
from octlm.positions import fire  # isort: skip
from octlm.positions import cope  # isort: skip

register(NoPositions)  # registered last: tables end with the scheme that has no position signal

__all__ = [
    "absolute",
    "bias",
    "build_positions",
    "cope",
    "fire",
    "register",
    "rotary",
    "scheme_class",
    "scheme_names",
    "xpos",
]
