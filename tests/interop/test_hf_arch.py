"""The newer export targets against transformers' own code: a Llama-shaped run with `model.nope_layers` as
SmolLM3 (`no_rope_layers`), a RoPE + LayerNorm + GELU + bias run, with any `rope_fraction`, as GPT-NeoX
(`rotary_pct`, per-head fused q/k/v, sequential residuals), and an ALiBi run without biases as MPT.

Each gives the same logits (both attention kernels), converts back to identical weights, and decodes greedily
with transformers' KV cache to the tokens octlm's own cached decoding gives. The models and helpers are
tests/hf_models.py's (random weights moved well away from their init, so a mapping mistake shows in the logits).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_models import (  # noqa: E402
    SMALL_GPT2,
    SMALL_LLAMA,
    TOL,
    check_folder,
    logits_difference,
    random_ids,
    random_model,
    tiny_run,
    tokenizer,  # noqa: F401 (the fixture)
)

from octlm.cli import main  # noqa: E402
from octlm.config import ModelConfig  # noqa: E402
from octlm.data.tokenizer import Tokenizer  # noqa: E402
from octlm.errors import UserError  # noqa: E402
from octlm.interop.hf import export_hf_model, from_hf, hf_architecture, to_hf  # noqa: E402
from octlm.positions.formulas import alibi_bias, alibi_slopes  # noqa: E402
from octlm.positions.rotary import rotary_dims  # noqa: E402

# Largest |logit difference| measured on this machine (float32, sdpa and eager): SmolLM3 3.1e-6, GPT-NeoX
# 2.4e-6 at rope_fraction 1 and 1.9e-6 below it, exported folders 1.7e-6, generate's per-step logits 2.7e-6.
# TOL (1e-5) leaves about 3x.
# MPT (ALiBi): 1.7e-6 at every head count below, non-powers of two included.
SMOL = dataclasses.replace(SMALL_LLAMA, n_layers=3, nope_layers=[1])
SMOL_CASES = {
    "nope1": SMOL,
    "nope02-gqa2-untied": dataclasses.replace(SMOL, nope_layers=[0, 2], n_kv_heads=2, tie_embeddings=False),
    "all-nope-mqa": dataclasses.replace(SMOL, nope_layers=[2, 0, 1], n_kv_heads=1),
}
NEOX = dataclasses.replace(SMALL_GPT2, position="rope", rope_base=500.0)  # head size 16
NEOX_CASES = {
    "full": NEOX,
    "full-untied": dataclasses.replace(NEOX, tie_embeddings=False, norm_eps=1e-6),
    "half": dataclasses.replace(NEOX, rope_fraction=0.5),  # 8 of 16 channels
    "quarter-untied": dataclasses.replace(NEOX, rope_fraction=0.25, tie_embeddings=False),  # 4 channels
    "odd": dataclasses.replace(NEOX, rope_fraction=0.35),  # int(16 × 0.35) = 5, rounded down to 4
}
MPT = dataclasses.replace(SMALL_GPT2, position="alibi", bias=False)  # d_ff 256 = 4 x d_model, 4 heads
MPT_CASES = {
    "h4": MPT,
    # 6, 3 and 5 heads: the slopes of the next power of two fill the heads past the lower one
    "h6-untied": dataclasses.replace(MPT, d_model=48, n_heads=6, d_ff=192, tie_embeddings=False),
    "h3": dataclasses.replace(MPT, d_model=48, n_heads=3, d_ff=192, n_layers=3, norm_eps=1e-6),
    "h5": dataclasses.replace(MPT, d_model=40, n_heads=5, d_ff=160),
}
CASES = (
    {f"smollm3-{k}": v for k, v in SMOL_CASES.items()}
    | {f"neox-{k}": v for k, v in NEOX_CASES.items()}
    | {f"mpt-{k}": v for k, v in MPT_CASES.items()}
)


def test_each_shape_maps_to_its_architecture() -> None:
    assert hf_architecture(SMALL_LLAMA) == "llama"  # no NoPE layers: Llama, as before
    assert [hf_architecture(c) for c in SMOL_CASES.values()] == ["smollm3"] * 3
    assert [hf_architecture(c) for c in NEOX_CASES.values()] == ["gpt_neox"] * 5
    assert hf_architecture(SMALL_GPT2) == "gpt2"
    assert [hf_architecture(c) for c in MPT_CASES.values()] == ["mpt"] * 4
    assert [rotary_dims(c.head_dim, c.rope_fraction) for c in NEOX_CASES.values()] == [16, 16, 8, 4, 4]


@pytest.mark.parametrize("config", SMOL_CASES.values(), ids=SMOL_CASES.keys())
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_smollm3_logits_match(config: ModelConfig, attn: str) -> None:
    model = random_model(config)
    hf_model = to_hf(model, attn_implementation=attn)
    assert type(hf_model).__name__ == "SmolLM3ForCausalLM" and not hf_model.training
    hc = hf_model.config
    # 1 marks a layer that uses RoPE (SmolLM3Attention.use_rope), 0 a NoPE layer
    assert hc.no_rope_layers == [int(i not in config.nope_layers) for i in range(3)]
    assert [layer.self_attn.sliding_window for layer in hf_model.model.layers] == [None] * 3
    assert hc.layer_types == ["full_attention"] * 3 and hc.num_key_value_heads == config.kv_heads
    assert hc.rope_parameters["rope_theta"] == config.rope_base  # not SmolLM3's default 2,000,000
    diff = logits_difference(model, hf_model, random_ids(config))
    print(f"SmolLM3 {attn} max |logit difference| = {diff:.3g}")
    assert diff <= TOL


def test_smollm3_parity_would_catch_the_inverted_convention() -> None:
    """no_rope_layers read the other way round (1 = NoPE) must move the logits far past the tolerance."""
    model = random_model(SMOL)
    hf_model = to_hf(model)
    for layer in hf_model.model.layers:
        layer.self_attn.use_rope = 1 - layer.self_attn.use_rope
    assert logits_difference(model, hf_model, random_ids(SMOL)) > 1000 * TOL


@pytest.mark.parametrize("config", NEOX_CASES.values(), ids=NEOX_CASES.keys())
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_neox_logits_match(config: ModelConfig, attn: str) -> None:
    model = random_model(config)
    hf_model = to_hf(model, attn_implementation=attn)
    assert type(hf_model).__name__ == "GPTNeoXForCausalLM" and not hf_model.training
    hc = hf_model.config
    assert not hc.use_parallel_residual and hc.attention_bias
    assert hc.tie_word_embeddings == config.tie_embeddings and hc.layer_norm_eps == config.norm_eps
    # transformers rotates 2 × len(inv_freq) channels (apply_rotary_pos_emb: cos.shape[-1])
    assert 2 * hf_model.gpt_neox.rotary_emb.inv_freq.numel() == rotary_dims(
        config.head_dim, config.rope_fraction
    )
    diff = logits_difference(model, hf_model, random_ids(config))
    print(f"GPT-NeoX {attn} rope_fraction {config.rope_fraction} max |logit difference| = {diff:.3g}")
    assert diff <= TOL


@pytest.mark.parametrize("mistake", ["stacked qkv", "parallel residual", "rotary_pct ignored"])
def test_neox_parity_would_catch_a_mapping_mistake(mistake: str) -> None:
    """octlm's [q | k | v] rows copied without regrouping per head, NeoX's parallel residual, or every channel
    rotated instead of half must move the logits far past the tolerance."""
    model = random_model(NEOX_CASES["half"])
    # the same seed and shapes give the same weights: only the rotated share differs
    hf_model = to_hf(random_model(NEOX) if mistake == "rotary_pct ignored" else model)
    with torch.no_grad():
        for block, layer in zip(model.blocks, hf_model.gpt_neox.layers, strict=True):
            if mistake == "stacked qkv":
                layer.attention.query_key_value.weight.copy_(block.attn.qkv.weight)
                layer.attention.query_key_value.bias.copy_(block.attn.qkv.bias)
            elif mistake == "parallel residual":
                layer.use_parallel_residual = True
    assert logits_difference(model, hf_model, random_ids(NEOX)) > 1000 * TOL


@pytest.mark.parametrize("config", MPT_CASES.values(), ids=MPT_CASES.keys())
def test_mpt_logits_match(config: ModelConfig) -> None:
    """MPT has one attention kernel (eager; transformers refuses sdpa for it), so there is one case each."""
    model = random_model(config)
    hf_model = to_hf(model, attn_implementation="sdpa")  # asked for sdpa: to_hf picks eager, MPT's only one
    assert type(hf_model).__name__ == "MptForCausalLM" and not hf_model.training
    assert hf_model.config._attn_implementation == "eager"
    assert hf_model.config.tie_word_embeddings == config.tie_embeddings
    assert hf_model.config.max_seq_len == 16 * config.context_length
    diff = logits_difference(model, hf_model, random_ids(config))
    print(f"MPT {config.n_heads} heads max |logit difference| = {diff:.3g}")
    assert diff <= TOL


@pytest.mark.parametrize("n_heads", range(1, 21))
def test_mpt_alibi_is_octlms_up_to_a_constant_per_row(n_heads: int) -> None:
    """MPT's bias for T keys is slope x (j - T + 1): octlm's -slope x (i - j) plus slope x (i - T + 1), the same
    for every key j of query i, which softmax ignores. Its slopes are octlm's for every head count."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    T = 12
    theirs = build_mpt_alibi_tensor(n_heads, T)  # [H, 1, T]
    ours = alibi_bias(alibi_slopes(n_heads), torch.arange(T), torch.arange(T))  # [H, T, T], -inf above
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    shift = (theirs - ours).masked_fill(~causal, 0.0)  # [H, T, T]: row i constant over j <= i
    row_constant = shift[:, :, :1].expand(-1, -1, T).masked_fill(~causal, 0.0)
    assert float((shift - row_constant).abs().max()) <= 1e-5
    assert float((theirs[:, 0, -2] + alibi_slopes(n_heads)).abs().max()) <= 1e-7  # one key back: -slope


