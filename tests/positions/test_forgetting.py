"""FoX, forgetting attention (octlm/positions/forgetting.py), against references that do not share its code: a
NumPy float64 loop over every query, key and gate written from the paper's formula, x-transformers'
`DataDependentAlibi`, NoPE's attention when every gate is 1, hand-made gates with exact values; then through the
decoder: KV-cache decoding, the per-chunk path, grouped KV heads, recording, training.

Tolerances: float32 results at 1e-5 absolute unless a comment says otherwise, with the measured error beside.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from decoders import small
from tiny import LargestTensor, memorise
from torch import Tensor

import octlm.positions.forgetting
from octlm.model.attention_record import recording_attention
from octlm.model.decoder import Decoder
from octlm.positions import SCHEMES
from octlm.positions.forgetting import ForgettingPositions, decay_bias, forgetting_attention
from octlm.positions.scheme import AttentionCall

B, H, D, C = 2, 4, 8, 16


def randn(*shape: int, seed: int, scale: float = 1.0) -> Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def inputs(T: int, kv_heads: int, seed: int, batch: int = B) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Random q `[batch, H, T, D]`, k and v `[batch, kv_heads, T, D]` and layer inputs x `[batch, T, C]`."""
    q, k, v = (randn(batch, h, T, D, seed=seed + i) for i, h in enumerate((H, kv_heads, kv_heads)))
    return q, k, v, randn(batch, T, C, seed=seed + 3)


def scheme_with(weight: Tensor, bias: Tensor, n_layers: int = 1) -> ForgettingPositions:
    """A FoX scheme whose every layer's gate has `weight` `[H, C]` and `bias` `[H]`."""
    scheme = ForgettingPositions(weight.shape[1], n_layers, weight.shape[0]).to(weight.dtype)
    with torch.no_grad():
        for gate in scheme.gates:
            gate.weight.copy_(weight)
            gate.bias.copy_(bias)
    return scheme


def call(x: Tensor, keys: int, state: dict | None = None, **fields) -> AttentionCall:
    """The call for the last x.shape[1] of `keys` tokens at positions 0 .. keys - 1, layer 0."""
    positions = torch.arange(keys)
    return AttentionCall(x, positions[keys - x.shape[1] :], positions, 0, state, **fields)


def np_log_sigmoid(z: float) -> float:
    return -math.log1p(math.exp(-z)) if z >= 0 else z - math.log1p(math.exp(z))


def np_forgetting_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, x: np.ndarray, w: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """The paper's formula one query at a time, float64: queries q `[B, H, Tq, D]` are the last Tq of the keys
    k, v `[B, Hkv, Tk, D]`, whose tokens' inputs are x `[B, Tk, C]`. Query i (token past + i) scores key
    j <= past + i with q·k/sqrt(D) + Σ_{t=j+1}^{past+i} log σ(w_h · x_t + b_h), softmax over those keys."""
    nb, nh, tq, d = q.shape
    tk, group = k.shape[2], nh // k.shape[1]
    out = np.zeros(q.shape)
    for bi in range(nb):
        for h in range(nh):
            kh = h // group
            for i in range(tq):
                token = tk - tq + i
                logits = []
                for j in range(token + 1):
                    logit = float(q[bi, h, i] @ k[bi, kh, j]) / math.sqrt(d)
                    for t in range(j + 1, token + 1):
                        logit += np_log_sigmoid(float(w[h] @ x[bi, t] + b[h]))
                    logits.append(logit)
                p = np.exp(np.array(logits) - max(logits))
                p /= p.sum()
                out[bi, h, i] = sum(p[j] * v[bi, kh, j] for j in range(token + 1))
    return out


def spread_gates() -> tuple[Tensor, Tensor]:
    """Gate weights `[H, C]` and biases `[H]` whose gates range from nearly 0 to nearly 1 on N(0, 1) inputs."""
    return randn(H, C, seed=20, scale=0.5), torch.tensor([-1.0, 0.5, 2.0, 4.0])


# ------------------------------------------------------------------------------------------------------------
# attend against independent references


