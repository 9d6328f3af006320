"""What a run is: the `[model]`, `[data]` and `[train]` sections as typed dataclasses, and every check of
them.

Each section's `problems()` lists, as readable lines, every number outside its range (`octlm.config.ranges`)
and every inconsistency; a name that picks a plug-in (`model.position`, `data.source`) is checked by asking
its registry (`octlm.config.registry`), and the plug-in's own checks come from its class. Reading TOML and
flags into these, with every problem listed in one `UserError`, is `octlm.config.load`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from octlm.config.ranges import SPANS, show
from octlm.config.registry import FIELD_REGISTRIES, SCHEMES, SOURCES, did_you_mean
from octlm.hashing import config_sha256

NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
ROPE_LAYOUTS = ("half", "interleaved")
# model.attention_scaling (octlm/model/decoder.py, `QueryScaling`): queries times a factor that grows with the
# length. "ssmax": Nakanishi's scalable softmax in every layer; "llama4": Llama 4's temperature in NoPE
# layers.
ATTENTION_SCALINGS = ("none", "ssmax", "llama4")
# model.rope_scaling (octlm.positions.rope_scaling): RoPE's frequencies rescaled for a longer context, as a
# model is fine-tuned and then run with them ("linear": position interpolation). Dynamic NTK follows each
# sequence's length, so it is an inference-time option only (`octlm experiment length`).
ROPE_SCALINGS = ("none", "linear", "ntk", "yarn")
LOGS = ("none", "tensorboard")  # train.log: where evaluation records go besides metrics.jsonl
# train.dtype (octlm.training.precision): auto = bf16 autocast on CUDA, fp32 on CPU;
# bf16 = bf16 weights, fp32 masters
DTYPES = ("auto", "fp32", "bf16", "bf16-autocast")
# The fields that take one of a few fixed names (a plug-in field asks its registry: `choices`).
NAMES: dict[str, tuple[str, ...]] = {
    "model.norm": NORMS,
    "model.mlp": MLPS,
    "model.rope_layout": ROPE_LAYOUTS,
    "model.attention_scaling": ATTENTION_SCALINGS,
    "model.rope_scaling": ROPE_SCALINGS,
    "train.log": LOGS,
    "train.dtype": DTYPES,
}


def choices(key: str) -> tuple[str, ...] | None:
    """The names field `key` (`section.field`) takes, or None for a field that is not a choice."""
    registry = FIELD_REGISTRIES.get(key)
    return tuple(registry) if registry is not None else NAMES.get(key)


def described(default: Any, meaning: str) -> Any:
    """A config field of `default` (a type such as `list`: a fresh one of it each time) with its meaning, the
    one line `--help` shows beside its flag (`description`)."""
    if isinstance(default, type):
        return field(default_factory=default, metadata={"help": meaning})
    return field(default=default, metadata={"help": meaning})


def description(cls: type, name: str) -> str:
    """The meaning of field `name` of a section's dataclass (see `described`)."""
    return next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)


def _span_problems(section: str, obj: Any) -> list[str]:
    """Every number of one section outside its span (see SPANS)."""
    found = []
    for f in dataclasses.fields(obj):
        span = SPANS.get(f"{section}.{f.name}")
        if span is not None and (problem := span.problem(f"{section}.{f.name}", getattr(obj, f.name))):
            found.append(problem)
    return found


def _unknown(where: str, value: Any, allowed: tuple[str, ...]) -> str:
    """`model.norm = 'rmsnrom' is unknown; choose one of layernorm, rmsnorm; did you mean rmsnorm?`"""
    close = did_you_mean(value, allowed) if isinstance(value, str) else ""
    return f"{where} = {show(value)} is unknown; choose one of {', '.join(allowed)}{close}"


def _path_problems(where: str, value: str) -> list[str]:
    """A path field must name something: an empty string would silently mean the current folder."""
    return [f"{where} is empty; give a folder or file path"] if not value.strip() else []


