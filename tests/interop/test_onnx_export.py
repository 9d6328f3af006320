"""`octlm export onnx`: the graph onnxruntime runs gives PyTorch's logits and the attention the model used.

Every scheme is exported once (module fixtures) from a run folder holding a tiny Decoder whose weights are moved
well away from their init (as in tests/interop/test_hf.py), then run in onnxruntime on a fixed text at several lengths.
The attention of layer 0 is recomputed in float64 NumPy from the weights alone. The first layer's outputs
(token_rows .. bias_0) are compared with the tensors PyTorch's own forward pass hands the model's hooks, and
the position signal in them with NumPy references (the sinusoidal table, ALiBi's slopes, T5, FIRE, CoPE, FoX).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import tokenizers
import torch

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# The scheme tests' own float64 references, reused for layer 0 (see numpy_first_layer_attention).
from onnx_runs import TINY, make_run, small_tokenizer  # noqa: E402
from references import np_cope_bias, np_fire, np_xpos  # noqa: E402

from octlm.config import ModelConfig  # noqa: E402
from octlm.data.tokenizer import Tokenizer  # noqa: E402
from octlm.errors import UserError  # noqa: E402
from octlm.inspect.probe import forward_with_hooks  # noqa: E402
from octlm.interop.onnx_export import (  # noqa: E402
    FIRST_LAYER,
    INFO_FILE,
    ONNX_FILE,
    TOKENIZER_FILE,
    ProbedDecoder,
    export_onnx,
    position_signal,
)
from octlm.model.decoder import Decoder  # noqa: E402
from octlm.positions import SCHEMES, householder, scheme_names  # noqa: E402
from octlm.positions.formulas import alibi_slopes, sinusoidal_table, t5_bucket  # noqa: E402
from octlm.positions.rope_scaling import scaled_frequencies  # noqa: E402
from octlm.storage.run import Run  # noqa: E402

# Largest |logit difference| onnxruntime vs PyTorch measured here (float32), over every scheme and length:
# 3.8e-6 (learned, nope), 1.7e-6 to 3.6e-6 for the others. 8e-6 leaves 2x for another CPU's kernels.
LOGIT_TOL = 8e-6
# Largest |attention difference| against the float64 NumPy recomputation: 3.0e-6 (rope with YaRN; 0.8e-6 to
# 1.5e-6 for the others): float32 rounding of scores made 16x larger on purpose (random_model).
ATTN_TOL = 6e-6
ROW_SUM_TOL = 1e-6  # the bound on a row's sum
# Largest |difference| of a first-layer output against the tensor PyTorch's own pass gave the hook, over every
# variant at the longest length, relative to max(1, the output's largest |value|) (xPos's keys reach ~10^3 at
# scale base 8, FoX's bias 45, where a float32 ulp is 1e-4 and 4e-6): measured 5.4e-7 (CoPE's bias_0; q and k
# 1e-7 to 3.5e-7; token_rows and embedded exactly 0). FIRST_TOL leaves about 3x.
FIRST_TOL = 1.5e-6
# |difference| against the float64 NumPy references, same scaling: measured 7.2e-7 (CoPE), 1.5e-7 (FIRE),
# 8.9e-8 (sinusoidal rows), 5.3e-8 (FoX), 0 (ALiBi, T5). SIGNAL_TOL leaves 2x over CoPE's.
SIGNAL_TOL = 1.5e-6

SOLVE = householder.solve_unit_lower  # PaTH's own triangular solve, before any export

MAX_LENGTH = 48  # unbounded schemes: three times the training length, so lengths past it are checked too
VARIANTS = {
    "learned": {},
    "sinusoidal": {"sinusoidal_scale": 1.0},  # the seed's unscaled sum: position matters in the logits
    # Llama's parts and grouped KV heads (two query heads per KV head).
    "rope": {"norm": "rmsnorm", "mlp": "swiglu", "bias": False, "n_kv_heads": 2},
    "rope-yarn": {"position": "rope", "rope_layout": "interleaved"},  # exported with --rope-scaling yarn
    "rope-fraction": {"position": "rope", "rope_fraction": 0.5},  # GPT-NeoX's partial rotary
    # Fine-tuned with position interpolation (model.rope_scaling): the graph keeps the config's frequencies.
    "rope-pi-tuned": {
        "position": "rope",
        "rope_scaling": "linear",
        "rope_factor": 2.0,
        "rope_original_length": 8,
    },
    "p-rope": {"prope_fraction": 0.5},
    "xpos": {"xpos_scale_base": 8.0},  # a strong decay at these lengths, so that a dropped scale shows
    "alibi": {},
    "fire": {
        "fire_hidden": 8,
        "fire_threshold": 6.0,
    },  # L below the export's lengths: the normaliser switches
    "cope": {"cope_positions": 6, "n_kv_heads": 2},  # counts clamp within the text; grouped KV heads
    "t5": {"t5_buckets": 8, "t5_max_distance": 20},  # so that the text reaches the logarithmic buckets
    "fox": {"n_kv_heads": 2},  # forget gates from the content; grouped KV heads
    "stick-breaking": {},  # weights that need not sum to 1, and none on the query's own key
    "path": {
        "n_kv_heads": 2
    },  # keys turned by the tokens after them, solved by doubling in the graph; grouped
    "nope": {},
    "rope-ssmax": {"position": "rope", "attention_scaling": "ssmax"},  # queries times s log n
}
# The schemes numpy_first_layer_attention re-derives: all of them (xPos, FIRE and CoPE through the references
# of tests/references.py, which the scheme tests compare against). A new scheme must be added here and there.
NUMPY_SCHEMES = (
    "learned",
    "sinusoidal",
    "rope",
    "p-rope",
    "xpos",
    "alibi",
    "fire",
    "cope",
    "t5",
    "fox",
    "path",
    "stick-breaking",
    "nope",
)
# Where each scheme's position signal enters (model.json's "signal"), by hand from the papers: rows added,
# q and k rotated, a term on the scores, an attention rule of its own, nothing.
SIGNAL = {
    "learned": "embed",
    "sinusoidal": "embed",
    "rope": "rotate",
    "p-rope": "rotate",
    "xpos": "rotate",
    "alibi": "bias",
    "t5": "bias",
    "fire": "bias",
    "cope": "bias",
    "fox": "attend",
    "path": "attend",
    "stick-breaking": "attend",
    "nope": "none",
}
ROTATING = {"rope", "p-rope", "xpos"}
ADDED_TERM = {"alibi", "t5", "fire", "cope", "fox"}  # bias_0 is not zero
# A fixed text: tabs, CRLF, non-ASCII, an emoji; twice, to be longer than MAX_LENGTH tokens.
TEXT = 2 * "def function_7(x):\r\n\treturn x * 7 + 'héllo, wörld' # 🙂 déjà vu\n"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return small_tokenizer()


@dataclasses.dataclass
class Exported:
    name: str  # a VARIANTS key
    model: Decoder  # the PyTorch reference (RoPE scaling applied as the export did)
    run_dir: Path
    out: Path
    info: dict
    session: ort.InferenceSession


@pytest.fixture(scope="module", params=list(VARIANTS))
def exported(
    request: pytest.FixtureRequest, tokenizer: Tokenizer, tmp_path_factory: pytest.TempPathFactory
) -> Exported:
    name = request.param
    extra = dict(VARIANTS[name])
    scheme = extra.pop("position", name)
    root = tmp_path_factory.mktemp(name)
    config = dataclasses.replace(TINY, vocab_size=tokenizer.vocab_size, position=scheme, **extra)
    model = make_run(root / "run", config, tokenizer)
    out = root / "onnx"
    kwargs = {} if scheme == "learned" else {"max_length": MAX_LENGTH}
    if name == "rope-yarn":
        kwargs["rope_scaling"] = "yarn"
        model.positions.set_frequencies(
            *scaled_frequencies("yarn", config.head_dim, config.rope_base, MAX_LENGTH / 16, 16)
        )
    info = export_onnx(root / "run", out, **kwargs)
    return Exported(name, model, root / "run", out, info, ort.InferenceSession(str(out / ONNX_FILE)))


def text_ids(tokenizer: Tokenizer, length: int) -> torch.Tensor:
    """`[2, length]`: the text's first `length` tokens, and the same shifted by one token."""
    ids = tokenizer.encode(TEXT)
    assert len(ids) > length, "the text must be longer than the longest length tested"
    return torch.tensor([ids[:length], ids[1 : length + 1]])


