"""FIRE (octlm/positions/fire.py) against references that do not share its code: a NumPy float64 evaluation of
the paper's formula b_h(i, j) = f_h(ψ(i - j) / ψ(max(L, i))), ψ(x) = log(c·x + 1), from the module's own
parameters; closed-form values of a hand-set MLP; the threshold's switch; causality; the chunked path, the KV
cache and a float64 gradient check against finite differences; a tiny training run; and the memory of a long
forward (the largest tensor it allocates, and its peak live memory against NoPE at config b's shape).

x-transformers (the test-only reference of other schemes) has no FIRE, so the NumPy evaluation is the reference.
"""

from __future__ import annotations

import math
import weakref

import numpy as np
import pytest
import tiny
import torch
from references import np_fire
from tiny import memorise
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import octlm.model.decoder
import octlm.positions.fire
import octlm.positions.rotary
from octlm.config import ModelConfig
from octlm.model.decoder import ChunkedBias, Decoder
from octlm.positions import SCHEMES, build_positions
from octlm.positions.fire import FirePositions, fire_inputs, fire_mlp

H = 4


def scheme_with(c: float, threshold: float, hidden: int = 8, seed: int = 0) -> FirePositions:
    """A FIRE module with random MLP weights and the given c and L (as its parameters would hold them)."""
    torch.manual_seed(seed)
    scheme = FirePositions(H, hidden, threshold)
    with torch.no_grad():
        scheme.c.fill_(c)
    return scheme


# ------------------------------------------------------------------------------------------------------------
# The formula


def test_fire_is_registered_with_its_options() -> None:
    cls = SCHEMES.choose("fire")
    assert cls is FirePositions and cls.options == ("fire_hidden", "fire_threshold")
    assert cls.shows == ("bias",) and not cls.bounded
    scheme = build_positions(
        ModelConfig(position="fire", n_heads=H, d_model=32, fire_hidden=16, fire_threshold=64.0)
    )
    assert scheme.w2.shape == (H, 16) and scheme.initial_threshold == 64.0 and scheme.has_bias


@pytest.mark.parametrize(("c", "threshold"), [(0.1, 7.5), (0.7, 3.0), (-0.3, 20.0)])
def test_bias_matches_the_numpy_formula(c: float, threshold: float) -> None:
    """Queries 3 .. 24 over keys 0 .. 24 (a chunk after a cache); L inside, below and past the queries. A
    negative stored c means |c| (the paper's convention)."""
    scheme = scheme_with(c, threshold)
    q, k = np.arange(3, 25), np.arange(25)
    got = scheme.bias(torch.from_numpy(q), torch.from_numpy(k))
    assert got.dtype == torch.float32 and got.shape == (H, 22, 25)
    want = np_fire(scheme, q, k)
    # float32 log and an 8-wide MLP on O(1) values: measured 4.7e-8.
    torch.testing.assert_close(got.double(), torch.from_numpy(want), rtol=0, atol=5e-7)


def identity_scheme(threshold: float) -> FirePositions:
    """c = 1 and an MLP that returns its input (head 0) and twice it minus 1 (head 1): f(x) = (x, 2x - 1)."""
    scheme = FirePositions(2, hidden=1, threshold=threshold)
    with torch.no_grad():
        scheme.c.fill_(1.0)
        scheme.w1.fill_(1.0), scheme.b1.zero_()
        scheme.w2.copy_(torch.tensor([[1.0], [2.0]])), scheme.b2.copy_(torch.tensor([0.0, -1.0]))
    return scheme


