"""`octlm inspect --hf NAME_OR_PATH`: the tables of a pretrained Hugging Face causal LM, for the same report.

Three families, whose first layer octlm's report knows how to read:

- GPT-2 (`gpt2`): token table `transformer.wte`, learned position table `transformer.wpe`.
- Llama (`llama`): token table `model.embed_tokens`; RoPE on every dimension of a head.
- GPT-NeoX (`gpt_neox`, e.g. Pythia): token table `gpt_neox.embed_in`; RoPE on the first `rotary_pct` of each
  head's dimensions (in pairs i, i + r/2), the rest carry no position.

RoPE's frequencies are the model's own: the `inv_freq` buffer of transformers' rotary embedding, so a scaled
RoPE (`rope_type` llama3, ...) is reported as the model computes it.

Loading runs no code from the model: `trust_remote_code` is never set, the weights are read from safetensors
only (`use_safetensors=True`), and a local folder with only pickled weights (`pytorch_model.bin`) is refused
before anything is read from it, because unpickling a file can run code.

What the report compares with, and what it lacks:

- "untrained" is the same config initialised afresh by transformers (`AutoModelForCausalLM.from_config` under
  seed 0): what such a model starts from, not this model's own starting point (its seed is unknown);
- there are no training token counts: tokens are ranked by id and row norms are plotted against token id;
- tokens are labelled by the model's tokenizer (`AutoTokenizer`, a tokenizer.json), or by id without one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from octlm.data.hub import quiet_hub, require_hub
from octlm.data.tokenizer import byte_of_char
from octlm.errors import UserError
from octlm.inspect.analysis import MAP_POSITIONS, MODEL_FIELDS, Tables, about
from octlm.positions import SCHEMES

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# model_type -> (what the report calls it, token table module, position table module or None)
FAMILIES = {
    "gpt2": ("GPT-2", "transformer.wte", "transformer.wpe"),
    "llama": ("Llama", "model.embed_tokens", None),
    "gpt_neox": ("GPT-NeoX", "gpt_neox.embed_in", None),
}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
UNTRAINED_SEED = 0
REPORTS = Path("reports")  # default report folders: reports/<sanitised name>/


def _one_line(error: BaseException, limit: int = 300) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise UserError("octlm inspect --hf needs transformers: pip install transformers") from None
    return transformers


def _dtype(transformers: Any) -> dict[str, Any]:
    """float32 in the installed transformers' spelling: `dtype` (4.56 and later) or `torch_dtype`."""
    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": torch.float32}


def _looks_like_a_path(name: str) -> bool:
    """A name that can only mean a local folder (a Hub id is `name` or `owner/name`)."""
    parent = Path(name).expanduser().parent
    return (
        name.startswith((".", "/", "~")) or name.count("/") > 1 or (parent != Path(".") and parent.is_dir())
    )


