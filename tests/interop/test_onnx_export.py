"""`octlm export onnx`: the graph onnxruntime runs gives PyTorch's logits and the attention the model used.

Every scheme is exported once (module fixtures) from a run folder holding a tiny Decoder whose weights are moved
well away from their init (as in tests/interop/test_hf.py), then run in onnxruntime on a fixed text at several lengths.
The attention of layer 0 is recomputed in float64 NumPy from the weights alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import math
import resource
import signal
from pathlib import Path

import numpy as np
import pytest
import tokenizers
import torch

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# The scheme tests' own float64 references, reused for layer 0 (see numpy_first_layer_attention).
from references import np_cope_bias, np_fire, np_xpos  # noqa: E402

from octlm.commands.export_onnx import add_arguments, run  # noqa: E402
from octlm.config import Config, ModelConfig  # noqa: E402
from octlm.data.sources import Document  # noqa: E402
from octlm.data.tokenizer import Tokenizer, train_tokenizer  # noqa: E402
from octlm.errors import UserError  # noqa: E402
from octlm.interop.onnx_export import (  # noqa: E402
    INFO_FILE,
    ONNX_FILE,
    TOKENIZER_FILE,
    ProbedDecoder,
    export_onnx,
)
from octlm.model.decoder import Decoder  # noqa: E402
from octlm.positions import scheme_names  # noqa: E402
from octlm.positions.formulas import alibi_slopes, sinusoidal_table, t5_bucket  # noqa: E402
from octlm.positions.rope_scaling import scaled_frequencies  # noqa: E402
from octlm.storage.checkpoint import save_checkpoint  # noqa: E402
from octlm.storage.run import Run  # noqa: E402

# Largest |logit difference| onnxruntime vs PyTorch measured here (float32), over every scheme and length:
# 3.8e-6 (learned, nope), 1.7e-6 to 3.6e-6 for the others. 8e-6 leaves 2x for another CPU's kernels.
LOGIT_TOL = 8e-6
# Largest |attention difference| against the float64 NumPy recomputation: 3.0e-6 (rope with YaRN; 0.8e-6 to
# 1.5e-6 for the others): float32 rounding of scores made 16x larger on purpose (random_model).
ATTN_TOL = 6e-6
ROW_SUM_TOL = 1e-6  # the bound on a row's sum

MAX_LENGTH = 48  # unbounded schemes: three times the training length, so lengths past it are checked too
TINY = ModelConfig(d_model=32, n_layers=2, n_heads=4, d_ff=64, context_length=16)
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
    "nope": {},
    "rope-ssmax": {"position": "rope", "attention_scaling": "ssmax"},  # queries times s log n
}
# The schemes `octlm export onnx` refuses in one line (the class says why: `onnx_refusal`).
REFUSED = ("path",)
# The schemes numpy_first_layer_attention re-derives: all of them (xPos, FIRE and CoPE through the references
# of tests/references.py, which the scheme tests compare against). A new scheme must be added here and there.
NUMPY_SCHEMES = ("learned", "sinusoidal", "rope", "p-rope", "xpos", "alibi", "fire", "cope", "t5", "fox",
                 "stick-breaking", "nope")  # fmt: skip
# A fixed text: tabs, CRLF, non-ASCII, an emoji; twice, to be longer than MAX_LENGTH tokens.
TEXT = 2 * "def function_7(x):\r\n\treturn x * 7 + 'héllo, wörld' # 🙂 déjà vu\n"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    docs = [Document(f"doc{i}", f"def function_{i}(x):\n    return x * {i} + 'text, with punctuation!'\n")
            for i in range(40)]  # fmt: skip
    return train_tokenizer(docs, vocab_size=300)


def random_model(config: ModelConfig, seed: int = 0) -> Decoder:
    """A Decoder in eval mode whose every parameter is moved well away from its initial value."""
    torch.manual_seed(seed)
    model = Decoder(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.1))
        for block in model.blocks:
            block.attn.qkv.weight.mul_(4.0)  # scores 16x larger: peaked attention, where a wrong score shows
    return model


def make_run(folder: Path, config: ModelConfig, tokenizer: Tokenizer) -> Decoder:
    """A run folder as `octlm train` leaves it (checkpoint/ and the tokenizer); returns its model."""
    model = random_model(config)
    save_checkpoint(folder, model, None, Config(model=config, name="tiny"), step=3,
                    state={"sha256": {"tokenizer": tokenizer.sha256}})  # fmt: skip
    tokenizer.save(Run.of(folder).tokenizer_path)
    return model


@dataclasses.dataclass
class Exported:
    name: str  # a VARIANTS key
    model: Decoder  # the PyTorch reference (RoPE scaling applied as the export did)
    run_dir: Path
    out: Path
    info: dict
    session: ort.InferenceSession


@pytest.fixture(scope="module", params=list(VARIANTS))
def exported(request: pytest.FixtureRequest, tokenizer: Tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Exported:  # fmt: skip
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
        model.positions.set_frequencies(*scaled_frequencies("yarn", config.head_dim, config.rope_base,
                                                            MAX_LENGTH / 16, 16))  # fmt: skip
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
    assert {extra.get("position", name) for name, extra in VARIANTS.items()} | set(REFUSED) == set(
        scheme_names()
    )
    assert set(NUMPY_SCHEMES) | set(REFUSED) == set(scheme_names()), "extend numpy_first_layer_attention"


@pytest.mark.parametrize("scheme", REFUSED)
def test_a_scheme_with_no_onnx_form_is_refused_in_one_line(
    scheme: str, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    config = dataclasses.replace(TINY, vocab_size=tokenizer.vocab_size, position=scheme)
    make_run(tmp_path / "run", config, tokenizer)
    with pytest.raises(UserError, match=rf"^{scheme} models are not exported to ONNX: .*solve_triangular"):
        export_onnx(tmp_path / "run", tmp_path / "out")
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


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
    assert len(outputs) == 1 + TINY.n_layers
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
        c.position, 16 if learned else MAX_LENGTH, 16)  # fmt: skip
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
    assert names == ["logits", "attn_0", "attn_1"] == list(info["outputs"])
    assert sorted(p.name for p in exported.out.parent.iterdir()) == ["onnx", "run"], "a temporary was left"


@pytest.fixture(scope="module")
def learned_run(tokenizer: Tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("refusals") / "run"
    make_run(folder, dataclasses.replace(TINY, vocab_size=tokenizer.vocab_size), tokenizer)
    return folder


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_length": 17}, "--max-length 17 is longer than the learned position table (16 rows)"),
        ({"rope_scaling": "ntk"}, "--rope-scaling ntk: the learned scheme has no RoPE frequencies to scale"),
        ({"rope_factor": 2.0}, "--rope-factor 2.0 needs --rope-scaling METHOD"),
        ({"max_length": 1}, "--max-length 1 is outside [2, 65536]"),
    ],
)
def test_refusals_write_nothing(learned_run: Path, tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        export_onnx(learned_run, tmp_path / "out", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_dynamic_ntk_is_refused_in_one_line(tokenizer: Tokenizer, tmp_path: Path) -> None:
    config = dataclasses.replace(TINY, vocab_size=tokenizer.vocab_size, position="rope")
    make_run(tmp_path / "run", config, tokenizer)
    with pytest.raises(UserError, match="--rope-scaling dynamic: dynamic NTK changes") as caught:
        export_onnx(tmp_path / "run", tmp_path / "out", rope_scaling="dynamic")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_fine_tuned_rope_run_refuses_a_second_scaling(tokenizer: Tokenizer, tmp_path: Path) -> None:
    config = dataclasses.replace(TINY, vocab_size=tokenizer.vocab_size, position="rope", rope_scaling="yarn",
                                 rope_factor=4.0, rope_original_length=4)  # fmt: skip
    make_run(tmp_path / "run", config, tokenizer)
    with pytest.raises(UserError, match=r"^--rope-scaling ntk: this run was fine-tuned with model.rope_scaling = "
                                        r"'yarn' \(factor 4\), which the export keeps; drop the flag$"):  # fmt: skip
        export_onnx(tmp_path / "run", tmp_path / "out", rope_scaling="ntk")
    assert not (tmp_path / "out").exists()


def test_output_folder_refusals(learned_run: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("mine")
    for out, message in [
        (learned_run, "is or holds the run folder"),
        (learned_run.parent, "is or holds the run folder"),
        (learned_run / "onnx", "is inside the run folder"),
        (tmp_path / "file", "is a file, not a folder"),
        (tmp_path / "notes", "already exists and is not empty; pass --force"),
    ]:
        with pytest.raises(UserError, match=message):
            export_onnx(learned_run, out)
    with pytest.raises(UserError, match="is no earlier ONNX export"):
        export_onnx(learned_run, tmp_path / "notes", force=True)
    assert (tmp_path / "notes" / "mine.txt").read_text() == "mine"
    assert sorted(p.name for p in learned_run.iterdir()) == ["checkpoint", "tokenizer.json"]


def test_force_replaces_an_export_and_a_full_disk_keeps_it(
    learned_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--force over an earlier export, through the command; then a real write failure (RLIMIT_FSIZE below the
    graph's size, SIGXFSZ ignored so that the write fails with EFBIG) leaves that export untouched."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "onnx"
    out.mkdir()
    (out / INFO_FILE).write_text(
        json.dumps({"format": "octlm-onnx"})
    )  # an earlier export, as far as it shows
    (out / "stale.bin").write_bytes(b"old")
    run(parser.parse_args([str(learned_run), "--out", str(out), "--force"]))
    assert f"wrote {out}: {ONNX_FILE}" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted([ONNX_FILE, TOKENIZER_FILE, INFO_FILE])
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"], "a temporary or set-aside folder was left"
    with pytest.raises(SystemExit):
        parser.parse_args([str(learned_run), "--out", str(out), "--max-length", "1"])

    before = {p.name: p.read_bytes() for p in out.iterdir()}
    limit, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, limit[1]))  # the graph is about 200 kB
        with pytest.raises(OSError) as caught:
            export_onnx(learned_run, out, force=True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    assert caught.value.errno == errno.EFBIG, caught.value
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"], "a temporary or set-aside folder was left"
