"""Which `transformers` architecture holds an octlm config exactly, and the weight names on both sides.

Six octlm stacks have an exact counterpart (the names are `transformers`' `model_type`s):

- `gpt2` (`GPT2LMHeadModel`): learned positions, LayerNorm, GELU MLP, biases everywhere, no grouped KV heads.
- `llama` (`LlamaForCausalLM`): RoPE in the `half` layout on every channel, RMSNorm, SwiGLU MLP, no biases
  (GQA allowed).
- `smollm3` (`SmolLM3ForCausalLM`): the Llama stack with `model.nope_layers`, SmolLM3's `no_rope_layers`.
- `llama4_text` (`Llama4ForCausalLM` with a `Llama4TextConfig`): the Llama stack with Llama 4's attention
  temperature (`model.attention_scaling = "llama4"`, its `attn_temperature_tuning`) in the NoPE layers, RoPE
  in either layout or none at all (`position = "nope"`). Its mixture of experts, QK norm and chunked attention
  are switched off: every layer is a dense SwiGLU MLP attending to every key, as octlm's.
- `gpt_neox` (`GPTNeoXForCausalLM`, e.g. Pythia): RoPE in the `half` layout on the first `rope_fraction` of
  each head's channels (`rotary_pct`), LayerNorm, GELU MLP, biases, sequential (not parallel) residuals.
- `mpt` (`MptForCausalLM`): ALiBi in every layer, LayerNorm without bias, GELU MLP of width 4 x d_model, no
  biases, no grouped KV heads. Its slopes are octlm's (1/2^(8i/n), the paper's fill for other head counts) and
  its bias is slope x (j - T + 1) for key j of T, which differs from octlm's -slope x (i - j) by a constant
  per query row: softmax is the same. Falcon (its ALiBi is added before the 1/sqrt(d) scale) and BLOOM (a
  LayerNorm after the token table) compute something else, so ALiBi maps only to MPT.

The mapping is renaming plus four layout facts: GPT-2's `Conv1D` stores weights as `[in, out]` (the
transpose of `nn.Linear`), Llama fuses nothing that octlm fuses (q/k/v and gate/up are split), GPT-NeoX
fuses q/k/v per head (`[q_h | k_h | v_h]` for each head h) where octlm stacks them (`[q | k | v]`), and
Llama 4 rotates the interleaved pairs (2i, 2i + 1), so a `half`-layout model's q/k rows are reordered per
head.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from octlm.config import ModelConfig
from octlm.errors import UserError
from octlm.model.decoder import Decoder
from octlm.positions.formulas import rope_frequencies
from octlm.positions.rotary import rotary_dims

# What each target architecture requires of an octlm config: (field, required value).
# None of these targets scales its queries with the length (model.attention_scaling); Llama 4's does, in
# its NoPE layers (the "llama4" scaling, _LLAMA4_NEEDS).
_UNSCALED = (("attention_scaling", "none"),)
_GPT2_NEEDS = (("position", "learned"), ("norm", "layernorm"), ("mlp", "gelu"), ("bias", True), *_UNSCALED)
_LLAMA_NEEDS = (
    ("position", "rope"),
    ("rope_layout", "half"),
    ("rope_fraction", 1.0),  # Llama rotates every channel; a fraction is GPT-NeoX's rotary_pct
    ("norm", "rmsnorm"),
    ("mlp", "swiglu"),
    ("bias", False),
    *_UNSCALED,
)
_NEOX_NEEDS = (
    ("position", "rope"),
    ("rope_layout", "half"),
    ("norm", "layernorm"),
    ("mlp", "gelu"),
    ("bias", True),
    *_UNSCALED,
)
_MPT_NEEDS = (("position", "alibi"), ("norm", "layernorm"), ("mlp", "gelu"), ("bias", False), *_UNSCALED)
# Llama 4's text model: the Llama stack whose NoPE layers scale their queries as octlm's "llama4" does (its
# position needs, rope or nope, and rope_fraction 1 with rope, are checked in _llama4_differences).
_LLAMA4_NEEDS = (("norm", "rmsnorm"), ("mlp", "swiglu"), ("bias", False), ("attention_scaling", "llama4"))
# MPT builds its ALiBi row for max_seq_len keys on every forward and attends to no more; octlm's ALiBi has no
# maximum, so the export allows the length experiment's farthest reach, 16 x the trained context.
MPT_LENGTH_FACTOR = 16
# The transformers class each architecture loads into.
CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
    "llama4_text": "Llama4ForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "mpt": "MptForCausalLM",
}


@dataclass(frozen=True)
class Difference:
    """One field of an octlm config that a target architecture needs otherwise."""

    field: str
    have: Any
    want: Any  # the value to retrain with
    why: str = ""  # what the target needs, when more than "needs {want!r}"

    def __str__(self) -> str:
        return f"{self.field}={self.have!r} ({self.why or f'needs {self.want!r}'})"

    @property
    def flag(self) -> str:
        """The `octlm train` flag that sets the needed value."""
        value = str(self.want).lower() if isinstance(self.want, bool) else str(self.want).replace(" ", "")
        return f"--set model.{self.field}={value}"


# How the refusal names each target, in the order it lists them.
LABELS = {"gpt2": "GPT-2", "llama": "Llama", "gpt_neox": "GPT-NeoX", "mpt": "MPT", "llama4_text": "Llama 4"}


def _differences(config: ModelConfig, needs: tuple[tuple[str, Any], ...]) -> list[Difference]:
    return [
        Difference(name, getattr(config, name), want) for name, want in needs if getattr(config, name) != want
    ]


def _mpt_differences(config: ModelConfig, full_heads: bool) -> list[Difference]:
    """What keeps `config` from MPT's shape: its MLP is 4 x d_model wide, every layer has ALiBi, no GQA."""
    mpt = _differences(config, _MPT_NEEDS)
    if config.d_ff != 4 * config.d_model:
        wide = 4 * config.d_model
        mpt.append(Difference("d_ff", config.d_ff, wide, f"MPT's MLP is 4 x d_model; needs {wide}"))
    if not full_heads:
        mpt.append(
            Difference("n_kv_heads", config.n_kv_heads, 0, "MPT has no grouped-query attention; needs 0")
        )
    if config.nope_layers:
        mpt.append(
            Difference("nope_layers", config.nope_layers, [], "MPT has ALiBi in every layer; needs []")
        )
    return mpt