def test_mpt_parity_would_catch_reordered_heads() -> None:
    """Six heads in power-of-two order (1/2, 1/4, ...: a plausible slip for non-powers of two) move the logits."""
    config = MPT_CASES["h6-untied"]
    model = random_model(config)
    hf_model = to_hf(model)
    with torch.no_grad():
        hf_model.transformer.build_mpt_alibi_tensor = lambda heads, length, *_, device=None: (
            torch.arange(1 - length, 1, dtype=torch.float32).view(1, 1, length)
            * torch.tensor([2.0 ** -(8 * (h + 1) / 8) for h in range(heads)]).view(heads, 1, 1)
        )
    assert logits_difference(model, hf_model, random_ids(config)) > 100 * TOL


@pytest.mark.parametrize(
    ("changes", "flag", "named"),
    [
        ({"bias": True}, "bias=false", "bias=True (needs False)"),
        ({"d_ff": 200}, "d_ff=256", "d_ff=200 (MPT's MLP is 4 x d_model; needs 256)"),
        ({"n_kv_heads": 2}, "n_kv_heads=0", "n_kv_heads=2 (MPT has no grouped-query attention; needs 0)"),
        ({"nope_layers": [1]}, "nope_layers=[]", "nope_layers=[1] (MPT has ALiBi in every layer; needs [])"),
        ({"norm": "rmsnorm"}, "norm=layernorm", "norm='rmsnorm' (needs 'layernorm')"),
        ({"mlp": "swiglu", "d_ff": 256}, "mlp=gelu", "mlp='swiglu' (needs 'gelu')"),
    ],
)
def test_alibi_shapes_mpt_lacks_are_refused(changes: dict, flag: str, named: str) -> None:
    """An ALiBi run's refusal leads with the flag that makes it MPT, the one target with ALiBi."""
    with pytest.raises(UserError) as error:
        hf_architecture(dataclasses.replace(MPT, **changes))
    assert str(error.value).startswith(
        f"retrain with --set model.{flag} to export as MPT (MptForCausalLM): as trained, the run is not "
        f"representable in transformers. MPT differs in {named}; the others: GPT-2 in position"
    )