@dataclass
class ModelConfig:
    """The decoder's shape. Defaults are the seed's Day 1 model (V=1,024, C=128, T=128)."""

    vocab_size: int = described(1024, "tokens in the BPE vocabulary")
    d_model: int = described(128, "width of the residual stream: each token's vector")
    context_length: int = described(128, "tokens per training block (a learned table's rows)")
    n_layers: int = described(2, "decoder layers")
    n_heads: int = described(4, "attention heads per layer")
    n_kv_heads: int = described(0, "key/value heads (grouped-query attention); 0: all")
    d_ff: int = described(512, "hidden width of each MLP")
    position: str = described("learned", "how the model knows where a token is")
    norm: str = described("layernorm", "the normalisation before attention and MLP")
    mlp: str = described("gelu", "the MLP's activation")
    bias: bool = described(True, "biases in linear layers and norms (GPT-2: yes, Llama: no)")
    tie_embeddings: bool = described(True, "the output head is the token table")
    dropout: float = described(0.0, "dropout probability")
    norm_eps: float = described(1e-5, "the epsilon inside each norm")
    rope_base: float = described(10000.0, "rope: frequencies base^(-2i/d), i a channel pair")
    rope_layout: str = described("half", "rope: pairs of channels i and i + d/2 (half) or 2i and 2i+1")
    sinusoidal_base: float = described(10000.0, "sinusoidal: frequencies base^(-2i/d)")
    # The table's size relative to token rows (std 0.02); 1 = the seed's sum.
    sinusoidal_scale: float = described(0.02, "sinusoidal: the table times this (1: the seed's sum)")
    t5_buckets: int = described(32, "t5: distance buckets, each a learned bias per head")
    t5_max_distance: int = described(128, "t5: the distance where the last bucket starts")
    # Options of the newer schemes (octlm/positions/); each scheme class names the fields it reads.
    rope_fraction: float = described(1.0, "rope: share of each head's channels rotated (rotary_pct)")
    prope_fraction: float = described(0.75, "p-rope: share of RoPE's frequencies kept (the highest)")
    xpos_scale_base: float = described(512.0, "xpos: positions per e-fold of the per-pair decay")
    fire_hidden: int = described(32, "fire: hidden width of its MLP over distance")
    fire_threshold: float = described(512.0, "fire: the learned threshold L's initial value")
    cope_positions: int = described(64, "cope: position embeddings per layer (shared by heads)")
    nope_layers: list[int] = described(list, "layers with no position signal (Llama 4, SmolLM3)")
    attention_scaling: str = described(
        "none", "queries scaled with length: ssmax (all layers), llama4 (NoPE)"
    )
    ssmax_init: float = described(0.43, "ssmax: the learned s per head starts here (s log n)")
    attention_floor: int = described(8192, "llama4: positions per temperature step (floor_scale)")
    attention_temperature: float = described(0.1, "llama4: the temperature's slope (attn_scale)")
    rope_scaling: str = described("none", "rope: frequencies rescaled for a longer context")
    rope_factor: float = described(1.0, "rope_scaling: extension factor s (new / original length)")
    rope_original_length: int = described(0, "rope_scaling: the length first trained at (YaRN's ramp)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    def problems(self) -> list[str]:
        """Every inconsistency in this config, as readable lines (empty when valid)."""
        p = _span_problems("model", self)
        if self.n_heads >= 1 and self.n_kv_heads > self.n_heads:
            p.append(f"model.n_kv_heads = {self.n_kv_heads} must be at most model.n_heads = {self.n_heads}")
        elif self.n_heads >= 1 and self.n_kv_heads > 0 and self.n_heads % self.n_kv_heads:
            p.append(
                f"model.n_heads = {self.n_heads} is not a multiple of model.n_kv_heads = {self.n_kv_heads}"
            )
        if self.n_heads >= 1 and self.d_model % self.n_heads:
            p.append(
                f"model.d_model = {self.d_model} is not divisible by model.n_heads = {self.n_heads}; "
                "pick a width that is a multiple of the head count"
            )
        for name in ("position", "norm", "mlp", "rope_layout", "attention_scaling", "rope_scaling"):
            if getattr(self, name) not in (allowed := choices(f"model.{name}") or ()):
                p.append(_unknown(f"model.{name}", getattr(self, name), allowed))
        if self.position in SCHEMES:
            p += SCHEMES[self.position].problems(self)
        return p + self._nope_layer_problems() + self._scaling_problems() + self._rope_scaling_problems()

    def _rope_scaling_problems(self) -> list[str]:
        """Rescaled frequencies need RoPE's own (p-RoPE and xPos have others) and the length they extend."""
        if self.rope_scaling == "none" or self.rope_scaling not in ROPE_SCALINGS:
            return []
        if self.position != "rope":
            return [
                f"model.rope_scaling = {self.rope_scaling!r} rescales RoPE's frequencies, and model.position "
                f"= {self.position!r} has none; use model.position = 'rope' or model.rope_scaling = 'none'"
            ]
        if self.rope_original_length < 1:
            return [
                f"model.rope_scaling = {self.rope_scaling!r} needs model.rope_original_length, the length "
                "the model was first trained at (e.g. 64)"
            ]
        return []

    def _scaling_problems(self) -> list[str]:
        """Llama 4's temperature acts only in layers with no position signal: a model without one would
        silently train as if the option were off."""
        if self.attention_scaling == "llama4" and self.position != "nope" and not self.nope_layers:
            return [
                f"model.attention_scaling = 'llama4' scales the layers with no position signal, and "
                f"model.position = {self.position!r} with no model.nope_layers has none; list layers in "
                "model.nope_layers, use model.position = 'nope', or use 'ssmax' (every layer)"
            ]
        return []

    def _nope_layer_problems(self) -> list[str]:
        """`nope_layers` must name distinct layers, and a scheme that acts inside attention (an added table
        acts once, before every layer)."""
        wrong = [i for i in self.nope_layers if not 0 <= i < self.n_layers]
        if wrong:
            return [
                f"model.nope_layers = {self.nope_layers} names layers {wrong} "
                f"outside 0 .. {self.n_layers - 1}"
            ]
        if len(set(self.nope_layers)) != len(self.nope_layers):
            return [f"model.nope_layers = {self.nope_layers} names a layer twice"]
        scheme = SCHEMES.get(self.position)
        if self.nope_layers and scheme is not None and "embed" in scheme.hooks():
            return [
                f"model.nope_layers needs a scheme that acts inside attention, and model.position = "
                f"{self.position!r} adds its vectors once, before every layer; use rope, alibi, t5 or another"
            ]
        return []


@dataclass
class DataConfig:
    """Where the text comes from and how it is split and tokenized."""

    source: str = described("stdlib", "where the documents come from")
    text: list[str] = described(list, "text: the files and folders to train on")
    hub_dataset: str = described("", "hub: a data set, e.g. roneneldan/TinyStories")
    hub_split: str = described("train", "hub: the split read")
    hub_text_field: str = described("text", "hub: the field holding each document")
    hub_max_documents: int = described(20000, "hub: documents read at most")
    val_fraction: float = described(0.1, "the share of documents held out for validation")
    data_dir: str = described("data", "the folder of the corpus, tokenizer and token files")

    def problems(self) -> list[str]:
        p = _span_problems("data", self)
        if self.source not in SOURCES:
            p.append(_unknown("data.source", self.source, choices("data.source") or ()))
        else:
            p += SOURCES[self.source].problems(self)
        for index, path in enumerate(self.text):
            p += _path_problems(f"data.text[{index}]", path)
        return p + _path_problems("data.data_dir", self.data_dir)


@dataclass
class TrainConfig:
    """Optimisation, evaluation and bookkeeping for one run."""

    steps: int = described(6000, "optimizer steps")
    batch_size: int = described(16, "sequences per step")
    lr: float = described(3e-3, "peak learning rate, after warm-up (AdamW)")
    min_lr: float = described(3e-4, "learning rate at the end of the cosine decay")
    warmup_steps: int = described(100, "steps of linear warm-up to lr")
    weight_decay: float = described(0.1, "AdamW's weight decay, on weight matrices only")
    beta1: float = described(0.9, "AdamW's beta1")
    beta2: float = described(0.95, "AdamW's beta2")
    grad_clip: float = described(1.0, "largest gradient norm; 0: no clipping")
    eval_interval: int = described(250, "steps between validation losses")
    eval_batches: int = described(20, "batches per validation loss")
    checkpoint_interval: int = described(500, "steps between checkpoints")
    seed: int = described(1337, "seed of the weights and the batches")
    device: str = described("auto", "auto, cpu, cuda or cuda:N")
    compile: bool = described(False, "torch.compile the model")
    out_dir: str = described("runs", "the folder that holds the run folders")
    run_name: str = described("", "the run folder's name; empty: <config>-<position>")
    sample_tokens: int = described(120, "tokens of the sample printed after training")
    report: bool = described(True, "write the embedding report after training")
    log: str = described("none", "where evaluations go besides the run's metrics log")
    dtype: str = described("auto", "precision (auto: bf16 autocast on CUDA); checkpoints stay float32")
    init_from: str = described("", "a run whose weights this run starts from (fine-tuning)")

    def problems(self) -> list[str]:
        p = _span_problems("train", self)
        if self.min_lr > self.lr > 0:
            p.append(f"train.min_lr = {self.min_lr:g} must be at most train.lr = {self.lr:g}")
        if self.lr * self.weight_decay >= 1:
            # AdamW multiplies every decayed weight by 1 - lr * weight_decay each step.
            p.append(
                f"train.lr * train.weight_decay = {self.lr:g} * {self.weight_decay:g} must be below 1, or "
                "each step zeroes or flips the sign of every decayed weight"
            )
        if self.run_name in (".", "..") or "/" in self.run_name or "\\" in self.run_name:
            p.append(
                f"train.run_name = {show(self.run_name)} must be one folder name (no '/'); "
                "use --out DIR/NAME for a run folder elsewhere"
            )
        p += _path_problems("train.out_dir", self.out_dir)
        if not re.fullmatch(r"auto|cpu|cuda(:\d{1,4})?", self.device):
            p.append(f"train.device = {show(self.device)} is unknown; choose auto, cpu, cuda or cuda:N")
        for name in ("log", "dtype"):
            if getattr(self, name) not in (allowed := choices(f"train.{name}") or ()):
                p.append(_unknown(f"train.{name}", getattr(self, name), allowed))
        return p


@dataclass
class Config:
    """A whole run: model, data and training settings."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    name: str = "custom"  # the config file's stem; names runs

    def problems(self) -> list[str]:
        return self.model.problems() + self.data.problems() + self.train.problems()

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": dataclasses.asdict(self.model),
            "data": dataclasses.asdict(self.data),
            "train": dataclasses.asdict(self.train),
        }

    def flat(self) -> dict[str, Any]:
        """Every field as `section.field` -> value."""
        return {
            f"{section}.{key}": value
            for section, table in self.to_dict().items()
            for key, value in table.items()
        }

    def hash(self) -> str:
        """SHA-256 of what determines the trained weights (`octlm.hashing.config_sha256`)."""
        return config_sha256(self.to_dict())
