"""The flags every command spells the same way, and the old spellings kept for one release.

The vocabulary: a command that reads a run takes it first (`RUN`, `add_run`); `--out PATH` names what a
command writes; `--threads N` how many CPU threads it computes with (`add_threads`; None: octlm's default,
which `runtime.torch_threads(None)` resolves); `--no-progress` silences progress; `--seed` seeds it.

An old spelling (`--run RUN`, `--run-name`, `--out-dir`) still works for one release: hidden from --help, it
stores its value as the new spelling would, and the command says once on stderr how to write it now
(`octlm generate: note: --run is deprecated; give the run first: octlm generate RUN ...`). The parser only
records the notes (`NOTES` in the parsed arguments); `cli` prints them once the whole command line parsed, so
one that fails to parse prints its one error line and no note. A note comes before whatever the command says.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from octlm.config import Config, load_config
from octlm.config.fields import field_types, is_list
from octlm.config.load import SECTIONS, config_fields
from octlm.config.registry import SCHEMES, SOURCES
from octlm.errors import MACHINE_LIMITS, THREADS_RANGE, UserError, whole_range_words

NOTES = "deprecation_notes"  # the parsed arguments' attribute holding the notes to print
# The thread pool of Hugging Face tokenizers (Rust's rayon): read once, when the pool is first used.
RAYON_THREADS = "RAYON_NUM_THREADS"


def int_in_range(low: int, high: int) -> Callable[[str], int]:
    """An argparse `type` for an integer flag in [low, high]: a wider one is refused where it enters."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
        if not low <= value <= high:
            if high in MACHINE_LIMITS:
                raise argparse.ArgumentTypeError(f"{text} must be {whole_range_words(value, low, high)}")
            raise argparse.ArgumentTypeError(f"{text} is outside [{low}, {high}]")
        return value

    return parse


def add_threads(
    parser: argparse.ArgumentParser, default: int | None = None, what: str = "torch CPU threads"
) -> None:
    """`--threads N` (1 to 4096); default None: octlm's default, as `runtime.torch_threads(None)` decides."""
    said = "chosen by octlm for this machine" if default is None else str(default)
    parser.add_argument(
        "--threads",
        type=int_in_range(*THREADS_RANGE),
        default=default,
        metavar="N",
        help=f"{what} (default: {said})",
    )


@contextlib.contextmanager
def threads(count: int | None, tokenizers: bool = False) -> Iterator[None]:
    """Compute with `count` torch threads (None: octlm's default); with `tokenizers`, Hugging Face tokenizers
    use as many, when given and the environment does not already choose (its pool reads the variable once)."""
    # torch: imported when a command computes, not for its --help
    from octlm.runtime import torch_threads

    if tokenizers and count is not None and RAYON_THREADS not in os.environ:
        os.environ[RAYON_THREADS] = str(count)
    with torch_threads(count):
        yield


class _Deprecated(argparse.Action):
    """An old spelling: stores its value under the new spelling's `dest` and records one note."""

    def __init__(self, option_strings: Sequence[str], dest: str, fix: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.fix = fix

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        note(namespace, parser.prog, f"{option_string} is deprecated; {self.fix}")


def note(args: argparse.Namespace, prog: str, text: str) -> None:
    """Record `prog: note: text` for `cli` to print (once, however often the old spelling was given)."""
    notes = getattr(args, NOTES, None) or []
    line = f"{prog}: note: {text}"
    if line not in notes:
        notes.append(line)
    setattr(args, NOTES, notes)


def add_deprecated(parser: argparse.ArgumentParser, flag: str, dest: str, fix: str, **kwargs: Any) -> None:
    """A hidden old spelling `flag` of what `dest` holds; `fix` says how to write it now."""
    parser.add_argument(flag, dest=dest, action=_Deprecated, fix=fix, default=None, **kwargs)


def add_run(parser: argparse.ArgumentParser, example: str = "runs/day1-learned", old_form: str = "") -> None:
    """The run a command reads, first: `RUN`; the old `--run RUN` is kept hidden (`run_folder` checks them).
    `old_form`: what the note says instead of `--run is deprecated` where the old form had more
    (export's OUT)."""
    parser.add_argument(
        "run", nargs="?", metavar="RUN", help=f"a run folder made by `octlm train`, e.g. {example}"
    )
    fix = old_form or f"give the run first: {parser.prog} RUN ..."
    add_deprecated(parser, "--run", "run_flag", fix, metavar="RUN")


def run_folder(args: argparse.Namespace, prog: str) -> str:
    """The run folder, given first (RUN) or by the old `--run RUN`; one of them, exactly once."""
    given = [x for x in (args.run, args.run_flag) if x is not None]
    if not given:
        raise UserError(f"give the run folder to read first: {prog} RUN ..., e.g. {prog} runs/day1-learned")
    if len(given) > 1:
        raise UserError(
            f"the run is given twice ({given[0]!r} and --run {given[1]!r}); give it once: {prog} RUN"
        )
    return given[0]


def run_and_out(args: argparse.Namespace, prog: str) -> tuple[str, str]:
    """A run and the folder written from it, as `RUN --out OUT`, or in the old spellings `--run RUN OUT` and
    `RUN OUT` (each noted). An export needs both."""
    if args.run_flag is not None and args.run is not None and args.old_out is None:
        args.old_out, args.run = args.run, None  # `--run RUN OUT`: the one positional is OUT
    run = run_folder(args, prog)
    if args.old_out is not None:
        if args.out is not None:
            raise UserError(
                f"the output is given twice ({args.old_out!r} and --out {args.out!r}); give --out once"
            )
        if args.run_flag is None:  # said now: the parse's notes are already printed
            sys.stderr.write(
                f"{prog}: note: a second positional OUT is deprecated; write {prog} RUN --out OUT\n"
            )
        args.out = args.old_out
    if args.out is None:
        raise UserError(f"give the folder to write: {prog} {run} --out DIR")
    return run, args.out


def add_export_folders(parser: argparse.ArgumentParser, example: str) -> None:
    """An export's `RUN --out DIR`, with the old `--run RUN OUT` and `RUN OUT` kept hidden (see
    `run_and_out`)."""
    add_run(parser, example, old_form=f"write {parser.prog} RUN --out OUT")
    parser.add_argument("old_out", nargs="?", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--out", metavar="DIR", help="the folder to write (must be new or empty)")


# The help of a field that picks a plug-in lists the registered names (asked of the registry when the flag is
# added).
CHOICES = {"model.position": SCHEMES, "data.source": SOURCES}


def add_config_arguments(
    parser: Any,
    fields: tuple[str, ...] | None = None,
    refused: dict[str, str] | None = None,
    no_flag: tuple[str, ...] = (),
) -> None:
    """Add `--config`, `--set` and one `--<field>` flag per config field in `fields` (`config_fields`;
    default: every one), e.g. `--position rope`, `--steps 200`. A command lists only the fields it reads, so
    its --help shows no flag it would ignore, and `--set` refuses the others (`overrides_from_args`).

    `refused`: `section.field` -> why the command sets that field itself (e.g. "use --schemes rope"); its flag
    is accepted by the parser, hidden from --help, and refused with that reason rather than ignored (`{value}`
    in the reason is the value given). `no_flag`: fields the command reads but gives flags of its own for
    (train's `--name` and `--out`); `--set` still reaches them.
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
