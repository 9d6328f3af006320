"""The scheme interface and its registry (octlm/positions/scheme.py): the registry's edges, the interface's
defaults and the device and dtype the hooks get, and `build_positions` passing every setting through. A scheme
defined outside the package, end to end, is tests/positions/test_scheme_plugin.py."""

from __future__ import annotations

import pytest
import torch
from tiny import forget_scheme
from torch import Tensor

from octlm.config import ModelConfig
from octlm.model.decoder import ChunkedBias, ContextualBias
from octlm.positions import NoPositions, PositionScheme, build_positions, family_of, register, table_order
from octlm.positions import scheme as positions
from octlm.positions.absolute import LearnedPositions, SinusoidalPositions
from octlm.positions.bias import AlibiPositions, T5Positions
from octlm.positions.rotary import RotaryPositions
from octlm.positions.scheme import AttentionCall

F64 = torch.float64


@pytest.mark.parametrize(
    ("position", "cls"),
    [
        ("learned", LearnedPositions),
        ("sinusoidal", SinusoidalPositions),
        ("rope", RotaryPositions),
        ("alibi", AlibiPositions),
        ("t5", T5Positions),
        ("nope", NoPositions),
    ],
    # ------------------------------------------------------------------------------------------------------------
    # build_positions
)
def test_build_positions_passes_every_setting_through(position, cls):
    config = ModelConfig(
        d_model=12,
        n_heads=3,
        context_length=20,
        position=position,
        rope_base=50.0,
        rope_layout="interleaved",
        sinusoidal_base=30.0,
        sinusoidal_scale=0.25,
        t5_buckets=8,
        t5_max_distance=40,
    )
    scheme = build_positions(config)
    assert type(scheme) is cls and scheme.name == position
    if position == "learned":
        assert scheme.max_length == 20 and tuple(scheme.table.weight.shape) == (20, 12)
    if position == "sinusoidal":
        assert (scheme.width, scheme.base, scheme.scale, scheme.table.shape[0]) == (12, 30.0, 0.25, 20)
    if position == "rope":  # head size 4: θ = (1, 50^-1/2)
        assert scheme.layout == "interleaved" and scheme.cos.shape == (20, 2)
        torch.testing.assert_close(scheme.inv_freq, torch.tensor([1.0, 50**-0.5], dtype=F64))
    if position == "alibi":
        assert scheme.slopes.shape == (3,)
    if position == "t5":
        assert (scheme.num_buckets, scheme.max_distance, tuple(scheme.table.weight.shape)) == (8, 40, (8, 3))
    if position != "learned":
        assert scheme.max_length is None


def test_build_positions_names_an_unknown_scheme():
    from octlm.errors import UserError

    with pytest.raises(
        UserError, match="^unknown position scheme 'bogus'; choose one of learned, sinusoidal, rope, "
    ):
        build_positions(ModelConfig(position="bogus"))


# ------------------------------------------------------------------------------------------------------------
# The registry and the interface's defaults


@pytest.mark.parametrize("thing, shown", [(int, "<class 'int'>"), (3, "3")])
def test_register_refuses_what_is_not_a_scheme_class(thing: object, shown: str) -> None:
    with pytest.raises(TypeError, match=rf"^register\(\) takes a PositionScheme subclass, got {shown}$"):
        register(thing)  # type: ignore[arg-type]
    assert "int" not in positions.SCHEMES


def test_family_of_an_unknown_name_is_the_name() -> None:
    assert family_of("no-such-scheme") == "no-such-scheme"
    assert family_of("xpos") == "rope"
    assert family_of("alibi") == "alibi"


class _Orphan(PositionScheme):
    """A variant of a family that is not registered: tables list it in its own registration place."""

    name = "orphan-test"
    family = "no-such-family"


def test_table_order_places_a_variant_of_an_unregistered_family_by_its_own_rank() -> None:
    register(_Orphan)
    try:
        names = list(positions.SCHEMES)
        assert names[-1] == "orphan-test"
        assert table_order(["orphan-test", "xpos", "nope", "rope", "unknown"]) == [
            "rope",
            "xpos",
            "nope",
            "orphan-test",
        ]
    finally:
        forget_scheme("orphan-test")


