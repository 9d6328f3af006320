"""octlm <-> Hugging Face `transformers`: convert models both ways and export a trained run as a model folder.

Which octlm stacks have an exact counterpart (GPT-2, Llama, SmolLM3 for Llama with NoPE layers, Llama 4's text
model for Llama with its attention temperature, GPT-NeoX for RoPE on a fraction of the channels with LayerNorm
and GELU, MPT for ALiBi without biases) and the weight names on both sides live in `octlm.interop.hf_arch`;
any other mix (sinusoidal, T5, interleaved RoPE, LayerNorm with SwiGLU, ALiBi with biases, ...) has no
standard architecture to load into, so `to_hf` raises a `UserError` that names every setting that differs.

An exported folder generates what `octlm generate` generates: its tokenizer puts `<|endoftext|>` before the
prompt as octlm does (`prompt_tokenizer`), and its generation config starts and stops at it
(`set_generation`).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from octlm.errors import writing
from octlm.files import give_plain_modes
from octlm.interop.export_folder import check_out, sibling, swap_in
from octlm.interop.hf_arch import (
    CLASSES,
    STATES,
    check_rope_untouched,
    hf_architecture,
    hf_config,
)
from octlm.interop.hf_config_read import config_from_hf
from octlm.model.decoder import Decoder
from octlm.storage.run import Run

if TYPE_CHECKING:
    from tokenizers import Tokenizer as HFTokenizer
    from transformers import PreTrainedModel

    from octlm.data.tokenizer import Tokenizer

# The same string as octlm.data.tokenizer.EOT (not imported: this module loads without it).
EOT = "<|endoftext|>"


def to_hf(
    model: Decoder, eos_token_id: int | None = None, attn_implementation: str = "sdpa"
) -> PreTrainedModel:
    """A float32, eval-mode `GPT2LMHeadModel`, `LlamaForCausalLM`, `SmolLM3ForCausalLM`, `Llama4ForCausalLM`,
    `GPTNeoXForCausalLM` or `MptForCausalLM` (eager attention, its only kind) computing the same logits as
    `model`.

    `eos_token_id` (the tokenizer's `<|endoftext|>` id) is recorded as bos/eos for `generate`. Raises
    UserError when the model's architecture has no counterpart in `transformers` (see `hf_architecture`).
    """
    import transformers

    config = model.config
    arch = hf_architecture(config)
    if arch not in ("gpt2", "mpt"):
        check_rope_untouched(model)
    cls = getattr(transformers, CLASSES[arch])
    if arch == "mpt":
        attn_implementation = "eager"  # MPT's attention has no other path (transformers refuses "sdpa")
    # Random init is wasted work (every weight is overwritten) but keeps us on the public constructor.
    hf_model = cls._from_config(
        hf_config(config, arch, eos_token_id), attn_implementation=attn_implementation
    )
    shapes = {name: t.shape for name, t in hf_model.state_dict().items()}
    # reshape: a mapped tensor may be a regrouping view of ours (GPT-NeoX's per-head q/k/v); a no-op elsewhere
    state = {
        name: t.detach().to("cpu", torch.float32).reshape(shapes[name]).contiguous()
        for name, t in STATES[arch](model).items()
    }
    hf_model.load_state_dict(state, strict=True)  # strict: a missing or extra name is a mapping bug
    if config.tie_embeddings:
        hf_model.tie_weights()
    return hf_model.float().eval()


def from_hf(hf_model: PreTrainedModel) -> Decoder:
    """The octlm Decoder for a `transformers` model of a representable configuration (the inverse of `to_hf`).

    Raises UserError for other architectures or settings octlm does not have (see
    `hf_config_read.config_from_hf`).
    """
    config = config_from_hf(hf_model.config)
    model = Decoder(config)
    mapped = STATES[hf_model.config.model_type](model)
    hf_state = hf_model.state_dict()
    with torch.no_grad():
        # Each mapped tensor is a view of an octlm parameter (a transpose, a row slice, a regrouping), so
        # copying into the view writes the parameter itself.
        for name, target in mapped.items():
            target.copy_(hf_state[name].reshape(target.shape).to(target.dtype))
    return model.eval()


# ------------------------------------------------------------------------------------------------------------
# Export a model folder


def _not_an_export(out: Path) -> str | None:
    """Why the non-empty folder `out` is no earlier transformers export (which holds files only), or None."""
    from transformers.utils import CONFIG_NAME

    inner = sorted(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())
    if inner:
        what = "the run folder" if Run.of(inner[0]).is_run() else "the folder"
        return f"holds {what} {str(inner[0])!r}, so it is no earlier export (an export holds files only)"
    if not (out / CONFIG_NAME).is_file():
        return f"is no earlier export (it has no {CONFIG_NAME} of a transformers model)"
    return None


def _check_out(out: Path, force: bool, run_dir: Path | None = None) -> None:
    """Fail before the (slow) export rather than after it; never write into or over a run folder."""
    check_out(out, force, run_dir, "-hf", _not_an_export)


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
    set_generation(hf_model, tokenizer)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = sibling(out, "tmp")
    tmp.mkdir()  # mkdir, not mkdtemp: the folder gets the usual permissions, not 0700
    try:
        with writing(out):  # the export's path, not its hidden temporary sibling's
            _write_export(hf_model, model, tokenizer, tmp, out)
        swap_in(tmp, out, force)
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
    prompt_tokenizer(tokenizer).save(str(tmp / "octlm_tokenizer.json"))
    # A learned table has no row past context_length, MPT attends to no more than max_seq_len keys; the other
    # schemes have no maximum.
    limits = {"learned": model.config.context_length, "alibi": getattr(hf_model.config, "max_seq_len", None)}
    limit = limits.get(model.config.position)
    max_length = {"model_max_length": limit} if limit else {}
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tmp / "octlm_tokenizer.json"),
        bos_token=EOT,
        eos_token=EOT,
        add_bos_token=True,
        add_eos_token=False,  # the same template as prompt_tokenizer's, in its own words
        clean_up_tokenization_spaces=False,  # else decode drops spaces before punctuation (tokenizer.py)
        split_special_tokens=True,  # literal "<|endoftext|>" in text is plain text, as in octlm's encode
        **max_length,
    )
    hf_tokenizer.save_pretrained(tmp)
    (tmp / "octlm_tokenizer.json").unlink()
    give_plain_modes(tmp)  # safetensors writes model.safetensors 0600; the files beside it follow the umask


def prompt_tokenizer(tokenizer: Tokenizer) -> HFTokenizer:
    """The `tokenizers` tokenizer of an export: octlm's, plus a post-processor that puts EOT first.

    `octlm generate` starts every prompt with EOT (`octlm.generation.generate.encode_prompt`: training streams
    put EOT before every document, so it marks a start); without it a model continues "class" as if from the
    middle of a document. With it `tokenizer("class")` is [EOT, ...], `add_special_tokens=False` gives the
    bare ids, and `decode(..., skip_special_tokens=True)` gives the text back. A pair is two documents, each
    after its EOT, as in the training stream.
    """
    from tokenizers import Tokenizer as Backend
    from tokenizers.processors import TemplateProcessing

    backend = Backend.from_str(tokenizer.to_json())
    backend.post_processor = TemplateProcessing(
        single=f"{EOT}:0 $A:0", pair=f"{EOT}:0 $A:0 {EOT}:1 $B:1", special_tokens=[(EOT, tokenizer.eot_id)]
    )
    return backend


def set_generation(hf_model: PreTrainedModel, tokenizer: Tokenizer) -> None:
    """`hf_model.generate` decodes as `octlm generate` does: it starts from EOT when given no prompt, stops at
    EOT, and never picks an id the tokenizer lacks (a model vocabulary larger than the tokenizer's).

    pad is EOT too, GPT-2's convention: transformers infers an attention mask from pad ids only when pad
    differs from eos, so the prompt's leading EOT is attended to, as in octlm.
    """
    settings = hf_model.generation_config
    settings.bos_token_id = settings.eos_token_id = settings.pad_token_id = tokenizer.eot_id
    missing = list(range(tokenizer.vocab_size, hf_model.config.vocab_size))
    settings.suppress_tokens = missing or None


def export_hf(run_dir: str | Path, out: str | Path, force: bool = False) -> Path:
    """Export the trained run in `run_dir` (see `octlm.storage.checkpoint.load_model`) to the folder `out`."""
    from octlm.storage.checkpoint import load_model

    _check_out(Path(out), force, Path(run_dir))  # before the load, so a mistake costs nothing
    model, _config, tokenizer = load_model(Path(run_dir))
    return export_hf_model(model, tokenizer, out, force)