def test_a_hand_set_mlp_gives_the_closed_form_values() -> None:
    """c = 1, L = 3: ψ(L) = log 4, so distances 1 and 3 below L give exactly 1/2 and 1; at i = 15, ψ(15) = log 16
    gives 1/4, 1/2, 1 at distances 1, 3, 15."""
    bias = identity_scheme(3.0).bias(torch.tensor([0, 1, 3, 15]), torch.arange(16))
    x = bias[0]
    assert x[0, 0] == 0 and x[1, 0] == 0.5 and x[2, 3] == 0
    # float32 logs of powers of two, one division: within 1 ulp (measured exact here).
    exact = {(1, 0): 0.5, (2, 0): 1.0, (2, 2): 0.5, (3, 14): 0.25, (3, 12): 0.5, (3, 0): 1.0}
    for (row, key), value in exact.items():
        assert x[row, key].item() == pytest.approx(value, abs=1.2e-7), (row, key)
        assert bias[1, row, key].item() == pytest.approx(2 * value - 1, abs=2.4e-7), (row, key)
    assert (x[0, 1:] == float("-inf")).all() and (x[2, 4:] == float("-inf")).all()


@pytest.mark.parametrize("threshold", [3.0, 4.5])
def test_the_normaliser_switches_from_psi_of_l_to_psi_of_i_at_l(threshold: float) -> None:
    """The key at distance i (key 0) from query i: ψ(i) / ψ(L) below L, then exactly ψ(i) / ψ(i) = 1."""
    x = identity_scheme(threshold).bias(torch.arange(8), torch.tensor([0]))[0, :, 0]
    want = [math.log1p(i) / math.log1p(max(threshold, i)) for i in range(8)]
    # float32 log1p and one division: measured 4.5e-8.
    torch.testing.assert_close(x.double(), torch.tensor(want, dtype=torch.float64), rtol=0, atol=1.2e-7)
    below = [i for i in range(8) if i < threshold]
    assert x[below[-1]] < 1 and (x[len(below) :] == 1).all()  # the last query below L is not stretched to 1


def test_causality_and_any_query_chunk_equals_its_rows_of_the_whole() -> None:
    scheme = scheme_with(0.1, 6.0)
    q, k = torch.arange(30), torch.arange(30)
    whole = scheme.bias(q, k)
    future = k.unsqueeze(0) > q.unsqueeze(1)
    assert (whole[:, future] == float("-inf")).all() and torch.isfinite(whole[:, ~future]).all()
    for start, stop in ((0, 1), (5, 12), (29, 30)):  # rows are computed independently: bit for bit
        assert torch.equal(scheme.bias(q[start:stop], k), whole[:, start:stop])


