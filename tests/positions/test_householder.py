"""PaTH attention (octlm/positions/householder.py) against references that do not share its code: a NumPy
float64 loop that builds every Householder-like matrix and multiplies the product out for each query-key pair,
a hand-made case with exact weights that fixes the product's order, the limits β = 0 (plain softmax attention)
and β = 2 (reflections: an orthogonal product); then through the decoder: KV-cache decoding, chunk sizes,
gradients.

Tolerances: float32 results at 1e-5 absolute unless a comment says otherwise, with the measured error beside.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import octlm.positions.householder
from octlm.config import ModelConfig
from octlm.model.decoder import Decoder
from octlm.positions import SCHEMES
from octlm.positions.householder import (
    PathAttention,
    householder_factors,
    path_attention,
    solve_unit_lower,
    solve_unit_lower_by_doubling,
)
from octlm.positions.scheme import AttentionCall

H, D, C = 4, 8, 16


def randn(*shape: int, seed: int, scale: float = 1.0) -> Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def scheme_with(
    kv_heads: int, seed: int, beta_bias: Tensor | float | None = None, head_dim: int = D, width: int = C
) -> PathAttention:
    """A one-layer PaTH scheme with O(1) weights (W_w, W_β N(0, 1/C)); β's bias N(0, 1.5) unless given, so
    that β spreads over (0, 2)."""
    scheme = PathAttention(1, width, kv_heads, head_dim)
    with torch.no_grad():
        scheme.directions[0].weight.copy_(randn(kv_heads * head_dim, width, seed=seed, scale=width**-0.5))
        scheme.strengths[0].weight.copy_(randn(kv_heads, width, seed=seed + 1, scale=width**-0.5))
        bias = randn(kv_heads, seed=seed + 2, scale=1.5) if beta_bias is None else beta_bias
        scheme.strengths[0].bias.copy_(torch.as_tensor(bias).expand(kv_heads))
    return scheme


def call_of(
    x: Tensor, tk: int, state: dict | None = None, record: list | None = None, dropout: float = 0.0
) -> AttentionCall:
    """The call the decoder makes for new tokens x `[B, Tq, C]` after tk - Tq earlier ones."""
    tq = x.shape[1]
    return AttentionCall(x, torch.arange(tk - tq, tk), torch.arange(tk), 0, state, dropout, record)


def np_path(q: Tensor, k: Tensor, v: Tensor, x: Tensor, scheme: PathAttention) -> tuple[np.ndarray, ...]:
    """The paper's formula pair by pair in float64: H_s = I - β_s w_s w_sᵀ as a D x D matrix, w_s = W_w x_s
    normalised per key head, β_s = 2σ(W_β x_s + b); s_ij = q_iᵀ H_i H_{i-1} ⋯ H_{j+1} k_j / sqrt(D) for
    j <= i; softmax over j. Query head h uses key head h // (H / Hkv) and its w, β. Returns the weights
    `[B, H, T, T]`, the output `[B, H, T, D]` and every key after the last token, H_{T-1} ⋯ H_{j+1} k_j
    `[B, Hkv, T, D]`."""
    q, k, v, x = (t.double().numpy() for t in (q, k, v, x))
    w_proj = scheme.directions[0].weight.detach().double().numpy()
    b_proj = scheme.strengths[0].weight.detach().double().numpy()
    b_bias = scheme.strengths[0].bias.detach().double().numpy()
    B, nh, T, dim = q.shape
    nkv = k.shape[1]
    matrices = np.zeros((B, nkv, T, dim, dim))
    for b in range(B):
        for g in range(nkv):
            for s in range(T):
                w = w_proj[g * dim : (g + 1) * dim] @ x[b, s]
                w = w / np.linalg.norm(w)
                beta = 2.0 / (1.0 + np.exp(-(b_proj[g] @ x[b, s] + b_bias[g])))
                matrices[b, g, s] = np.eye(dim) - beta * np.outer(w, w)

    def path(b: int, g: int, i: int, j: int) -> np.ndarray:  # H_i H_{i-1} ⋯ H_{j+1}
        product = np.eye(dim)
        for s in range(i, j, -1):
            product = product @ matrices[b, g, s]
        return product

    weights, out = np.zeros((B, nh, T, T)), np.zeros((B, nh, T, dim))
    for b in range(B):
        for h in range(nh):
            g = h // (nh // nkv)
            scores = np.full((T, T), -np.inf)
            for i in range(T):
                for j in range(i + 1):
                    scores[i, j] = q[b, h, i] @ path(b, g, i, j) @ k[b, g, j] / math.sqrt(dim)
            p = np.exp(scores - scores.max(-1, keepdims=True))
            weights[b, h] = p / p.sum(-1, keepdims=True)
            out[b, h] = weights[b, h] @ v[b, g]
    keys = np.stack(
        [[[path(b, g, T - 1, j) @ k[b, g, j] for j in range(T)] for g in range(nkv)] for b in range(B)]
    )
    return weights, out, keys


def inputs(kv_heads: int, T: int, seed: int, B: int = 2) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q `[B, H, T, D]`, k and v `[B, Hkv, T, D]`, x `[B, T, C]`, all N(0, 1)."""
    return (
        randn(B, H, T, D, seed=seed),
        randn(B, kv_heads, T, D, seed=seed + 1),
        randn(B, kv_heads, T, D, seed=seed + 2),
        randn(B, T, C, seed=seed + 3),
    )


