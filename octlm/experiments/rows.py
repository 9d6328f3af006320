"""A row of an experiment's tables: a position scheme and its options, spelt `scheme[+random][+nopeK][+ssmax]`
(`rope`, `rope+random`, `alibi+nope0`, `nope+ssmax`), parsed here once for the battery, the length experiment
and the figures.

`+random`: randomized positions (Ruoss et al., 2023); `+nopeK`: layer K uses no position signal; `+ssmax`:
queries scaled by s log n (scalable softmax, `model.attention_scaling`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from octlm.errors import UserError
from octlm.positions import SCHEMES


def spelt(spec: str) -> str:
    """A row with its scheme as registered, given in any case: `ROPE+ssmax` -> `rope+ssmax`."""
    scheme, plus, extras = spec.partition("+")
    return SCHEMES.canonical(scheme) + plus + extras


@dataclass(frozen=True)
class Row:
    """A row of an experiment's tables: a scheme, whether its positions are randomized, which layers use none,
    whether its queries are scaled by s log n (scalable softmax, `model.attention_scaling`)."""

    spec: str
    scheme: str
    randomized: bool
    nope_layers: tuple[int, ...]
    ssmax: bool = False

    @classmethod
    def parse(cls, spec: str, n_layers: int | None = None) -> Row:
        """The row `spec` names (its NoPE layers below `n_layers` when given), or a UserError listing every
        problem."""
        spec = spelt(spec)
        scheme, *extras = spec.split("+")
        problems = [] if scheme in SCHEMES else [SCHEMES.unknown(scheme, f" in row {spec!r}")]
        layers = [int(e[4:]) for e in extras if e.startswith("nope") and e[4:].isdigit()]
        unknown = [
            e
            for e in extras
            if e not in ("random", "ssmax") and not (e.startswith("nope") and e[4:].isdigit())
        ]
        problems += [f"row {spec!r}: {e!r} is not random, ssmax or nopeK (K a layer index)" for e in unknown]
        problems += [
            f"row {spec!r}: layer {k} is not one of 0 .. {n_layers - 1}"
            for k in layers
            if n_layers is not None and k >= n_layers
        ]
        if (
            "random" in extras
            and scheme in SCHEMES
            and not set(SCHEMES[scheme].hooks()) - {"contextual_bias", "attend"}
        ):
            problems.append(
                f"row {spec!r}: {scheme} reads no position ids (only their order), so randomizing "
                "them changes nothing; drop +random"
            )
        if problems:
            raise UserError("; ".join(problems))
        return cls(spec, scheme, "random" in extras, tuple(sorted(set(layers))), "ssmax" in extras)

    def config_fields(self) -> dict[str, Any]:
        """The config fields this row sets (`+random` is none: it is how batches are drawn)."""
        fields: dict[str, Any] = {"model.position": self.scheme}
        if self.nope_layers:
            fields["model.nope_layers"] = list(self.nope_layers)
        return fields | ({"model.attention_scaling": "ssmax"} if self.ssmax else {})
