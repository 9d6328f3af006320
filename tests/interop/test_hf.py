"""octlm against Hugging Face `transformers`: exported models give the same logits as the originals, and
the position formulas match transformers' own code (RoPE from Llama, T5's buckets, ALiBi slopes from Bloom).

Every model here has random weights, perturbed away from their init (norm weights not 1, biases not 0, larger
matrices) so that a mapping mistake such as a missing transpose or swapped gate/up shows in the logits.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import hf_models  # noqa: E402
from hf_models import (  # noqa: E402
    SMALL_GPT2,
    SMALL_LLAMA,
    TOL,
    check_folder,
    logits_difference,
    random_ids,
    random_model,
    tiny_run,
)

from octlm.cli import main  # noqa: E402
from octlm.config import ModelConfig  # noqa: E402
from octlm.data.tokenizer import Tokenizer  # noqa: E402
from octlm.errors import UserError  # noqa: E402
from octlm.interop.hf import export_hf, export_hf_model, from_hf, hf_architecture, to_hf  # noqa: E402
from octlm.interop.hf_arch import target_differences  # noqa: E402
from octlm.model.decoder import Decoder  # noqa: E402
from octlm.positions.formulas import alibi_slopes, rope_rotate, t5_bucket  # noqa: E402

tokenizer = hf_models.tokenizer  # its module-scoped fixture, which pytest finds here by this name

# Largest |logit difference| measured on this machine (float32, both attention kernels) for the modern-sized
# Llama (C = 128, V = 1024, larger logits): 1.5e-5; the smaller models' TOL is hf_models.py's. About 3x, no more.
MODERN_TOL = 4e-5

DAY1 = ModelConfig()  # octlm/config/builtin/day1.toml: V=1024, C=128, T=128, 2 layers, 4 heads, d_ff=512
MODERN = dataclasses.replace(
    SMALL_LLAMA, vocab_size=1024, d_model=128, context_length=128, d_ff=344, rope_base=10000.0, norm_eps=1e-5
)  # octlm/config/builtin/modern.toml


# ------------------------------------------------------------------------------------------------------------
# Logit parity


@pytest.mark.parametrize(
    "config",
    [SMALL_GPT2, DAY1, dataclasses.replace(SMALL_GPT2, tie_embeddings=False, norm_eps=1e-6)],
    ids=["small", "day1", "untied"],
)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_gpt2_logits_match(config: ModelConfig, attn: str) -> None:
    model = random_model(config)
    hf_model = to_hf(model, attn_implementation=attn)
    assert type(hf_model).__name__ == "GPT2LMHeadModel" and not hf_model.training
    assert hf_model.dtype == torch.float32
    assert hf_model.config.tie_word_embeddings == config.tie_embeddings
    diff = logits_difference(model, hf_model, random_ids(config))
    print(f"GPT-2 {attn} max |logit difference| = {diff:.3g}")
    assert diff <= TOL


@pytest.mark.parametrize(
    "config",
    [
        SMALL_LLAMA,
        dataclasses.replace(SMALL_LLAMA, n_kv_heads=2),
        dataclasses.replace(SMALL_LLAMA, n_kv_heads=1, tie_embeddings=False),
        MODERN,
        dataclasses.replace(MODERN, n_kv_heads=2),
    ],
    ids=["small", "gqa2", "mqa-untied", "modern", "modern-gqa2"],
)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_llama_logits_match(config: ModelConfig, attn: str) -> None:
    model = random_model(config)
    hf_model = to_hf(model, attn_implementation=attn)
    assert type(hf_model).__name__ == "LlamaForCausalLM" and not hf_model.training
    assert hf_model.config.num_key_value_heads == config.kv_heads
    diff = logits_difference(model, hf_model, random_ids(config))
    print(f"Llama {attn} max |logit difference| = {diff:.3g}")
    assert diff <= (MODERN_TOL if config.d_model == MODERN.d_model else TOL)


def test_parity_test_would_catch_a_mapping_mistake() -> None:
    """Swapping gate and up (a plausible mistake) must move the logits far past the tolerance."""
    model = random_model(SMALL_LLAMA)
    hf_model = to_hf(model)
    with torch.no_grad():
        for layer in hf_model.model.layers:
            gate = layer.mlp.gate_proj.weight.clone()
            layer.mlp.gate_proj.weight.copy_(layer.mlp.up_proj.weight)
            layer.mlp.up_proj.weight.copy_(gate)
    assert logits_difference(model, hf_model, random_ids(SMALL_LLAMA)) > 1000 * TOL


def test_kv_cache_generation_matches() -> None:
    """The exported model decodes greedily to the same tokens as octlm's own cached decoding."""
    model = random_model(SMALL_LLAMA)
    hf_model = to_hf(model)
    prompt = random_ids(SMALL_LLAMA, batch=1)[:, :5]
    ids, cache = prompt, model.new_cache(1)
    with torch.no_grad():
        ours = []
        for _ in range(10):
            logits, _ = model(ids, cache=cache)
            ids = logits[:, -1:].argmax(-1)
            ours.append(int(ids))
        theirs = hf_model.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0)[0, 5:].tolist()
    assert theirs == ours