def test_an_alibi_run_is_refused_with_its_fix_first() -> None:
    """The default ALiBi run (biases, as every octlm default): the whole line, the fix first."""
    with pytest.raises(UserError) as error:
        hf_architecture(dataclasses.replace(MPT, bias=True))
    assert str(error.value) == (
        "retrain with --set model.bias=false to export as MPT (MptForCausalLM): as trained, the run is not "
        "representable in transformers. MPT differs in bias=True (needs False); the others: GPT-2 in "
        "position; Llama in position, norm, mlp, bias; GPT-NeoX in position; Llama 4 in position, norm, mlp, "
        "bias, attention_scaling (`octlm export hf --help` says what each needs)"
    )


@pytest.mark.parametrize("config", CASES.values(), ids=CASES.keys())
def test_round_trip(config: ModelConfig) -> None:
    model = random_model(config)
    back = from_hf(to_hf(model))
    # The odd fraction exports as the rotary_pct transformers reads as the same 4 channels: 4 / 16.
    want = dataclasses.replace(config, rope_fraction=0.25) if config.rope_fraction == 0.35 else config
    assert back.config == dataclasses.replace(want, nope_layers=sorted(config.nope_layers))
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(ours, theirs), name


@pytest.mark.parametrize(
    "name",
    [
        "smollm3-nope1",
        "smollm3-nope02-gqa2-untied",
        "neox-full",
        "neox-half",
        "neox-odd",
        "mpt-h4",
        "mpt-h6-untied",
    ],
)
def test_kv_cache_generation_matches(name: str) -> None:
    """transformers' `generate` (greedy, its own KV cache) gives octlm's cached greedy tokens, 20 of them, and
    each step's logits (tiny random models repeat tokens; the logits still differ at every position)."""
    config = CASES[name]
    model = random_model(config)
    hf_model = to_hf(model)
    prompt = random_ids(config, batch=1)[:, :5]
    ids, cache, ours, steps = prompt, model.new_cache(1), [], []
    with torch.no_grad():
        for _ in range(20):
            logits, _ = model(ids, cache=cache)
            steps.append(logits[:, -1])
            ids = logits[:, -1:].argmax(-1)
            ours.append(int(ids))
        out = hf_model.generate(
            prompt,
            max_new_tokens=20,
            do_sample=False,
            pad_token_id=0,
            return_dict_in_generate=True,
            output_logits=True,
        )
    assert out.sequences[0, 5:].tolist() == ours
    diff = max(float((a - b).abs().max()) for a, b in zip(steps, out.logits, strict=True))
    print(f"{name} generate: 20 tokens equal, max |step logit difference| = {diff:.3g}")
    assert diff <= TOL