@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_attend_matches_a_numpy_loop_over_every_gate(kv_heads: int) -> None:
    T = 10
    q, k, v, x = inputs(T, kv_heads, seed=1)
    w, b = spread_gates()
    scheme = scheme_with(w, b)
    gates = scheme.forget_gates(x, 0).exp()
    assert gates.min() < 0.05 and gates.max() > 0.99  # forgetting and remembering heads both exercised
    out = scheme.attend(q, k, v, call(x, T)).detach()
    expected = np_forgetting_attention(*(t.double().numpy() for t in (q, k, v, x, w, b)))
    assert out.shape == (B, H, T, D) and out.dtype == torch.float32
    # float32 against float64, outputs O(1): measured 2.6e-7 to 6.2e-7.
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-5)


def test_forgetting_attention_alone_has_no_dropout_and_groups_as_many_keys_as_heads() -> None:
    """The chunked function called without `dropout` (none by default), with 2 KV heads for 4 query heads over
    4 keys: as many keys as heads, the edge where a key count could pass for a head count."""
    T = H
    q, k, v, x = inputs(T, 2, seed=30)
    w, b = spread_gates()
    scheme = scheme_with(w, b)
    c, positions = scheme.running_sums(x, 0, None, T), torch.arange(T)
    out = forgetting_attention(q, k, v, c, positions, positions).detach()
    expected = np_forgetting_attention(*(t.double().numpy() for t in (q, k, v, x, w, b)))
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-5)  # measured 1.8e-7


def test_a_second_call_continues_the_running_sums_of_the_first() -> None:
    """Two calls with one state (a cache): the new queries see the cached keys decayed by the cached gates."""
    T, P = 11, 6
    q, k, v, x = inputs(T, 2, seed=5)
    w, b = spread_gates()
    scheme, state = scheme_with(w, b), {}
    first = scheme.attend(q[:, :, :P], k[:, :, :P], v[:, :, :P], call(x[:, :P], P, state))
    assert state["log_forget"].shape == (B, H, P) and state["log_forget"].dtype == torch.float64
    second = scheme.attend(q[:, :, P:], k, v, call(x[:, P:], T, state)).detach()
    assert state["log_forget"].shape == (B, H, T)
    expected = np_forgetting_attention(*(t.double().numpy() for t in (q[:, :, P:], k, v, x, w, b)))
    np.testing.assert_allclose(second.numpy(), expected, rtol=0, atol=1e-5)  # measured 1.7e-7
    whole = scheme.attend(q, k, v, call(x, T)).detach()
    parts = torch.cat([first.detach(), second], 2)
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-6)  # measured 2.4e-7
    with pytest.raises(ValueError, match="6 kept, 1 new tokens, but 12 keys"):
        scheme.attend(
            q[:, :, :1],
            k[:, :, :1].repeat(1, 1, 12, 1),
            v[:, :, :1].repeat(1, 1, 12, 1),
            call(x[:, :1], 12, {"log_forget": state["log_forget"][..., :6]}),
        )


