"""Every position scheme behind one small interface, and the registry that finds them by name.

Attention compares queries with keys and has no notion of order beyond the causal mask, so a model must be
told where each token sits. There are three places to do it, and each scheme uses at most one:

- `embed(x, positions)`: add a position vector to each token vector before the first block
  (learned table, sinusoidal formula);
- `rotate(q, k, positions)`: rotate query and key channel pairs by an angle proportional to the position,
  inside every attention layer (RoPE); values are never rotated;
- `bias(q_positions, k_positions)`: add a number to each attention score that depends on the distance
  (ALiBi's fixed slope, T5's learned buckets).

NoPE uses none of them: the causal mask is its only order information.

A fourth hook, `contextual_bias(q, k, q_positions, k_positions, layer)`, is for schemes whose bias depends
on the content as well as the positions (CoPE counts gated keys); the model calls it in every layer.

A fifth, `attend(q, k, v, call)`, is for schemes that are not a number added to a softmax's scores at all:
they read the layer's input (FoX's forget gates, PaTH's reflections) or replace the softmax itself
(stick-breaking). The model hands such a scheme the layer's queries, keys and values and an `AttentionCall`
(the input, positions, layer, the state it keeps in the KV cache) and takes back the attention's output; the
other schemes never see the hook, and their attention path is untouched.

Every hook takes explicit integer positions, so decoding with a KV cache (new tokens at positions
`offset .. offset + T - 1`) goes through exactly the same code as a full forward pass.

Schemes are found by name in one registry (`register`, `scheme_names`, `SCHEMES.choose`; the registry itself
is `octlm.config.registry.SCHEMES`, which config validation asks): model building, `octlm inspect`, the length
experiment, the benchmark and the fixture export all ask it. Each family of schemes has its module in this
package, and `import octlm.positions` registers them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor, nn

from octlm.config.registry import SCHEMES

if TYPE_CHECKING:
    from octlm.config import ModelConfig


@dataclass
class AttentionCall:
    """What a scheme that computes attention itself (`PositionScheme.attend`) gets besides q, k and v.

    `x` is the layer's normed input `[B, Tq, C]` for the new tokens (gates and reflections are read from it);
    queries sit at `q_positions` `[Tq]`, keys at `k_positions` `[Tk]` (the queries are the last Tq keys).
    `state` is this layer's dict in the KV cache, kept between calls of one cache (empty at its first call),
    or None for a pass without a cache: a scheme keeps there what it needs of the earlier tokens. When
    `record` is a list, the scheme appends the attention weights it used, `[B, H, Tq, Tk]`, rows of what
    multiplied the values (octlm/model/attention_record.py asks for them).
    """

    x: Tensor
    q_positions: Tensor
    k_positions: Tensor
    layer: int
    state: dict | None = None
    dropout: float = 0.0
    record: list[Tensor] | None = field(default=None, repr=False)


class PositionScheme(nn.Module):
    """The interface every scheme implements; each hook's default does nothing.

    A subclass declares what the rest of octlm needs to know of it, and `register` files it by `name`:
    `options` (the `ModelConfig` fields it reads), `bounded` (whether it has a maximum length; the instance's
    `max_length` says which), `family` (the scheme whose variant it is, grouped with it in tables), and
    `shows` (what `octlm inspect` can show of it: "vectors", "frequencies", "bias", read through `vectors`,
    `frequencies` and `bias_by_distance`, or "gates", a scheme's `forget_gates(x, layer)` measured on text).
    `from_config` builds it and `problems` lists what a config gets wrong for it, with the rest of the
    config's problems.
    """

    name: ClassVar[str] = "nope"
    options: ClassVar[tuple[str, ...]] = ()
    bounded: ClassVar[bool] = False
    family: ClassVar[str] = ""
    shows: ClassVar[tuple[str, ...]] = ()
    max_length: int | None = None

    @classmethod
    def from_config(cls, config: ModelConfig) -> PositionScheme:
        """The scheme a valid `config` asks for."""
        return cls()

    @classmethod
    def problems(cls, config: ModelConfig) -> list[str]:
        """What `config` gets wrong for this scheme, as readable lines (empty when nothing)."""
        return []

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Token vectors `[B, T, C]` plus position information; positions `[T]`."""
        return x

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Queries `[B, H, T, D]` and keys `[B, Hkv, T, D]` at `positions` `[T]`, rotated."""
        return q, k

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor | None:
        """Additive attention-score bias `[H, Tq, Tk]` (causal -inf included), or None."""
        return None

    def contextual_bias(
        self, q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int
    ) -> Tensor | None:
        """A bias that depends on queries `[B, H, Tq, D]` and keys `[B, Hkv, Tk, D]` too: `[B, H, Tq, Tk]`
        (causal -inf included), or None. `layer` lets a scheme keep parameters per layer."""
        return None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, call: AttentionCall) -> Tensor:
        """The attention output `[B, H, Tq, D]` of queries `[B, H, Tq, D]` over every key and value
        `[B, Hkv, Tk, D]` (cached ones first; the new tokens' are the last Tq), for a scheme that computes
        attention itself (`replaces_attention`). Keys j after a query's position stay hidden from it."""
        raise NotImplementedError(f"{self.name} does not compute attention itself")

    # What `octlm inspect` reads, for the capabilities a scheme lists in `shows` (octlm/inspect/analysis.py).

    def vectors(self, length: int) -> Tensor:
        """ "vectors": the position rows `[length, C]` that `embed` adds (what it adds to zero vectors)."""
        width = self.vector_width
        zero = torch.zeros(1, length, width, device=self.device)
        return self.embed(zero, torch.arange(length, device=self.device))[0].detach()

    def frequencies(self) -> Tensor:
        """ "frequencies": the angular frequency of each rotated channel pair, `[D/2]` float64
        (0: not rotated)."""
        raise NotImplementedError(
            f"{self.name} lists 'frequencies' in shows but does not define frequencies()"
        )

    def bias_by_distance(self, length: int) -> Tensor:
        """ "bias": the bias `[H, length]` that a query at position length - 1 adds to the key d positions
        back, d = 0 .. length - 1 (for a scheme whose bias depends on the distance alone, at any query)."""
        positions = torch.arange(length, device=self.device)
        row = self.bias(positions[-1:], positions)  # [H, 1, length]: keys 0 .. length - 1
        return row[:, 0].flip(-1).detach()  # column d: the key at distance d

    @property
    def device(self) -> torch.device:
        """Where the scheme's tensors live (the CPU for a scheme with none)."""
        tensor = next(iter(self.parameters()), None)
        tensor = tensor if tensor is not None else next(iter(self.buffers()), None)
        return tensor.device if tensor is not None else torch.device("cpu")

    vector_width: int = 0  # the model width, for `vectors` (set by schemes that embed)

    @classmethod
    def hooks(cls) -> tuple[str, ...]:
        """The hooks this scheme overrides (where it acts), in the order of the forward pass."""
        names = ("embed", "rotate", "bias", "contextual_bias", "attend")
        return tuple(name for name in names if getattr(cls, name) is not getattr(PositionScheme, name))

    @property
    def has_bias(self) -> bool:
        """Whether the scheme overrides `bias`. The model may then ask for any rows of it (query chunks)."""
        return type(self).bias is not PositionScheme.bias

    @property
    def is_contextual(self) -> bool:
        """Whether the scheme overrides `contextual_bias` (computed in every layer, from q and k)."""
        return type(self).contextual_bias is not PositionScheme.contextual_bias

    @property
    def replaces_attention(self) -> bool:
        """Whether the scheme overrides `attend`: the model calls it instead of its own softmax attention."""
        return type(self).attend is not PositionScheme.attend

    # How the scheme's cost grows with the length T, when it grows faster than softmax attention's T²
    # (`octlm model --dry-run` and docs/RESULTS.md's scheme table say so); empty for the usual T².
    cost: ClassVar[str] = ""
    # Why `octlm export onnx` cannot write the scheme, when it cannot (empty: it can).
    onnx_refusal: ClassVar[str] = ""


def register(cls: type[PositionScheme]) -> type[PositionScheme]:
    """Class decorator: file a `PositionScheme` subclass under its `name` in `SCHEMES`, the registry config
    validation asks (a second class of a name replaces the first, so a test or a notebook can redefine
    one)."""
    if not (isinstance(cls, type) and issubclass(cls, PositionScheme)):
        raise TypeError(f"register() takes a PositionScheme subclass, got {cls!r}")
    return SCHEMES.register(cls)


def scheme_names() -> tuple[str, ...]:
    """Every registered scheme's name, in registration order."""
    return tuple(SCHEMES)


def unbounded_schemes() -> tuple[str, ...]:
    """The registered schemes with no maximum length."""
    return tuple(name for name, cls in SCHEMES.items() if not cls.bounded)


def family_of(name: str) -> str:
    """The scheme a registered name is grouped under (itself unless it declares a `family`)."""
    return SCHEMES[name].family or name if name in SCHEMES else name


def table_order(names: list[str] | tuple[str, ...]) -> list[str]:
    """`names` in the order tables list them: registration order, each variant right after its family, and an
    experiment's row `scheme+option` (`rope+ssmax`) right after its scheme; unknown schemes are left out."""
    rank = {name: i for i, name in enumerate(SCHEMES)}
    known = [n for n in names if n.split("+")[0] in rank]

    def key(name: str) -> tuple:
        scheme = name.split("+")[0]
        return rank.get(family_of(scheme), rank[scheme]), rank[scheme], name != scheme, name

    return sorted(known, key=key)


class NoPositions(PositionScheme):
    """NoPE: no position signal at all; the causal mask alone tells a token what came before it."""

    name = "nope"


def build_positions(config: ModelConfig) -> PositionScheme:
    """The registered scheme named by `config.position`, built from the config (`import octlm.positions`
    first, as octlm.model.decoder does, so that every built-in scheme is registered)."""
    return SCHEMES.choose(config.position).from_config(config)
