"""The typed configs: what a run is, read from TOML and flags and validated once, every problem listed.

Owns the `[model]`, `[data]` and `[train]` dataclasses, the range of every number they hold, how a TOML or
command-line value becomes a field's type, and the built-in TOML configs (package data in `builtin/`).
May import: the top-level ground modules (errors, files) only.
"""
