"""Typed configs, loaded from TOML and validated once at the boundary.

A config file has three tables, `[model]`, `[data]` and `[train]`, each a dataclass below. `load_config` reads a
file, applies `section.field=value` overrides (the CLI turns `--position rope` into `model.position=rope`), and
checks everything at once: every unknown key, wrong type, number outside its range (`octlm.config.ranges`) and
inconsistent value is listed in one `UserError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from octlm.config.builtin_configs import CONFIG_DIR, builtin_config_names, default_config_path
from octlm.config.fields import coerce, field_types, is_list, printable
from octlm.config.ranges import SPANS, show
from octlm.errors import UserError
from octlm.positions import scheme_names
from octlm.positions.scheme import SCHEMES, PositionScheme

NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
ROPE_LAYOUTS = ("half", "interleaved")
LOGS = ("none", "tensorboard")  # train.log: where evaluation records go besides metrics.jsonl
# train.dtype (octlm.training.precision): auto = bf16 autocast on CUDA, fp32 on CPU; bf16 = bf16 weights, fp32 masters
DTYPES = ("auto", "fp32", "bf16", "bf16-autocast")


def _span_problems(section: str, obj: Any) -> list[str]:
    """Every number of one section outside its span (see SPANS)."""
    found = []
    for f in dataclasses.fields(obj):
        span = SPANS.get(f"{section}.{f.name}")
        if span is not None and (problem := span.problem(f"{section}.{f.name}", getattr(obj, f.name))):
            found.append(problem)
    return found


def _hooks(scheme: type) -> set[str]:
    """The hooks of octlm.positions.scheme.PositionScheme that `scheme` overrides."""
    hooks = ("embed", "rotate", "bias", "contextual_bias")
    return {h for h in hooks if getattr(scheme, h) is not getattr(PositionScheme, h)}


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
            ("position", scheme_names()),
            ("norm", NORMS),
            ("mlp", MLPS),
            ("rope_layout", ROPE_LAYOUTS),
        ):
            if getattr(self, name) not in allowed:
                p.append(
                    f"model.{name} = {show(getattr(self, name))} is unknown; choose one of {', '.join(allowed)}"
                )
        if self.position in SCHEMES:
            p += SCHEMES[self.position].problems(self)
        return p + self._nope_layer_problems()

    def _nope_layer_problems(self) -> list[str]:
        """`nope_layers` must name distinct layers, and a scheme that acts inside attention (an added table
        acts once, before every layer)."""
        wrong = [i for i in self.nope_layers if not 0 <= i < self.n_layers]
        if wrong:
            return [
                f"model.nope_layers = {self.nope_layers} names layers {wrong} outside 0 .. {self.n_layers - 1}"
            ]
        if len(set(self.nope_layers)) != len(self.nope_layers):
            return [f"model.nope_layers = {self.nope_layers} names a layer twice"]
        scheme = SCHEMES.get(self.position)
        if self.nope_layers and scheme is not None and "embed" in _hooks(scheme):
            return [f"model.nope_layers needs a scheme that acts inside attention, and model.position = "
                    f"{self.position!r} adds its vectors once, before every layer; use rope, alibi, t5 or another"]  # fmt: skip
        return []


@dataclass
class DataConfig:
    """Where the text comes from and how it is split and tokenized."""

    source: str = "stdlib"  # "stdlib" (built in), "text" (the paths in `text`) or "hub" (`hub_dataset`)
    text: list[str] = field(default_factory=list)
    hub_dataset: str = ""  # e.g. "roneneldan/TinyStories"; needs internet and the `datasets` package
    hub_split: str = "train"
    hub_text_field: str = "text"
    hub_max_documents: int = 20000
    val_fraction: float = 0.1
    data_dir: str = "data"

    def problems(self) -> list[str]:
        p = _span_problems("data", self)
        if self.source not in ("stdlib", "text", "hub"):
            p.append(f"data.source = {show(self.source)} is unknown; choose one of stdlib, text, hub")
        if self.source == "text" and not self.text:
            p.append("data.source = 'text' needs at least one path in data.text (or pass --text PATH)")
        for index, path in enumerate(self.text):
            p += _path_problems(f"data.text[{index}]", path)
        if self.source == "hub" and not self.hub_dataset:
            p.append("data.source = 'hub' needs data.hub_dataset, e.g. 'roneneldan/TinyStories'")
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
                "use --out-dir for the folder that holds runs"
            )
        p += _path_problems("train.out_dir", self.out_dir)
        if not re.fullmatch(r"auto|cpu|cuda(:\d{1,4})?", self.device):
            p.append(f"train.device = {show(self.device)} is unknown; choose auto, cpu, cuda or cuda:N")
        for name, allowed in (("log", LOGS), ("dtype", DTYPES)):
            if getattr(self, name) not in allowed:
                p.append(
                    f"train.{name} = {show(getattr(self, name))} is unknown; choose one of {', '.join(allowed)}"
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
        return {"model": dataclasses.asdict(self.model), "data": dataclasses.asdict(self.data),
                "train": dataclasses.asdict(self.train)}  # fmt: skip

    def flat(self) -> dict[str, Any]:
        """Every field as `section.field` -> value."""
        return {
            f"{section}.{key}": value
            for section, table in self.to_dict().items()
            for key, value in table.items()
        }

    def hash(self) -> str:
        """SHA-256 of what determines the trained weights (bookkeeping fields such as steps excluded)."""
        d = self.to_dict()
        for key in ("out_dir", "run_name", "device", "compile", "report", "sample_tokens", "log"):
            d["train"].pop(key)
        if d["train"]["dtype"] == "auto":  # the default: runs from before the field keep their hash
            d["train"].pop("dtype")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


SECTIONS: dict[str, type] = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}


def config_from_dict(
    raw: dict[str, Any], name: str = "custom", overrides: dict[str, Any] | None = None
) -> Config:
    """Build and validate a Config from nested dicts (as TOML gives) plus dotted overrides.

    Raises UserError listing every problem: unknown sections and keys, wrong types, inconsistent values.
    """
    problems: list[str] = []
    values: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    from_cli: set[str] = set()  # "section.field" keys whose string values may be parsed
    if not isinstance(raw, dict):
        raise UserError(
            f"a config must be a table of sections ({', '.join(SECTIONS)}), got {type(raw).__name__}"
        )
    for section, table in raw.items():
        if section not in SECTIONS:
            problems.append(f"unknown section [{printable(section)}]; sections are {', '.join(SECTIONS)}")
            continue
        if not isinstance(table, dict):
            problems.append(f"[{section}] must be a table, got {table!r}")
            continue
        values[section].update(table)
    for key, value in (overrides or {}).items():
        section, _, field_name = key.partition(".")
        if section not in SECTIONS or not field_name:
            problems.append(
                f"override {key!r} must look like section.field with section one of {', '.join(SECTIONS)}"
            )
            continue
        values[section][field_name] = value
        from_cli.add(key)

    built: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        types_ = field_types(cls)
        kwargs: dict[str, Any] = {}
        for key, value in values[section].items():
            if key not in types_:
                close = [k for k in types_ if k.startswith(key[:3])]
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                problems.append(f"unknown key {section}.{printable(key)}{hint}")
                continue
            coerced = coerce(value, types_[key], f"{section}.{key}", problems, f"{section}.{key}" in from_cli)
            if coerced is not None:
                kwargs[key] = coerced
        built[section] = cls(**kwargs)
    config = Config(**built, name=name)
    problems += config.problems()  # checked even after type errors, so one run lists everything
    if problems:
        raise UserError(f"config {name!r} has {len(problems)} problem(s): " + "; ".join(problems))
    return config


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Read a TOML config (default: the built-in octlm/config/builtin/day1.toml), apply overrides, validate."""
    path: Path | Traversable = Path(path) if path is not None else default_config_path()
    if not path.is_file() and (CONFIG_DIR / f"{path}.toml").is_file():
        path = CONFIG_DIR / f"{path}.toml"  # `--config modern` names a built-in config
    if not path.is_file():
        known = ", ".join(builtin_config_names())
        raise UserError(f"config file {str(path)!r} does not exist; built-in configs: {known}")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise UserError(f"config file {str(path)!r} is nested too deeply to be a config") from None
    except OSError as error:
        raise UserError(f"could not read config file {str(path)!r}: {error.strerror or error}") from None
    except ValueError as error:  # TOMLDecodeError, UnicodeDecodeError, an integer past 4,300 digits
        reason = (str(error).splitlines() or [""])[0][:300]
        raise UserError(f"config file {str(path)!r} is not valid TOML: {reason}") from None
    return config_from_dict(raw, name=Path(path.name).stem, overrides=overrides)


