"""octlm <-> Hugging Face `transformers`: map weights both ways and export a trained run as a model folder.

Two octlm stacks have an exact counterpart in `transformers`:

- GPT-2 (`GPT2LMHeadModel`): learned positions, LayerNorm, GELU MLP, biases everywhere, no grouped KV heads.
- Llama (`LlamaForCausalLM`): RoPE in the `half` layout, RMSNorm, SwiGLU MLP, no biases (GQA allowed).

Any other mix (sinusoidal, ALiBi, T5, NoPE, interleaved RoPE, LayerNorm with SwiGLU, ...) has no standard
architecture to load into, so `to_hf` raises a `UserError` that names every setting that differs.

The mapping is renaming plus two layout facts: GPT-2's `Conv1D` stores weights as `[in, out]` (the transpose
of `nn.Linear`), and octlm fuses projections that `transformers` keeps apart (Llama's q/k/v and gate/up).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from octlm.config import ModelConfig
from octlm.errors import UserError, check_output, writing
from octlm.model import Decoder
from octlm.positions import rope_frequencies
from octlm.run import Run

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from octlm.tokenizer import Tokenizer

EOT = "<|endoftext|>"  # the same string as octlm.tokenizer.EOT (not imported: this module loads without it)

# What each target architecture requires of an octlm config: (field, required value).
_GPT2_NEEDS = (("position", "learned"), ("norm", "layernorm"), ("mlp", "gelu"), ("bias", True))
_LLAMA_NEEDS = (
    ("position", "rope"),
    ("rope_layout", "half"),
    ("norm", "rmsnorm"),
    ("mlp", "swiglu"),
    ("bias", False),
)


def _differences(config: ModelConfig, needs: tuple[tuple[str, Any], ...]) -> list[str]:
    return [
        f"{name}={getattr(config, name)!r} (needs {want!r})"
        for name, want in needs
        if getattr(config, name) != want
    ]


def hf_architecture(config: ModelConfig) -> str:
    """The `transformers` architecture that holds this config exactly: "gpt2" or "llama".

    Raises UserError "not representable in transformers: ..." naming what differs from each target.
    """
    gpt2 = _differences(config, _GPT2_NEEDS)
    if config.kv_heads != config.n_heads:
        gpt2.append(f"n_kv_heads={config.n_kv_heads} (GPT-2 has no grouped-query attention; needs 0)")
    llama = _differences(config, _LLAMA_NEEDS)
    if not gpt2:
        return "gpt2"
    if not llama:
        return "llama"
    raise UserError(
        "not representable in transformers: as GPT-2 (GPT2LMHeadModel) it differs in " + ", ".join(gpt2)
        + "; as Llama (LlamaForCausalLM) it differs in " + ", ".join(llama)
    )  # fmt: skip


def _check_rope_untouched(model: Decoder) -> None:
    """Llama's default RoPE is base^(-2i/D) unscaled; refuse a model whose frequencies were replaced."""
    scheme = model.positions
    default = rope_frequencies(model.config.head_dim, model.config.rope_base)
    inv_freq = getattr(scheme, "inv_freq", default)
    if getattr(scheme, "attention_scaling", 1.0) != 1.0 or not torch.allclose(inv_freq.cpu(), default):
        raise UserError(
            "not representable in transformers: this model's RoPE frequencies were replaced with "
            "set_frequencies (context extension); export the model as trained, before scaling them"
        )


def _rope_kwargs(llama_config: type, base: float) -> dict[str, Any]:
    """RoPE's base in the installed transformers' spelling: `rope_parameters` (5.x) or `rope_theta` (4.x).

    Checked rather than assumed, because 4.x would silently keep an unknown keyword and use base 10,000.
    """
    if "rope_parameters" in inspect.signature(llama_config.__init__).parameters:
        return {"rope_parameters": {"rope_type": "default", "rope_theta": float(base)}}
    return {"rope_theta": float(base)}