def default_out(name: str) -> Path:
    """reports/<name>: a local folder's own name, or the Hub id with `/` as `--`; odd characters become
    `-`."""
    path = Path(name).expanduser()
    stem = path.resolve().name if path.is_dir() else name.replace("/", "--")
    return REPORTS / (re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-") or "model")


HUB_FIX = "pass a local folder with the model (--hf path/to/folder, saved by transformers' save_pretrained)"


def _cached_or_hub(load: Callable[..., Any], name: str, **kwargs: Any) -> Any:
    """`load(name, ...)` from a local folder, else from the Hugging Face cache alone, else, once one quick try
    finds the Hub there (`octlm.data.hub`), from the Hub; its retry lines held back either way."""
    local = Path(name).expanduser()
    with quiet_hub():
        if local.exists():
            return load(str(local), **kwargs)
        try:
            return load(name, local_files_only=True, **kwargs)
        except OSError:  # not (all) in the cache
            require_hub(f"--hf {name!r} is not in the local Hugging Face cache", HUB_FIX)
        return load(name, **kwargs)


def load_config(name: str) -> Any:
    """The model's transformers config, refused unless it is a GPT-2, Llama or GPT-NeoX model."""
    transformers = _transformers()
    local = Path(name).expanduser()
    if local.exists() and not local.is_dir():
        raise UserError(f"--hf {name!r} is a file; pass the model's folder or a Hub name such as gpt2")
    if not local.exists() and _looks_like_a_path(name):
        raise UserError(f"--hf {name!r}: there is no such folder")
    try:
        config = _cached_or_hub(transformers.AutoConfig.from_pretrained, name, trust_remote_code=False)
    except UserError:  # the Hub cannot be reached: already one line
        raise
    except (OSError, ValueError) as error:  # missing, offline, not a model, custom code refused
        where = "" if local.exists() else " (not a local folder; from the Hub)"
        raise UserError(f"--hf {name!r}: cannot load its config{where}: {_one_line(error)}") from None
    if config.model_type not in FAMILIES:
        architecture = ", ".join(getattr(config, "architectures", None) or []) or config.model_type
        raise UserError(
            f"--hf {name!r}: {architecture} (model_type {config.model_type!r}) is not a GPT-2, Llama or "
            "GPT-NeoX model, the only families octlm inspect reads"
        )
    return config


def refuse_pickles(folder: Path) -> None:
    """A local folder must hold safetensors weights; one with only pickled weights is refused, unread."""
    if not folder.is_dir() or any(folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise UserError(
            f"--hf {str(folder)!r} is refused: its weights are pickled ({', '.join(pickles)}), and loading a "
            "pickle can run code; convert them where you trust the file, with transformers: "
            "AutoModelForCausalLM.from_pretrained(folder).save_pretrained(folder, safe_serialization=True)"
        )


def load_model(name: str, config: Any) -> PreTrainedModel:
    """The pretrained model in float32, eval mode, from safetensors weights only, never running its code."""
    from safetensors import SafetensorError

    transformers = _transformers()
    local = Path(name).expanduser()
    refuse_pickles(local)
    try:
        model = _cached_or_hub(
            transformers.AutoModelForCausalLM.from_pretrained,
            name,
            config=config,
            use_safetensors=True,
            trust_remote_code=False,
            **_dtype(transformers),
        )
    except UserError:  # the Hub cannot be reached: already one line
        raise
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:  # missing, corrupt, wrong shapes
        raise UserError(
            f"--hf {name!r}: cannot load safetensors weights ({_one_line(error)}); "
            "octlm reads no other format"
        ) from None
    return model.eval()


def fresh_model(config: Any, seed: int = UNTRAINED_SEED) -> PreTrainedModel:
    """The same config initialised afresh by transformers under `seed`; the caller's random state is kept."""
    transformers = _transformers()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(
            config, trust_remote_code=False, **_dtype(transformers)
        )
    return model.eval()


# ------------------------------------------------------------------------------------------------------------
# The tables


def _rope(model: PreTrainedModel, config: Any) -> dict[str, Any]:
    """What RoPE shows as the model runs it: its rotary embedding's `inv_freq` `[P]`, the head size they
    rotate in, and a note when transformers scaled them."""
    rotary = next(m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor))
    inv_freq = rotary.inv_freq.detach().double().cpu().numpy()  # [P]
    # transformers 5.x: rope_parameters; 4.x: rope_theta / rotary_emb_base, rotary_pct, rope_scaling.
    params = getattr(config, "rope_parameters", None) or {}
    scaling = getattr(config, "rope_scaling", None) or {}
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rotary_dims = int(head_dim * params.get("partial_rotary_factor", getattr(config, "rotary_pct", 1.0)))
    base = params.get("rope_theta", getattr(config, "rope_theta", getattr(config, "rotary_emb_base", None)))
    kind = params.get("rope_type") or scaling.get("rope_type", "default")
    if len(inv_freq) != (rotary_dims + 1) // 2 or base is None:
        raise UserError(
            f"{type(model).__name__}: its RoPE settings do not match its {len(inv_freq)} frequencies"
        )
    note = f" Base {float(base):g}."
    if kind != "default":
        note += f" The frequencies are the model's own, scaled by rope_type {kind}."
    return {"frequencies": inv_freq, "head_dim": int(head_dim), "note": note}


def tables_of(model: PreTrainedModel, source: dict[str, Any] | None = None) -> Tables:
    """What the report inspects in a GPT-2, Llama or GPT-NeoX model of transformers: its token table, and what
    its position scheme shows, as octlm's own scheme of that kind shows it (learned vectors, RoPE
    frequencies)."""
    config = model.config
    _, token_path, position_path = FAMILIES[config.model_type]

    def weight(path: str) -> Any:
        return model.get_submodule(path).weight.detach().double().cpu().numpy()

    token = weight(token_path)  # [V, C]
    head = model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    scheme = "learned" if position_path else "rope"
    shape = (
        token.shape[0],
        token.shape[1],
        config.max_position_embeddings,
        config.num_hidden_layers,
        config.num_attention_heads,
        scheme,
        tied,
    )
    scheme_class = SCHEMES[scheme]
    positions = {"shows": list(scheme_class.shows), "about": about(scheme_class)}
    if position_path:
        positions["vectors"] = weight(position_path)[:MAP_POSITIONS]  # [T, C]
    else:
        positions |= _rope(model, config)
    return Tables(token, dict(zip(MODEL_FIELDS, shape, strict=True)), positions, source=source)


# ------------------------------------------------------------------------------------------------------------
# The tokenizer


class PretrainedTokenizer:
    """A transformers tokenizer, seen through what the report asks of one (as
    `octlm.data.tokenizer.Tokenizer`).

    Byte-level vocabularies (GPT-2, GPT-NeoX, Llama 3) map each token back to its exact bytes; SentencePiece
    ones (Llama 2) read `▁` as a space and `<0xNN>` as one byte.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        spec = json.loads(tokenizer.backend_tokenizer.to_str())
        self._byte_level = '"ByteLevel"' in json.dumps(spec.get("decoder"))

    @property
    def vocab_size(self) -> int:
        return len(self._tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def token_bytes(self, token_id: int) -> bytes:
        token = self._tokenizer.convert_ids_to_tokens(int(token_id))
        if token is None:
            return f"<id {token_id}>".encode()
        byte_of = byte_of_char()
        if self._byte_level and all(c in byte_of for c in token):
            return bytes(byte_of[c] for c in token)
        if match := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token):
            return bytes([int(match.group(1), 16)])
        return token.replace("▁", " ").encode("utf-8")

    def token_str(self, token_id: int) -> str:
        return self.token_bytes(token_id).decode("utf-8", errors="replace")


def load_tokenizer(name: str) -> tuple[PretrainedTokenizer | None, str | None]:
    """The model's fast tokenizer, or (None, a note saying tokens are labelled by id)."""
    local = Path(name).expanduser()
    if local.is_dir() and not (local / "tokenizer.json").is_file():
        return None, f"{name} has no tokenizer.json: tokens are labelled by id."
    try:
        tokenizer = _cached_or_hub(
            _transformers().AutoTokenizer.from_pretrained, name, trust_remote_code=False
        )
        return PretrainedTokenizer(tokenizer), None
    except Exception as error:  # any tokenizer trouble costs the labels, not the report
        return (
            None,
            f"No tokenizer could be loaded from {name} ({_one_line(error)}): tokens are labelled by id.",
        )


# ------------------------------------------------------------------------------------------------------------
# Everything the report needs


@dataclass
class Pretrained:
    """A loaded model's tables, the fresh model's, the tokenizer (or None) and the report's notes."""

    trained: Tables
    initial: Tables
    tokenizer: PretrainedTokenizer | None
    notes: list[str] = field(default_factory=list)


def load_pretrained(name: str) -> Pretrained:
    """Load `name` (a local folder or a Hub name) and its fresh twin; UserError in one line when refused."""
    config = load_config(name)
    model = load_model(name, config)
    family = FAMILIES[config.model_type][0]
    parameters = sum(p.numel() for p in model.parameters())
    source = {
        "name": name,
        "family": family,
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "parameters": parameters,
        "init_std": float(getattr(config, "initializer_range", 0.02)),
        "untrained_seed": UNTRAINED_SEED,
        "summary": (
            f"A pretrained {family} model, {name} ({type(model).__name__}, {parameters:,} parameters), "
            "loaded with transformers from safetensors weights. 'Trained' is the pretrained model; "
            "'untrained' is the same config initialised afresh by transformers (from_config, seed 0): what "
            "such a model starts from, not this model's own starting point, which is unknown."
        ),
    }
    trained = tables_of(model, source)
    del model  # only the tables are kept
    initial = tables_of(fresh_model(config), source)
    tokenizer, note = load_tokenizer(name)
    notes = [note] if note else []
    if tokenizer is not None and tokenizer.vocab_size < trained.model["vocab_size"]:
        notes.append(
            f"The token table has {trained.model['vocab_size']:,} rows and the tokenizer "
            f"{tokenizer.vocab_size:,} tokens: rows past the tokenizer are labelled by id."
        )
    notes.append(
        "A pretrained model comes without the counts of the tokens it was trained on: the count column shows "
        "?, no rows are singled out as unseen, and the row-norm figure plots each row's norm against its id."
    )
    return Pretrained(trained, initial, tokenizer, notes)
