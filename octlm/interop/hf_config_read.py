"""transformers -> octlm: the octlm ModelConfig a `transformers` config holds, or why it holds none.

One reader per architecture (`_READERS`, by `model_type`) returns the config and the settings octlm lacks; the
mapping is the inverse of `hf_arch`'s (which architecture, its config), so export then import gives back the
same config.
"""

from __future__ import annotations

import math
from typing import Any

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.interop.hf_arch import MPT_LENGTH_FACTOR


def _rope_of(hc: Any) -> dict[str, Any]:
    """RoPE's parameters: transformers 5.x `rope_parameters`; 4.x rope_theta (or GPT-NeoX's rotary_emb_base
    and rotary_pct) plus rope_scaling (None for plain RoPE)."""
    return getattr(hc, "rope_parameters", None) or {
        "rope_type": (getattr(hc, "rope_scaling", None) or {}).get("rope_type", "default"),
        "rope_theta": getattr(hc, "rope_theta", getattr(hc, "rotary_emb_base", 10000.0)),
        "partial_rotary_factor": getattr(hc, "rotary_pct", 1.0),
    }


def _problems(checks: tuple[tuple[str, Any, bool], ...]) -> list[str]:
    return [f"{name}={value!r}" for name, value, ok in checks if not ok]


def _gpt2_config(hc: Any) -> tuple[ModelConfig, list[str]]:
    problems = _problems(
        (
            ("activation_function", hc.activation_function, hc.activation_function == "gelu"),
            ("scale_attn_by_inverse_layer_idx", True, not hc.scale_attn_by_inverse_layer_idx),
            ("add_cross_attention", True, not hc.add_cross_attention),
            ("scale_attn_weights", False, hc.scale_attn_weights),
        )
    )
    config = ModelConfig(
        vocab_size=hc.vocab_size,
        d_model=hc.n_embd,
        context_length=hc.n_positions,
        n_layers=hc.n_layer,
        n_heads=hc.n_head,
        d_ff=hc.n_inner or 4 * hc.n_embd,
        position="learned",
        norm="layernorm",
        mlp="gelu",
        bias=True,
        tie_embeddings=hc.tie_word_embeddings,
        norm_eps=hc.layer_norm_epsilon,
    )
    return config, problems


def _llama_config(hc: Any) -> tuple[ModelConfig, list[str]]:
    """Llama, or SmolLM3 (Llama with `no_rope_layers`: 0 marks a NoPE layer)."""
    rope = _rope_of(hc)
    head_dim = getattr(hc, "head_dim", None) or hc.hidden_size // hc.num_attention_heads
    no_rope = list(getattr(hc, "no_rope_layers", None) or [1] * hc.num_hidden_layers)
    sliding = hc.model_type == "smollm3" and hc.use_sliding_window and hc.sliding_window is not None
    problems = _problems(
        (
            ("hidden_act", hc.hidden_act, hc.hidden_act == "silu"),
            ("rope_type", rope.get("rope_type"), rope.get("rope_type", "default") == "default"),
            ("attention_bias", hc.attention_bias, not hc.attention_bias),
            ("mlp_bias", hc.mlp_bias, not hc.mlp_bias),
            ("head_dim", head_dim, head_dim * hc.num_attention_heads == hc.hidden_size),
            ("no_rope_layers", no_rope, set(no_rope[: hc.num_hidden_layers]) <= {0, 1}),
            ("sliding_window", getattr(hc, "sliding_window", None), not sliding),
        )
    )
    config = ModelConfig(
        vocab_size=hc.vocab_size,
        d_model=hc.hidden_size,
        context_length=hc.max_position_embeddings,
        n_layers=hc.num_hidden_layers,
        n_heads=hc.num_attention_heads,
        n_kv_heads=0 if hc.num_key_value_heads == hc.num_attention_heads else hc.num_key_value_heads,
        d_ff=hc.intermediate_size,
        position="rope",
        rope_layout="half",
        rope_base=float(rope["rope_theta"]),
        norm="rmsnorm",
        mlp="swiglu",
        bias=False,
        tie_embeddings=hc.tie_word_embeddings,
        norm_eps=hc.rms_norm_eps,
        nope_layers=[i for i in range(hc.num_hidden_layers) if not no_rope[i]],
    )
    return config, problems


