"""Reading a config: a TOML file (or a built-in one, by name), `section.field=value` overrides, and the flags that
give them, built into `octlm.config.schema`'s dataclasses and validated once.

`load_config` reads a file, applies overrides (the CLI turns `--position rope` into `model.position=rope`) and
checks everything at once: every unknown section and key, wrong type (`octlm.config.fields`), number outside its
range and inconsistent value is listed in one `UserError`. The built-in configs are package data
(`octlm/config/builtin/*.toml`), found through importlib.resources so that an installed wheel finds them from
any folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from octlm.config.fields import coerce, field_types, is_list, printable
from octlm.config.registry import SCHEMES, SOURCES
from octlm.config.schema import Config, DataConfig, ModelConfig, TrainConfig
from octlm.errors import UserError

CONFIG_DIR: Traversable = files("octlm.config") / "builtin"


def builtin_config_names() -> list[str]:
    """The names `--config NAME` accepts (file stems), sorted; empty for an install without its package data."""
    if not CONFIG_DIR.is_dir():
        return []
    return sorted(p.name.removesuffix(".toml") for p in CONFIG_DIR.iterdir() if p.name.endswith(".toml"))


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


# The help of a field that picks a plug-in lists the registered names (asked of the registry when the flag is added).
CHOICES = {"model.position": SCHEMES, "data.source": SOURCES}


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


def add_config_arguments(
    parser: Any,
    fields: tuple[str, ...] | None = None,
    refused: dict[str, str] | None = None,
    no_flag: tuple[str, ...] = (),
) -> None:
    """Add `--config`, `--set` and one `--<field>` flag per config field in `fields` (`config_fields`; default:
    every one), e.g. `--position rope`, `--steps 200`. A command lists only the fields it reads, so its --help
    shows no flag it would ignore, and `--set` refuses the others (`overrides_from_args`).

    `refused`: `section.field` -> why the command sets that field itself (e.g. "use --schemes rope"); its flag
    is accepted by the parser, hidden from --help, and refused with that reason rather than ignored (`{value}` in
    the reason is the value given). `no_flag`: fields the command reads but gives flags of its own for (train's
    `--name` and `--out`); `--set` still reaches them.
    A field name that appears in two sections is only reachable with `--set section.field=value`.
    """
    fields = config_fields() if fields is None else fields
    refused = refused or {}
    example = "train.lr=1e-3" if "train.lr" in fields else f"{fields[0]}=VALUE"
    parser.add_argument("--config", default=None, help="TOML config file or built-in name (default: day1)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help=f"override a config field this command reads, e.g. --set {example}",
    )
    parser.set_defaults(config_fields=fields, config_refused=refused)
    seen: dict[str, str] = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            seen[f.name] = section if f.name not in seen else ""
    for name, section in seen.items():
        key = f"{section}.{name}"
        if section and (key in fields or key in refused) and key not in no_flag:
            kind = field_types(SECTIONS[section])[name]
            # A boolean field is a switch as well (`--compile` = `--compile true`); a list takes many words.
            nargs = "+" if is_list(kind) else "?" if kind is bool else None
            parser.add_argument(
                "--" + name.replace("_", "-"),
                dest=f"cfg__{section}__{name}",
                default=None,
                nargs=nargs,
                const="true" if kind is bool else None,
                metavar=name.upper(),
                help=argparse.SUPPRESS if key in refused else _field_help(key),
            )


def _field_help(key: str) -> str:
    """`override model.position (learned, rope, ...)`: the choices of a plug-in field listed."""
    registry = CHOICES.get(key)
    return f"override {key}" + (f" (one of: {', '.join(registry)})" if registry is not None else "")


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
    _check_fields(args, overrides)
    if "data.text" in overrides and "data.source" not in overrides:
        overrides["data.source"] = "text"  # `--text PATH` alone means "train on my files"
    return overrides


def config_from_args(args: Any) -> Config:
    """The Config described by `--config`, the per-field flags and `--set` (see add_config_arguments)."""
    return load_config(args.config, overrides_from_args(args))


def _check_fields(args: Any, overrides: dict[str, Any]) -> None:
    """Refuse an override of a field the command sets itself (its reason) or never reads: never ignore it."""
    refused: dict[str, str] = getattr(args, "config_refused", {})
    fields: tuple[str, ...] = getattr(args, "config_fields", ())
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        shown = " ".join(value) if isinstance(value, list) else str(value)
        by_flag = getattr(args, f"cfg__{section}__{name}", None) is not None
        given = f"--{name.replace('_', '-')} {shown}" if by_flag else f"--set {key}={shown}"
        if key in refused:
            raise UserError(f"{given}: {refused[key].format(value=shown)}")
        if fields and key not in fields and key in config_fields():
            raise UserError(f"{given}: this command does not read {key}; it reads {_sections(fields)}")


def _sections(fields: tuple[str, ...]) -> str:
    """`[model], data.text and ...`: the fields a command reads, whole sections by name."""
    whole = [s for s in SECTIONS if set(config_fields(s)) <= set(fields)]
    rest = [key for key in fields if key.partition(".")[0] not in whole]
    return ", ".join([f"[{s}]" for s in whole] + rest)
