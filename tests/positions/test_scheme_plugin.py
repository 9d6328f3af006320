"""The position-scheme registry: a scheme defined only in this file trains, decodes with a KV cache exactly as a
full pass, and appears in `octlm experiment length --quick` without any change under octlm/; every built-in
scheme's declarations are consistent; and `model.nope_layers` turns the scheme off in the layers it names."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiny
import torch
from tiny import forget_scheme
from torch import Tensor

import octlm.model.decoder
from octlm.cli import main
from octlm.config import ModelConfig, config_from_dict, load_config
from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.positions import PositionScheme, register, scheme_names, table_order, unbounded_schemes
from octlm.positions import scheme as positions


class FixedLinearBias(PositionScheme):
    """The test's own scheme: every head subtracts 0.3 x distance (one slope, unlike ALiBi's per-head ones)."""

    name = "linear-test"
    shows = ("bias",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> FixedLinearBias:
        return cls(config.n_heads)

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads

    def bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(0)).float()  # [Tq, Tk]
        bias = torch.where(distance < 0, -math.inf, -0.3 * distance)
        return bias.expand(self.n_heads, *bias.shape)


@pytest.fixture
def linear_scheme() -> Iterator[type[PositionScheme]]:
    """FixedLinearBias registered for one test, and unregistered after it."""
    register(FixedLinearBias)
    try:
        yield FixedLinearBias
    finally:
        forget_scheme(FixedLinearBias.name)


def small(position: str, **fields) -> ModelConfig:
    return ModelConfig(
        **dict(vocab_size=64, d_model=32, context_length=8, n_layers=2, n_heads=4, d_ff=64, position=position)
        | fields
    )


def full_and_cached(model: Decoder, ids: Tensor, prompt: int = 5) -> tuple[Tensor, Tensor]:
    """Logits of one full pass, and of a prompt then one token at a time through the KV cache."""
    with torch.no_grad():
        full, _ = model(ids)
        cache = model.new_cache(ids.shape[0], 4)  # small, so that it has to grow
        parts = [model(ids[:, :prompt], cache=cache)[0]]
        parts += [model(ids[:, t : t + 1], cache=cache)[0] for t in range(prompt, ids.shape[1])]
    return full, torch.cat(parts, dim=1)


def test_a_scheme_from_outside_the_package_is_known_everywhere(linear_scheme) -> None:
    assert "linear-test" in scheme_names() and "linear-test" in unbounded_schemes()
    assert config_from_dict({"model": {"position": "linear-test"}}).model.position == "linear-test"
    model = Decoder(small("linear-test"))
    scores = model.positions.bias_by_distance(5)  # inspect's view: [H, distance]
    assert torch.equal(scores, (-0.3 * torch.arange(5.0)).expand(4, 5))  # d = 0 .. 4 back from position 4
    ids = torch.randint(0, 64, (2, 19), generator=torch.Generator().manual_seed(3))
    full, cached = full_and_cached(model, ids)
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)  # measured 1.9e-6 (different matmul shapes)
    # Past WHOLE_BIAS_PAIRS the model builds the bias per query chunk, through the same `bias` hook.
    original = octlm.model.decoder.WHOLE_BIAS_PAIRS
    try:
        octlm.model.decoder.WHOLE_BIAS_PAIRS = 16
        chunked, _ = model(ids)
    finally:
        octlm.model.decoder.WHOLE_BIAS_PAIRS = original
    torch.testing.assert_close(chunked, full.detach(), rtol=0, atol=1e-5)


def test_an_unregistered_scheme_is_refused_with_the_choices() -> None:
    with pytest.raises(UserError) as info:
        config_from_dict({"model": {"position": "linear-test"}})
    assert "model.position = 'linear-test' is unknown; choose one of learned, sinusoidal, rope" in str(
        info.value
    )


@pytest.mark.slow
def test_a_scheme_from_outside_trains_and_joins_the_length_experiment(linear_scheme, tmp_path: Path) -> None:
    corpus = tiny.write_corpus(tmp_path / "text", files=8, lines=80, per_line=10)
    out = tmp_path / "out"
    argv = [
        "experiment",
        "length",
        "--quick",
        "--text",
        str(corpus),
        "--data-dir",
        str(tmp_path / "data"),
        "--out",
        str(out),
        "--schemes",
        "linear-test",
        "alibi",
        "--seeds",
        "1",
        "--jobs",
        "1",
        "--no-progress",
    ]
    assert main(argv) == 0  # one worker: the scheme lives in this process (a spawned worker would not see it)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ours = [r for r in records if r["scheme"] == "linear-test"]
    assert ours and all(r["status"] == "ok" and 0 < r["bpb"] < 10 for r in ours)
    assert {r["length"] for r in ours} == {16, 32, 64}  # past the training length: the bias has no maximum
    table = (out / "results.md").read_text()
    assert "| linear-test |" in table and "| alibi |" in table
    metrics = [json.loads(x) for x in (out / "runs" / "linear-test-seed1337" / "metrics.jsonl").open()]
    # It trained: the last validation loss is below the mean training loss of all 15 steps, which includes the
    # untrained start (measured 5.48 against 6.10 nats/token).
    assert metrics[-1]["val_loss"] < metrics[-1]["train_loss"] - 0.3


def test_every_built_in_scheme_declares_what_the_rest_of_octlm_reads() -> None:
    fields = set(ModelConfig.__dataclass_fields__)
    for name in scheme_names():
        cls = positions.SCHEMES.choose(name)
        assert cls.name == name
        assert set(cls.options) <= fields, f"{name} reads options that ModelConfig lacks"
        assert set(cls.shows) <= {"vectors", "frequencies", "bias", "gates"}
        assert ("gates" in cls.shows) == hasattr(cls, "forget_gates")
        assert not cls.family or cls.family in scheme_names()
        scheme = Decoder(small(name)).positions
        assert (scheme.max_length is not None) == cls.bounded
        if "frequencies" in cls.shows:
            assert scheme.frequencies().dtype == torch.float64
        if "vectors" in cls.shows:
            assert scheme.vectors(6).shape[0] == 6
        if "bias" in cls.shows:
            assert scheme.bias_by_distance(6).shape == (4, 6)
    classic = [n for n in scheme_names() if n in ("learned", "sinusoidal", "rope", "alibi", "t5", "nope")]
    assert (
        classic == ["learned", "sinusoidal", "rope", "alibi", "t5", "nope"] and scheme_names()[-1] == "nope"
    )
    assert unbounded_schemes() == tuple(n for n in scheme_names() if n != "learned")


def test_table_order_puts_each_variant_after_its_family(linear_scheme) -> None:
    class Variant(PositionScheme):
        name, family = "alibi-variant-test", "alibi"

    register(Variant)
    try:
        order = table_order(["nope", "alibi-variant-test", "linear-test", "learned", "alibi", "unknown"])
        assert order == ["learned", "alibi", "alibi-variant-test", "nope", "linear-test"]
    finally:
        forget_scheme("alibi-variant-test")


# ------------------------------------------------------------------------------------------------------------
# model.nope_layers


@pytest.mark.parametrize("position", ["rope", "alibi", "t5"])
def test_nope_in_every_layer_is_nope(position: str) -> None:
    """The same weights with every layer listed give exactly the logits of position = "nope"."""
    ids = torch.randint(0, 64, (2, 11), generator=torch.Generator().manual_seed(4))
    torch.manual_seed(0)
    listed = Decoder(small(position, nope_layers=[1, 0]))
    with torch.no_grad():  # O(1) weights (the 0.02 initialisation leaves a scheme's effect near 1e-4)
        for p in listed.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
    plain = Decoder(small("nope"))
    plain.load_state_dict(listed.state_dict(), strict=False)  # T5's table has nowhere to go in NoPE
    with torch.no_grad():
        assert torch.equal(listed(ids)[0], plain(ids)[0])
        one = Decoder(small(position, nope_layers=[1]))
        one.load_state_dict(listed.state_dict())
        assert (one(ids)[0] - plain(ids)[0]).abs().max() > 1e-3  # layer 0 still uses the scheme


@pytest.mark.parametrize(("position", "layers"), [("rope", [1]), ("alibi", [0]), ("t5", [0, 2])])
def test_nope_layers_decode_with_the_cache_as_a_full_pass(position: str, layers: list[int]) -> None:
    model = Decoder(small(position, n_layers=3, nope_layers=layers))
    ids = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(6))
    full, cached = full_and_cached(model, ids)
    torch.testing.assert_close(cached, full, rtol=0, atol=1e-5)
    assert [model.layer_scheme(i).name for i in range(3)] == [
        "nope" if i in layers else position for i in range(3)
    ]


def test_nope_layers_from_the_command_line_and_toml(tmp_path: Path) -> None:
    from argparse import ArgumentParser

    from octlm.commands.options import add_config_arguments, config_from_args

    parser = ArgumentParser()
    add_config_arguments(parser)
    for argv in (
        ["--nope-layers", "1", "0"],
        ["--set", "model.nope_layers=[1,0]"],
        ["--set", "model.nope_layers=1,0"],
    ):
        args = parser.parse_args(["--position", "rope", *argv])
        assert config_from_args(args).model.nope_layers == [1, 0]
    path = tmp_path / "c.toml"
    path.write_text('[model]\nposition = "rope"\nn_layers = 4\nnope_layers = [3]\n')
    assert load_config(path).model.nope_layers == [3]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"position": "rope", "nope_layers": [2]}, "model.nope_layers = [2] names layers [2] outside 0 .. 1"),
        ({"position": "rope", "nope_layers": [-1]}, "names layers [-1] outside 0 .. 1"),
        ({"position": "rope", "nope_layers": [1, 1]}, "model.nope_layers = [1, 1] names a layer twice"),
        ({"position": "learned", "nope_layers": [0]}, "needs a scheme that acts inside attention"),
        ({"position": "rope", "nope_layers": ["1"]}, "must be a list of whole numbers, e.g. [3, 7]"),
        ({"position": "rope", "nope_layers": 1}, "must be a list of whole numbers"),
        ({"position": "rope", "nope_layers": [True]}, "must be a list of whole numbers"),
    ],
)
def test_bad_nope_layers_are_one_line_each(fields: dict, message: str) -> None:
    with pytest.raises(UserError) as info:
        config_from_dict({"model": {"n_layers": 2, **fields}})
    assert message in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------------------------
# octlm inspect reads what a registered scheme `shows`


class HalfTurns(PositionScheme):
    """A test scheme that shows frequencies: pair i of 4 turns at 1/2^i radians per position, pair 3 not at all."""

    name, shows = "half-turns-test", ("frequencies",)

    def frequencies(self) -> Tensor:
        return torch.tensor([1.0, 0.5, 0.25, 0.0], dtype=torch.float64)


class OwnTable(PositionScheme):
    """A test scheme that shows vectors: a learned table of its own, added like GPT-2's."""

    name, shows = "own-table-test", ("vectors",)

    @classmethod
    def from_config(cls, config: ModelConfig) -> OwnTable:
        return cls(config.context_length, config.d_model)

    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.table, self.vector_width = torch.nn.Embedding(rows, width), width

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(positions)