def test_from_hf_refuses_what_octlm_lacks() -> None:
    tiny = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=20,
        bos_token_id=0,
        eos_token_id=0,
    )
    # GPTNeoXConfig's defaults are Pythia's: parallel residual, rotary_pct 0.25
    pythia = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**tiny))
    with pytest.raises(UserError, match=r"^not representable in octlm: .*use_parallel_residual=True$"):
        from_hf(pythia)
    odd = dict(rope_type="default", rope_theta=100.0, partial_rotary_factor=0.3)  # int(16 × 0.3) = 4: fine
    assert (
        from_hf(
            transformers.GPTNeoXForCausalLM(
                transformers.GPTNeoXConfig(**tiny, use_parallel_residual=False, rope_parameters=odd)
            )
        ).config.rope_fraction
        == 0.3
    )
    odd["partial_rotary_factor"] = 0.35  # int(16 × 0.35) = 5: transformers rotates 6 channels
    with pytest.raises(UserError, match=r"rotary_pct=0\.35$"):
        from_hf(
            transformers.GPTNeoXForCausalLM(
                transformers.GPTNeoXConfig(**tiny, use_parallel_residual=False, rope_parameters=odd)
            )
        )
    sliding = transformers.SmolLM3Config(**tiny, use_sliding_window=True, sliding_window=4, pad_token_id=None)
    with pytest.raises(
        UserError, match=r"^not representable in octlm: this smollm3 model has sliding_window=4"
    ):
        from_hf(transformers.SmolLM3ForCausalLM(sliding))
    mpt = dict(d_model=32, n_heads=2, n_layers=1, vocab_size=20, max_seq_len=64)
    assert from_hf(transformers.MptForCausalLM(transformers.MptConfig(**mpt))).config.position == "alibi"
    clipped = transformers.MptConfig(**mpt, attn_config={"clip_qkv": 6.0, "qk_ln": True}, logit_scale=0.5)
    with pytest.raises(
        UserError,
        match=r"^not representable in octlm: this mpt model has clip_qkv=6\.0, qk_ln=True, logit_scale=0\.5$",
    ):
        from_hf(transformers.MptForCausalLM(clipped))


