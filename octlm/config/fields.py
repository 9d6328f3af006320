"""How a value from TOML or the command line becomes a config field's type, every mismatch a readable line.

Strings are parsed only when they come from the command line: in a TOML file `d_model = "128"` is a type
error, not a number. Each function appends its problems to the list it is given, so that one run of
`octlm.config.schema.config_from_dict` lists them all.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

from octlm.config.ranges import show


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def coerce(value: Any, kind: Any, where: str, problems: list[str], parse_strings: bool) -> Any:
    """Check a value against a field's type. Strings are parsed only when they come from the command line
    (`parse_strings`): in a TOML file, `d_model = "128"` is a type error, not a number."""
    if isinstance(value, str) and parse_strings and kind is not str and not is_list(kind):
        value = _parse_cli_string(value, kind)
    if is_list(kind):
        return _coerce_list(value, kind, where, problems, parse_strings)
    if kind is bool:
        if not isinstance(value, bool):
            problems.append(f"{where} = {show(value)} must be true or false")
            return None
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{where} = {show(value)} must be a whole number")
            return None
        if value.bit_length() > 64:  # TOML and Python integers have no size; torch's and JSON readers' do
            problems.append(f"{where} = {show(value)} does not fit in 64 bits")
            return None
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{where} = {show(value)} must be a number")
            return None
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        # NaN passes every `<` check silently and turns every logit into NaN: refuse it here.
        if not math.isfinite(number):
            problems.append(f"{where} = {show(value)} must be a finite number")
            return None
        return number
    if not isinstance(value, str):
        problems.append(f"{where} = {show(value)} must be a string")
        return None
    if "\0" in value:  # the OS refuses it in a path, and Python raises ValueError rather than OSError
        problems.append(f"{where} = {show(value)} holds a NUL character")
        return None
    return value


def _coerce_list(value: Any, kind: Any, where: str, problems: list[str], parse_strings: bool) -> Any:
    """A list of strings (paths) or of whole numbers (layer indices). From the command line a list of
    numbers may come as separate words (`--nope-layers 3 7`) or as one (`--set model.nope_layers=[3,7]`)."""
    numbers = typing.get_args(kind) == (int,)
    if isinstance(value, str) and parse_strings:
        value = [value]
    if numbers and parse_strings and isinstance(value, list) and all(isinstance(v, str) for v in value):
        words = " ".join(value).replace("[", " ").replace("]", " ").replace(",", " ").split()
        value = [_parse_cli_string(w, int) for w in words]
    if numbers:
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            problems.append(f"{where} = {show(value)} must be a list of whole numbers, e.g. [3, 7]")
            return None
        if any(v.bit_length() > 64 for v in value):
            problems.append(f"{where} = {show(value)} holds a number that does not fit in 64 bits")
            return None
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{where} = {show(value)} must be a list of strings")
        return None
    if any("\0" in v for v in value):
        problems.append(f"{where} = {show(value)} holds a NUL character, which no path can contain")
        return None
    return value


def printable(name: str) -> str:
    """A key as written, or quoted with escapes when it holds a newline or other control character (a quoted
    TOML key may), so that every error stays on one line."""
    return name if name.isprintable() else repr(name)


def is_list(kind: Any) -> bool:
    return kind is list or typing.get_origin(kind) is list


def _parse_cli_string(text: str, kind: Any) -> Any:
    """`"128"` -> 128, `"3e-4"` -> 0.0003, `"true"` -> True; anything unparsable is returned as is (and then
    reported with the field's expected type)."""
    try:
        if kind is bool and text.lower() in ("true", "false", "1", "0", "yes", "no"):
            return text.lower() in ("true", "1", "yes")
        if kind is int:
            return int(text.replace("_", ""))
        if kind is float:
            return float(text)
    except ValueError:
        pass
    return text