def _hf_config(config: ModelConfig, arch: str, eos_token_id: int | None) -> Any:
    """The `transformers` config for an octlm ModelConfig (arch from `hf_architecture`)."""
    from transformers import GPT2Config, LlamaConfig

    common = dict(vocab_size=config.vocab_size, tie_word_embeddings=config.tie_embeddings,
                  bos_token_id=eos_token_id, eos_token_id=eos_token_id, pad_token_id=None)  # fmt: skip
    if arch == "gpt2":
        return GPT2Config(
            n_embd=config.d_model, n_layer=config.n_layers, n_head=config.n_heads,
            n_positions=config.context_length, n_inner=config.d_ff,
            activation_function="gelu",  # exact erf GELU, as F.gelu; GPT-2's own "gelu_new" is the tanh form
            layer_norm_epsilon=config.norm_eps, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common,
        )  # fmt: skip
    return LlamaConfig(
        hidden_size=config.d_model, intermediate_size=config.d_ff, num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads, num_key_value_heads=config.kv_heads, head_dim=config.head_dim,
        hidden_act="silu", **_rope_kwargs(LlamaConfig, config.rope_base),
        rms_norm_eps=config.norm_eps, max_position_embeddings=config.context_length,
        attention_bias=False, mlp_bias=False, attention_dropout=0.0, **common,
    )  # fmt: skip


def _gpt2_state(model: Decoder) -> dict[str, Tensor]:
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
            p + "ln_1.weight": b.norm1.weight, p + "ln_1.bias": b.norm1.bias,
            # Conv1D is x @ W + b, W [in, out]: the transpose of nn.Linear. c_attn is [q | k | v] like qkv.
            p + "attn.c_attn.weight": b.attn.qkv.weight.T, p + "attn.c_attn.bias": b.attn.qkv.bias,
            p + "attn.c_proj.weight": b.attn.proj.weight.T, p + "attn.c_proj.bias": b.attn.proj.bias,
            p + "ln_2.weight": b.norm2.weight, p + "ln_2.bias": b.norm2.bias,
            p + "mlp.c_fc.weight": b.mlp.fc.weight.T, p + "mlp.c_fc.bias": b.mlp.fc.bias,
            p + "mlp.c_proj.weight": b.mlp.proj.weight.T, p + "mlp.c_proj.bias": b.mlp.proj.bias,
        }  # fmt: skip
    return s


def _llama_state(model: Decoder) -> dict[str, Tensor]:
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
        }  # fmt: skip
    return s


def to_hf(
    model: Decoder, eos_token_id: int | None = None, attn_implementation: str = "sdpa"
) -> PreTrainedModel:
    """A float32, eval-mode `GPT2LMHeadModel` or `LlamaForCausalLM` computing the same logits as `model`.

    `eos_token_id` (the tokenizer's `<|endoftext|>` id) is recorded as bos/eos for `generate`. Raises
    UserError when the model's architecture has no counterpart in `transformers` (see `hf_architecture`).
    """
    from transformers import GPT2LMHeadModel, LlamaForCausalLM

    config = model.config
    arch = hf_architecture(config)
    if arch == "llama":
        _check_rope_untouched(model)
    hf_config = _hf_config(config, arch, eos_token_id)
    cls = GPT2LMHeadModel if arch == "gpt2" else LlamaForCausalLM
    # Random init is wasted work (every weight is overwritten) but keeps us on the public constructor.
    hf_model = cls._from_config(hf_config, attn_implementation=attn_implementation)
    state = _gpt2_state(model) if arch == "gpt2" else _llama_state(model)
    state = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in state.items()}
    hf_model.load_state_dict(state, strict=True)  # strict: a missing or extra name is a mapping bug
    if config.tie_embeddings:
        hf_model.tie_weights()
    return hf_model.float().eval()