def _llama4_config(hc: Any) -> tuple[ModelConfig, list[str]]:
    """Llama 4's text model when it is the Llama stack: no experts, no QK norm in a RoPE layer, no chunked
    attention. RoPE layers read as the `interleaved` layout, Llama 4's own; a model with no RoPE layer at all
    reads as position "nope". The temperature becomes attention_scaling "llama4" where it acts
    (a NoPE layer)."""
    rope = _rope_of(hc)
    n = hc.num_hidden_layers
    head_dim = getattr(hc, "head_dim", None) or hc.hidden_size // hc.num_attention_heads
    uses_rope = list(hc.no_rope_layers)
    nope = [i for i in range(n) if i < len(uses_rope) and not uses_rope[i]]
    scaled = bool(hc.attn_temperature_tuning and nope)
    problems = _problems(
        (
            ("hidden_act", hc.hidden_act, hc.hidden_act == "silu"),
            ("rope_type", rope.get("rope_type"), rope.get("rope_type", "default") == "default"),
            ("attention_bias", hc.attention_bias, not hc.attention_bias),
            ("head_dim", head_dim, head_dim * hc.num_attention_heads == hc.hidden_size),
            ("no_rope_layers", uses_rope, len(uses_rope) >= n and set(uses_rope[:n]) <= {0, 1}),
            ("moe_layers", hc.moe_layers, not hc.moe_layers),
            ("use_qk_norm", hc.use_qk_norm, not hc.use_qk_norm or len(nope) == n),  # only RoPE layers have it
            ("attention_chunk_size", hc.attention_chunk_size, set(hc.layer_types[:n]) <= {"full_attention"}),
            ("floor_scale", hc.floor_scale, not scaled or hc.floor_scale >= 1),
        )
    )
    scaling = (
        {
            "attention_scaling": "llama4",
            "attention_floor": int(hc.floor_scale),
            "attention_temperature": float(hc.attn_scale),
        }
        if scaled
        else {}
    )
    # octlm's rope_layout means nothing without RoPE: a NoPE model keeps the default.
    position = {"position": "nope"} if len(nope) == n else {"position": "rope", "rope_layout": "interleaved"}
    config = ModelConfig(
        vocab_size=hc.vocab_size,
        d_model=hc.hidden_size,
        context_length=hc.max_position_embeddings,
        n_layers=n,
        n_heads=hc.num_attention_heads,
        n_kv_heads=0 if hc.num_key_value_heads == hc.num_attention_heads else hc.num_key_value_heads,
        d_ff=hc.intermediate_size_mlp,
        rope_base=float(rope["rope_theta"]),
        norm="rmsnorm",
        mlp="swiglu",
        bias=False,
        tie_embeddings=hc.tie_word_embeddings,
        norm_eps=hc.rms_norm_eps,
        nope_layers=nope if len(nope) < n else [],
        **position,
        **scaling,
    )
    return config, problems


def _neox_config(hc: Any) -> tuple[ModelConfig, list[str]]:
    rope = _rope_of(hc)
    fraction = float(rope.get("partial_rotary_factor", 1.0))
    dims = int(hc.hidden_size // hc.num_attention_heads * fraction)
    problems = _problems(
        (
            ("hidden_act", hc.hidden_act, hc.hidden_act == "gelu"),
            ("rope_type", rope.get("rope_type"), rope.get("rope_type", "default") == "default"),
            # Pythia's parallel residual adds attention and MLP of the same input; octlm's blocks are
            # sequential.
            ("use_parallel_residual", hc.use_parallel_residual, not hc.use_parallel_residual),
            ("attention_bias", hc.attention_bias, hc.attention_bias),
            # An odd int(head_dim × rotary_pct) rotates one channel more than it says; octlm rotates what it
            # says.
            ("rotary_pct", fraction, dims % 2 == 0 and dims > 0),
        )
    )
    config = ModelConfig(
        vocab_size=hc.vocab_size,
        d_model=hc.hidden_size,
        context_length=hc.max_position_embeddings,
        n_layers=hc.num_hidden_layers,
        n_heads=hc.num_attention_heads,
        d_ff=hc.intermediate_size,
        position="rope",
        rope_layout="half",
        rope_base=float(rope["rope_theta"]),
        rope_fraction=fraction,
        norm="layernorm",
        mlp="gelu",
        bias=True,
        tie_embeddings=hc.tie_word_embeddings,
        norm_eps=hc.layer_norm_eps,
    )
    return config, problems


def _mpt_config(hc: Any) -> tuple[ModelConfig, list[str]]:
    """MPT as transformers runs it: ALiBi, bias-free LayerNorm and Linear, a 4 x d_model GELU MLP (the
    modeling code ignores `expansion_ratio`, `no_bias` and `attn_type`, so they are not read). The context
    length is max_seq_len / MPT_LENGTH_FACTOR, the inverse of the export: octlm's ALiBi has no maximum, so it
    is only the training block length a further run would use."""
    attn, head_dim = hc.attn_config, hc.d_model // hc.n_heads
    problems = _problems(
        (
            ("alibi", attn.alibi, attn.alibi),
            ("alibi_bias_max", attn.alibi_bias_max, attn.alibi_bias_max == 8),
            (
                "softmax_scale",
                attn.softmax_scale,
                attn.softmax_scale is None or math.isclose(attn.softmax_scale, head_dim**-0.5, rel_tol=1e-6),
            ),
            ("clip_qkv", attn.clip_qkv, not attn.clip_qkv),
            ("qk_ln", attn.qk_ln, not attn.qk_ln),
            ("logit_scale", hc.logit_scale, hc.logit_scale is None),
        )
    )
    config = ModelConfig(
        vocab_size=hc.vocab_size,
        d_model=hc.d_model,
        context_length=max(1, hc.max_seq_len // MPT_LENGTH_FACTOR),
        n_layers=hc.n_layers,
        n_heads=hc.n_heads,
        d_ff=4 * hc.d_model,
        position="alibi",
        norm="layernorm",
        mlp="gelu",
        bias=False,
        tie_embeddings=hc.tie_word_embeddings,
        norm_eps=hc.layer_norm_epsilon,
    )
    return config, problems


_READERS = {
    "gpt2": _gpt2_config,
    "llama": _llama_config,
    "smollm3": _llama_config,
    "llama4_text": _llama4_config,
    "gpt_neox": _neox_config,
    "mpt": _mpt_config,
}


def config_from_hf(hc: Any) -> ModelConfig:
    """The octlm ModelConfig of a transformers config; UserError for another architecture or a setting octlm
    does not have (GPT-2's tanh GELU, biased Llama projections, scaled RoPE, parallel residuals, ...)."""
    reader = _READERS.get(hc.model_type)
    if reader is None:
        raise UserError(
            "octlm reads only gpt2, llama, smollm3, gpt_neox and mpt models, and Llama 4's text "
            f"model (llama4_text), from transformers, not model_type {hc.model_type!r}"
        )
    config, problems = reader(hc)
    if problems:
        raise UserError(f"not representable in octlm: this {hc.model_type} model has " + ", ".join(problems))
    return config