# ------------------------------------------------------------------------------------------------------------
# Against independent references


@pytest.mark.parametrize("chunk", [1, 3, 64])
@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_attend_matches_a_numpy_loop_over_every_pair(
    kv_heads: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Weights, output and the cached keys, for chunks of 1, 3 (T = 11 leaves a short last chunk) and 64."""
    monkeypatch.setattr(octlm.positions.householder, "CHUNK_TOKENS", chunk)
    T = 11
    q, k, v, x = inputs(kv_heads, T, seed=1)
    scheme = scheme_with(kv_heads, seed=5)
    record, state = [], {}
    with torch.no_grad():
        y = scheme.attend(q, k, v, call_of(x, T, state, record))
    weights, out, keys = np_path(q, k, v, x, scheme)
    assert y.shape == (2, H, T, D) and y.dtype == torch.float32 and record[0].shape == (2, H, T, T)
    # float32 against float64, O(1) values: measured 1.1e-7 to 2.2e-7 (weights), 2.9e-7 to 4.0e-7 (output),
    # 3.0e-7 to 7.7e-7 (keys).
    np.testing.assert_allclose(record[0].numpy(), weights, rtol=0, atol=1e-5)
    np.testing.assert_allclose(y.numpy(), out, rtol=0, atol=1e-5)
    np.testing.assert_allclose(state["keys"].numpy(), keys, rtol=0, atol=1e-5)
    # Sanity: the reflections matter (far from plain attention) and β spreads over (0, 2).
    plain = (
        (q @ k.repeat_interleave(H // kv_heads, 1).transpose(-1, -2) / math.sqrt(D))
        .masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
        .softmax(-1)
    )
    assert (record[0] - plain).abs().max() > 0.2
    beta = 2 * torch.sigmoid(scheme.strengths[0](x))
    assert beta.min() < 0.6 and beta.max() > 1.4


def test_directions_are_unit_vectors_above_a_projection_of_1e_6() -> None:
    """w = W_w x / max(‖W_w x‖, 1e-6) per key head, β = 2σ(W_β x + b) `[B, Hkv, T]`. A projection of norm
    ~0.03 (where the decoder's N(0, 0.02) init puts it) still gives a unit w; one of ~4e-9 is not blown up
    to a unit direction that rounding noise would point: w ~ 4e-3, so H_s is the identity to ~1e-4; zero
    stays zero."""
    scheme, x = scheme_with(2, seed=81), randn(2, 6, C, seed=82)
    for scale in (1e-2, 1e-9, 0.0):
        with torch.no_grad():
            w, beta = householder_factors(scale * x, scheme.directions[0], scheme.strengths[0], 2)
            p = scheme.directions[0](scale * x).view(2, 6, 2, D).transpose(1, 2)
            logits = scheme.strengths[0](scale * x).transpose(1, 2)
        assert w.shape == (2, 2, 6, D) and beta.shape == (2, 2, 6)
        torch.testing.assert_close(beta, 2 * torch.sigmoid(logits), rtol=0, atol=0)
        norms = p.norm(dim=-1)
        if scale == 1e-2:  # measured norms 0.017 to 0.064
            assert norms.max() < 0.1
            torch.testing.assert_close(w.norm(dim=-1), torch.ones(2, 2, 6), rtol=0, atol=1e-6)
        elif scale == 1e-9:  # measured norms 1.7e-9 to 6.4e-9
            assert norms.min() > 1e-12 and norms.max() < 1e-8
            torch.testing.assert_close(w, p / 1e-6, rtol=1e-6, atol=0)
        else:
            assert torch.equal(w, torch.zeros_like(w))


def test_the_product_runs_from_the_query_back_to_the_key() -> None:
    """Exact weights in D = 2 with two reflections (β = 2): w_1 = e1, w_2 = (e1 + e2)/√2, k_0 = e1, the other
    keys 0. H_2 H_1 e1 = H_2 (-e1) = e2, where the other order gives H_1 H_2 e1 = H_1 (-e2) = -e2. With
    q_2 = c e2, c = √2 ln 2 (scale 1/√2): scores (ln 2, 0, 0), weights (1/2, 1/4, 1/4); the other order
    would give (1/5, 2/5, 2/5). Query 1 = c e1 sees H_1 e1 = -e1: scores (-ln 2, 0), weights (1/3, 2/3)."""
    c = math.sqrt(2) * math.log(2)
    e1, e2 = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.0, 1.0], dtype=torch.float64)
    q = torch.stack([e1, c * e1, c * e2]).view(1, 1, 3, 2)
    k = torch.stack([e1, 0 * e1, 0 * e1]).view(1, 1, 3, 2)
    v = torch.eye(3, dtype=torch.float64)[:, :2].reshape(1, 1, 3, 2)  # not used by the weights
    w = torch.stack([e2, e1, (e1 + e2) / math.sqrt(2)]).view(1, 1, 3, 2)
    beta = torch.full((1, 1, 3), 2.0, dtype=torch.float64)
    record: list[Tensor] = []
    _, keys = path_attention(q, k, v, w, beta, record=record)
    expected = torch.tensor([[1, 0, 0], [1 / 3, 2 / 3, 0], [1 / 2, 1 / 4, 1 / 4]], dtype=torch.float64)
    torch.testing.assert_close(record[0][0, 0], expected, rtol=0, atol=1e-12)  # measured 5.6e-17
    torch.testing.assert_close(keys[0, 0, 0], e2, rtol=0, atol=1e-12)  # the cache holds H_2 H_1 k_0: 2.2e-16


def test_beta_zero_is_plain_softmax_attention() -> None:
    """β = 2σ(-60) ≈ 2e-26: every H_s is the identity, so PaTH is NoPE's causal softmax attention, in a full
    pass and for a chunk after a prefill (grouped heads)."""
    T, kv_heads = 10, 2
    q, k, v, x = inputs(kv_heads, T, seed=11)
    scheme = scheme_with(kv_heads, seed=12, beta_bias=-60.0)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    state: dict = {}
    with torch.no_grad():
        full = scheme.attend(q, k, v, call_of(x, T))
        first = scheme.attend(q[:, :, :6], k[:, :, :6], v[:, :, :6], call_of(x[:, :6], 6, state))
        rest = scheme.attend(q[:, :, 6:], k, v, call_of(x[:, 6:], T, state))
    torch.testing.assert_close(full, expected, rtol=0, atol=1e-6)  # measured 2.4e-7
    torch.testing.assert_close(torch.cat([first, rest], 2), expected, rtol=0, atol=1e-6)  # measured 2.4e-7
    torch.testing.assert_close(state["keys"], k, rtol=0, atol=1e-6)  # untouched keys: measured 0


def test_beta_two_makes_the_product_orthogonal() -> None:
    """β = 2σ(40) = 2 exactly in float32: each H_s is a reflection, so every transformed key keeps its length
    and the score of unit q and k stays within ±1/√D. With β in (0, 2) the keys shrink instead: the check
    tells a reflection from a Householder-like contraction."""
    T, kv_heads = 12, 2
    q, k, v, x = inputs(kv_heads, T, seed=21)
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    scheme = scheme_with(kv_heads, seed=22, beta_bias=40.0)
    record: list[Tensor] = []
    state: dict = {}
    with torch.no_grad():
        scheme.attend(q, k, v, call_of(x, T, state, record))
    lengths = state["keys"].norm(dim=-1)
    torch.testing.assert_close(lengths, torch.ones_like(lengths), rtol=0, atol=1e-6)  # measured 3.0e-7
    # The scores back from the weights: log p_ij - log p_ii, plus the diagonal's q_i · k_i / √D.
    p = record[0]
    diagonal = (q * k.repeat_interleave(H // kv_heads, 1)).sum(-1) / math.sqrt(D)  # [B, H, T]
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    log_p = p.log() - p.diagonal(dim1=-2, dim2=-1).log().unsqueeze(-1)
    scores = (log_p + diagonal.unsqueeze(-1))[..., visible]
    assert scores.abs().max() <= (1 + 1e-5) / math.sqrt(D)  # measured max 0.308 of the bound 0.354
    # Random β in (0, 2): the same keys shrink.
    shrunk: dict = {}
    with torch.no_grad():
        scheme_with(kv_heads, seed=22).attend(q, k, v, call_of(x, T, shrunk))
    lengths = shrunk["keys"].norm(dim=-1)
    assert lengths.max() <= 1 + 1e-6  # the last key is untouched: 1
    assert lengths[..., :-1].max() < 0.99 and lengths.mean() < 0.9  # measured 0.984 and 0.81


def np_forward_substitution(system: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """a with system a = rhs, row by row in float64, for a unit lower-triangular `[c, c]` system."""
    a = np.zeros_like(rhs)
    for s in range(system.shape[0]):
        a[s] = rhs[s] - system[s, :s] @ a[:s]
    return a


def path_system(c: int, seed: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """PaTH's UT system for c tokens (I + β_s w_sᵀ w_t below the diagonal) `[2, 5, c, c]` (batch and key heads,
    as chunk_scores has it) and a right side `[2, 5, c, 3]`."""
    w = F.normalize(randn(2, 5, c, D, seed=seed), dim=-1)
    beta = 2 * torch.sigmoid(randn(2, 5, c, seed=seed + 1, scale=2.0))
    lower = (w @ w.transpose(-1, -2)) * beta.unsqueeze(-1) * torch.ones(c, c).tril(-1)
    return (lower + torch.eye(c)).to(dtype), randn(2, 5, c, 3, seed=seed + 2).to(dtype)


def np_solve(system: Tensor, rhs: Tensor) -> np.ndarray:
    """np_forward_substitution over every leading index."""
    system, rhs = system.double().numpy(), rhs.double().numpy()
    out = np.zeros_like(rhs)
    for index in np.ndindex(*system.shape[:-2]):
        out[index] = np_forward_substitution(system[index], rhs[index])
    return out


@pytest.mark.parametrize("c", [1, 2, 3, 7, 64, 100])
def test_the_doubling_solve_is_the_triangular_solve(c: int) -> None:
    """The solve by doubling (what the ONNX graph computes) against float64 forward substitution, as closely
    as torch's float32 solve is: exact once 2^steps >= c, more steps change nothing, one step fewer leaves
    tokens more than half the blocks apart unsolved. Measured: at most 5.9e-7 relative to the largest |a| at
    c = 100 (torch's own solve: 3.5e-7); one step short, 0.26 or more. In float64 it stays float64 (3e-15)."""
    system, rhs = path_system(c, seed=90 + c)
    steps = max(1, math.ceil(math.log2(c)))
    want = np_solve(system, rhs)
    scale = float(np.abs(want).max())
    for n in (steps, steps + 2):
        got = solve_unit_lower_by_doubling(system, rhs, n)
        assert got.dtype == torch.float32 and got.shape == rhs.shape
        assert np.abs(got.double().numpy() - want).max() <= 2e-6 * scale
    assert np.abs(solve_unit_lower(system, rhs).double().numpy() - want).max() <= 2e-6 * scale
    if c > 2:
        short = solve_unit_lower_by_doubling(system, rhs, steps - 1)
        assert np.abs(short.double().numpy() - want).max() > 1e-2 * scale
    odd = system + 6 * torch.eye(c)  # the diagonal is taken as ones: what is stored there is never read
    assert torch.equal(solve_unit_lower(odd, rhs), solve_unit_lower(system, rhs))
    assert torch.equal(
        solve_unit_lower_by_doubling(odd, rhs, steps), solve_unit_lower_by_doubling(system, rhs, steps)
    )
    exact = solve_unit_lower_by_doubling(*path_system(c, seed=90 + c, dtype=torch.float64), steps)
    assert exact.dtype == torch.float64 and np.abs(exact.numpy() - want).max() <= 1e-12 * scale


def test_the_doubling_solve_runs_on_the_meta_device() -> None:
    """Its index and identity are made on the system's device ("meta" stands in for a GPU)."""
    system, rhs = (t.to("meta") for t in path_system(5, seed=97))
    got = solve_unit_lower_by_doubling(system, rhs, 3)
    assert (got.device.type, got.shape) == ("meta", rhs.shape)


def test_one_chunk_keeps_a_symbolic_length_under_torch_export() -> None:
    """Up to one chunk, the chunk bounds are settled from the length's declared range: torch.export (what the
    ONNX export runs) keeps the length symbolic instead of pinning it to the example's, and the program gives
    the eager outputs at other lengths (measured difference 0; bound 1e-6)."""
    scheme = scheme_with(2, seed=98)

    class Attend(torch.nn.Module):
        def forward(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor) -> Tensor:
            w, beta = householder_factors(x, scheme.directions[0], scheme.strengths[0], 2)
            return path_attention(q, k, v, w, beta)[0]

    length = torch.export.Dim("length", min=2, max=octlm.positions.householder.CHUNK_TOKENS)
    shapes = {"q": {2: length}, "k": {2: length}, "v": {2: length}, "x": {1: length}}
    program = torch.export.export(Attend(), inputs(2, 6, seed=99, B=1), dynamic_shapes=shapes)
    for T in (3, 64):
        args = inputs(2, T, seed=100 + T, B=1)
        torch.testing.assert_close(program.module()(*args), Attend()(*args), rtol=0, atol=1e-6)


def test_recorded_weights_times_values_are_the_output_after_a_prefill() -> None:
    """Three new queries after five cached keys: `[B, H, 3, 8]` causal rows that sum to 1, and weights @ v
    (grouped heads) the output."""
    T, kv_heads = 8, 2
    q, k, v, x = inputs(kv_heads, T, seed=31)
    scheme, state, record = scheme_with(kv_heads, seed=32), {}, []
    with torch.no_grad():
        scheme.attend(q[:, :, :5], k[:, :, :5], v[:, :, :5], call_of(x[:, :5], 5, state))
        y = scheme.attend(q[:, :, 5:], k, v, call_of(x[:, 5:], T, state, record))
    (weights,) = record
    assert weights.shape == (2, H, 3, T)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, 3), rtol=0, atol=1e-6)
    assert torch.equal(weights[:, :, 0, 6:], torch.zeros(2, H, 2)) and torch.equal(
        weights[:, :, 1, 7], torch.zeros(2, H)
    )
    torch.testing.assert_close(
        weights @ v.repeat_interleave(H // kv_heads, 1), y, rtol=0, atol=1e-6
    )  # measured 0


def test_dropout_drops_weights_and_records_what_multiplied_the_values() -> None:
    T = 9
    q, k, v, x = inputs(4, T, seed=41)
    scheme = scheme_with(4, seed=42)
    with torch.no_grad():
        kept: list[Tensor] = []
        scheme.attend(q, k, v, call_of(x, T, record=kept))
        dropped: list[Tensor] = []
        torch.manual_seed(0)
        y = scheme.attend(q, k, v, call_of(x, T, record=dropped, dropout=0.25))
    kept_w, dropped_w = kept[0], dropped[0]
    zero = dropped_w == 0
    visible = torch.ones(T, T, dtype=torch.bool).tril().expand_as(zero)
    assert 0.15 < zero[visible].float().mean() < 0.35  # measured 0.25 of 360 weights
    torch.testing.assert_close(dropped_w[~zero], kept_w[~zero] / 0.75, rtol=1e-6, atol=0)
    torch.testing.assert_close(dropped_w @ v, y, rtol=0, atol=1e-6)


def test_gradients_pass_a_float64_gradcheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """q, k, v and the layer input x (through w and β), with chunks of 2 so that the keys cross chunks."""
    monkeypatch.setattr(octlm.positions.householder, "CHUNK_TOKENS", 2)
    T, heads, kv_heads, dim, width = 5, 2, 1, 3, 4
    scheme = scheme_with(kv_heads, seed=51, head_dim=dim, width=width).double()
    q = randn(1, heads, T, dim, seed=52).double().requires_grad_()
    k = randn(1, kv_heads, T, dim, seed=53).double().requires_grad_()
    v = randn(1, kv_heads, T, dim, seed=54).double().requires_grad_()
    x = randn(1, T, width, seed=55).double().requires_grad_()

    def attend(q: Tensor, k: Tensor, v: Tensor, x: Tensor) -> Tensor:
        return scheme.attend(q, k, v, call_of(x, T))

    assert torch.autograd.gradcheck(attend, (q, k, v, x), eps=1e-6, atol=1e-8)


def test_bfloat16_inputs_compute_in_float32() -> None:
    """bf16 q, k, v and x: the output is bf16, its error that of rounding the inputs; the cached keys stay
    float32."""
    T = 40
    q, k, v, x = inputs(2, T, seed=61)
    scheme, state = scheme_with(2, seed=62), {}
    with torch.no_grad():
        exact = scheme.attend(q, k, v, call_of(x, T))
        low = scheme.bfloat16().attend(
            q.bfloat16(), k.bfloat16(), v.bfloat16(), call_of(x.bfloat16(), T, state)
        )
    assert low.dtype == torch.bfloat16 and state["keys"].dtype == torch.float32
    # The factors themselves: float32, β the float32 sigmoid of the bf16 strength logits.
    w, beta = householder_factors(x.bfloat16(), scheme.directions[0], scheme.strengths[0], 2)
    assert w.dtype == beta.dtype == torch.float32
    logits = scheme.strengths[0](x.bfloat16()).detach()
    assert torch.equal(beta, 2.0 * torch.sigmoid(logits.float()).transpose(1, 2))
    # bf16 inputs and weights carry 3 significant digits: measured 7.2e-3 on outputs of size ~1.
    torch.testing.assert_close(low.float(), exact, rtol=0, atol=2e-2)


# ------------------------------------------------------------------------------------------------------------
# Through the decoder


def path_model(kv_heads: int = 0, seed: int = 0, **fields) -> Decoder:
    """A 2-layer PaTH model with O(1) weights (matrices N(0, 1/fan_in), β's bias N(0, 1)), so that the
    reflections move the logits well past the tolerances."""
    config = (
        dict(
            vocab_size=64,
            d_model=32,
            context_length=8,
            n_layers=2,
            n_heads=H,
            d_ff=64,
            n_kv_heads=kv_heads,
            position="path",
            dropout=0.0,
        )
        | fields
    )
    torch.manual_seed(seed)
    model = Decoder(ModelConfig(**config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("positions.strengths") and name.endswith("bias"):
                p.normal_(0.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
    return model


def test_the_registry_knows_path() -> None:
    cls = SCHEMES.choose("path")
    assert cls is PathAttention and cls.options == () and not cls.bounded and "T²" in cls.cost
    assert cls.hooks() == ("attend",) and cls.problems(ModelConfig(position="path", n_kv_heads=2)) == []
    scheme = path_model(kv_heads=2).positions
    assert scheme.replaces_attention and not scheme.is_contextual and not scheme.has_bias
    assert len(scheme.directions) == len(scheme.strengths) == 2  # every layer, even one in nope_layers
    assert scheme.directions[1].weight.shape == (2 * D, 32) and scheme.directions[1].bias is None
    assert scheme.strengths[1].weight.shape == (2, 32) and scheme.strengths[1].bias.shape == (2,)


def test_a_cache_without_its_state_is_refused() -> None:
    q, k, v, x = inputs(4, 6, seed=71)
    scheme = scheme_with(4, seed=72)
    refusal = "^PaTH needs its cache state for the cached keys: use one cache from the start$"
    with pytest.raises(ValueError, match=refusal):
        scheme.attend(q[:, :, 5:], k, v, call_of(x[:, 5:], 6, {}))
    # Earlier keys of the wrong count: 2 new of 5 keys need the 3 before them.
    w, beta = householder_factors(x, scheme.directions[0], scheme.strengths[0], 4)
    with pytest.raises(ValueError, match="^PaTH needs the 3 earlier keys transformed; got 2$"):
        path_attention(q[:, :, 3:5], k[:, :, :5], v[:, :, :5], w[:, :, 3:5], beta[:, :, 3:5], k[:, :, :2])


def test_attend_runs_on_the_meta_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its masks and identity are made on the inputs' device: "meta" stands in for a GPU (shapes and
    devices, no data), where a CPU tensor meeting a meta one fails. Chunks of 2 over 5 tokens, recorded."""
    monkeypatch.setattr(octlm.positions.householder, "CHUNK_TOKENS", 2)
    T, kv_heads = 5, 2
    scheme = PathAttention(1, C, kv_heads, D).to("meta")
    q, k = torch.zeros(1, H, T, D, device="meta"), torch.zeros(1, kv_heads, T, D, device="meta")
    positions = torch.arange(T, device="meta")
    call = AttentionCall(torch.zeros(1, T, C, device="meta"), positions, positions, 0, {}, 0.0, [])
    y = scheme.attend(q, k, k, call)
    assert (y.device.type, y.shape) == ("meta", (1, H, T, D))
    assert call.state["keys"].device.type == call.record[0].device.type == "meta"
    assert call.record[0].shape == (1, H, T, T)


@pytest.mark.parametrize("chunk", [4, 64])
@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
def test_cached_decoding_equals_a_full_pass(
    kv_heads: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5-token prefill, then 1, 3 or 16 tokens at a time (small capacities make the cache grow), against one
    pass over 21 tokens; chunks of 4 make both cross chunk boundaries."""
    monkeypatch.setattr(octlm.positions.householder, "CHUNK_TOKENS", chunk)
    model = path_model(kv_heads, seed=8).eval()
    ids = torch.randint(0, 64, (2, 21), generator=torch.Generator().manual_seed(9))  # past the context (8)
    with torch.no_grad():
        full, _ = model(ids)
        alone, _ = model(ids[:, 6:])
        assert (full[:, 6:] - alone).abs().max() > 0.1  # the earlier tokens' reflections matter
        for step, capacity in ((1, None), (3, 2), (16, 4)):
            cache = model.new_cache(2, capacity)
            parts = [model(ids[:, :5], cache=cache)[0]]
            parts += [model(ids[:, t : t + step], cache=cache)[0] for t in range(5, 21, step)]
            # float32, O(1) logits, other matmul shapes: measured 1.1e-6 to 2.0e-6.
            torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-5, msg=f"step {step}")
            assert cache.states[0]["keys"].shape == (2, kv_heads or H, 21, D)


def loss_and_grads(model: Decoder, ids: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    model.zero_grad()
    logits, loss = model(ids[:, :-1], ids[:, 1:])
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk", [1, 3])
def test_chunked_path_equals_one_chunk_forward_and_backward(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T = 23 in one chunk and in chunks of 1 or 3: the same logits and gradients. Layer 0 is a NoPE layer:
    its W_w and W_β get no gradient, layer 1's do."""
    model = path_model(kv_heads=2, seed=2, nope_layers=[0]).train()
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(3))
    logits, grads = loss_and_grads(model, ids)
    monkeypatch.setattr(octlm.positions.householder, "CHUNK_TOKENS", chunk)
    logits_c, grads_c = loss_and_grads(model, ids)
    # Same algebra, other sums: measured 9.5e-7 (logits); gradients (up to 0.22; W_w's 0.012) 1.5e-7.
    torch.testing.assert_close(logits_c, logits, rtol=0, atol=1e-5)
    assert grads.keys() == grads_c.keys()
    assert {"positions.directions.1.weight", "positions.strengths.1.bias"} <= grads.keys()
    assert not any(name.startswith(("positions.directions.0", "positions.strengths.0")) for name in grads)
    assert grads["positions.directions.1.weight"].abs().max() > 1e-3
    for name in grads:
        torch.testing.assert_close(grads_c[name], grads[name], rtol=0, atol=1e-6, msg=name)
