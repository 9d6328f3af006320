"""The flags every command spells the same way, and the old spellings kept for one release.

The vocabulary: a command that reads a run takes it first (`RUN`, `add_run`); `--out PATH` names what a
command writes; `--threads N` how many CPU threads it computes with (`add_threads`; None: octlm's default,
which `runtime.torch_threads(None)` resolves); `--no-progress` silences progress; `--seed` seeds it.

An old spelling (`--run RUN`, `--run-name`, `--out-dir`) still works for one release: hidden from --help, it
stores its value as the new spelling would, and the command says once on stderr how to write it now
(`octlm generate: note: --run is deprecated; give the run first: octlm generate RUN ...`). The parser only
records the notes (`NOTES` in the parsed arguments); `cli` prints them once the whole command line parsed, so
one that fails to parse prints its one error line and no note. A note comes before whatever the command says.

Two spellings of one value never decide silently which wins: every flag records how it was given (`Given`),
and `overrides_from_args` refuses, in one line naming both, a field flag and a `--set` of that field (or an old
and a new spelling, or a command's own flag such as train's `--name`) that disagree.

The config's flags are listed in --help by section (model, data, training), each with its meaning (the
schema's `described` fields) and the default this command uses; the usage line shows them as one
`[--<field> VALUE ...]` (`HelpFormatter`, at most 100 columns wide).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from octlm.config import Config, builtin_config_names, load_config
from octlm.config.fields import field_types, is_list
from octlm.config.load import SECTIONS, config_fields
from octlm.config.schema import choices, description
from octlm.errors import MACHINE_LIMITS, THREADS_RANGE, UserError, whole_range_words

NOTES = "deprecation_notes"  # the parsed arguments' attribute holding the notes to print
GIVEN = "given_flags"  # the parsed arguments' attribute: what each flag given set, and how it was spelt
CONFIG_DEST = "cfg__"  # the dest of a config field's flag: cfg__<section>__<field>
HELP_WIDTH = 100  # --help is wrapped at most this wide, however wide the terminal
SECTION_TITLES = {"model": "model", "data": "data", "train": "training"}
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


def add_threads(parser: Any, default: int | None = None, what: str = "torch CPU threads") -> None:
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


class Spelt(NamedTuple):
    """One value as given: the flag (`--position`, `--set model.position`), its value, the whole spelling."""

    flag: str
    value: str
    text: str  # `--position alibi`, `--set model.position=rope`


def shown(value: Any) -> str:
    """A flag's value as it was typed: the words of a many-valued flag joined by spaces."""
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


class Given(argparse.Action):
    """Store the value, and record how it was spelt under what it sets (`what`: a config key, or the dest), so
    that two spellings of one thing that disagree are refused (`overrides_from_args`), never one ignored."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, what: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.what = what or (dest[len(CONFIG_DEST) :].replace("__", ".", 1) if _is_field(dest) else dest)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        record: dict[str, list[Spelt]] = getattr(namespace, GIVEN, None) or {}
        flag = option_string or self.dest
        record.setdefault(self.what, []).append(Spelt(flag, shown(values), f"{flag} {shown(values)}"))
        setattr(namespace, GIVEN, record)


def _is_field(dest: str) -> bool:
    return dest.startswith(CONFIG_DEST)


def spelt(args: argparse.Namespace, what: str) -> Spelt | None:
    """The last flag given for `what` (a config key, or a dest), as it was spelt; None when none was."""
    given = (getattr(args, GIVEN, None) or {}).get(what)
    return given[-1] if given else None


class _Deprecated(Given):
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
        super().__call__(parser, namespace, values, option_string)
        note(namespace, parser.prog, f"{option_string} is deprecated; {self.fix}")


def note(args: argparse.Namespace, prog: str, text: str) -> None:
    """Record `prog: note: text` for `cli` to print (once, however often the old spelling was given)."""
    notes = getattr(args, NOTES, None) or []
    line = f"{prog}: note: {text}"
    if line not in notes:
        notes.append(line)
    setattr(args, NOTES, notes)


def add_deprecated(parser: Any, flag: str, dest: str, fix: str, **kwargs: Any) -> None:
    """A hidden old spelling `flag` of what `dest` holds; `fix` says how to write it now (`what`, when given:
    the config key the value sets, as for `Given`)."""
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


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, at most `HELP_WIDTH` columns wide, with the config's field flags shown in the usage line as
    one `[--<field> VALUE ...]`: each is listed below it, in its section's group, with meaning and default."""

    def __init__(self, prog: str) -> None:
        width = min(shutil.get_terminal_size().columns, HELP_WIDTH) - 2
        super().__init__(prog, max_help_position=30, width=width)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # as argparse's, but never cutting a name at its hyphen (stick-breaking, bf16-autocast)
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def add_usage(
        self,
        usage: str | None,
        actions: Any,
        groups: Any,
        prefix: str | None = None,
    ) -> None:
        kept = [a for a in actions if not _is_field(a.dest)]
        fields = [a for a in actions if _is_field(a.dest) and a.help is not argparse.SUPPRESS]
        if fields:
            first = actions.index(fields[0])
            kept.insert(len([a for a in actions[:first] if not _is_field(a.dest)]), _FIELDS_IN_USAGE)
        super().add_usage(usage, kept, groups, prefix)


