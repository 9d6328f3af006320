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
from octlm.config.registry import SCHEMES, SOURCES
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


def _span_problems(section: str, obj: Any) -> list[str]:
    """Every number of one section outside its span (see SPANS)."""
    found = []
    for f in dataclasses.fields(obj):
        span = SPANS.get(f"{section}.{f.name}")
        if span is not None and (problem := span.problem(f"{section}.{f.name}", getattr(obj, f.name))):
            found.append(problem)
    return found


def _path_problems(where: str, value: str) -> list[str]:
    """A path field must name something: an empty string would silently mean the current folder."""
    return [f"{where} is empty; give a folder or file path"] if not value.strip() else []


@dataclass
class ModelConfig:
    """The decoder's shape. Defaults are the seed's Day 1 model (V=1,024, C=128, T=128)."""

    vocab_size: int = 1024
    d_model: int = 128
    context_length: int = 128  # rows of a learned table; the training block length for every scheme
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 0  # 0 = same as n_heads; fewer gives grouped-query attention
    d_ff: int = 512  # MLP hidden width
    position: str = "learned"
    norm: str = "layernorm"
    mlp: str = "gelu"
    bias: bool = True  # biases in linear layers and LayerNorm (GPT-2 has them, Llama does not)
    tie_embeddings: bool = True
    dropout: float = 0.0
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    rope_layout: str = "half"
    sinusoidal_base: float = 10000.0
    sinusoidal_scale: float = 0.02  # the table's size relative to token rows (std 0.02); 1 = the seed's sum
    t5_buckets: int = 32
    t5_max_distance: int = 128
    # Options of the newer schemes (octlm/positions/); each scheme class names the fields it reads.
    rope_fraction: float = 1.0  # rope: the share of each head's channels rotated (GPT-NeoX's rotary_pct)
    prope_fraction: float = 0.75  # p-rope: the share of RoPE's frequencies kept, the highest ones
    xpos_scale_base: float = 512.0  # xpos: positions per e-fold of the per-pair decay
    fire_hidden: int = 32  # fire: hidden width of the MLP over the transformed distance
    fire_threshold: float = 512.0  # fire: the learned threshold L's initial value (progressive interpolation)
    cope_positions: int = (
        64  # cope: interpolated position embeddings 0 .. cope_positions - 1 per layer, shared by its heads
    )
    nope_layers: list[int] = field(
        default_factory=list
    )  # layers that use no position signal (Llama 4, SmolLM3)
    attention_scaling: str = (
        "none"  # none, ssmax (every layer) or llama4 (the layers with no position signal)
    )
    ssmax_init: float = 0.43  # ssmax: each head's learned s starts here (logits times s log n)
    attention_floor: int = 8192  # llama4: positions per step of the temperature (Llama 4's floor_scale)
    attention_temperature: float = 0.1  # llama4: the temperature's slope (Llama 4's attn_scale)
    rope_scaling: str = "none"  # rope: none, linear (PI), ntk or yarn, with the two fields below
    rope_factor: float = 1.0  # rope_scaling: the extension factor s (new context / original)
    rope_original_length: int = 0  # rope_scaling: the length the model was first trained at (YaRN's ramp)

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
        for name, allowed in (
            ("position", tuple(SCHEMES)),
            ("norm", NORMS),
            ("mlp", MLPS),
            ("rope_layout", ROPE_LAYOUTS),
            ("attention_scaling", ATTENTION_SCALINGS),
            ("rope_scaling", ROPE_SCALINGS),
        ):
            if getattr(self, name) not in allowed:
                p.append(
                    f"model.{name} = {show(getattr(self, name))} is unknown; "
                    f"choose one of {', '.join(allowed)}"
                )
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

    source: str = (
        "stdlib"  # a registered source (octlm.data.sources): stdlib, prose, text (the paths in `text`), hub
    )
    text: list[str] = field(default_factory=list)
    hub_dataset: str = ""  # e.g. "roneneldan/TinyStories"; needs internet and the `datasets` package
    hub_split: str = "train"
    hub_text_field: str = "text"
    hub_max_documents: int = 20000
    val_fraction: float = 0.1
    data_dir: str = "data"

    def problems(self) -> list[str]:
        p = _span_problems("data", self)
        if self.source not in SOURCES:
            p.append(f"data.source = {show(self.source)} is unknown; choose one of {', '.join(SOURCES)}")
        else:
            p += SOURCES[self.source].problems(self)
        for index, path in enumerate(self.text):
            p += _path_problems(f"data.text[{index}]", path)
        return p + _path_problems("data.data_dir", self.data_dir)


@dataclass
class TrainConfig:
    """Optimisation, evaluation and bookkeeping for one run."""

    steps: int = 6000
    batch_size: int = 16
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_interval: int = 250
    eval_batches: int = 20
    checkpoint_interval: int = 500
    seed: int = 1337
    device: str = "auto"
    compile: bool = False
    out_dir: str = "runs"
    run_name: str = ""  # empty: derived from the config name and position scheme
    sample_tokens: int = 120
    report: bool = True
    log: str = "none"  # "tensorboard": event files beside metrics.jsonl (octlm.training.tracking)
    dtype: str = "auto"  # "bf16" and "bf16-autocast" on any device; checkpoints stay float32
    # A run folder whose trained weights this run starts from (fine-tuning, e.g. at a longer context);
    # "": none.
    init_from: str = ""

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
        for name, allowed in (("log", LOGS), ("dtype", DTYPES)):
            if getattr(self, name) not in allowed:
                p.append(
                    f"train.{name} = {show(getattr(self, name))} is unknown; "
                    f"choose one of {', '.join(allowed)}"
                )
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