def add_config_arguments(parser: Any) -> None:
    """Add `--config` and one `--<field>` flag per config field (e.g. `--position rope`, `--steps 200`).

    A field name that appears in two sections is only reachable with `--set section.field=value`.
    """
    parser.add_argument("--config", default=None, help="TOML config file or built-in name (default: day1)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override any config field, e.g. --set train.lr=1e-3")  # fmt: skip
    seen: dict[str, str] = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            seen[f.name] = section if f.name not in seen else ""
    for name, section in seen.items():
        if section:
            flag = "--" + name.replace("_", "-")
            # A boolean field is a switch as well (`--compile` = `--compile true`); a list takes many words.
            is_bool = field_types(SECTIONS[section])[name] is bool
            nargs = "+" if is_list(field_types(SECTIONS[section])[name]) else "?" if is_bool else None
            parser.add_argument(flag, dest=f"cfg__{section}__{name}", default=None, nargs=nargs,
                                const="true" if is_bool else None, metavar=name.upper(),
                                help=f"override {section}.{name}")  # fmt: skip


def overrides_from_args(args: Any) -> dict[str, Any]:
    """The dotted overrides given by the per-field flags and `--set` (see add_config_arguments)."""
    overrides: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key.startswith("cfg__") and value is not None:
            _, section, name = key.split("__", 2)
            overrides[f"{section}.{name}"] = value
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq:
            raise UserError(f"--set {item!r} must look like section.field=value")
        overrides[key.strip()] = value.strip()
    if "data.text" in overrides and "data.source" not in overrides:
        overrides["data.source"] = "text"  # `--text PATH` alone means "train on my files"
    return overrides


def config_from_args(args: Any) -> Config:
    """The Config described by `--config`, the per-field flags and `--set` (see add_config_arguments)."""
    return load_config(args.config, overrides_from_args(args))