def lengths(e: Exported) -> list[int]:
    return [1, 11, e.info["context_length"]]


def run_onnx(e: Exported, ids: torch.Tensor) -> list[np.ndarray]:
    return e.session.run(None, {"ids": ids.numpy()})


# ------------------------------------------------------------------------------------------------------------
# The graph


def test_every_config_scheme_is_covered() -> None:
    assert {extra.get("position", name) for name, extra in VARIANTS.items()} == set(scheme_names())
    assert set(NUMPY_SCHEMES) == set(scheme_names()), "extend numpy_first_layer_attention"


def test_a_scheme_with_no_onnx_form_is_refused_in_one_line(
    tokenizer: Tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every built-in scheme has a graph; a plugin scheme may say it has none, as PaTH's class once did
    monkeypatch.setattr(SCHEMES["path"], "onnx_refusal", "its attention needs an operator ONNX lacks")
    config = dataclasses.replace(TINY, vocab_size=tokenizer.vocab_size, position="path")
    make_run(tmp_path / "run", config, tokenizer)
    with pytest.raises(
        UserError, match=r"^path models are not exported to ONNX: its attention needs an operator"
    ):
        export_onnx(tmp_path / "run", tmp_path / "out")
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_path_is_chunked_again_after_its_export(exported: Exported) -> None:
    # the export traces PaTH as one chunk solved by doubling; PyTorch's own passes must get their solve back
    assert (householder.CHUNK_TOKENS, householder.solve_unit_lower) == (64, SOLVE)


def test_logits_match_pytorch_at_every_length(exported: Exported, tokenizer: Tokenizer) -> None:
    worst = 0.0
    for length in lengths(exported):
        ids = text_ids(tokenizer, length)
        outputs = run_onnx(exported, ids)
        with torch.no_grad():
            reference, _ = exported.model(ids)
        assert outputs[0].shape == (2, length, tokenizer.vocab_size)
        assert reference.abs().max() > 1.0, "logits this small would hide mistakes"
        worst = max(worst, float(np.abs(outputs[0] - reference.numpy()).max()))
    print(
        f"{exported.name}: max |logit difference| {worst:.3g}, max |logit| {float(reference.abs().max()):.3g}"
    )
    assert worst <= LOGIT_TOL


def test_attention_is_causal_and_rows_sum_to_one(exported: Exported, tokenizer: Tokenizer) -> None:
    length = exported.info["context_length"]
    outputs = run_onnx(exported, text_ids(tokenizer, length))
    assert len(outputs) == 1 + TINY.n_layers + len(FIRST_LAYER)
    outputs = outputs[: 1 + TINY.n_layers]  # logits, attn_0, attn_1
    for attn in outputs[1:]:
        assert attn.shape == (2, TINY.n_heads, length, length)
        assert np.all(np.triu(attn, k=1) == 0.0), "a query attends to a later key"
        assert attn.min() >= 0.0
    if exported.name == "stick-breaking":  # rows sum to 1 - Π(1 - β) < 1, the first row to 0 (no own key)
        sums = np.stack([attn.sum(-1) for attn in outputs[1:]])
        assert np.all(sums <= 1 + ROW_SUM_TOL) and np.all(sums[..., 0] == 0) and sums.max() > 0.5
    else:
        worst = max(float(np.abs(attn.sum(-1) - 1).max()) for attn in outputs[1:])
        print(f"{exported.name}: max |row sum - 1| {worst:.3g}")
        assert worst <= ROW_SUM_TOL
    # Not uniform: the weights make attention peaked, so a wrong score would show.
    assert outputs[-1][:, :, -1].max() > 2.0 / length


def test_probed_decoder_attention_matches_the_graph(exported: Exported, tokenizer: Tokenizer) -> None:
    ids = text_ids(tokenizer, 11)
    with torch.no_grad():
        ours = ProbedDecoder(exported.model, exported.info["context_length"])(ids)
    for mine, theirs in zip(ours, run_onnx(exported, ids), strict=True):
        assert np.abs(mine.numpy() - theirs).max() <= LOGIT_TOL
    single = run_onnx(exported, ids[:1, :5])  # a batch of one, a fifth length
    assert np.abs(single[0] - ours[0][:1, :5].numpy()).max() <= LOGIT_TOL
    assert exported.info["checked"]["max_logit_difference"] <= LOGIT_TOL


def numpy_norm(x: np.ndarray, config: ModelConfig, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    if config.norm == "rmsnorm":
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + config.norm_eps) * weight
    centred = x - x.mean(-1, keepdims=True)
    y = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + config.norm_eps) * weight
    return y + bias if bias is not None else y