def _llama4_differences(config: ModelConfig) -> list[Difference]:
    """What keeps `config` from Llama 4's text model: the Llama stack with the "llama4" attention temperature,
    RoPE on every channel in either layout (the export reorders a `half` model's rows), or no positions at
    all."""
    llama4 = _differences(config, _LLAMA4_NEEDS)
    if config.position not in ("rope", "nope"):
        llama4.insert(0, Difference("position", config.position, "rope", "needs 'rope' or 'nope'"))
    elif config.position == "rope" and config.rope_fraction != 1.0:
        llama4.insert(0, Difference("rope_fraction", config.rope_fraction, 1.0))
    return llama4


def target_differences(config: ModelConfig) -> dict[str, list[Difference]]:
    """Each target architecture (LABELS' order) -> what keeps `config` from it (empty: it fits)."""
    full_heads = config.kv_heads == config.n_heads
    gpt2 = _differences(config, _GPT2_NEEDS)
    neox = _differences(config, _NEOX_NEEDS)
    if not full_heads:
        gpt2.append(
            Difference("n_kv_heads", config.n_kv_heads, 0, "GPT-2 has no grouped-query attention; needs 0")
        )
        neox.append(
            Difference("n_kv_heads", config.n_kv_heads, 0, "GPT-NeoX has no grouped-query attention; needs 0")
        )
    if config.nope_layers:
        neox.append(
            Difference("nope_layers", config.nope_layers, [], "GPT-NeoX has no NoPE layers; needs []")
        )
    return {
        "gpt2": gpt2,
        "llama": _differences(config, _LLAMA_NEEDS),
        "gpt_neox": neox,
        "mpt": _mpt_differences(config, full_heads),
        "llama4_text": _llama4_differences(config),
    }


