"""Queries scaled with the length (`model.attention_scaling`, octlm/model/decoder.py `QueryScaling`): scalable
softmax and Llama 4's temperature against a NumPy re-derivation of each paper's formula, only where each acts,
the KV cache and the lean decoding step equal to the full pass, and the config's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.interop.hf_arch import hf_architecture
from octlm.model.decode_step import DecodeStep
from octlm.model.decoder import Decoder, QueryScaling


def small(**kw) -> ModelConfig:
    base = dict(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, context_length=32, position="nope")
    return ModelConfig(**{**base, **kw})


def numpy_attention(attn: torch.nn.Module, x: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """Float64 causal softmax attention of one layer on x `[T, C]`, each query's scores times factor `[H, T]`."""
    w, b = attn.qkv.weight.detach().double().numpy(), attn.qkv.bias.detach().double().numpy()
    T, C = x.shape
    H = attn.n_heads
    D = C // H
    q, k, v = np.split(x @ w.T + b, 3, axis=1)
    out = np.zeros((T, C))
    for h in range(H):
        cols = slice(h * D, (h + 1) * D)
        for i in range(T):
            scores = np.array([factor[h, i] * q[i, cols] @ k[j, cols] / math.sqrt(D) for j in range(i + 1)])
            p = np.exp(scores - scores.max())
            out[i, cols] = (p / p.sum()) @ v[: i + 1, cols]
    pw, pb = attn.proj.weight.detach().double().numpy(), attn.proj.bias.detach().double().numpy()
    return out @ pw.T + pb


def layer_output(model: Decoder, layer: int, x: torch.Tensor) -> np.ndarray:
    """What layer `layer`'s attention makes of x `[1, T, C]` at positions 0 .. T - 1."""
    positions = torch.arange(x.shape[1])
    scheme = model.layer_scheme(layer)
    with torch.no_grad():
        return model.blocks[layer].attn(x, positions, scheme, None, True).double().numpy()[0]


def test_ssmax_scales_each_query_by_s_log_n():
    torch.manual_seed(0)
    model = Decoder(small(attention_scaling="ssmax", ssmax_init=0.43)).eval()
    s = torch.tensor([0.3, 1.7])
    model.blocks[0].attn.scaling.s.data.copy_(s)
    model.blocks[0].attn.qkv.weight.data.mul_(
        40
    )  # scores of order 1, not the initial ~0.01: a visible softmax
    x = torch.randn(1, 9, 16)
    n = np.arange(1, 10)  # query i sees i + 1 keys
    factor = s.double().numpy()[:, None] * np.log(n)[None, :]
    want = numpy_attention(model.blocks[0].attn, x[0].double().numpy(), factor)
    got = layer_output(model, 0, x)
    assert np.abs(got - want).max() < 1e-5, np.abs(got - want).max()  # float32 against float64
    unscaled = numpy_attention(model.blocks[0].attn, x[0].double().numpy(), np.ones((2, 9)))
    assert np.abs(got - unscaled).max() > 1e-3  # the scaling changed something


def test_ssmax_starts_at_the_configured_s_and_learns_it_undecayed():
    model = Decoder(small(attention_scaling="ssmax", ssmax_init=0.25))
    s = model.blocks[1].attn.scaling.s
    assert s.shape == (2,) and torch.equal(s.detach(), torch.full((2,), 0.25))
    ids = torch.randint(0, 50, (2, 12))
    model(ids, ids)[1].backward()
    assert s.grad is not None and s.grad.abs().min() > 0
    from octlm.training.optimizer import param_groups

    decayed = {id(p) for p in param_groups(model, 0.1)[0]["params"]}
    assert id(s) not in decayed


def llama4_factor(positions: np.ndarray, floor: int, tau: float) -> np.ndarray:
    """Llama 4's temperature as transformers writes it: log1p(floor((p + 1) / floor_scale)) * attn_scale + 1."""
    return np.log(np.floor((positions + 1.0) / floor) + 1.0) * tau + 1.0


def test_llama4_temperature_acts_in_nope_layers_only():
    torch.manual_seed(1)
    config = small(
        position="rope",
        attention_scaling="llama4",
        nope_layers=[1],
        attention_floor=3,
        attention_temperature=0.5,
    )
    model = Decoder(config).eval()
    model.blocks[1].attn.qkv.weight.data.mul_(40)
    x = torch.randn(1, 11, 16)
    factor = np.tile(llama4_factor(np.arange(11), 3, 0.5), (2, 1))
    assert factor[0, 1] == 1.0 and factor[0, 2] > 1.0  # 1 up to position floor - 2, then steps
    want = numpy_attention(model.blocks[1].attn, x[0].double().numpy(), factor)
    got = layer_output(model, 1, x)
    assert np.abs(got - want).max() < 1e-5
    unscaled = numpy_attention(model.blocks[1].attn, x[0].double().numpy(), np.ones((2, 11)))
    assert np.abs(got - unscaled).max() > 1e-3
    assert model.blocks[0].attn.scaling.kind == "none"  # the rope layer is left alone
    assert not list(model.blocks[0].attn.scaling.parameters())