def numpy_rope(x: np.ndarray, model: Decoder) -> np.ndarray:
    """x `[B, H, T, D]` rotated by t·θ_i, θ from the scheme (scaled or not), cos and sin times its scaling."""
    scheme = model.positions
    r = scheme.rotary_dims  # rope_fraction < 1: only the first r channels turn
    if r < x.shape[-1]:
        return np.concatenate([numpy_rope_channels(x[..., :r], scheme), x[..., r:]], axis=-1)
    return numpy_rope_channels(x, scheme)


def numpy_rope_channels(x: np.ndarray, scheme) -> np.ndarray:
    angle = np.arange(x.shape[2])[:, None] * scheme.inv_freq.numpy()[None, :]  # [T, D/2]; p-RoPE: some 0
    cos, sin = np.cos(angle) * scheme.attention_scaling, np.sin(angle) * scheme.attention_scaling
    if scheme.layout == "half":
        a, b = np.split(x, 2, axis=-1)
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def numpy_xpos(x: np.ndarray, model: Decoder, key: bool) -> np.ndarray:
    """x `[B, H, T, D]` at positions 0 .. T - 1 through tests/references.py's `np_xpos` (the paper's formula, half
    layout), with the model's base and scale base. Interleaved pairs are gathered into the half layout first:
    queries and keys get the same channel order, so q · k is unchanged."""
    if model.positions.layout == "interleaved":
        x = np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)
    return np_xpos(x, np.arange(x.shape[2]), model.config.rope_base, model.positions.scale_base, key)


