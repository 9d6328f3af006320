"""Llama 4's attention temperature (`model.attention_scaling = "llama4"`) exported as transformers' Llama 4 text
model (`Llama4ForCausalLM`, model_type `llama4_text`) with its experts, QK norm and chunked attention off.

Each case gives octlm's logits (both attention kernels) with the temperature visibly at work (attention_floor 4
inside 32 positions), converts back, and decodes greedily with transformers' KV cache to octlm's cached tokens.
A Llama 4 built by hand from its own config reads back to the same logits, and what octlm lacks is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_models import (  # noqa: E402
    SMALL_LLAMA,
    TOL,
    check_folder,
    logits_difference,
    random_ids,
    random_model,
    tokenizer,  # noqa: F401 (the fixture)
)

from octlm.config import ModelConfig  # noqa: E402
from octlm.data.tokenizer import Tokenizer  # noqa: E402
from octlm.errors import UserError  # noqa: E402
from octlm.interop.hf import export_hf_model, from_hf, hf_architecture, to_hf  # noqa: E402
from octlm.interop.hf_arch import target_differences  # noqa: E402
from octlm.model.decoder import Decoder  # noqa: E402

# Largest |logit difference| measured on this machine (float32, sdpa and eager): 3.6e-6 (the half layout, its
# q/k rows reordered), 3.1e-6 (interleaved, and no RoPE at all); read back from a hand-built Llama 4 3.2e-6;
# exported folder 2.3e-6; generate's per-step logits 2.2e-6. TOL (1e-5) leaves about 3x. The temperature's
# own effect (0.1 against 0) is at least 0.03 at every position from FLOOR - 1 on.
FLOOR = 4  # Llama 4's floor_scale: the temperature first acts at position FLOOR - 1 = 3 of the 32
LLAMA4 = dataclasses.replace(
    SMALL_LLAMA, n_layers=3, nope_layers=[1], attention_scaling="llama4", attention_floor=FLOOR
)  # the default temperature, Llama 4's 0.1; octlm's default layout, half
CASES = {
    "nope1-half": LLAMA4,
    "nope1-interleaved": dataclasses.replace(LLAMA4, rope_layout="interleaved", attention_temperature=0.5),
    "nope02-gqa2-untied": dataclasses.replace(
        LLAMA4, nope_layers=[2, 0], n_kv_heads=2, tie_embeddings=False, attention_temperature=0.3
    ),
    "all-nope-mqa": dataclasses.replace(LLAMA4, position="nope", nope_layers=[], n_kv_heads=1, norm_eps=1e-5),
}


def test_each_case_maps_to_llama4_text_and_without_temperature_to_llama() -> None:
    assert [hf_architecture(c) for c in CASES.values()] == ["llama4_text"] * 4
    assert hf_architecture(dataclasses.replace(LLAMA4, attention_scaling="none")) == "smollm3"


@pytest.mark.parametrize("config", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_llama4_logits_match(config: ModelConfig, attn: str) -> None:
    model = random_model(config)
    hf_model = to_hf(model, attn_implementation=attn)
    assert type(hf_model).__name__ == "Llama4ForCausalLM" and not hf_model.training
    hc = hf_model.config
    nope = range(3) if config.position == "nope" else config.nope_layers
    # 1 marks a layer that uses RoPE (Llama4TextAttention.use_rope), 0 a NoPE layer, the temperature's
    assert hc.no_rope_layers == [int(i not in nope) for i in range(3)]
    assert hc.moe_layers == [] and hc.layer_types == ["full_attention"] * 3 and not hc.use_qk_norm
    for layer in hf_model.model.layers:  # dense SwiGLU everywhere, no L2 norm of q and k
        assert type(layer.feed_forward).__name__ == "Llama4TextMLP"
        assert not hasattr(layer.self_attn, "qk_norm")
    assert (hc.attn_temperature_tuning, hc.floor_scale, hc.attn_scale) == (
        True,
        FLOOR,
        config.attention_temperature,
    )
    assert hc.rope_parameters["rope_theta"] == config.rope_base  # not Llama 4's default 500,000
    assert hc.num_key_value_heads == config.kv_heads and hc.tie_word_embeddings == config.tie_embeddings
    diff = logits_difference(model, hf_model, random_ids(config))
    print(f"Llama 4 {attn} {config.position} {config.rope_layout} max |logit difference| = {diff:.3g}")
    assert diff <= TOL


@pytest.mark.parametrize("name", ["nope1-half", "all-nope-mqa"])
def test_the_temperature_acts_from_position_floor_minus_one(name: str) -> None:
    """The same weights exported with attention_temperature 0 give octlm's logits before position FLOOR - 1
    (the factor is exactly 1 there) and differ far past the tolerance from there on."""
    config = CASES[name]
    model = random_model(config)
    # the same seed and shapes give the same weights: only the temperature differs
    cold = to_hf(random_model(dataclasses.replace(config, attention_temperature=0.0)))
    ids = random_ids(config)
    with torch.no_grad():
        ours, _ = model(ids)
        theirs = cold(input_ids=ids).logits
    gap = (ours - theirs).abs().amax(dim=(0, 2))  # [T]
    print(
        f"{name}: temperature 0 vs {config.attention_temperature}: {gap[: FLOOR - 1].max():.3g} before "
        f"position {FLOOR - 1}, then at least {gap[FLOOR - 1 :].min():.3g}"
    )
    assert float(gap[: FLOOR - 1].max()) <= TOL
    assert float(gap[FLOOR - 1 :].min()) > 1000 * TOL


@pytest.mark.parametrize("mistake", ["rows not reordered", "inverted no_rope_layers"])
def test_llama4_parity_would_catch_a_mapping_mistake(mistake: str) -> None:
    """A half-layout model's q/k rows copied in octlm's order, or no_rope_layers read the other way round
    (1 = NoPE), must move the logits far past the tolerance."""
    model = random_model(LLAMA4)
    hf_model = to_hf(model)
    with torch.no_grad():
        for block, layer in zip(model.blocks, hf_model.model.layers, strict=True):
            if mistake == "rows not reordered":
                q, k, _ = block.attn.qkv.weight.split(LLAMA4.d_model, dim=0)  # 4 heads, 4 KV heads
                layer.self_attn.q_proj.weight.copy_(q)
                layer.self_attn.k_proj.weight.copy_(k)
            else:
                layer.self_attn.use_rope = 1 - layer.self_attn.use_rope
    assert logits_difference(model, hf_model, random_ids(LLAMA4)) > 1000 * TOL


@pytest.mark.parametrize("config", CASES.values(), ids=CASES.keys())
def test_round_trip(config: ModelConfig) -> None:
    """Back to the same config and weights; a half-layout model comes back interleaved (Llama 4's own layout),
    with each head's q/k rows in the exported order: the same logits."""
    model = random_model(config)
    hf_model = to_hf(model)
    back = from_hf(hf_model)
    half = config.position == "rope" and config.rope_layout == "half"
    want = dataclasses.replace(config, rope_layout="interleaved") if half else config
    assert back.config == dataclasses.replace(want, nope_layers=sorted(config.nope_layers))
    again = to_hf(back).state_dict()
    for name, theirs in hf_model.state_dict().items():
        assert torch.equal(again[name], theirs), name
    for (name, ours), (_, read) in zip(model.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(ours, read) or (half and name.endswith("attn.qkv.weight")), name
    assert logits_difference(back, hf_model, random_ids(config)) <= TOL


def hand_built_llama4(**changes: object) -> torch.nn.Module:
    """A Llama 4 from its own config (not through to_hf): layer 1 NoPE, random weights moved off their init."""
    settings = dict(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=172,
        intermediate_size_mlp=172,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=32,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
        no_rope_layers=[1, 0, 1],
        moe_layers=[],
        use_qk_norm=False,
        attention_chunk_size=None,
        floor_scale=FLOOR,
        attn_scale=0.5,
        rms_norm_eps=1e-6,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(2)
    hf_model = transformers.Llama4ForCausalLM(transformers.Llama4TextConfig(**(settings | changes))).eval()
    with torch.no_grad():
        for p in hf_model.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.1))
    return hf_model


@pytest.mark.parametrize("tuning", [True, False])
def test_from_hf_reads_a_hand_built_llama4(tuning: bool) -> None:
    """The reader on its own: a Llama 4 with attn_temperature_tuning reads as the "llama4" scaling, one without
    as none (the same stack, SmolLM3's shape); either way octlm computes its logits."""
    hf_model = hand_built_llama4(attn_temperature_tuning=tuning)
    model = from_hf(hf_model)
    c = model.config
    shape = (c.position, c.rope_layout, c.nope_layers, c.kv_heads, c.d_ff)
    assert shape == ("rope", "interleaved", [1], 2, 172)
    assert (c.attention_scaling, c.attention_floor, c.attention_temperature) == (
        ("llama4", FLOOR, 0.5) if tuning else ("none", 8192, 0.1)  # the unused fields keep octlm's defaults
    )
    diff = logits_difference(model, hf_model, random_ids(c))
    print(f"hand-built Llama 4 (tuning {tuning}) read back: max |logit difference| = {diff:.3g}")
    assert diff <= TOL


def test_from_hf_refuses_what_octlm_lacks() -> None:
    """Llama4TextConfig's defaults are Llama 4 Scout's: experts in every layer, QK norm in the RoPE layers and
    chunked attention there; a layer with none of them but a GELU is refused too."""
    tiny = dict(
        vocab_size=20,
        hidden_size=32,
        intermediate_size=16,
        intermediate_size_mlp=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_local_experts=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    scout = transformers.Llama4ForCausalLM(transformers.Llama4TextConfig(**tiny))
    with pytest.raises(UserError) as error:
        from_hf(scout)
    assert str(error.value) == (
        "not representable in octlm: this llama4_text model has moe_layers=[0, 1], use_qk_norm=True, "
        "attention_chunk_size=8192"
    )
    plain = dict(moe_layers=[], use_qk_norm=False, attention_chunk_size=None, hidden_act="gelu")
    gelu = transformers.Llama4ForCausalLM(transformers.Llama4TextConfig(**tiny, **plain))
    with pytest.raises(UserError, match=r"^not representable in octlm: this llama4_text model has hidden"):
        from_hf(gelu)


@pytest.mark.parametrize("name", ["nope1-half", "nope02-gqa2-untied", "all-nope-mqa"])
def test_kv_cache_generation_matches(name: str) -> None:
    """transformers' `generate` (greedy, its own KV cache: the temperature's positions come from the cache
    length there) gives octlm's cached greedy tokens, 20 of them past a 5-token prompt, and each step's logits."""
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


def test_export_model_folder(tokenizer: Tokenizer, tmp_path: Path) -> None:  # noqa: F811
    config = dataclasses.replace(CASES["nope02-gqa2-untied"], vocab_size=tokenizer.vocab_size)
    model = random_model(config)
    out = export_hf_model(model, tokenizer, tmp_path / "export")
    assert transformers.AutoConfig.from_pretrained(out).model_type == "llama4_text"
    check_folder(out, model, tokenizer)  # AutoModelForCausalLM and AutoTokenizer, logits to TOL


# ------------------------------------------------------------------------------------------------------------
# Refusals


def test_scalable_softmax_is_refused_by_every_target() -> None:
    ssmax = dataclasses.replace(LLAMA4, attention_scaling="ssmax")
    with pytest.raises(UserError) as error:
        hf_architecture(ssmax)
    # Llama (SmolLM3, for its NoPE layer) and Llama 4 tie at one difference: the first listed leads.
    assert str(error.value) == (
        "retrain with --set model.attention_scaling=none to export as SmolLM3 (SmolLM3ForCausalLM): as "
        "trained, the run is not representable in transformers. SmolLM3 differs in attention_scaling='ssmax' "
        "(needs 'none'); the others: GPT-2 in position, norm, mlp, bias, attention_scaling; GPT-NeoX in "
        "norm, mlp, bias, attention_scaling, nope_layers; MPT in position, norm, mlp, attention_scaling, "
        "d_ff, nope_layers; Llama 4 in attention_scaling (`octlm export hf --help` says what each needs)"
    )
    found = {name: [str(d) for d in ds] for name, ds in target_differences(ssmax).items()}
    assert all(
        "attention_scaling='ssmax' (needs 'none')" in found[n] for n in ("gpt2", "llama", "gpt_neox", "mpt")
    )
    assert found["llama4_text"] == ["attention_scaling='ssmax' (needs 'llama4')"]
    with pytest.raises(UserError, match="attention_scaling='ssmax'"):
        to_hf(Decoder(ssmax))


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"position": "alibi"}, "position='alibi' (needs 'rope' or 'nope')"),
        ({"rope_fraction": 0.5}, "rope_fraction=0.5 (needs 1.0)"),
        ({"norm": "layernorm"}, "norm='layernorm' (needs 'rmsnorm')"),
        ({"mlp": "gelu"}, "mlp='gelu' (needs 'swiglu')"),
        ({"bias": True}, "bias=True (needs False)"),
    ],
)
def test_llama4_shapes_llama4_lacks_are_refused(changes: dict, named: str) -> None:
    config = dataclasses.replace(LLAMA4, **changes)
    with pytest.raises(UserError, match=r"^retrain with --set model\..* not representable in transformers"):
        hf_architecture(config)
    found = target_differences(config)
    assert [str(d) for d in found["llama4_text"]] == [named]  # the temperature itself fits
    assert "attention_scaling='llama4' (needs 'none')" in [str(d) for d in found["llama"]]


def test_a_llama4_run_with_biases_is_refused_with_its_fix_first() -> None:
    with pytest.raises(UserError) as error:
        hf_architecture(dataclasses.replace(LLAMA4, bias=True))
    assert str(error.value) == (
        "retrain with --set model.bias=false to export as Llama 4 (Llama4ForCausalLM): as trained, the run "
        "is not representable in transformers. Llama 4 differs in bias=True (needs False); the others: GPT-2 "
        "in position, norm, mlp, attention_scaling; Llama in bias, attention_scaling; GPT-NeoX in norm, mlp, "
        "attention_scaling, nope_layers; MPT in position, norm, mlp, bias, attention_scaling, d_ff, "
        "nope_layers (`octlm export hf --help` says what each needs)"
    )