def test_gradients_match_finite_differences_in_float64() -> None:
    """No custom autograd here, but abs, max(L, i), log1p and the ReLU MLP all carry gradients to c, L and the
    MLP: gradcheck of the formula (float64) w.r.t. every parameter and the MLP's input path."""
    torch.manual_seed(3)
    params = [torch.randn(6, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    params += [torch.randn(3, 6, dtype=torch.float64, requires_grad=True)]
    params += [torch.randn(3, dtype=torch.float64, requires_grad=True)]
    c = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    threshold = torch.tensor(5.5, dtype=torch.float64, requires_grad=True)  # between queries: no tie in max
    q, k = torch.arange(2, 9), torch.arange(9)

    def bias(c: torch.Tensor, threshold: torch.Tensor, *mlp: torch.Tensor) -> torch.Tensor:
        return fire_mlp(fire_inputs(c.abs(), threshold.abs(), q, k), *mlp)

    assert torch.autograd.gradcheck(bias, (c, threshold, *params), eps=1e-6, atol=1e-8)
    x = fire_inputs(c, threshold, q, k).detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: fire_mlp(x, *params), (x,), eps=1e-6, atol=1e-8)


# ------------------------------------------------------------------------------------------------------------
# Through the model


def fire_model(seed: int = 0, kv_heads: int = 0, **fields) -> Decoder:
    """A 2-layer FIRE model with L = 6, so that sequences of 20+ tokens cross the threshold."""
    torch.manual_seed(seed)
    config = dict(
        vocab_size=64,
        d_model=32,
        context_length=8,
        n_layers=2,
        n_heads=H,
        d_ff=64,
        fire_hidden=8,
        fire_threshold=6.0,
    )
    config.update(fields)
    return Decoder(ModelConfig(position="fire", n_kv_heads=kv_heads, **config))


def loss_and_grads(model: Decoder, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    model.zero_grad()
    logits, loss = model(ids[:, :-1], ids[:, 1:])
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
def test_chunked_bias_equals_the_whole_bias_forward_and_backward(
    kv_heads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = fire_model(kv_heads=kv_heads).train()
    ids = torch.randint(0, 64, (2, 38), generator=torch.Generator().manual_seed(1))  # T = 37
    logits, grads = loss_and_grads(model, ids)
    monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", 0)
    monkeypatch.setattr(
        octlm.model.decoder, "CHUNK_BIAS_ENTRIES", H * 5 * 37
    )  # 7 chunks of 5 queries and one of 2
    seen: list[int] = []
    rows = ChunkedBias.rows
    monkeypatch.setattr(ChunkedBias, "rows", lambda self, a, b: seen.append(b - a) or rows(self, a, b))
    logits_c, grads_c = loss_and_grads(model, ids)
    assert seen == ([5] * 7 + [2]) * 2  # both layers went by chunks
    # Same kernels on other shapes: measured 1.8e-7 (logits), 5.2e-8 (gradients).
    torch.testing.assert_close(logits_c, logits, rtol=0, atol=1e-5)
    for name in grads:
        torch.testing.assert_close(grads_c[name], grads[name], rtol=0, atol=1e-5, msg=name)
    # every FIRE parameter learns through the chunks
    for name in ("c", "threshold_scale", "w1", "b1", "w2", "b2"):
        assert grads_c[f"positions.{name}"].abs().max() > 0, name


@pytest.mark.parametrize("kv_heads", [0, 2], ids=["mha", "gqa"])
def test_cached_decoding_equals_a_full_pass(kv_heads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefill 5, then 3 at a time and 1 at a time (the cache grows past its capacity), past L = 6 and past the
    training context; and once more with every bias built by chunks."""
    model = fire_model(seed=8, kv_heads=kv_heads).eval()
    ids = torch.randint(0, 64, (2, 21), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        full, _ = model(ids)
        for step, capacity, chunked in ((1, None, False), (3, 2, False), (3, 4, True)):
            if chunked:
                monkeypatch.setattr(octlm.model.decoder, "WHOLE_BIAS_PAIRS", 0)
                monkeypatch.setattr(octlm.model.decoder, "CHUNK_BIAS_ENTRIES", H * 2 * 21)
            cache = model.new_cache(2, capacity)
            parts = [model(ids[:, :5], cache=cache)[0]]
            parts += [model(ids[:, t : t + step], cache=cache)[0] for t in range(5, 21, step)]
            # float32, O(1) logits, different matmul shapes: measured 1.8e-7.
            torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-5, msg=f"step {step}")


def test_the_cache_passes_the_right_positions() -> None:
    """The test above can fail: decoding the last token as if it sat at position 0 changes its logits."""
    model = fire_model(seed=8).eval()
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        full, _ = model(ids)
        cache = model.new_cache(1)
        model(ids[:, :11], cache=cache)
        cache.length = 3  # pretend fewer tokens are cached: wrong positions and fewer keys
        wrong, _ = model(ids[:, 11:], cache=cache)
    assert (wrong[0, -1] - full[0, -1]).abs().max() > 1e-2  # measured 0.069


def test_a_tiny_model_learns_and_c_and_l_train() -> None:
    """Next-token loss on a fixed batch falls, and c and L move (as parameters, through abs)."""
    model = fire_model(seed=0, vocab_size=32, context_length=16, dropout=0.0)
    ids = torch.randint(0, 32, (8, 17), generator=torch.Generator().manual_seed(1))
    start = {n: p.detach().clone() for n, p in model.positions.named_parameters()}
    losses = memorise(model, ids)
    # Starts at ln 32 = 3.47; measured 3.47 -> 1.27 after 40 steps (memorising 128 random tokens), while c
    # went 0.1 -> 0.198 and L's multiple 1 -> 0.92.
    assert losses[0] == pytest.approx(math.log(32), abs=0.05) and losses[-1] < losses[0] - 1.5
    for name, value in model.positions.named_parameters():
        assert not torch.equal(value, start[name]), name


# ------------------------------------------------------------------------------------------------------------
# Memory of a long forward


class PeakLiveBytes(TorchDispatchMode):
    """The peak of the bytes held by storages that ops return while the mode is on (freed ones subtracted as
    they are freed: a storage's Python object lives exactly as long as some tensor uses it)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = self.peak = 0

    def _free(self, key: int) -> None:
        self.now -= self.live.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = id(storage)
                if key not in self.live and storage.nbytes():
                    self.live[key] = storage.nbytes()
                    self.now += storage.nbytes()
                    weakref.finalize(storage, self._free, key)
                    self.peak = max(self.peak, self.now)
        return out


def test_a_long_forward_allocates_no_tensor_past_one_chunks_bias_when_hidden_equals_heads() -> None:
    """As tests/model/test_decoder_long.py's check of ALiBi and T5 (T = 4,096, the whole bias [4, 4096, 4096] = 256 MiB):
    with fire_hidden = H the MLP's hidden layer of one chunk is as large as the chunk's bias, 8 MiB."""
    T = 4096
    model = fire_model(n_layers=1, d_model=16, d_ff=16, fire_hidden=H).eval()
    spy = tiny.LargestTensor()
    with torch.inference_mode(), spy:
        model(torch.randint(0, 64, (1, T), generator=torch.Generator().manual_seed(5)))
    assert spy.largest == 4 * octlm.model.decoder.CHUNK_BIAS_ENTRIES


def test_the_live_bytes_spy_counts_what_is_held_and_forgets_what_is_freed() -> None:
    """The test below can fail: the spy's peak is the 4 MiB held at once, and freed storages leave its count."""
    spy = PeakLiveBytes()
    with spy:
        a = torch.zeros(2**20)  # 4 MiB
        b = a + 1  # 4 MiB more
        del a
        c = b * 2  # a's bytes were given back first
        del b, c
    assert spy.peak == 2 * 4 * 2**20 and spy.now == 0


@pytest.mark.slow
def test_peak_memory_of_a_16k_forward_at_config_b_is_within_twice_nope() -> None:
    """T = 16,384 at config b's shape (C 256, 4 heads, V 1,024; benchmarks/measure.py), chunked. One layer, not
    config b's 4: a layer's temporaries are freed before the next, and the weights exist before the spy starts,
    so more layers add time, not peak. FIRE's extra is one chunk's hidden layer, fire_hidden / H = 8 times one
    chunk's bias (64 MiB), held while attention runs."""
    peaks = {}
    for position in ("nope", "fire"):
        torch.manual_seed(0)
        config = ModelConfig(
            vocab_size=1024,
            d_model=256,
            n_layers=1,
            n_heads=4,
            context_length=256,
            d_ff=1024,
            position=position,
            dropout=0.0,
        )
        model = Decoder(config).eval()
        spy = PeakLiveBytes()
        with torch.inference_mode(), spy:
            model(torch.zeros(1, 16384, dtype=torch.long))
        peaks[position] = spy.peak
    # Measured: NoPE 201,588,736 B, FIRE 792 B more (the same with 4 layers): FIRE's chunk temporaries, ~80 MiB,
    # stay under the peak the rest of the forward reaches anyway (the MLP and the head at T = 16,384).
    assert peaks["fire"] <= 2 * peaks["nope"], peaks


# ------------------------------------------------------------------------------------------------------------
# The constructor's defaults and initial draws


def test_fire_defaults_and_its_initial_draws() -> None:
    torch.manual_seed(7)
    fire = FirePositions(4)
    torch.manual_seed(7)
    bound = 1.0 / math.sqrt(32)  # PyTorch's Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan-in 1 then 32
    expected = {
        "w1": torch.empty(32).uniform_(-1.0, 1.0),
        "b1": torch.empty(32).uniform_(-1.0, 1.0),
        "w2": torch.empty(4, 32).uniform_(-bound, bound),
        "b2": torch.empty(4).uniform_(-bound, bound),
    }
    for name, value in expected.items():
        assert torch.equal(getattr(fire, name).detach(), value), name
    assert fire.initial_threshold == 512.0
    c, threshold = fire.values()
    assert (c.item(), threshold.item()) == (pytest.approx(0.1), 512.0)