# What the usage line shows in place of the config's many field flags.
_FIELDS_IN_USAGE = argparse.Action(["--<field>"], dest="field", metavar="VALUE ...")


def add_config_arguments(
    parser: Any,
    fields: tuple[str, ...] | None = None,
    refused: dict[str, str] | None = None,
    no_flag: tuple[str, ...] = (),
    defaults: dict[str, Any] | None = None,
) -> None:
    """Add `--config`, `--set` and one `--<field>` flag per config field in `fields` (`config_fields`;
    default: every one), e.g. `--position rope`, `--steps 200`, grouped by section. A command lists only the
    fields it reads, so its --help shows no flag it would ignore, and `--set` refuses the others
    (`overrides_from_args`).

    `refused`: `section.field` -> why the command sets that field itself (e.g. "use --schemes rope"); its flag
    is accepted by the parser, hidden from --help, and refused with that reason rather than ignored (`{value}`
    in the reason is the value given). `no_flag`: fields the command reads but gives flags of its own for
    (train's `--name` and `--out`); `--set` still reaches them. `defaults`: the overrides the command applies
    before the user's (the length experiment's budget), so that --help shows the defaults it runs with.
    A field name that appears in two sections is only reachable with `--set section.field=value`.
    """
    fields = config_fields() if fields is None else fields
    refused = refused or {}
    example = "train.lr=1e-3" if "train.lr" in fields else f"{fields[0]}=VALUE"
    config = parser.add_argument_group(
        "config",
        "Each flag below sets one field of the config (--config) for this run; --set reaches the same "
        "fields by name. The defaults shown: the built-in day1 config, as this command runs it.",
    )
    config.add_argument(
        "--config",
        default=None,
        help=f"a TOML config file, or a built-in config: {', '.join(builtin_config_names())} (default: day1)",
    )
    config.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help=f"set a config field this command reads by name (repeatable), e.g. --set {example}",
    )
    parser.set_defaults(config_fields=fields, config_refused=refused)
    values = load_config(None, defaults).flat()
    seen: dict[str, str] = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            seen[f.name] = section if f.name not in seen else ""
    groups: dict[str, Any] = {}
    for name, section in seen.items():
        key = f"{section}.{name}"
        if section and (key in fields or key in refused) and key not in no_flag:
            kind = field_types(SECTIONS[section])[name]
            if section not in groups:
                groups[section] = parser.add_argument_group(SECTION_TITLES[section])
            # A boolean field is a switch as well (`--compile` = `--compile true`); a list takes many words.
            groups[section].add_argument(
                "--" + name.replace("_", "-"),
                dest=f"{CONFIG_DEST}{section}__{name}",
                action=Given,
                default=None,
                nargs="+" if is_list(kind) else "?" if kind is bool else None,
                const="true" if kind is bool else None,
                metavar=_metavar(key, kind),
                help=argparse.SUPPRESS if key in refused else _field_help(key, values[key]),
            )


