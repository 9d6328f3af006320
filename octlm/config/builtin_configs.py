"""Where the built-in configs live: package data (`octlm/config/builtin/*.toml`), found through importlib.resources so
that an installed wheel finds them too, whatever the working directory. `octlm.config.schema` reads them."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

CONFIG_DIR: Traversable = files("octlm.config") / "builtin"


def builtin_config_names() -> list[str]:
    """The names `--config NAME` accepts (file stems), sorted; empty for an install without its package data."""
    if not CONFIG_DIR.is_dir():
        return []
    return sorted(p.name.removesuffix(".toml") for p in CONFIG_DIR.iterdir() if p.name.endswith(".toml"))


def default_config_path() -> Traversable:
    return CONFIG_DIR / "day1.toml"