@pytest.mark.parametrize(
    "config", [SMALL_GPT2, dataclasses.replace(SMALL_LLAMA, n_kv_heads=2, tie_embeddings=False)]
)
def test_round_trip(config: ModelConfig) -> None:
    model = random_model(config)
    back = from_hf(to_hf(model))
    assert back.config == model.config
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(ours, theirs), name


def test_from_hf_refuses_other_models() -> None:
    tiny = dict(n_embd=16, n_layer=1, n_head=2, n_positions=8, vocab_size=20, bos_token_id=0, eos_token_id=0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(**tiny))
    with pytest.raises(UserError, match="not representable in octlm.*gelu_new"):
        from_hf(gpt2)  # GPT-2's default activation is the tanh approximation
    bert_config = transformers.BertConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=20
    )
    bert = transformers.BertForMaskedLM(bert_config)
    with pytest.raises(UserError, match="only gpt2, llama, smollm3, gpt_neox and mpt models"):
        from_hf(bert)


# ------------------------------------------------------------------------------------------------------------
# Refusals

LLAMA_PARTS = {"position": "rope", "norm": "rmsnorm", "mlp": "swiglu", "bias": False}


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"position": "sinusoidal"}, "position='sinusoidal'"),
        ({"position": "alibi"}, "position='alibi'"),
        ({"position": "t5"}, "position='t5'"),
        ({"position": "nope"}, "position='nope'"),
        ({"mlp": "swiglu"}, "mlp='swiglu'"),  # LayerNorm + SwiGLU
        ({"norm": "rmsnorm"}, "norm='rmsnorm'"),  # RMSNorm + GELU
        ({"bias": False}, "bias=False"),  # GPT-2 without biases
        ({"n_kv_heads": 2}, "n_kv_heads=2"),  # GQA for GPT-2
        ({**LLAMA_PARTS, "rope_layout": "interleaved"}, "rope_layout='interleaved'"),
        ({**LLAMA_PARTS, "bias": True}, "bias=True"),  # Llama with biases
        ({**LLAMA_PARTS, "norm": "layernorm"}, "norm='layernorm'"),  # LayerNorm + SwiGLU + RoPE
        ({"position": "rope", "n_kv_heads": 2}, "(GPT-NeoX has no grouped-query attention"),
        ({"position": "rope", "nope_layers": [1]}, "nope_layers=[1] (GPT-NeoX has no NoPE layers"),
        ({"position": "alibi", "nope_layers": [1]}, "position='alibi' (needs 'rope')"),
        ({**LLAMA_PARTS, "rope_fraction": 0.5}, "rope_fraction=0.5 (needs 1.0)"),  # partial RoPE: NeoX only
    ],
)
def test_unrepresentable_configs_are_refused(changes: dict, named: str) -> None:
    """Some target names the difference; the refusal leads with the flags for the nearest target."""
    config = dataclasses.replace(SMALL_GPT2, **changes)
    with pytest.raises(UserError, match="^retrain with --set model.* not representable in transformers"):
        hf_architecture(config)
    assert named in "; ".join(str(d) for found in target_differences(config).values() for d in found)
    with pytest.raises(UserError, match="not representable in transformers"):
        to_hf(Decoder(config))