def numpy_bias(model: Decoder, q: np.ndarray, k: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The score bias of query i, key j (0 where none; -inf after the query where the scheme says so), added
    to q · k / sqrt(D): `[H, T, T]`, or `[B, H, T, T]` for CoPE, whose bias reads q `[B, H, T, D]` and the
    ungrouped k `[B, Hkv, T, D]`, and FoX, whose gates read layer 0's normed input h `[B, T, C]`."""
    c, T = model.config, q.shape[2]
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    if c.position == "alibi":
        return -alibi_slopes(c.n_heads).double().numpy()[:, None, None] * (i - j)
    if c.position == "t5":
        buckets = t5_bucket(torch.from_numpy(j - i), c.t5_buckets, c.t5_max_distance).numpy()
        return model.positions.table.weight.detach().double().numpy()[buckets].transpose(2, 0, 1)
    if c.position == "fire":  # the MLP of ψ(i - j) / ψ(max(L, i)), from c, L and the MLP's parameters
        return np_fire(model.positions, np.arange(T), np.arange(T))
    if c.position == "cope":  # gated counts of layer 0's q and k, interpolated in layer 0's table
        return np_cope_bias(q, k, model.positions.tables[0].weight.detach().double().numpy())
    if c.position == "fox":  # Σ_{t=j+1..i} log σ(w_h · h_t + b_h), loop by loop
        gate = model.positions.gates[0]
        logit = h @ gate.weight.detach().double().numpy().T + gate.bias.detach().double().numpy()  # [B, T, H]
        log_f = -np.logaddexp(0.0, -logit)
        bias = np.zeros((q.shape[0], c.n_heads, T, T))
        for a, b in np.ndindex(T, T):
            bias[:, :, a, b] = log_f[:, b + 1 : a + 1].sum(1) if b <= a else -np.inf
        return bias
    return np.zeros((1, T, T))


def numpy_path_scores(model: Decoder, q: np.ndarray, k: np.ndarray, h: np.ndarray) -> np.ndarray:
    """PaTH's q_iᵀ H_i ⋯ H_{j+1} k_j for j <= i (-inf after) `[B, H, T, T]`, token by token: when token i
    arrives every earlier key is turned by H_i = I - β_i w_i w_iᵀ (w_i, β_i from layer 0's normed input h)."""
    w = {name: value.detach().double().numpy() for name, value in model.positions.state_dict().items()}
    B, H, T, D = q.shape
    Hkv = k.shape[1]
    directions = (h @ w["directions.0.weight"].T).reshape(B, T, Hkv, D)
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
    beta = 2.0 / (1.0 + np.exp(-(h @ w["strengths.0.weight"].T + w["strengths.0.bias"])))  # [B, T, Hkv]
    scores = np.full((B, H, T, T), -np.inf)
    for b, g in np.ndindex(B, Hkv):
        keys = k[b, g].copy()  # [T, D]
        for i in range(T):
            u = directions[b, i, g]
            keys[:i] -= beta[b, i, g] * np.outer(keys[:i] @ u, u)  # H_i on every earlier key
            for head in range(g * (H // Hkv), (g + 1) * (H // Hkv)):
                scores[b, head, i, : i + 1] = keys[: i + 1] @ q[b, head, i]
    return scores


def numpy_stick_breaking(scores: np.ndarray) -> np.ndarray:
    """Stick-breaking weights A_ij = σ(z_ij) Π_{j<m<i} (1 - σ(z_im)) for j < i (0 elsewhere), as products."""
    beta, T = 1.0 / (1.0 + np.exp(-scores)), scores.shape[-1]
    weights = np.zeros_like(scores)
    for i, j in np.ndindex(T, T):
        if j < i:
            weights[..., i, j] = beta[..., i, j] * np.prod(1.0 - beta[..., i, j + 1 : i], axis=-1)
    return weights


def numpy_first_layer_attention(model: Decoder, ids: np.ndarray) -> np.ndarray:
    """Layer 0's attention probabilities `[B, H, T, T]` in float64, from the weights alone."""
    c, w = model.config, {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    B, T = ids.shape
    x = w["token_embedding.weight"][ids]  # [B, T, C]
    if c.position == "learned":
        x = x + w["positions.table.weight"][:T]
    if c.position == "sinusoidal":
        x = x + sinusoidal_table(T, c.d_model, c.sinusoidal_base).double().numpy() * c.sinusoidal_scale
    p = "blocks.0."
    h = numpy_norm(x, c, w[p + "norm1.weight"], w.get(p + "norm1.bias"))
    qkv = h @ w[p + "attn.qkv.weight"].T + w.get(p + "attn.qkv.bias", 0.0)
    D, H, Hkv = c.head_dim, c.n_heads, c.kv_heads
    q = qkv[..., : H * D].reshape(B, T, H, D).transpose(0, 2, 1, 3)
    k = qkv[..., H * D : (H + Hkv) * D].reshape(B, T, Hkv, D).transpose(0, 2, 1, 3)
    if c.position in ("rope", "p-rope"):
        q, k = numpy_rope(q, model), numpy_rope(k, model)
    if c.position == "xpos":
        q, k = numpy_xpos(q, model, key=False), numpy_xpos(k, model, key=True)
    bias = numpy_bias(model, q, k, h)
    if c.position == "path":
        scores = numpy_path_scores(model, q, k, h) / math.sqrt(D)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    k = np.repeat(k, H // Hkv, axis=1)  # query head h reads KV head h // (H / Hkv)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D)
    if c.attention_scaling == "ssmax":  # query i sees i + 1 keys: its scores times s_h log(i + 1)
        scores = scores * w[p + "attn.scaling.s"][:, None, None] * np.log(np.arange(1, T + 1))[:, None]
    if c.position == "stick-breaking":
        return numpy_stick_breaking(scores)
    scores = scores + bias
    scores = np.where(np.arange(T)[None, :] > np.arange(T)[:, None], -np.inf, scores)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_first_layer_attention_matches_numpy(exported: Exported, tokenizer: Tokenizer) -> None:
    ids = text_ids(tokenizer, exported.info["context_length"])
    graph = run_onnx(exported, ids)[1]
    reference = numpy_first_layer_attention(exported.model, ids.numpy())
    error = float(np.abs(graph - reference).max())
    print(f"{exported.name}: max |attention difference| vs NumPy {error:.3g}")
    assert error <= ATTN_TOL


# ------------------------------------------------------------------------------------------------------------
# The first layer's numbers


def spy(obj: object, method: str, calls: list) -> None:
    """Record every call of `obj.method` (an instance attribute shadows the class's) as (args, result)."""
    original = getattr(obj, method)

    def recorded(*args):
        result = original(*args)
        calls.append((args, result))
        return result

    setattr(obj, method, recorded)


def pytorch_first_layer(model: Decoder, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The first layer's numbers as `model(ids)` itself hands them to its hooks (module hooks and spies on its
    scheme's methods, no ProbedDecoder): FIRST_LAYER's names, bias_0 only below the diagonal (above it: -inf or
    anything, as the scheme's hook gives it) and only for the schemes with a term on the scores."""
    seen: dict[str, torch.Tensor] = {}
    calls: dict[str, list] = {name: [] for name in ("rotate", "bias", "contextual_bias", "running_sums")}
    scheme, attn = model.positions, model.blocks[0].attn
    for name, found in calls.items():
        if hasattr(scheme, name):
            spy(scheme, name, found)

    def keep(name: str, x: torch.Tensor) -> None:  # a hook that returns None leaves the pass as it is
        seen.setdefault(name, x)

    handles = [
        model.token_embedding.register_forward_hook(lambda m, a, out: keep("token_rows", out)),
        model.blocks[0].register_forward_pre_hook(lambda m, a: keep("embedded", a[0])),
    ]
    try:
        forward_with_hooks(model, ids, handles)
    finally:
        for name in calls:
            scheme.__dict__.pop(name, None)
    (q, k, _), (q_rot, k_rot) = calls["rotate"][0]  # layer 0's is the first call
    seen.update(q_0=q, k_0=k, q_rot_0=q_rot, k_rot_0=k_rot)
    assert (q.shape[1], k.shape[1]) == (attn.n_heads, attn.n_kv_heads)
    if calls["bias"] and calls["bias"][0][1] is not None:  # built once per pass, shared by every layer
        seen["bias_0"] = calls["bias"][0][1].expand(ids.shape[0], -1, -1, -1)
    if calls["contextual_bias"]:
        seen["bias_0"] = calls["contextual_bias"][0][1]
    if calls["running_sums"]:  # FoX: c_i - c_j of layer 0's running sums of log forget gates
        c = calls["running_sums"][0][1]
        seen["bias_0"] = (c.unsqueeze(-1) - c.unsqueeze(-2)).float()
    return seen


def test_first_layer_outputs_are_what_pytorch_hands_its_hooks(
    exported: Exported, tokenizer: Tokenizer
) -> None:
    ids = text_ids(tokenizer, exported.info["context_length"])
    graph = dict(zip(exported.info["outputs"], run_onnx(exported, ids), strict=True))
    reference = pytorch_first_layer(exported.model, ids)
    below = np.tril(np.ones((ids.shape[1],) * 2, dtype=bool))  # key j <= query i
    errors = {}
    for name in FIRST_LAYER:
        mine = graph[name]
        if name == "bias_0":
            assert np.all(mine[..., ~below] == 0.0), "cells above the diagonal are written as 0"
            if "bias_0" not in reference:
                assert np.all(mine == 0.0)
                continue
            mine, theirs = mine[..., below], reference[name].numpy()[..., below]
        else:
            theirs = reference[name].numpy()
        assert mine.shape == theirs.shape, name
        errors[name] = float(np.abs(mine - theirs).max()) / max(1.0, float(np.abs(theirs).max()))
    print(
        f"{exported.name}: max |first-layer difference| / max(1, max |value|) "
        + ", ".join(f"{n} {e:.2g}" for n, e in errors.items())
    )
    assert max(errors.values()) <= FIRST_TOL


def numpy_sinusoidal(length: int, width: int, base: float) -> np.ndarray:
    """Vaswani et al.'s table `[length, width]`: sin(t / base^(2i / width)) in column 2i, cos in 2i + 1."""
    angle = np.arange(length)[:, None] / base ** (np.arange(0, width, 2)[None, :] / width)
    table = np.empty((length, width))
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table


def test_first_layer_outputs_hold_each_schemes_signal(exported: Exported, tokenizer: Tokenizer) -> None:
    """embedded - token_rows is the position rows (0 without), q_rot_0 differs from q_0 exactly where the
    scheme rotates, bias_0 is the scheme's term on the scores (0 without), each against NumPy."""
    c, model = exported.model.config, exported.model
    ids = text_ids(tokenizer, exported.info["context_length"])
    out = dict(zip(exported.info["outputs"], run_onnx(exported, ids), strict=True))
    T, scheme = ids.shape[1], c.position
    added = out["embedded"].astype(np.float64) - out["token_rows"]  # [B, T, C]
    if scheme == "sinusoidal":
        error = np.abs(added - numpy_sinusoidal(T, c.d_model, c.sinusoidal_base) * c.sinusoidal_scale).max()
        print(f"{exported.name}: max |embedded - token_rows - sinusoidal table| {error:.2g}")
        assert error <= SIGNAL_TOL
    elif scheme == "learned":
        table = model.positions.table.weight.detach().double().numpy()[:T]
        assert np.abs(added - table).max() <= SIGNAL_TOL
    else:
        assert np.all(added == 0.0)
    for x in ("q", "k"):
        turned = np.abs(out[f"{x}_rot_0"] - out[f"{x}_0"]).max()
        assert turned > 0.1 if scheme in ROTATING else turned == 0.0, (x, turned)
    bias = out["bias_0"]
    assert bias.shape == (2, c.n_heads, T, T)
    if scheme not in ADDED_TERM:
        assert np.all(bias == 0.0)
        return
    below = np.tril(np.ones((T, T), dtype=bool))
    q, k = out["q_rot_0"].astype(np.float64), out["k_rot_0"].astype(np.float64)  # CoPE's gates read these
    w = {name: p.detach().double().numpy() for name, p in model.state_dict().items()}
    h = numpy_norm(
        out["embedded"].astype(np.float64), c, w["blocks.0.norm1.weight"], w.get("blocks.0.norm1.bias")
    )
    if scheme == "alibi":  # 4 heads: slopes 2^-2, 2^-4, 2^-6, 2^-8 (Press et al.), times -(i - j)
        slopes = 2.0 ** (-8.0 / c.n_heads * np.arange(1, c.n_heads + 1))
        reference = -slopes[:, None, None] * (np.arange(T)[:, None] - np.arange(T)[None, :])
    else:
        reference = numpy_bias(model, q, k, h)
    reference = np.broadcast_to(reference, bias.shape)
    error = float(np.abs(bias[..., below] - reference[..., below]).max()) / max(
        1.0, np.abs(reference[..., below]).max()
    )
    print(
        f"{exported.name}: max |bias_0 - NumPy| / max(1, max |NumPy|) {error:.2g}, max |bias_0| {np.abs(bias).max():.2g}"
    )
    assert error <= SIGNAL_TOL and np.abs(bias).max() > 0.1
    assert np.all(bias[..., ~below] == 0.0)


def test_signal_says_where_each_scheme_acts(exported: Exported) -> None:
    assert exported.info["signal"] == SIGNAL[exported.model.config.position]


def test_signal_covers_every_registered_scheme() -> None:
    assert {name: position_signal(cls) for name, cls in SCHEMES.items()} == SIGNAL


# ------------------------------------------------------------------------------------------------------------
# The folder


def test_folder_holds_the_graph_the_tokenizer_and_model_json(exported: Exported) -> None:
    files = sorted(p.name for p in exported.out.iterdir())
    assert files == sorted([ONNX_FILE, TOKENIZER_FILE, INFO_FILE])
    # The run's tokenizer, plus the post-processor that puts EOT first as octlm's prompts have it.
    shipped = tokenizers.Tokenizer.from_file(str(exported.out / TOKENIZER_FILE))
    shipped.encode_special_tokens = True  # as octlm's Tokenizer (a literal "<|endoftext|>" is plain text)
    run_tokenizer = Tokenizer.load(Run.of(exported.run_dir).tokenizer_path)
    text = "class Codec(codecs.Codec): <|endoftext|>"
    assert shipped.encode(text).ids == [run_tokenizer.eot_id, *run_tokenizer.encode(text)]
    assert shipped.encode(text, add_special_tokens=False).ids == run_tokenizer.encode(text)
    info = json.loads((exported.out / INFO_FILE).read_text(encoding="utf-8"))
    assert info == exported.info
    c = exported.model.config
    learned = c.position == "learned"
    assert (info["scheme"], info["context_length"], info["train_length"]) == (
        c.position,
        16 if learned else MAX_LENGTH,
        16,
    )
    assert (info["vocab_size"], info["n_layers"], info["n_heads"]) == (c.vocab_size, 2, 4)
    assert info["files"] == {
        name: (exported.out / name).stat().st_size for name in (ONNX_FILE, TOKENIZER_FILE)
    }
    expected = {
        "rope-yarn": {"method": "yarn", "factor": 3.0},
        "rope-pi-tuned": {"method": "linear", "factor": 2.0},
    }
    assert info["rope_scaling"] == expected.get(exported.name)
    names = [o.name for o in exported.session.get_outputs()]
    assert (
        names
        == [
            "logits",
            "attn_0",
            "attn_1",
            "token_rows",
            "embedded",
            "q_0",
            "k_0",
            "q_rot_0",
            "k_rot_0",
            "bias_0",
        ]
        == info["outputs"]
        == list(info["output_shapes"])
    )
    assert (info["n_kv_heads"], info["head_dim"]) == (c.kv_heads, c.head_dim)
    assert sorted(p.name for p in exported.out.parent.iterdir()) == ["onnx", "run"], "a temporary was left"