def test_bias_and_gradients_match_x_transformers_data_dependent_alibi() -> None:
    """x-transformers' `DataDependentAlibi` (FoX's bias, cited to the paper) computes c_i - c_j from the same
    linear gate: the visible part of its bias, and the gradients of the gate and the input through it."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    T = 17
    x = randn(B, T, C, seed=9).requires_grad_()
    w, b = spread_gates()
    ours = scheme_with(w, b)
    theirs = xt.DataDependentAlibi(C, H)
    with torch.no_grad():
        theirs.to_forget_gates[0].weight.copy_(w)
        theirs.to_forget_gates[0].bias.copy_(b)
    positions = torch.arange(T)
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    c = ours.running_sums(x, 0, None, T)
    bias = decay_bias(c, c, positions, positions, torch.float32)
    assert torch.isneginf(bias[..., ~visible]).all()
    bias, reference = bias[..., visible], theirs(x)[..., visible]
    assert reference.min() < -20  # strongly forgetting heads
    torch.testing.assert_close(bias, reference, rtol=0, atol=1e-5)  # their float32 cumsum: measured 1.9e-6
    weights = randn(*bias.shape, seed=10, scale=0.1)
    grads = torch.autograd.grad((bias * weights).sum(), (x, ours.gates[0].weight, ours.gates[0].bias))
    grads_ref = torch.autograd.grad((reference * weights).sum(), (x, *theirs.to_forget_gates[0].parameters()))
    for name, ours_g, theirs_g in zip(("x", "weight", "bias"), grads, grads_ref, strict=True):
        assert ours_g.abs().max() > 0.1, name
        torch.testing.assert_close(ours_g, theirs_g, rtol=0, atol=1e-5, msg=name)  # measured 3.0e-7 to 1.4e-6


@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "chunked"])
def test_gradients_pass_a_float64_gradcheck(chunked: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Of q, k, v and the layer input x (through the gates), grouped heads, with and without query chunks."""
    T, c = 5, 3
    if chunked:  # 2 queries per chunk
        monkeypatch.setattr(octlm.positions.forgetting, "CHUNK_ENTRIES", 2 * 2 * T)
    scheme = scheme_with(randn(2, c, seed=11).double(), torch.tensor([0.5, 2.0], dtype=torch.float64))
    q = randn(1, 2, T, 3, seed=12).double().requires_grad_()
    k = randn(1, 1, T, 3, seed=13).double().requires_grad_()
    v = randn(1, 1, T, 3, seed=14).double().requires_grad_()
    x = randn(1, T, c, seed=15).double().requires_grad_()

    def attend(q: Tensor, k: Tensor, v: Tensor, x: Tensor) -> Tensor:
        return scheme.attend(q, k, v, call(x, T))

    assert torch.autograd.gradcheck(attend, (q, k, v, x), eps=1e-6, atol=1e-8)


def test_gates_of_exactly_known_values() -> None:
    """Zero weights and bias ln 3: every gate is σ(ln 3) = 3/4, so the bias is (i - j) ln(3/4) exactly ALiBi's
    with slope -ln(3/4), and a query's weights over equal scores fall by 3/4 per key back."""
    T = 6
    scheme = scheme_with(torch.zeros(1, C), torch.tensor([math.log(3.0)]))
    x = randn(1, T, C, seed=16)
    log_f = scheme.forget_gates(x, 0)
    assert log_f.shape == (1, 1, T) and log_f.dtype == torch.float64
    # ln 3 is rounded to float32 in the gate's bias: measured 5.0e-9 from ln(3/4)
    torch.testing.assert_close(log_f, torch.full_like(log_f, math.log(0.75)), rtol=0, atol=1e-7)
    assert torch.equal(log_f, log_f[..., :1].expand(1, 1, T))
    c, positions = scheme.running_sums(x, 0, None, T), torch.arange(T)
    bias = decay_bias(c, c, positions, positions, torch.float64)[0, 0]
    i, j = positions.unsqueeze(1), positions.unsqueeze(0)
    expected = torch.where(j <= i, (i - j) * log_f[0, 0, 0], -math.inf)
    torch.testing.assert_close(bias, expected, rtol=0, atol=1e-14)
    record: list[Tensor] = []
    zeros, ones = torch.zeros(1, 1, T, 2), torch.ones(1, 1, T, 2)  # equal scores: the decay alone
    scheme.attend(zeros, zeros, ones, call(x, T, record=record))
    last = record[0][0, 0, -1]
    torch.testing.assert_close(last[1:] / last[:-1], torch.full((T - 1,), 4 / 3), rtol=1e-6, atol=0)