def test_scaled_rope_is_refused() -> None:
    model = Decoder(SMALL_LLAMA)
    model.positions.set_frequencies(model.positions.inv_freq / 4)  # position interpolation
    with pytest.raises(UserError, match="not representable in transformers.*set_frequencies"):
        to_hf(model)


# ------------------------------------------------------------------------------------------------------------
# Position formulas against transformers' own code


ROPE_CASES = [(16, 10000.0), (64, 10000.0), (128, 10000.0), (32, 500000.0), (8, 100.0)]


def llama_rotary(head_dim: int, base: float) -> torch.nn.Module:
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rope = {"rope_type": "default", "rope_theta": base}
    config = transformers.LlamaConfig(
        hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim, rope_parameters=rope
    )
    return LlamaRotaryEmbedding(config)


@pytest.mark.parametrize(("head_dim", "base"), ROPE_CASES)
def test_rope_matches_llama(head_dim: int, base: float) -> None:
    """transformers' whole RoPE path (LlamaRotaryEmbedding's cos/sin, apply_rotary_pos_emb), as Llama runs it.

    Positions stay below 64 because transformers forms the angles position × θ in float32, which drifts by
    about 1e-7 per position (1e-5 by 128, 2.5e-4 by 2,048); octlm forms them in float64. Far positions are
    the next test's job.
    """
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    gen = torch.Generator().manual_seed(0)
    positions = torch.arange(64)
    q, k = torch.randn(2, 2, 3, len(positions), head_dim, generator=gen)
    cos, sin = llama_rotary(head_dim, base)(q, positions.unsqueeze(0))
    hf_q, hf_k = apply_rotary_pos_emb(q, k, cos, sin)
    diff = max(
        float((rope_rotate(x, positions, base, "half") - y).abs().max()) for x, y in ((q, hf_q), (k, hf_k))
    )
    assert diff <= 1e-5, diff