class _Spy(PositionScheme):
    """Records what the interface's defaults hand to its hooks; its one buffer says where it lives."""

    name = "spy-test"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.register_buffer("anchor", torch.zeros(1, device=device), persistent=False)
        self.vector_width, self.seen = 3, []

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        self.seen.append((tuple(x.shape), x.device.type, positions.device.type))
        return x + 1.0

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        self.seen.append((q_positions.device.type, k_positions.device.type, k_positions.shape[0]))
        return torch.zeros(2, q_positions.shape[0], k_positions.shape[0], device=q_positions.device)

    def contextual_bias(self, q, k, q_positions, k_positions, layer):  # noqa: ANN001, ANN201
        self.seen.append(
            (tuple(q.shape), tuple(k.shape), q_positions.device.type, k_positions.device.type, layer)
        )
        return torch.zeros(
            q.shape[0], q.shape[1], q.shape[2], k.shape[2], dtype=torch.float32, device=q.device
        )


def test_vectors_embed_one_row_of_zeros_on_the_schemes_device() -> None:
    spy = _Spy("meta")
    rows = spy.vectors(5)
    assert rows.shape == (5, 3) and rows.device.type == "meta"
    assert spy.seen == [((1, 5, 3), "meta", "meta")]  # one [1, T, C] batch of zeros, positions beside it


def test_vectors_of_a_learned_table_on_meta_stay_on_meta() -> None:
    assert LearnedPositions(8, 6).to("meta").vectors(4).device.type == "meta"


def test_bias_by_distance_builds_positions_on_the_schemes_device() -> None:
    # ALiBi's slopes on "meta" meet the distances: CPU positions there fail ("not on the expected device").
    row = AlibiPositions(4).to("meta").bias_by_distance(5)
    assert row.shape == (4, 5) and row.device.type == "meta"


def test_chunked_bias_rows_are_in_its_dtype_and_on_the_queries_device() -> None:
    spy = _Spy("meta")
    bias, end = ChunkedBias(
        spy, torch.arange(3, 6, device="meta"), torch.arange(6, device="meta"), torch.float64
    ).rows(1, 2)
    assert (bias.dtype, bias.device.type, bias.shape, end) == (torch.float64, "meta", (2, 1, 5), 5)
    assert spy.seen == [("meta", "meta", 5)]  # keys 0 .. 4: the query at position 4 and those before it


def test_contextual_bias_rows_are_in_the_query_dtype_and_device() -> None:
    spy = _Spy()
    q, k = torch.zeros(2, 4, 3, 8, dtype=torch.float64), torch.zeros(2, 2, 5, 8, dtype=torch.float64)
    bias, end = ContextualBias(spy, q, k, torch.arange(2, 5), torch.arange(5), layer=1).rows(1, 3)
    assert (bias.dtype, bias.shape, end) == (torch.float64, (2, 4, 2, 5), 5)  # the spy returned float32
    assert spy.seen == [((2, 4, 2, 8), (2, 2, 5, 8), "cpu", "cpu", 1)]
    meta = _Spy("meta")
    q, k = q.to("meta"), k.to("meta")
    bias, end = ContextualBias(
        meta, q, k, torch.arange(2, 5, device="meta"), torch.arange(5, device="meta"), layer=0
    ).rows(0, 1)
    assert (bias.device.type, end) == ("meta", 3)
    assert meta.seen == [((2, 4, 1, 8), (2, 2, 3, 8), "meta", "meta", 0)]


def test_a_scheme_that_shows_frequencies_without_defining_them_says_so() -> None:
    """The interface's default names the class and the missing method (an empty NotImplementedError would not)."""

    class Bare(PositionScheme):
        name, shows = "bare-test", ("frequencies",)

    with pytest.raises(NotImplementedError) as raised:
        Bare().frequencies()
    assert str(raised.value) == "bare-test lists 'frequencies' in shows but does not define frequencies()"


def test_a_scheme_that_does_not_compute_attention_itself_says_so() -> None:
    """`attend`'s default names the scheme (the model calls `attend` only for a scheme that overrides it)."""

    class Plain(PositionScheme):
        name = "plain-test"

    q, x, positions = torch.zeros(1, 2, 3, 4), torch.zeros(1, 3, 8), torch.arange(3)
    assert not Plain().replaces_attention
    with pytest.raises(NotImplementedError) as raised:
        Plain().attend(q, q, q, AttentionCall(x, positions, positions, 0))
    assert str(raised.value) == "plain-test does not compute attention itself"