def test_a_scheme_built_alone_starts_its_gates_at_one_half() -> None:
    """The class's own init (the decoder re-initialises every Linear, so only a scheme built alone shows it):
    weights N(0, 0.02) and biases 0, so that the gates of normed inputs start near σ(0) = 1/2."""
    torch.manual_seed(0)
    scheme = ForgettingPositions(256, 2, 8)
    weights = torch.stack([g.weight.detach() for g in scheme.gates])  # 4,096 draws
    assert all(torch.equal(g.bias, torch.zeros(8)) for g in scheme.gates)
    # standard errors 3.1e-4 (mean) and 2.2e-4 (std): measured mean -1.6e-4, std 0.0202
    assert abs(weights.mean().item()) < 1e-3 and weights.std().item() == pytest.approx(0.02, abs=1e-3)
    x = F.rms_norm(randn(2, 64, 256, seed=31), (256,))
    gates = scheme.forget_gates(x, 1).exp()  # σ(w · x), w · x ~ N(0, 0.02² · 256 = 0.32²)
    # measured mean 0.497, every one of the 1,024 gates within 1/2 ± 0.25 (σ(±1.1))
    assert gates.mean().item() == pytest.approx(0.5, abs=0.01) and (gates - 0.5).abs().max() < 0.3


def test_running_sums_of_16k_tokens_keep_each_gate() -> None:
    """At 16,384 tokens of gates 1/2, c reaches -11,357; the decay between neighbours stays ln 1/2 to float64
    rounding. A float32 running sum would get it wrong by ~1e-3 (asserted, so this test can fail)."""
    T = 16_384
    scheme = scheme_with(torch.zeros(1, C), torch.zeros(1))
    c = scheme.running_sums(torch.zeros(1, T, C), 0, None, T)
    assert c[0, 0, -1].item() == pytest.approx(T * math.log(0.5), rel=1e-12)
    positions = torch.arange(T)
    bias = decay_bias(c[..., -1:], c[..., -3:], positions[-1:], positions[-3:], torch.float32)[0, 0, 0]
    assert bias.tolist() == [np.float32(2 * math.log(0.5)), np.float32(math.log(0.5)), 0.0]  # exact
    single = torch.full((T,), math.log(0.5), dtype=torch.float32).cumsum(0)
    assert abs((single[-1] - single[-2]).item() - math.log(0.5)) > 1e-4  # measured 6.3e-4


def test_bfloat16_inputs_give_bfloat16_output_near_float32() -> None:
    T = 12
    q, k, v, x = inputs(T, 2, seed=17)
    scheme = scheme_with(*spread_gates())
    out = scheme.attend(q, k, v, call(x, T)).detach()
    half = [t.bfloat16() for t in (q, k, v, x)]
    out_bf16 = scheme.attend(*half[:3], call(half[3], T)).detach()
    assert out_bf16.dtype == torch.bfloat16
    # bfloat16 inputs and softmax (8-bit mantissa), outputs O(1): measured 8.0e-3
    torch.testing.assert_close(out_bf16.float(), out, rtol=0, atol=2e-2)