@pytest.mark.parametrize(("head_dim", "base"), ROPE_CASES)
def test_rope_matches_llama_far_along(head_dim: int, base: float) -> None:
    """Positions up to 4,096 against transformers' rotation, its frequency formula evaluated in float64."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    # LlamaRotaryEmbedding.compute_default_rope_parameters' formula, in float64; its float32 buffer agrees.
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    assert torch.allclose(llama_rotary(head_dim, base).inv_freq.double(), inv_freq, rtol=1e-6, atol=0)
    positions = torch.cat([torch.arange(0, 4096, 37), torch.arange(4090, 4097)])
    freqs = positions.double()[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)  # as LlamaRotaryEmbedding.forward
    q, k = torch.randn(2, 2, 3, len(positions), head_dim, generator=torch.Generator().manual_seed(1))
    hf_q, hf_k = apply_rotary_pos_emb(q.double(), k.double(), emb.cos()[None], emb.sin()[None])
    diff = max(
        float((rope_rotate(x, positions, base, "half") - y).abs().max()) for x, y in ((q, hf_q), (k, hf_k))
    )
    assert diff <= 1e-5, diff


@pytest.mark.parametrize(
    ("num_buckets", "max_distance"), [(32, 128), (16, 64), (8, 20), (64, 256), (2, 1), (32, 32)]
)
def test_t5_buckets_match(num_buckets: int, max_distance: int) -> None:
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = -torch.arange(0, 1001)  # key - query: the key 0..1000 positions before the query
    theirs = T5Attention._relative_position_bucket(
        relative, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(t5_bucket(relative, num_buckets, max_distance), theirs)
    # Keys after the query are bucket 0 in both (octlm's causal mask hides them anyway).
    ahead = torch.arange(1, 10)
    assert torch.equal(t5_bucket(ahead, num_buckets, max_distance), torch.zeros(9, dtype=torch.long))


@pytest.mark.parametrize("n_heads", [1, 2, 4, 6, 8, 12, 16, 20])
def test_alibi_slopes_match_bloom(n_heads: int) -> None:
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    length = 16
    alibi = build_alibi_tensor(torch.ones(1, length, dtype=torch.long), n_heads, torch.float32)  # [H, 1, T]
    key_positions = torch.arange(1, length, dtype=torch.float32)  # Bloom's bias is slope × key position
    slopes = alibi[:, 0, 1:] / key_positions  # [H, T-1], each row constant
    assert float((slopes - alibi_slopes(n_heads)[:, None]).abs().max()) <= 1e-7
    if n_heads == 8:  # the paper's worked example: 1/2, 1/4, ..., 1/256
        assert torch.equal(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))


# ------------------------------------------------------------------------------------------------------------
# Export to a folder


@pytest.mark.parametrize(
    "config", [SMALL_GPT2, dataclasses.replace(SMALL_LLAMA, n_kv_heads=2)], ids=["gpt2", "llama"]
)
def test_export_model_folder(config: ModelConfig, tokenizer: Tokenizer, tmp_path: Path) -> None:
    config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
    model = random_model(config)
    out = tmp_path / "export"
    assert export_hf_model(model, tokenizer, out) == out
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    check_folder(out, model, tokenizer)
    assert [p.name for p in tmp_path.iterdir()] == ["export"], "temporary folders were left behind"


def test_export_refuses_to_overwrite(tokenizer: Tokenizer, tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL_GPT2, vocab_size=tokenizer.vocab_size)
    first, second = random_model(config, seed=1), random_model(config, seed=2)
    out = tmp_path / "export"
    out.mkdir()  # an empty folder is fine
    export_hf_model(first, tokenizer, out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty; pass --force"):
        export_hf_model(second, tokenizer, out)
    assert (out / "notes.txt").is_file()
    check_folder(out, first, tokenizer)
    export_hf_model(second, tokenizer, out, force=True)
    assert not (out / "notes.txt").exists()
    check_folder(out, second, tokenizer)
    assert [p.name for p in tmp_path.iterdir()] == ["export"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        export_hf_model(first, tokenizer, tmp_path / "file", force=True)


def test_unrepresentable_export_writes_nothing(tokenizer: Tokenizer, tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL_GPT2, vocab_size=tokenizer.vocab_size, position="alibi")
    with pytest.raises(UserError, match="not representable"):
        export_hf_model(Decoder(config), tokenizer, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("config", [SMALL_GPT2, SMALL_LLAMA], ids=["gpt2", "llama"])
def test_export_run_folder(config: ModelConfig, tokenizer: Tokenizer, tmp_path: Path) -> None:
    run_dir, model = tiny_run(tmp_path, tokenizer, config)
    out = export_hf(run_dir, tmp_path / "hf")
    check_folder(out, model, tokenizer)


def test_cli_export(tokenizer: Tokenizer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, model = tiny_run(tmp_path, tokenizer, SMALL_GPT2)
    out = tmp_path / "hf"
    assert main(["export", "hf", str(run_dir), "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    check_folder(out, model, tokenizer)
    assert main(["export", "hf", str(run_dir), "--out", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main(["export", "hf", str(run_dir), "--out", str(out), "--force"]) == 0
    assert main(["export", "hf", str(tmp_path / "missing"), "--out", str(tmp_path / "other")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()
