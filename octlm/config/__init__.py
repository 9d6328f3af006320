"""The typed configs: what a run is, read from TOML and flags and validated once, every problem listed.

`schema` holds the `[model]`, `[data]` and `[train]` dataclasses and their checks, `ranges` the range of every
number they hold, `fields` how a TOML or command-line value becomes a field's type, `load` the reading (files,
built-in configs in `builtin/`, overrides), and `registry` the names of the plug-ins a field chooses
among (position schemes, data sources), which the layers that define them register.
May import: the ground modules (errors, files, hashing) only.
"""

from octlm.config.load import (
    builtin_config_names,
    config_fields,
    config_from_dict,
    load_config,
)
from octlm.config.schema import Config, DataConfig, ModelConfig, TrainConfig

__all__ = [
    "Config",
    "DataConfig",
    "ModelConfig",
    "TrainConfig",
    "builtin_config_names",
    "config_fields",
    "config_from_dict",
    "load_config",
]