def _metavar(key: str, kind: Any) -> str:
    """`NAME` for a field that takes one of some names, `N` a whole number, `X` a number, `K` a layer index,
    `PATH` a list of paths; other strings their field's name (`DEVICE`)."""
    if choices(key):
        return "NAME"
    if is_list(kind):
        return "K" if kind == list[int] else "PATH"
    words = {int: "N", float: "X", bool: "BOOL"}
    return words.get(kind, key.partition(".")[2].upper())


def _field_help(key: str, default: Any) -> str:
    """`how the model knows where a token is; one of learned, rope, ... (default: learned)`: the field's
    meaning (the schema's), the names it takes, and the default this command runs with."""
    section, _, name = key.partition(".")
    names = choices(key)
    text = description(SECTIONS[section], name) + (f"; one of {', '.join(names)}" if names else "")
    if isinstance(default, bool):
        default = str(default).lower()
    elif isinstance(default, float):
        default = f"{default:g}"
    elif default in ("", []):
        default = "none"
    return f"{text} (default: {shown(default)})".replace("%", "%%")  # argparse %-formats help


def overrides_from_args(args: Any, own: dict[str, Spelt] | None = None) -> dict[str, Any]:
    """The dotted overrides given by the per-field flags and `--set` (see add_config_arguments), and by the
    command's own flags (`own`: key -> how it was spelt; train's `--out runs/m7` sets train.run_name to m7).

    Two spellings of one field that disagree (`--position alibi --set model.position=rope`, `--run-name m7
    --name m7b`) are refused in one line naming both; the same flag given twice keeps its last value."""
    overrides: dict[str, Any] = {}
    for key, value in vars(args).items():
        if _is_field(key) and value is not None:
            _, section, name = key.split("__", 2)
            overrides[f"{section}.{name}"] = value
    spellings = {what: list(given) for what, given in (getattr(args, GIVEN, None) or {}).items()}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq:
            raise UserError(f"--set {item!r} must look like section.field=value")
        key, value = key.strip(), value.strip()
        overrides[key] = value
        spellings.setdefault(key, []).append(Spelt(f"--set {key}", value, f"--set {key}={value}"))
    for key, spelling in (own or {}).items():
        overrides[key] = spelling.value
        spellings.setdefault(key, []).append(spelling)
    _check_fields(args, spellings)
    for what, given in spellings.items():
        for first, second in itertools.combinations(given, 2):
            if first.flag != second.flag and first.value != second.value:
                raise UserError(f"{first.text} and {second.text} both set {what}; give only one")
    if "data.text" in overrides and "data.source" not in overrides:
        overrides["data.source"] = "text"  # `--text PATH` alone means "train on my files"
    return overrides


def config_from_args(args: Any) -> Config:
    """The Config described by `--config`, the per-field flags and `--set` (see add_config_arguments)."""
    return load_config(args.config, overrides_from_args(args))


def _check_fields(args: Any, spellings: dict[str, list[Spelt]]) -> None:
    """Refuse an override of a field the command sets itself (its reason) or never reads: never ignore it."""
    refused: dict[str, str] = getattr(args, "config_refused", {})
    fields: tuple[str, ...] = getattr(args, "config_fields", ())
    for key, given in spellings.items():
        if key in refused:
            raise UserError(f"{given[0].text}: {refused[key].format(value=given[0].value)}")
        if fields and key not in fields and key in config_fields():
            raise UserError(
                f"{given[0].text}: this command does not read {key}; it reads {_sections(fields)}"
            )


def _sections(fields: tuple[str, ...]) -> str:
    """`[model], data.text and ...`: the fields a command reads, whole sections by name."""
    whole = [s for s in SECTIONS if set(config_fields(s)) <= set(fields)]
    rest = [key for key in fields if key.partition(".")[0] not in whole]
    return ", ".join([f"[{s}]" for s in whole] + rest)