def from_hf(hf_model: PreTrainedModel) -> Decoder:
    """The octlm Decoder for a `GPT2LMHeadModel` or `LlamaForCausalLM` of a representable configuration.

    The inverse of `to_hf`. Raises UserError for other architectures or settings octlm does not have
    (GPT-2's tanh GELU, biased Llama projections, scaled RoPE, ...).
    """
    hc = hf_model.config
    if hc.model_type == "gpt2":
        problems = [f"{k}={getattr(hc, k)!r}" for k, ok in (
            ("activation_function", hc.activation_function == "gelu"),
            ("scale_attn_by_inverse_layer_idx", not hc.scale_attn_by_inverse_layer_idx),
            ("add_cross_attention", not hc.add_cross_attention),
            ("scale_attn_weights", hc.scale_attn_weights),
        ) if not ok]  # fmt: skip
        config = ModelConfig(
            vocab_size=hc.vocab_size, d_model=hc.n_embd, context_length=hc.n_positions, n_layers=hc.n_layer,
            n_heads=hc.n_head, d_ff=hc.n_inner or 4 * hc.n_embd, position="learned", norm="layernorm",
            mlp="gelu", bias=True, tie_embeddings=hc.tie_word_embeddings, norm_eps=hc.layer_norm_epsilon,
        )  # fmt: skip
    elif hc.model_type == "llama":
        # transformers 5.x: rope_parameters; 4.x: rope_theta plus rope_scaling (None for plain RoPE).
        rope = getattr(hc, "rope_parameters", None) or {
            "rope_type": (getattr(hc, "rope_scaling", None) or {}).get("rope_type", "default"),
            "rope_theta": getattr(hc, "rope_theta", 10000.0),
        }
        problems = [f"{k}={v!r}" for k, v, ok in (
            ("hidden_act", hc.hidden_act, hc.hidden_act == "silu"),
            ("rope_type", rope.get("rope_type"), rope.get("rope_type", "default") == "default"),
            ("attention_bias", hc.attention_bias, not hc.attention_bias),
            ("mlp_bias", hc.mlp_bias, not hc.mlp_bias),
            ("head_dim", hc.head_dim, hc.head_dim * hc.num_attention_heads == hc.hidden_size),
        ) if not ok]  # fmt: skip
        config = ModelConfig(
            vocab_size=hc.vocab_size, d_model=hc.hidden_size, context_length=hc.max_position_embeddings,
            n_layers=hc.num_hidden_layers, n_heads=hc.num_attention_heads,
            n_kv_heads=0 if hc.num_key_value_heads == hc.num_attention_heads else hc.num_key_value_heads,
            d_ff=hc.intermediate_size, position="rope", rope_layout="half",
            rope_base=float(rope["rope_theta"]), norm="rmsnorm", mlp="swiglu", bias=False,
            tie_embeddings=hc.tie_word_embeddings, norm_eps=hc.rms_norm_eps,
        )  # fmt: skip
    else:
        raise UserError(
            f"octlm reads only gpt2 and llama models from transformers, not model_type {hc.model_type!r}"
        )
    if problems:
        raise UserError(f"not representable in octlm: this {hc.model_type} model has " + ", ".join(problems))

    model = Decoder(config)
    mapped = _gpt2_state(model) if config.position == "learned" else _llama_state(model)
    hf_state = hf_model.state_dict()
    with torch.no_grad():
        # Each mapped tensor is a view of an octlm parameter (a transpose or a row slice), so copying into the
        # view writes the parameter itself.
        for name, target in mapped.items():
            target.copy_(hf_state[name].to(target.dtype))
    return model.eval()


# ------------------------------------------------------------------------------------------------------------
# Export a model folder


def _fresh_path(out: Path, kind: str) -> Path:
    """A hidden sibling of `out` for this process, cleared of any leftover from a crashed export."""
    path = out.parent / f".{out.name}.{kind}-{os.getpid()}"
    if path.exists():
        shutil.rmtree(path)
    return path


def _replace_folder(tmp: Path, out: Path, force: bool) -> None:
    """Move the finished `tmp` folder to `out`; an existing non-empty `out` is replaced only with `force`."""
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise UserError(f"{str(out)!r} exists and is not a folder; choose another output path")
        if any(out.iterdir()):
            if not force:
                raise UserError(f"{str(out)!r} already exists and is not empty; pass --force to replace it")
            # Rename the old folder aside first, so that `out` is at every moment either old or new.
            old = _fresh_path(out, "old")
            os.replace(out, old)
            try:
                os.replace(tmp, out)
            except OSError:
                os.replace(old, out)  # put the old export back rather than leave nothing
                raise
            shutil.rmtree(old, ignore_errors=True)
            return
        out.rmdir()
    os.replace(tmp, out)


def _is_run(folder: Path) -> bool:
    run = Run.of(folder)
    return run.has_checkpoint() or run.metrics_path.is_file()


