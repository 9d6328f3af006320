"""Reading a config: a TOML file (or a built-in one, by name) and `section.field=value` overrides, built into
`octlm.config.schema`'s dataclasses and validated once (the flags that give overrides are
`octlm.commands.options`').

`load_config` reads a file, applies overrides (the CLI turns `--position rope` into `model.position=rope`) and
checks everything at once: every unknown section and key, wrong type (`octlm.config.fields`), number outside
its range and inconsistent value is listed in one `UserError`. The built-in configs are package data
(`octlm/config/builtin/*.toml`), found through importlib.resources so that an installed wheel finds them from
any folder.
"""

from __future__ import annotations

import dataclasses
import tomllib
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from octlm.config.fields import coerce, field_types, printable
from octlm.config.registry import FIELD_REGISTRIES, did_you_mean, nearest
from octlm.config.schema import Config, DataConfig, ModelConfig, TrainConfig
from octlm.errors import UserError

CONFIG_DIR: Traversable = files("octlm.config") / "builtin"


def builtin_config_names() -> list[str]:
    """The names `--config NAME` accepts (file stems), sorted; empty for an install without its package
    data."""
    if not CONFIG_DIR.is_dir():
        return []
    return sorted(p.name.removesuffix(".toml") for p in CONFIG_DIR.iterdir() if p.name.endswith(".toml"))


SECTIONS: dict[str, type] = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}
# Other libraries' names for our fields (Hugging Face transformers, nanoGPT, litgpt), suggested for an unknown
# key that is one of them (difflib finds `dmodel`, not `learning_rate`).
KEY_ALIASES: dict[str, str] = {
    "learning_rate": "train.lr",
    "max_steps": "train.steps",
    "max_iters": "train.steps",
    "warmup_iters": "train.warmup_steps",
    "micro_batch_size": "train.batch_size",
    "per_device_train_batch_size": "train.batch_size",
    "max_grad_norm": "train.grad_clip",
    "eval_iters": "train.eval_batches",
    "save_steps": "train.checkpoint_interval",
    "output_dir": "train.out_dir",
    "torch_dtype": "train.dtype",
    "n_embd": "model.d_model",
    "hidden_size": "model.d_model",
    "n_layer": "model.n_layers",
    "num_hidden_layers": "model.n_layers",
    "n_head": "model.n_heads",
    "num_attention_heads": "model.n_heads",
    "num_key_value_heads": "model.n_kv_heads",
    "intermediate_size": "model.d_ff",
    "block_size": "model.context_length",
    "max_position_embeddings": "model.context_length",
    "rope_theta": "model.rope_base",
    "tie_word_embeddings": "model.tie_embeddings",
}


def nearest_key(key: str) -> str | None:
    """The config key a misspelt or foreign `section.field` most likely means: `model.dmodel` ->
    `model.d_model`, `train.learning_rate` -> `train.lr` (`KEY_ALIASES`), `model.lr` -> `train.lr`; or None."""
    section, _, name = key.partition(".")
    every = config_fields()
    by_name = {k.partition(".")[2]: k for k in every}
    return (
        KEY_ALIASES.get(name.lower())
        or by_name.get(name)
        or nearest(key, every)
        or (by_name[close] if (close := nearest(name, by_name)) else None)
    )


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
            problems.append(
                f"unknown section [{printable(section)}]; sections are {', '.join(SECTIONS)}"
                + did_you_mean(str(section), SECTIONS)
            )
            continue
        if not isinstance(table, dict):
            problems.append(f"[{section}] must be a table, got {table!r}")
            continue
        values[section].update(table)
    for key, value in (overrides or {}).items():
        section, _, field_name = key.partition(".")
        if section not in SECTIONS or not field_name:
            close = nearest_key(key) if field_name else None
            problems.append(
                f"override {key!r} must look like section.field with section one of {', '.join(SECTIONS)}"
                + (f"; did you mean {close}?" if close else "")
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
                close = nearest_key(f"{section}.{key}")
                hint = f"; did you mean {close}?" if close else ""
                problems.append(f"unknown key {section}.{printable(key)}{hint}")
                continue
            coerced = coerce(value, types_[key], f"{section}.{key}", problems, f"{section}.{key}" in from_cli)
            if isinstance(coerced, str) and f"{section}.{key}" in FIELD_REGISTRIES:
                coerced = FIELD_REGISTRIES[f"{section}.{key}"].canonical(coerced)  # `ROPE` is `rope`
            if coerced is not None:
                kwargs[key] = coerced
        built[section] = cls(**kwargs)
    config = Config(**built, name=name)
    problems += config.problems()  # checked even after type errors, so one run lists everything
    if problems:
        raise UserError(f"config {name!r} has {len(problems)} problem(s): " + "; ".join(problems))
    return config


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Read a TOML config (default: the built-in octlm/config/builtin/day1.toml), apply overrides,
    validate."""
    path: Path | Traversable = Path(path) if path is not None else CONFIG_DIR / "day1.toml"
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


def config_fields(*wanted: str) -> tuple[str, ...]:
    """`section.field` keys of the config: every field of a section named alone (`"data"`), and each
    `section.field` given; every field when none is given. A name that is neither is a programming mistake."""
    every = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    if not wanted:
        return tuple(every)
    chosen = [key for key in every if key in wanted or key.partition(".")[0] in wanted]
    unknown = set(wanted) - set(chosen) - set(SECTIONS)
    if unknown:
        raise ValueError(f"no config field {sorted(unknown)}")
    return tuple(chosen)