def hf_architecture(config: ModelConfig) -> str:
    """The `transformers` architecture that holds this config exactly: "gpt2", "llama", "smollm3" (Llama with
    `nope_layers`), "llama4_text" (Llama with Llama 4's attention temperature), "gpt_neox" or "mpt" (ALiBi).

    Raises UserError (`refusal`): the flags to retrain with for the nearest target, then what differs.
    """
    targets = target_differences(config)
    for name in ("gpt2", "llama", "llama4_text", "gpt_neox", "mpt"):  # the first that fits
        if not targets[name]:
            return "smollm3" if name == "llama" and config.nope_layers else name
    raise UserError(refusal(config, targets))


def refusal(config: ModelConfig, targets: dict[str, list[Difference]]) -> str:
    """One line, the fix first: retrain with these flags to export as the nearest target (one that keeps the
    run's position scheme if any can, else the fewest differences), then its differences and the others'
    fields."""
    nearest = min(targets, key=lambda n: (any(d.field == "position" for d in targets[n]), len(targets[n])))
    smollm3 = nearest == "llama" and config.nope_layers  # Llama with NoPE layers is SmolLM3
    label, cls = ("SmolLM3", CLASSES["smollm3"]) if smollm3 else (LABELS[nearest], CLASSES[nearest])
    others = "; ".join(
        f"{LABELS[n]} in {', '.join(d.field for d in found)}" for n, found in targets.items() if n != nearest
    )
    flags = " ".join(d.flag for d in targets[nearest])
    return (
        f"retrain with {flags} to export as {label} ({cls}): as trained, the run is not representable in "
        f"transformers. {label} differs in {', '.join(map(str, targets[nearest]))}; the others: {others} "
        "(`octlm export hf --help` says what each needs)"
    )


def _rotary_pct(config: ModelConfig) -> float:
    """A `rotary_pct` for which transformers rotates exactly octlm's `rotary_dims` channels.

    transformers rotates int(head_dim × pct) channels rounded *up* to even (its frequencies are
    arange(0, dim, 2) / dim), octlm's `rotary_dims` rounds down: the fraction is kept when the product is even
    already (so that export then import gives back the same config), else replaced by rotary_dims / head_dim.
    """
    head_dim = config.head_dim
    dims = rotary_dims(head_dim, config.rope_fraction)
    if int(head_dim * config.rope_fraction) == dims:
        return config.rope_fraction
    pct = dims / head_dim
    while int(head_dim * pct) < dims:  # r / D × D may land an ulp below r
        pct = math.nextafter(pct, 2.0)
    return pct


def check_rope_untouched(model: Decoder) -> None:
    """transformers' default RoPE is base^(-2i/d) unscaled; refuse a model whose frequencies were replaced."""
    scheme = model.positions
    default = rope_frequencies(
        rotary_dims(model.config.head_dim, model.config.rope_fraction), model.config.rope_base
    )
    inv_freq = getattr(scheme, "inv_freq", default).cpu()
    if (
        getattr(scheme, "attention_scaling", 1.0) != 1.0
        or inv_freq.shape != default.shape
        or not torch.allclose(inv_freq, default)
    ):
        raise UserError(
            "not representable in transformers: this model's RoPE frequencies are rescaled (a run fine-tuned "
            f"with model.rope_scaling = {model.config.rope_scaling!r}, "
            "or frequencies set by set_frequencies); "
            "octlm exports RoPE as trained, unscaled"
        )


def _rope_kwargs(hf_config: type, base: float, fraction: float | None = None) -> dict[str, Any]:
    """RoPE's base (and GPT-NeoX's rotated fraction) in the installed transformers' spelling:
    `rope_parameters` (5.x) or `rope_theta` / `rotary_emb_base` and `rotary_pct` (4.x).

    Checked rather than assumed, because 4.x would silently keep an unknown keyword and use its default base.
    """
    if "rope_parameters" in inspect.signature(hf_config.__init__).parameters:
        rope = {"rope_type": "default", "rope_theta": float(base)}
        return {"rope_parameters": rope | ({} if fraction is None else {"partial_rotary_factor": fraction})}
    if fraction is None:
        return {"rope_theta": float(base)}
    return {"rotary_emb_base": float(base), "rotary_pct": fraction}