def _check_out(out: Path, force: bool, run_dir: Path | None = None) -> None:
    """Fail before the (slow) export rather than after it; never write into or over a run folder."""
    check_output(out, "OUT", folder=True)
    shown = f"OUT {str(out)!r}"
    if out.is_symlink():
        raise UserError(f"{shown} is a symbolic link (to {os.readlink(out)!r}); give the folder itself")
    where = out.resolve()
    if run_dir is not None and Path(run_dir).resolve().is_relative_to(where):
        raise UserError(f"{shown} is or holds the run folder {str(run_dir)!r}; an export never replaces "
                        f"a run: choose a new folder, e.g. {str(Path(run_dir)) + '-hf'!r}")  # fmt: skip
    for folder in (where, *where.parents):
        if _is_run(folder):
            raise UserError(f"{shown} is inside the run folder {str(folder)!r}; an export never writes "
                            "into a run: choose a folder outside it")  # fmt: skip
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not force:
        raise UserError(f"{shown} already exists and is not empty; pass --force to replace it")
    # An export is a transformers model folder, files only: anything else is not --force's to delete.
    from transformers.utils import CONFIG_NAME

    inner = sorted(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    if inner:
        what = "the run folder" if _is_run(inner[0]) else "the folder"
        raise UserError(f"{shown} holds {what} {str(inner[0])!r}, so it is no earlier export (an export "
                        "holds files only); --force replaces only an export: choose a new folder")  # fmt: skip
    if not (out / CONFIG_NAME).is_file():
        raise UserError(f"{shown} is no earlier export (it has no {CONFIG_NAME} of a transformers model); "
                        "--force replaces only an export: choose a new folder")  # fmt: skip


def _save_error(error: Exception, folder: Path) -> Exception:
    """safetensors reports a failed write as its own error type; make it the OSError it wraps, if one."""
    found = re.search(r"(?:Os \{ code: |os error )(\d+)", str(error))  # Rust's io::Error, as text
    if isinstance(error, OSError) or found is None:
        return error
    code = int(found.group(1))
    return OSError(code, os.strerror(code), str(folder))


def export_hf_model(model: Decoder, tokenizer: Tokenizer, out: str | Path, force: bool = False) -> Path:
    """Write `model` and `tokenizer` to the folder `out` as a `transformers` model, atomically.

    The folder loads with `AutoModelForCausalLM.from_pretrained(out)` and
    `AutoTokenizer.from_pretrained(out)`; nothing is left behind when anything fails, and with `force` an
    earlier export is replaced only once the new one is complete (it stays when anything fails).
    """
    out = Path(out)
    _check_out(out, force)
    hf_model = to_hf(model, eos_token_id=tokenizer.eot_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_path(out, "tmp")
    tmp.mkdir()  # mkdir, not mkdtemp: the folder gets the usual permissions, not 0700
    try:
        with writing(out):  # the export's path, not its hidden temporary sibling's
            _write_export(hf_model, model, tokenizer, tmp, out)
        _replace_folder(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _write_export(
    hf_model: PreTrainedModel, model: Decoder, tokenizer: Tokenizer, tmp: Path, out: Path
) -> None:
    """The model folder's files, written into `tmp` (a failed write names `out`)."""
    from transformers import PreTrainedTokenizerFast
    from transformers.utils import logging

    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # "Writing model shards" bars: stderr is for one line on failure
    try:
        hf_model.save_pretrained(tmp, safe_serialization=True)
    except Exception as error:
        raise _save_error(error, out) from None
    finally:
        if bars:
            logging.enable_progress_bar()
    tokenizer.save(tmp / "octlm_tokenizer.json")
    # A learned table has no row past context_length; other schemes have no maximum.
    learned = model.config.position == "learned"
    max_length = {"model_max_length": model.config.context_length} if learned else {}
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tmp / "octlm_tokenizer.json"), bos_token=EOT, eos_token=EOT,
        clean_up_tokenization_spaces=False,  # else decode drops spaces before punctuation (tokenizer.py)
        split_special_tokens=True,  # literal "<|endoftext|>" in text is plain text, as in octlm's encode
        **max_length,
    )  # fmt: skip
    hf_tokenizer.save_pretrained(tmp)
    (tmp / "octlm_tokenizer.json").unlink()


def export_hf(run_dir: str | Path, out: str | Path, force: bool = False) -> Path:
    """Export the trained run in `run_dir` (see `octlm.checkpoint.load_model`) to the folder `out`."""
    from octlm.checkpoint import load_model

    _check_out(Path(out), force, Path(run_dir))  # before the load, so a mistake costs nothing
    model, _config, tokenizer = load_model(Path(run_dir))
    return export_hf_model(model, tokenizer, out, force)


# ------------------------------------------------------------------------------------------------------------
# `octlm export hf`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run", required=True, metavar="RUN_DIR", help="a trained run folder, e.g. runs/day1-learned"
    )
    parser.add_argument("out", metavar="OUT", help="the folder to write (must be new or empty)")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists and is not empty")


def run(args: argparse.Namespace) -> None:
    out = export_hf(args.run, args.out, force=args.force)
    print(f"wrote {out}: load it with transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
