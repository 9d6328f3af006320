"""`octlm <command>`: a thin dispatcher over the modules that do the work.

Each command lives next to the code that owns its behaviour: a module (or, written `module:Name`, an object in
a module that holds several commands) with `add_arguments(parser)` and `run(args)`; tests call the library
functions underneath directly. Only the module of the command being run is imported, so `octlm --help` stays
fast and one command's dependencies never break another.

User mistakes raise `octlm.errors.UserError`; they are printed as one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from octlm.errors import UserError

# Command words -> (module, one-line help). Two-word commands ("export hf") nest under their first word.
COMMANDS: dict[str, tuple[str, str]] = {
    "corpus": (
        "octlm.corpus",
        "build the corpus (built-in, your files or a hub data set), print its figures",
    ),
    "tokenizer": (
        "octlm.prepare:TokenizerCommand",
        "train the byte-level BPE tokenizer and print its figures",
    ),
    "data": ("octlm.prepare:DataCommand", "encode the corpus into cached token files"),
    "model": ("octlm.model", "describe a model config: parameter count and logits shape"),
    "train": ("octlm.train_command", "train a model (the main job)"),
    "generate": ("octlm.generate", "generate text from a trained run, streaming"),
    "inspect": ("octlm.report", "report what the embedding and position tables learned"),
    "export hf": ("octlm.hf", "export a run as a Hugging Face transformers model folder"),
    "export fixtures": ("octlm.fixtures", "write the JSON fixtures the web site's math is tested against"),
    "experiment length": (
        "octlm.length_command",
        "train short, test long: every position scheme past its length",
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (exit 2), like every other octlm error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def _overview() -> str:
    lines = ["usage: octlm <command> [options]", "", "commands:"]
    lines += [f"  {name:<20} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `octlm <command> --help` for the options of one command."]
    return "\n".join(lines)


def _group_overview(group: str, subs: list[str]) -> str:
    lines = [f"usage: octlm {group} <subcommand> [options]", "", "subcommands:"]
    lines += [f"  {name:<20} {COMMANDS[name][1]}" for name in subs]
    lines += ["", f"Run `octlm {group} <subcommand> --help` for the options of one."]
    return "\n".join(lines)


def _find_command(argv: list[str]) -> tuple[str | None, list[str]]:
    """Split argv into the command words and the rest."""
    if argv and argv[0] in COMMANDS:
        return argv[0], argv[1:]
    if len(argv) >= 2 and f"{argv[0]} {argv[1]}" in COMMANDS:
        return f"{argv[0]} {argv[1]}", argv[2:]
    return None, argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = _find_command(argv)
    if command is None:
        if not argv or argv[0] in ("-h", "--help", "help"):
            print(_overview())
            return 0
        groups = sorted({name.split()[0] for name in COMMANDS if " " in name})
        if argv[0] in groups:
            subs = [name for name in COMMANDS if name.startswith(argv[0] + " ")]
            if argv[1:2] and argv[1] in ("-h", "--help"):
                print(_group_overview(argv[0], subs))
                return 0
            sys.stderr.write(f"octlm: error: '{argv[0]}' needs one of: {', '.join(subs)}\n")
        else:
            sys.stderr.write(f"octlm: error: unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)}\n")
        return 2

    target, help_ = COMMANDS[command]
    module_name, _, attribute = target.partition(":")
    module = importlib.import_module(module_name)
    if attribute:
        module = getattr(module, attribute)
    parser = _Parser(prog=f"octlm {command}", description=help_)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        result = module.run(args)
    except UserError as error:
        sys.stderr.write(f"octlm {command}: error: {error}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"octlm {command}: interrupted\n")
        return 130
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
