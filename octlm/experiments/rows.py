"""A row of an experiment's tables: a position scheme and its options, spelt
`scheme[+random][+nopeK][+ssmax][+ftF|+piF|+ntkF|+yarnF]` (`rope`, `rope+random`, `alibi+nope0`, `nope+ssmax`,
`rope+pi4`), parsed here once for the battery, the length experiment and the figures.

`+random`: randomized positions (Ruoss et al., 2023); `+nopeK`: layer K uses no position signal; `+ssmax`:
queries scaled by s log n (scalable softmax, `model.attention_scaling`). `+ftF`, `+piF`, `+ntkF`, `+yarnF`: a
RoPE model trained as `rope` is, then fine-tuned to F times its largest training size, plainly (ft) or with
RoPE's frequencies rescaled by position interpolation, NTK-aware scaling or YaRN (`model.rope_scaling`; the
battery's extension rows, Chen et al. and Peng et al., 2023).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from octlm.errors import UserError
from octlm.positions import SCHEMES

# +ftF and its kin: the `model.rope_scaling` each fine-tunes with
EXTENSIONS = {"ft": "none", "pi": "linear", "ntk": "ntk", "yarn": "yarn"}
MAX_EXTENSION = 64  # past this a factor is a typo: the test sizes multiply it again


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
    extension: str | None = None  # ft, pi, ntk or yarn: fine-tuned to `extend_factor` x (None: not)
    extend_factor: int = 1

    @property
    def rope_scaling(self) -> str:
        """The `model.rope_scaling` an extension row fine-tunes and scores with ("none" for ft and others)."""
        return EXTENSIONS[self.extension] if self.extension else "none"

    @classmethod
    def parse(cls, spec: str, n_layers: int | None = None) -> Row:
        """The row `spec` names (its NoPE layers below `n_layers` when given), or a UserError listing every
        problem."""
        spec = spelt(spec)
        scheme, *extras = spec.split("+")
        problems = [] if scheme in SCHEMES else [SCHEMES.unknown(scheme, f" in row {spec!r}")]
        layers = [int(e[4:]) for e in extras if e.startswith("nope") and e[4:].isdigit()]
        extends = [(m, int(e[len(m) :])) for e in extras if (m := _extension(e))]
        unknown = [
            e
            for e in extras
            if e not in ("random", "ssmax")
            and not (e.startswith("nope") and e[4:].isdigit())
            and not _extension(e)
        ]
        problems += [
            f"row {spec!r}: {e!r} is not random, ssmax, nopeK (K a layer index) or ftF, piF, ntkF, yarnF (F an "
            "extension factor)"
            for e in unknown
        ]
        problems += _extension_problems(spec, scheme, extends)
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
        method, factor = extends[0] if extends else (None, 1)
        return cls(
            spec, scheme, "random" in extras, tuple(sorted(set(layers))), "ssmax" in extras, method, factor
        )

    def config_fields(self) -> dict[str, Any]:
        """The config fields this row sets (`+random` is none: it is how batches are drawn)."""
        fields: dict[str, Any] = {"model.position": self.scheme}
        if self.nope_layers:
            fields["model.nope_layers"] = list(self.nope_layers)
        return fields | ({"model.attention_scaling": "ssmax"} if self.ssmax else {})


def _extension(extra: str) -> str | None:
    """The extension an extra names (`pi4` -> "pi"), or None."""
    return next((m for m in EXTENSIONS if extra.startswith(m) and extra[len(m) :].isdigit()), None)


def _extension_problems(spec: str, scheme: str, extends: list[tuple[str, int]]) -> list[str]:
    """One extension, of a RoPE row, by a factor from 2 to MAX_EXTENSION."""
    if not extends:
        return []
    problems = [] if len(extends) == 1 else [f"row {spec!r}: one of +ft, +pi, +ntk, +yarn at most"]
    if scheme != "rope":
        problems.append(
            f"row {spec!r}: +{extends[0][0]}{extends[0][1]} fine-tunes RoPE's frequencies; use rope+... "
            f"(the scheme here is {scheme})"
        )
    problems += [
        f"row {spec!r}: extension factor {f} must be from 2 to {MAX_EXTENSION}"
        for _, f in extends
        if not 2 <= f <= MAX_EXTENSION
    ]
    return problems