# ------------------------------------------------------------------------------------------------------------
# Export to a folder, and the command


@pytest.mark.parametrize("name", ["smollm3-nope02-gqa2-untied", "neox-half", "mpt-h6-untied"])
def test_export_model_folder(name: str, tokenizer: Tokenizer, tmp_path: Path) -> None:  # noqa: F811
    config = dataclasses.replace(CASES[name], vocab_size=tokenizer.vocab_size)
    model = random_model(config)
    out = export_hf_model(model, tokenizer, tmp_path / "export")
    check_folder(out, model, tokenizer)  # AutoModelForCausalLM and AutoTokenizer, logits to TOL
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_cli_exports_and_refuses(
    tokenizer: Tokenizer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir, model = tiny_run(tmp_path, tokenizer, dataclasses.replace(SMOL, vocab_size=tokenizer.vocab_size))
    assert main(["export", "hf", str(run_dir), "--out", str(tmp_path / "hf")]) == 0
    check_folder(tmp_path / "hf", model, tokenizer)
    alibi = dataclasses.replace(SMOL, position="alibi", vocab_size=tokenizer.vocab_size)
    run_dir, _ = tiny_run(tmp_path / "second", tokenizer, alibi)
    capsys.readouterr()
    assert main(["export", "hf", str(run_dir), "--out", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    # MPT, the one target with ALiBi, comes first, though Llama needs fewer changes (another scheme).
    assert err == (
        "octlm export hf: error: retrain with --set model.norm=layernorm --set model.mlp=gelu --set "
        "model.d_ff=256 --set model.nope_layers=[] to export as MPT (MptForCausalLM): as trained, the run is "
        "not representable in transformers. MPT differs in norm='rmsnorm' (needs 'layernorm'), mlp='swiglu' "
        "(needs 'gelu'), d_ff=172 (MPT's MLP is 4 x d_model; needs 256), nope_layers=[1] (MPT has ALiBi in "
        "every layer; needs []); the others: GPT-2 in position, norm, mlp, bias; Llama in position; GPT-NeoX "
        "in position, norm, mlp, bias, nope_layers; Llama 4 in position, attention_scaling (`octlm export hf "
        "--help` says what each needs)\n"
    )
    assert not (tmp_path / "no").exists()
    assert main(["export", "hf", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "or SmolLM3 when it also has nope_layers; GPT-NeoX" in shown
    assert "MPT (alibi, layernorm, gelu, no bias, d_ff = 4 x d_model" in shown