def test_llama4_factor_is_one_below_the_floor_so_short_models_are_unchanged():
    torch.manual_seed(2)
    plain, scaled = Decoder(small()), Decoder(small(attention_scaling="llama4"))
    scaled.load_state_dict(plain.state_dict())  # no parameters of its own
    ids = torch.randint(0, 50, (1, 32))
    assert torch.equal(plain(ids)[0], scaled(ids)[0])  # positions < 8191: factor exactly 1


@pytest.mark.parametrize(
    "kw",
    [
        dict(attention_scaling="ssmax", position="rope"),
        dict(attention_scaling="ssmax", position="alibi", n_kv_heads=1),
        dict(attention_scaling="llama4", attention_floor=2, nope_layers=[0], position="rope"),
    ],
)
def test_cache_and_decode_step_equal_the_full_pass(kw):
    torch.manual_seed(3)
    model = Decoder(small(**kw)).eval()
    ids = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        full = model(ids)[0]
        cache = model.new_cache(2)
        parts = [
            model(ids[:, :6], cache=cache)[0],
            model(ids[:, 6:10], cache=cache)[0],
        ]  # a chunk after a prefill
        step = DecodeStep(model)
        parts += [step(ids[:, t], cache)[:, None] for t in range(10, 20)]
    assert (torch.cat(parts, 1) - full).abs().max() < 1e-5  # measured 7e-7


def test_config_refuses_unknown_and_idle_scalings():
    problems = small(attention_scaling="ssmx").problems()
    assert any(
        "model.attention_scaling = 'ssmx' is unknown; choose one of none, ssmax, llama4" in p
        for p in problems
    )
    idle = small(position="rope", attention_scaling="llama4").problems()
    assert len(idle) == 1 and "has none; list layers in model.nope_layers" in idle[0]
    assert small(position="nope", attention_scaling="llama4").problems() == []
    assert any("model.attention_floor = 0" in p for p in small(attention_floor=0).problems())


def test_hugging_face_export_refuses_scaled_queries():
    llama = dict(position="rope", norm="rmsnorm", mlp="swiglu", bias=False)
    assert hf_architecture(small(**llama)) == "llama"
    with pytest.raises(UserError, match=r"attention_scaling='ssmax' \(needs 'none'\)"):
        hf_architecture(small(**llama, attention_scaling="ssmax"))


def test_llama4_scales_every_layer_of_a_nope_model_and_only_the_listed_ones_otherwise():
    kinds = [b.attn.scaling.kind for b in Decoder(small(attention_scaling="llama4", n_layers=3)).blocks]
    assert kinds == ["llama4"] * 3  # position nope: every layer has no position signal
    listed = Decoder(small(position="rope", attention_scaling="llama4", n_layers=3, nope_layers=[1]))
    assert [b.attn.scaling.kind for b in listed.blocks] == ["none", "llama4", "none"]


def test_no_scaling_hands_back_the_queries_themselves():
    config = small(attention_floor=1, attention_temperature=0.5)  # the llama4 factor would be far from 1
    scaling = QueryScaling(config, 0)
    q = torch.randn(1, 2, 3, 8)
    assert scaling(q, torch.arange(3), 3) is q


@pytest.mark.parametrize("kind", ["ssmax", "llama4"])
def test_scaled_queries_keep_their_dtype_and_device(kind: str):
    scaling = QueryScaling(small(attention_scaling=kind, attention_floor=1), 0)
    q = torch.randn(2, 2, 5, 8, dtype=torch.bfloat16)
    assert scaling(q, torch.arange(5), 5).dtype == torch.bfloat16  # not promoted to the float32 factor's
    meta = scaling.to("meta")  # "meta" stands in for a GPU: every tensor the factor needs is made where q is
    out = meta(torch.empty(2, 2, 5, 8, device="meta"), torch.arange(5, device="meta"), 5)
    assert out.device.type == "meta" and out.shape == (2, 2, 5, 8)


def test_a_scheme_that_attends_itself_gets_the_layers_dropout_in_training_only(
    monkeypatch: pytest.MonkeyPatch,
):
    import octlm.model.decoder as decoder
    import octlm.positions.forgetting  # noqa: F401  (registers fox)

    seen: list[float] = []
    real = decoder.scheme_attention
    monkeypatch.setattr(
        decoder,
        "scheme_attention",
        lambda scheme, q, k, v, call: seen.append(call.dropout) or real(scheme, q, k, v, call),
    )
    model = Decoder(small(position="fox", dropout=0.25))
    ids = torch.randint(0, 50, (1, 6))
    model.train()(ids)
    model.eval()(ids)
    assert seen == [0.25, 0.25, 0.0, 0.0]  # two layers, trained then evaluated