@pytest.mark.parametrize("cls", [FixedLinearBias, HalfTurns, OwnTable], ids=lambda c: c.name)
def test_inspect_shows_what_a_registered_scheme_declares(cls, tmp_path: Path) -> None:
    from octlm.inspect import analysis, figures, report
    from octlm.inspect.render import render_markdown

    register(cls)
    try:
        torch.manual_seed(1)
        trained, initial = Decoder(small(cls.name)), Decoder(small(cls.name))
        rep = analysis.analyze(trained, initial, None, None)
        section = rep["positions"]
    finally:
        forget_scheme(cls.name)
    assert section["summary"].startswith(cls.__doc__.split(":")[0])  # its class's own words first
    if cls is FixedLinearBias:
        assert section["bias"]["bias_at_distance"][4].tolist() == pytest.approx([-1.2] * 4, abs=1e-6)
        assert "-2.100 to 0.000, fixed" in section["summary"]  # distances 0 .. 7 at 0.3 each; nothing learned
    if cls is HalfTurns:
        f = section["frequencies"]
        assert f["wavelength"].tolist()[:3] == pytest.approx([2 * math.pi, 4 * math.pi, 8 * math.pi])
        assert f["wavelength"][3] == math.inf and "3 of its 4 channel pairs rotate" in section["summary"]
    if cls is OwnTable:
        assert section["has_vectors"] and section["trained"]["similarity"].shape == (8, 8)
        assert section["trained"]["similarity"][2, 2] == pytest.approx(1.0)
        assert not (section["trained"]["similarity"] == section["untrained"]["similarity"]).all()
    drawn = figures.plot_scheme(section, tmp_path / "scheme.png")
    assert (drawn is not None) == (cls is not OwnTable) and (drawn is None or drawn.stat().st_size > 1000)
    pictures = {name: tmp_path / f"{name}.png" for name in ("positions", "tokens_pca", "norms")}
    text = render_markdown(report.report_blocks(rep, pictures), tmp_path)
    assert ("| pair i |" in text) == (cls is HalfTurns) and ("| head | d = 1 |" in text) == (
        cls is FixedLinearBias
    )
    assert ("Nearest positions, untrained" in text) == (cls is OwnTable)