def hf_config(config: ModelConfig, arch: str, eos_token_id: int | None) -> Any:
    """The `transformers` config for an octlm ModelConfig (arch from `hf_architecture`)."""
    common = dict(
        vocab_size=config.vocab_size,
        tie_word_embeddings=config.tie_embeddings,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=None,
    )
    if arch == "llama4_text":
        return _llama4_text_config(config, common)
    if arch == "gpt2":
        return _gpt2_hf_config(config, common)
    if arch == "mpt":
        return _mpt_hf_config(config, common)
    if arch == "gpt_neox":
        return _neox_hf_config(config, common)
    return _llama_hf_config(config, arch, common)


def _gpt2_hf_config(config: ModelConfig, common: dict[str, Any]) -> Any:
    """GPT-2's config: its MLP's exact GELU, no dropout."""
    import transformers

    return transformers.GPT2Config(
        n_embd=config.d_model,
        n_layer=config.n_layers,
        n_head=config.n_heads,
        n_positions=config.context_length,
        n_inner=config.d_ff,
        activation_function="gelu",  # exact erf GELU, as F.gelu; GPT-2's own "gelu_new" is the tanh form
        layer_norm_epsilon=config.norm_eps,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **common,
    )


def _mpt_hf_config(config: ModelConfig, common: dict[str, Any]) -> Any:
    """MPT's config: ALiBi with octlm's slopes, no biases, MPT_LENGTH_FACTOR x the context as its maximum."""
    import transformers

    # softmax_scale None is 1/sqrt(head_dim), as SDPA's; the slopes' 8 is ALiBi's (alibi_slopes).
    attn = dict(alibi=True, alibi_bias_max=8, softmax_scale=None, clip_qkv=None, qk_ln=False, attn_pdrop=0)
    return transformers.MptConfig(
        d_model=config.d_model,
        n_heads=config.n_heads,
        n_layers=config.n_layers,
        expansion_ratio=4,
        max_seq_len=MPT_LENGTH_FACTOR * config.context_length,
        layer_norm_epsilon=config.norm_eps,
        attn_config=attn,
        no_bias=True,
        logit_scale=None,
        resid_pdrop=0.0,
        emb_pdrop=0.0,
        # MptConfig's default is False: generate would re-read the whole sequence per token.
        use_cache=True,
        **common,
    )


def _neox_hf_config(config: ModelConfig, common: dict[str, Any]) -> Any:
    """GPT-NeoX's config: RoPE on `_rotary_pct` of the channels, sequential residuals."""
    import transformers

    cls = transformers.GPTNeoXConfig
    return cls(
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        hidden_act="gelu",  # exact erf GELU, as F.gelu
        **_rope_kwargs(cls, config.rope_base, _rotary_pct(config)),
        use_parallel_residual=False,  # octlm's block: x + attn(norm1(x)), then + mlp(norm2(that))
        layer_norm_eps=config.norm_eps,
        max_position_embeddings=config.context_length,
        attention_bias=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        **common,
    )


def _llama_hf_config(config: ModelConfig, arch: str, common: dict[str, Any]) -> Any:
    """Llama's config, or SmolLM3's (arch "smollm3": Llama with NoPE layers)."""
    import transformers

    cls = transformers.SmolLM3Config if arch == "smollm3" else transformers.LlamaConfig
    llama = dict(
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.kv_heads,
        hidden_act="silu",
        **_rope_kwargs(cls, config.rope_base),
        rms_norm_eps=config.norm_eps,
        max_position_embeddings=config.context_length,
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        **common,
    )
    if arch == "llama":
        return cls(head_dim=config.head_dim, **llama)
    # SmolLM3 (its head size is always hidden_size / heads, as octlm's): no_rope_layers[i] is 1 where layer i
    # *uses* RoPE. Its sliding window (which applies to NoPE layers) stays off: octlm attends to every key.
    no_rope = [int(i not in config.nope_layers) for i in range(config.n_layers)]
    return cls(no_rope_layers=no_rope, use_sliding_window=False, sliding_window=None, **llama)


