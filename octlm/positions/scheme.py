"""Every position scheme behind one small interface.

Attention compares queries with keys and has no notion of order beyond the causal mask, so a model must be told
where each token sits. There are three places to do it, and each scheme uses at most one:

- `embed(x, positions)`: add a position vector to each token vector before the first block
  (learned table, sinusoidal formula);
- `rotate(q, k, positions)`: rotate query and key channel pairs by an angle proportional to the position,
  inside every attention layer (RoPE); values are never rotated;
- `bias(q_positions, k_positions)`: add a number to each attention score that depends on the distance
  (ALiBi's fixed slope, T5's learned buckets).

NoPE uses none of them: the causal mask is its only order information.

A fourth hook, `contextual_bias(q, k, q_positions, k_positions, layer)`, is for schemes whose bias depends
on the content as well as the positions (CoPE counts gated keys); the model calls it in every layer.

Every hook takes explicit integer positions, so decoding with a KV cache (new tokens at positions
`offset .. offset + T - 1`) goes through exactly the same code as a full forward pass.

Schemes are found by name in one registry (`register`, `scheme_class`, `scheme_names`): config validation,
model building, `octlm inspect`, the length experiment, the benchmark and the fixture export all ask it. The
classic schemes live here; the newer ones each have a module under `octlm/positions/`, and `import octlm.positions`
registers them all.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor, nn

from octlm.config.registry import SCHEMES
from octlm.errors import UserError

if TYPE_CHECKING:
    from octlm.config import ModelConfig


# ---------------------------------------------------------------------------------------------------------------
# The formulas, as plain functions (the web site's math and its fixtures mirror these)


def sinusoidal_table(length: int, width: int, base: float = 10000.0) -> Tensor:
    """The fixed sinusoidal table of Vaswani et al., `[length, width]` float32.

    Column pair i of position t holds sin and cos of t / base^(2i / width): sin in column 2i, cos in 2i + 1.
    Computed in float64 and cast once, so that large positions keep their precision.
    """
    if width % 2:
        raise UserError(f"the sinusoidal table needs an even width (sin and cos pairs), got width {width}")
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # [T, 1]
    inv_freq = base ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)  # [C/2]
    angle = position * inv_freq  # [T, C/2]
    table = torch.stack((angle.sin(), angle.cos()), dim=-1).reshape(length, width)  # interleave sin, cos
    return table.to(torch.float32)


def add_positions(token_vectors: Tensor, position_rows: Tensor) -> Tensor:
    """`[B, T, C]` token vectors plus `[T, C]` position rows, broadcast over the batch.

    This is where a mismatch in context length or width first shows, so the error names both shapes.
    """
    if token_vectors.shape[-2:] != position_rows.shape:
        raise UserError(
            f"cannot add position table of shape {list(position_rows.shape)} to token vectors of shape "
            f"{list(token_vectors.shape)}: the position table must be [T, C] = {list(token_vectors.shape[-2:])}"
        )
    return token_vectors + position_rows


def rope_frequencies(head_dim: int, base: float = 10000.0) -> Tensor:
    """RoPE's angular frequency per channel pair, θ_i = base^(-2i / head_dim), `[head_dim // 2]` float64."""
    if head_dim % 2:
        raise UserError(f"RoPE rotates channel pairs and needs an even head size, got {head_dim}")
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, layout: str = "half") -> Tensor:
    """Rotate channel pairs of `x` `[..., T, D]` by the angles whose cos/sin are `[T, D/2]`.

    A pair (a, b) becomes (a cos φ - b sin φ, a sin φ + b cos φ). The `half` layout (Llama, Hugging Face)
    pairs channel i with i + D/2; the `interleaved` layout (the RoFormer paper) pairs 2i with 2i + 1.
    """
    if layout == "half":
        a, b = x.chunk(2, dim=-1)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    if layout == "interleaved":
        pairs = x.unflatten(-1, (-1, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    raise UserError(f"unknown RoPE layout {layout!r}; choose half or interleaved")


def rope_rotate(x: Tensor, positions: Tensor, base: float = 10000.0, layout: str = "half") -> Tensor:
    """Rotate `x` `[..., T, D]` for the given positions `[T]` (uncached; for tests, fixtures and teaching)."""
    angle = positions.to(torch.float64).unsqueeze(-1) * rope_frequencies(x.shape[-1], base)  # [T, D/2]
    return apply_rope(x, angle.cos().to(x.dtype), angle.sin().to(x.dtype), layout)


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's per-head slopes (Press et al., 2022), `[H]` float32.

    For a power of two n the slopes are the geometric sequence starting at 2^(-8/n) with that same ratio, so
    8 heads get 1/2, 1/4, ..., 1/256. Otherwise the paper takes the slopes of the nearest lower power of two
    and fills the remaining heads with every other slope of the next power of two.
    """

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads < 1:
        raise UserError(f"ALiBi needs at least one head, got {n_heads}")
    lower = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(lower)
    if lower != n_heads:
        slopes += geometric(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """ALiBi's score bias with the causal mask folded in, `[H, Tq, Tk]`: -slope·(q - k), -inf where k > q.

    The -inf goes into the `[Tq, Tk]` distances (as +inf) before the slopes multiply them, so the `[H, Tq, Tk]`
    result is written in one pass: long sequences build this per query chunk in every layer (octlm/model/decoder.py).
    """
    distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(0)).to(slopes.dtype)  # [Tq, Tk]
    distance.masked_fill_(distance < 0, float("inf"))  # -slope · inf = -inf: the causal mask
    return -slopes.view(-1, 1, 1) * distance


def t5_bucket(relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's causal relative-position bucket for `relative_position` = key position - query position.

    Distances below num_buckets / 2 get a bucket each; longer ones share logarithmically wider buckets up to
    `max_distance`, beyond which everything lands in the last bucket. Keys after the query count as distance 0
    (the causal mask hides them anyway).
    """
    distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    scaled = torch.log(distance.clamp(min=1).to(torch.float32) / max_exact) / math.log(
        max_distance / max_exact
    )
    large = (max_exact + (scaled * (num_buckets - max_exact)).to(torch.long)).clamp(max=num_buckets - 1)
    return torch.where(distance < max_exact, distance, large)


def cosine_similarity_matrix(x: Tensor) -> Tensor:
    """Cosine similarity between every pair of rows of `x` `[N, C]`, `[N, N]`. A zero row has similarity 0."""
    unit = x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    return unit @ unit.T


# ---------------------------------------------------------------------------------------------------------------
# The schemes, as modules behind one interface


class PositionScheme(nn.Module):
    """The interface every scheme implements; each hook's default does nothing.

    A subclass declares what the rest of octlm needs to know of it, and `register` files it by `name`:
    `options` (the `ModelConfig` fields it reads), `bounded` (whether it has a maximum length; the instance's
    `max_length` says which), `family` (the scheme whose variant it is, grouped with it in tables), and `shows`
    (what `octlm inspect` can show of it: "vectors", "frequencies", "bias", read through `vectors`,
    `frequencies` and `bias_by_distance`). `from_config` builds it and `problems` lists what a config gets
    wrong for it, with the rest of the config's problems.
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

    def contextual_bias(self, q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor,
                        layer: int) -> Tensor | None:  # fmt: skip
        """A bias that depends on queries `[B, H, Tq, D]` and keys `[B, Hkv, Tk, D]` too: `[B, H, Tq, Tk]`
        (causal -inf included), or None. `layer` lets a scheme keep parameters per layer."""
        return None

    # What `octlm inspect` reads, for the capabilities a scheme lists in `shows` (octlm/inspect/analysis.py).

    def vectors(self, length: int) -> Tensor:
        """ "vectors": the position rows `[length, C]` that `embed` adds (what it adds to zero vectors)."""
        width = self.vector_width
        zero = torch.zeros(1, length, width, device=self.device)
        return self.embed(zero, torch.arange(length, device=self.device))[0].detach()

    def frequencies(self) -> Tensor:
        """ "frequencies": the angular frequency of each rotated channel pair, `[D/2]` float64 (0: not rotated)."""
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
    def hooks(cls) -> set[str]:
        """The hooks this scheme overrides, of embed, rotate, bias and contextual_bias."""
        names = ("embed", "rotate", "bias", "contextual_bias")
        return {name for name in names if getattr(cls, name) is not getattr(PositionScheme, name)}

    @property
    def has_bias(self) -> bool:
        """Whether the scheme overrides `bias`. The model may then ask for any rows of it (query chunks)."""
        return type(self).bias is not PositionScheme.bias

    @property
    def is_contextual(self) -> bool:
        """Whether the scheme overrides `contextual_bias` (computed in every layer, from q and k)."""
        return type(self).contextual_bias is not PositionScheme.contextual_bias


def register(cls: type[PositionScheme]) -> type[PositionScheme]:
    """Class decorator: file a `PositionScheme` subclass under its `name` in `SCHEMES`, the registry config
    validation asks (a second class of a name replaces the first, so a test or a notebook can redefine one)."""
    if not (isinstance(cls, type) and issubclass(cls, PositionScheme)):
        raise TypeError(f"register() takes a PositionScheme subclass, got {cls!r}")
    return SCHEMES.register(cls)


def scheme_names() -> tuple[str, ...]:
    """Every registered scheme's name, in registration order."""
    return tuple(SCHEMES)


def unbounded_schemes() -> tuple[str, ...]:
    """The registered schemes with no maximum length."""
    return tuple(name for name, cls in SCHEMES.items() if not cls.bounded)


def scheme_class(name: str) -> type[PositionScheme]:
    """The registered class called `name`; a UserError naming the choices otherwise."""
    return SCHEMES.choose(name)


def family_of(name: str) -> str:
    """The scheme a registered name is grouped under (itself unless it declares a `family`)."""
    return SCHEMES[name].family or name if name in SCHEMES else name


def table_order(names: list[str] | tuple[str, ...]) -> list[str]:
    """`names` in the order tables list them: registration order, each variant right after its family."""
    rank = {name: i for i, name in enumerate(SCHEMES)}
    known = [n for n in names if n in rank]
    return sorted(known, key=lambda n: (rank.get(family_of(n), rank[n]), rank[n]))


class NoPositions(PositionScheme):
    """NoPE: no position signal at all; the causal mask alone tells a token what came before it."""

    name = "nope"


def build_positions(config: ModelConfig) -> PositionScheme:
    """The registered scheme named by `config.position`, built from the config (`import octlm.positions` first,
    as octlm.model.decoder does, so that every built-in scheme is registered)."""
    return scheme_class(config.position).from_config(config)