def test_dropout_reaches_the_attention_weights() -> None:
    """SDPA's dropout on the weights; the recorded path drops them itself, before recording them."""
    T = 8
    q, k, v, x = inputs(T, H, seed=21, batch=1)
    scheme = scheme_with(*spread_gates())
    plain = scheme.attend(q, k, v, call(x, T))
    torch.manual_seed(0)
    dropped = scheme.attend(q, k, v, call(x, T, dropout=0.5))
    torch.manual_seed(0)
    again = scheme.attend(q, k, v, call(x, T, dropout=0.5))
    assert (dropped - plain).abs().max() > 0.1 and torch.equal(dropped, again)
    kept: list[Tensor] = []
    scheme.attend(q, k, v, call(x, T, record=kept))
    record: list[Tensor] = []  # recorded: the weights after dropout, zeros and 1 / (1 - p), met the values
    out = scheme.attend(q, k, v, call(x, T, dropout=0.25, record=record))
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    dropped_w = record[0][..., visible]
    zero = dropped_w == 0
    assert 0.1 < zero.float().mean() < 0.4  # about a quarter of the 144 weights: measured 0.19
    torch.testing.assert_close(dropped_w[~zero], kept[0][..., visible][~zero] / 0.75, rtol=1e-6, atol=0)
    torch.testing.assert_close(record[0] @ v, out, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------------------
# Through the decoder


def fox_model(kv_heads: int = 0, seed: int = 0, **fields) -> Decoder:
    """A 2-layer FoX model with O(1) weights (matrices N(0, 1/fan_in)) and gate biases N(2, 1) (gates 0.3 ..
    0.99), so that the gates and the keys many tokens back both move the logits well past the tolerances."""
    torch.manual_seed(seed)
    model = Decoder(small("fox", n_kv_heads=kv_heads, **fields))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("positions.gates") and name.endswith("bias"):
                p.normal_(2.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
    return model


def test_the_registry_knows_fox_and_the_decoder_starts_gates_at_one_half() -> None:
    cls = SCHEMES.choose("fox")
    assert cls is ForgettingPositions and cls.hooks() == ("attend",)
    assert cls.options == () and cls.shows == ("gates",) and cls.cost == "" and not cls.bounded
    torch.manual_seed(0)
    model = Decoder(small("fox", d_model=64, nope_layers=[1]))
    scheme = model.positions
    assert scheme.replaces_attention and not scheme.has_bias and not scheme.is_contextual
    assert len(scheme.gates) == 2 and scheme.gates[1].weight.shape == (4, 64)  # a NoPE layer keeps its gate
    # The authors' start (the class docstring): biases 0 and weights N(0, 0.02): gates σ(±0.16) around 1/2.
    assert all(torch.equal(g.bias, torch.zeros(4)) for g in scheme.gates)
    assert 0.015 < scheme.gates[0].weight.std() < 0.025
    log_f = scheme.forget_gates(F.rms_norm(randn(3, 50, 64, seed=25), (64,)), 0)
    assert log_f.exp().mean().item() == pytest.approx(0.5, abs=0.02)


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
def test_cached_decoding_equals_a_full_pass(kv_heads: int) -> None:
    model = fox_model(kv_heads, seed=8).eval()
    ids = torch.randint(0, 64, (2, 21), generator=torch.Generator().manual_seed(9))  # past the context (8)
    with torch.no_grad():
        full, _ = model(ids)
        whole_cache = model.new_cache(2)
        model(ids, cache=whole_cache)
        for step, capacity in ((1, None), (3, 2), (16, 4)):  # small capacities make the cache grow
            cache = model.new_cache(2, capacity)
            parts = [model(ids[:, :5], cache=cache)[0]]
            parts += [model(ids[:, t : t + step], cache=cache)[0] for t in range(5, 21, step)]
            # float32, O(1) logits, different matmul shapes: measured 9.5e-7 to 1.9e-6.
            torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-5, msg=f"step {step}")
            for layer in range(2):  # the running sums kept are those of one pass
                kept, once = cache.states[layer]["log_forget"], whole_cache.states[layer]["log_forget"]
                assert kept.shape == (2, H, 21)
                # float32 gate logits of other matmul shapes, summed: measured 1.4e-6
                torch.testing.assert_close(kept, once, rtol=0, atol=1e-5)


def test_the_gates_matter() -> None:
    """Sanity for the tests here: earlier tokens change the logits, and so do the gates' biases."""
    model = fox_model(seed=8).eval()
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        full, _ = model(ids)
        alone, _ = model(ids[:, 6:])
        model.positions.gates[0].bias.add_(1.0)
        shifted, _ = model(ids)
    assert (full[:, 6:] - alone).abs().max() > 0.1 and (full - shifted).abs().max() > 0.1


def test_gates_of_one_are_nope_attention() -> None:
    """Zero gate weights and bias 100: log σ(100) = -4e-44, every gate 1 in float64, so FoX is the same model
    as NoPE with the same weights."""
    fox = fox_model(seed=3).eval()
    with torch.no_grad():
        for gate in fox.positions.gates:
            gate.weight.zero_()
            gate.bias.fill_(100.0)
    nope = Decoder(small("nope")).eval()
    weights = {n: p for n, p in fox.state_dict().items() if not n.startswith("positions.")}
    nope.load_state_dict(weights)
    ids = torch.randint(0, 64, (2, 19), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours, theirs = fox(ids)[0], nope(ids)[0]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)  # other SDPA calls: measured 0


def test_recorded_weights_make_the_output() -> None:
    """Recorded through octlm's recorder: rows sum to 1, nothing after the query, weights @ v is the output,
    and the recorded pass gives the logits of the plain one."""
    T = 9
    q, k, v, x = inputs(T, 2, seed=26)
    scheme = scheme_with(*spread_gates())
    record: list[Tensor] = []
    out = scheme.attend(q, k, v, call(x, T, record=record))
    (weights,) = record
    assert weights.shape == (B, H, T, T)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T), rtol=0, atol=1e-6)
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))
    torch.testing.assert_close(weights @ v.repeat_interleave(2, 1), out, rtol=0, atol=1e-6)
    torch.testing.assert_close(out, scheme.attend(q, k, v, call(x, T)), rtol=0, atol=1e-6)  # measured 3.6e-7
    model = fox_model(2, seed=5).eval()
    ids = torch.randint(0, 64, (2, 11), generator=torch.Generator().manual_seed(6))
    layers: list[Tensor] = []
    with torch.no_grad(), recording_attention(layers):
        recorded, _ = model(ids)
    plain, _ = model(ids)
    assert len(layers) == 2 and layers[1].shape == (2, H, 11, 11)
    torch.testing.assert_close(recorded, plain.detach(), rtol=0, atol=1e-5)  # measured 1.3e-6