def _llama4_text_config(config: ModelConfig, common: dict[str, Any]) -> Any:
    """Llama 4's text config with every Llama 4 addition that octlm lacks switched off."""
    import transformers

    cls = transformers.Llama4TextConfig
    # no_rope_layers[i] is 1 where layer i *uses* RoPE (Llama4TextAttention.use_rope), as SmolLM3's.
    no_rope = [int(config.position == "rope" and i not in config.nope_layers) for i in range(config.n_layers)]
    return cls(
        hidden_size=config.d_model,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.kv_heads,
        head_dim=config.head_dim,
        hidden_act="silu",
        # An empty moe_layers makes every layer's feed_forward the dense Llama4TextMLP, intermediate_size_mlp
        # wide (intermediate_size is the experts' width, unused without experts; kept equal for clarity).
        moe_layers=[],
        intermediate_size_mlp=config.d_ff,
        intermediate_size=config.d_ff,
        # Llama 4 L2-normalizes q and k in its RoPE layers by default; octlm does not.
        use_qk_norm=False,
        # A chunk size makes its RoPE layers attend within chunks of that many tokens; None: every key.
        attention_chunk_size=None,
        no_rope_layers=no_rope,
        **_rope_kwargs(cls, config.rope_base),
        # Queries in the NoPE layers times 1 + attn_scale log1p(floor((p + 1) / floor_scale)): octlm's
        # formula.
        attn_temperature_tuning=True,
        floor_scale=int(config.attention_floor),
        attn_scale=float(config.attention_temperature),
        rms_norm_eps=config.norm_eps,
        max_position_embeddings=config.context_length,
        attention_bias=False,
        attention_dropout=0.0,
        **common,
    )


# ------------------------------------------------------------------------------------------------------------
# Weight names: each octlm tensor (a view of its parameter) under its transformers name


def gpt2_state(model: Decoder) -> dict[str, Tensor]:
    s: dict[str, Tensor] = {
        "transformer.wte.weight": model.token_embedding.weight,
        "transformer.wpe.weight": model.positions.table.weight,
        "transformer.ln_f.weight": model.norm.weight,
        "transformer.ln_f.bias": model.norm.bias,
        "lm_head.weight": model.head.weight,
    }
    for i, b in enumerate(model.blocks):
        p = f"transformer.h.{i}."
        s |= {
            p + "ln_1.weight": b.norm1.weight,
            p + "ln_1.bias": b.norm1.bias,
            # Conv1D is x @ W + b, W [in, out]: the transpose of nn.Linear. c_attn is [q | k | v] like qkv.
            p + "attn.c_attn.weight": b.attn.qkv.weight.T,
            p + "attn.c_attn.bias": b.attn.qkv.bias,
            p + "attn.c_proj.weight": b.attn.proj.weight.T,
            p + "attn.c_proj.bias": b.attn.proj.bias,
            p + "ln_2.weight": b.norm2.weight,
            p + "ln_2.bias": b.norm2.bias,
            p + "mlp.c_fc.weight": b.mlp.fc.weight.T,
            p + "mlp.c_fc.bias": b.mlp.fc.bias,
            p + "mlp.c_proj.weight": b.mlp.proj.weight.T,
            p + "mlp.c_proj.bias": b.mlp.proj.bias,
        }
    return s


def llama_state(model: Decoder) -> dict[str, Tensor]:
    """Llama's names, which SmolLM3 shares."""
    c = model.config
    q_rows, kv_rows = c.n_heads * c.head_dim, c.kv_heads * c.head_dim
    s: dict[str, Tensor] = {
        "model.embed_tokens.weight": model.token_embedding.weight,
        "model.norm.weight": model.norm.weight,
        "lm_head.weight": model.head.weight,
    }
    for i, b in enumerate(model.blocks):
        p = f"model.layers.{i}."
        q, k, v = b.attn.qkv.weight.split([q_rows, kv_rows, kv_rows], dim=0)
        gate, up = b.mlp.fc.weight.split([c.d_ff, c.d_ff], dim=0)  # MLP.forward: gate, up = h.chunk(2)
        s |= {
            p + "input_layernorm.weight": b.norm1.weight,
            p + "self_attn.q_proj.weight": q,
            p + "self_attn.k_proj.weight": k,
            p + "self_attn.v_proj.weight": v,
            p + "self_attn.o_proj.weight": b.attn.proj.weight,
            p + "post_attention_layernorm.weight": b.norm2.weight,
            p + "mlp.gate_proj.weight": gate,
            p + "mlp.up_proj.weight": up,
            p + "mlp.down_proj.weight": b.mlp.proj.weight,
        }
    return s


def llama4_state(model: Decoder) -> dict[str, Tensor]:
    """Llama 4's names: Llama's, with the MLP under `feed_forward`.

    Llama 4 rotates the pairs (2i, 2i + 1) of a head (apply_rotary_emb: channel pairs as complex numbers), the
    `interleaved` layout. A `half` model pairs i with i + D/2 at the same frequency θ_i, so its q and k rows
    are taken in the order 0, D/2, 1, D/2 + 1, ... of each head: the view [H, 2, D/2, C] -> [H, D/2, 2, C].
    The same order for q and k leaves every q·k as it was, NoPE layers included.
    """
    c = model.config
    half = c.position == "rope" and c.rope_layout == "half"
    state: dict[str, Tensor] = {}
    for name, tensor in llama_state(model).items():
        if half and name.endswith(("q_proj.weight", "k_proj.weight")):
            tensor = tensor.view(-1, 2, c.head_dim // 2, c.d_model).transpose(1, 2)
        state[name.replace(".mlp.", ".feed_forward.")] = tensor
    return state


def neox_state(model: Decoder) -> dict[str, Tensor]:
    """GPT-NeoX's names. Its fused q/k/v is per head: rows [q_h | k_h | v_h] for h = 0 .. H-1 (its attention
    views the output as [B, T, H, 3D] and chunks the last axis), where octlm's are [q | k | v], each [H, D].
    The same rows regrouped: the view [H, 3, D, ...] of ours, which is NeoX's [3C, ...] reshaped."""
    c = model.config
    H, D = c.n_heads, c.head_dim
    s: dict[str, Tensor] = {
        "gpt_neox.embed_in.weight": model.token_embedding.weight,
        "gpt_neox.final_layer_norm.weight": model.norm.weight,
        "gpt_neox.final_layer_norm.bias": model.norm.bias,
        "lm_head.weight": model.head.weight,
    }
    for i, b in enumerate(model.blocks):
        p = f"gpt_neox.layers.{i}."
        s |= {
            p + "input_layernorm.weight": b.norm1.weight,
            p + "input_layernorm.bias": b.norm1.bias,
            p + "attention.query_key_value.weight": b.attn.qkv.weight.view(3, H, D, c.d_model).transpose(
                0, 1
            ),
            p + "attention.query_key_value.bias": b.attn.qkv.bias.view(3, H, D).transpose(0, 1),
            p + "attention.dense.weight": b.attn.proj.weight,
            p + "attention.dense.bias": b.attn.proj.bias,
            p + "post_attention_layernorm.weight": b.norm2.weight,
            p + "post_attention_layernorm.bias": b.norm2.bias,
            p + "mlp.dense_h_to_4h.weight": b.mlp.fc.weight,
            p + "mlp.dense_h_to_4h.bias": b.mlp.fc.bias,
            p + "mlp.dense_4h_to_h.weight": b.mlp.proj.weight,
            p + "mlp.dense_4h_to_h.bias": b.mlp.proj.bias,
        }
    return s


def mpt_state(model: Decoder) -> dict[str, Tensor]:
    """MPT's names. Its fused Wqkv is [q | k | v] like octlm's qkv (it chunks the output in three)."""
    s: dict[str, Tensor] = {
        "transformer.wte.weight": model.token_embedding.weight,
        "transformer.norm_f.weight": model.norm.weight,
        "lm_head.weight": model.head.weight,
    }
    for i, b in enumerate(model.blocks):
        p = f"transformer.blocks.{i}."
        s |= {
            p + "norm_1.weight": b.norm1.weight,
            p + "attn.Wqkv.weight": b.attn.qkv.weight,
            p + "attn.out_proj.weight": b.attn.proj.weight,
            p + "norm_2.weight": b.norm2.weight,
            p + "ffn.up_proj.weight": b.mlp.fc.weight,
            p + "ffn.down_proj.weight": b.mlp.proj.weight,
        }
    return s


STATES = {
    "gpt2": gpt2_state,
    "llama": llama_state,
    "smollm3": llama_state,
    "llama4_text": llama4_state,
    "gpt_neox": neox_state,
    "mpt": mpt_state,
}