def loss_and_grads(model: Decoder, ids: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    model.zero_grad()
    logits, loss = model(ids[:, :-1], ids[:, 1:])
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
def test_chunked_path_equals_the_whole_forward_and_backward(
    kv_heads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = fox_model(kv_heads, seed=2).train()
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(3))  # T = 23
    logits, grads = loss_and_grads(model, ids)
    monkeypatch.setattr(octlm.positions.forgetting, "CHUNK_ENTRIES", 2 * H * 5 * 23)  # chunks of 5 queries
    seen: list[tuple[int, int]] = []
    original = octlm.positions.forgetting.decay_bias

    def spy(c_q: Tensor, c_k: Tensor, *args) -> Tensor:
        seen.append((c_q.shape[-1], c_k.shape[-1]))
        return original(c_q, c_k, *args)

    monkeypatch.setattr(octlm.positions.forgetting, "decay_bias", spy)
    logits_c, grads_c = loss_and_grads(model, ids)
    # both layers; the last chunk short; each over the keys up to its last query
    assert seen == [(5, 5), (5, 10), (5, 15), (5, 20), (3, 23)] * 2
    # Same kernels on other shapes: measured 1.2e-6 to 1.4e-6 (logits), up to 8.4e-8 (gradients).
    torch.testing.assert_close(logits_c, logits, rtol=0, atol=1e-5)
    assert grads.keys() == grads_c.keys() and "positions.gates.1.weight" in grads
    for name in grads:
        torch.testing.assert_close(grads_c[name], grads[name], rtol=0, atol=1e-5, msg=name)


def test_memory_is_linear_in_the_length() -> None:
    """T = 2,048, one layer of 4 heads: the largest tensor is one chunk's float64 bias (16 MiB), where the
    whole [1, 4, T, T] bias would be 128 MiB."""
    T = 2048
    model = Decoder(small("fox", n_layers=1, d_model=16, d_ff=16, context_length=T)).eval()
    spy = LargestTensor()
    with torch.inference_mode(), spy:
        model(torch.randint(0, 64, (1, T), generator=torch.Generator().manual_seed(5)))
    assert spy.largest == 8 * octlm.positions.forgetting.CHUNK_ENTRIES


def test_a_tiny_model_learns_and_every_gate_trains() -> None:
    """Next-token loss on a fixed batch falls, and each layer's gate gets its own gradient."""
    torch.manual_seed(0)
    model = Decoder(small("fox", vocab_size=32, context_length=16, dropout=0.0))
    ids = torch.randint(0, 32, (8, 17), generator=torch.Generator().manual_seed(1))
    losses = memorise(model, ids)
    grads = [g.weight.grad for g in model.positions.gates]
    assert all(g is not None and g.abs().max() > 0 for g in grads) and not torch.equal(*grads)
    # Starts at ln 32 = 3.47; measured 3.47 -> 1.3 after 40 steps (memorising 128 random tokens).
    assert losses[0] == pytest.approx(math.log(32), abs=0.05) and losses[-1] < losses[0] - 1.5
