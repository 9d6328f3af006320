"""`octlm <command>`: a thin dispatcher over the command modules (`octlm.commands`).

Each command word is one module with `add_arguments(parser)` and `run(args)`, over library functions that
tests call directly. Only the module of the command being run is imported, so `octlm --help` stays fast and
one command's dependencies never break another.

The one error boundary (`run_command`) turns what a user can act on into one line on stderr:

- `UserError` (a mistake the user can fix): its message, exit status 2.
- An expected `OSError` (a full disk, a read-only folder, a path through a file, ...; `errors.OS_ERRORS`): the
  path, what happened and the fix for that errno, exit status 2. So is running out of memory (`MemoryError`,
  torch's "can't allocate memory"): the size asked for and what to shrink.
- Ctrl-C: "interrupted", exit status 130. SIGTERM and SIGHUP (raised as `signals.Stopped` for the whole
  command, so every cleanup runs): "stopped by SIGTERM", exit status 143 (129 for SIGHUP).
- A closed standard output (`octlm corpus | head -1`): nothing at all, exit status 141 = 128 + SIGPIPE, what
  a shell reports for any Unix tool the signal ends (`yes | head -1`). octlm returns the number rather than
  dying by the signal, so in-process callers get a status back; standard output then points at /dev/null
  (the recipe of Python's `signal` docs), so no "Exception ignored" message follows at exit.

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import io
import os
import signal
import sys
from collections.abc import Callable

from octlm.commands.options import NOTES, HelpFormatter
from octlm.errors import STDOUT, UserError, describe_memory_error, describe_os_error
from octlm.signals import Stopped, raising_signals

# Command words -> (module, one-line help). Two-word commands ("export hf") nest under their first word.
COMMANDS: dict[str, tuple[str, str]] = {
    "corpus": (
        "octlm.commands.corpus",
        "build the corpus (built-in code or prose, your files or a hub data set), print its figures",
    ),
    "tokenizer": (
        "octlm.commands.tokenizer",
        "train the byte-level BPE tokenizer and print its figures",
    ),
    "data": ("octlm.commands.data", "encode the corpus into cached token files"),
    "model": ("octlm.commands.model", "describe a model config: parameter count and logits shape"),
    "train": ("octlm.commands.train", "train a model (the main job)"),
    "generate": ("octlm.commands.generate", "generate text from a trained run, streaming"),
    "inspect": ("octlm.commands.inspect", "report what the embedding and position tables learned"),
    "probe": ("octlm.commands.probe", "linear probes: what each layer knows of a token's absolute position"),
    "score": ("octlm.commands.score", "bits per byte of a run at chosen lengths, on its data or a text"),
    "compare": ("octlm.commands.compare", "runs side by side: losses, curves, attention by distance"),
    "export hf": ("octlm.commands.export_hf", "export a run as a Hugging Face transformers model folder"),
    "export onnx": (
        "octlm.commands.export_onnx",
        "export a run as one ONNX graph (logits and every layer's attention) for onnxruntime",
    ),
    "export fixtures": (
        "octlm.commands.export_fixtures",
        "write the JSON fixtures the web site's math is tested against",
    ),
    "list": (
        "octlm.commands.list",
        "list the position schemes, tasks, data sources, configs and experiments",
    ),
    "experiment length": (
        "octlm.commands.experiment_length",
        "train short, test long: every position scheme past its length",
    ),
    "experiment tasks": (
        "octlm.commands.experiment_tasks",
        "tasks that test position (copy, recall, counting, arithmetic, passkey) past the training length",
    ),
    "experiment extend": (
        "octlm.commands.experiment_extend",
        "train short, fine-tune longer: RoPE's extensions (PI, NTK, YaRN) against schemes that need none",
    ),
}


# The exit status after standard output was closed by its reader: 128 + SIGPIPE, as a shell shows a tool it
# ended.
CLOSED_PIPE = 128 + signal.SIGPIPE


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (exit 2), like every other octlm error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def _overview(names: list[str], group: str = "") -> str:
    """The usage, one line per command (or per subcommand of `group`) and where to look next."""
    word, what = (f"{group} <subcommand>", "subcommands") if group else ("<command>", "commands")
    lines = [f"usage: octlm {word} [options]", "", f"{what}:"]
    lines += [f"  {name:<20} {COMMANDS[name][1]}" for name in names]
    lines += ["", f"Run `octlm {word} --help` for the options of one{'' if group else ' command'}."]
    lines += [] if group else ["`octlm --version` prints the version."]
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
    return run_command(command, lambda: _dispatch(command, rest, argv))


def _dispatch(command: str | None, rest: list[str], argv: list[str]) -> int:
    """Parse the command's flags and run it (or print the overview, or refuse an unknown command)."""
    if command is None:
        if not argv or argv[0] in ("-h", "--help", "help"):
            print(_overview(list(COMMANDS)))
            return 0
        if argv[0] in ("-V", "--version"):
            print(f"octlm {importlib.metadata.version('octlm')}")
            return 0
        groups = sorted({name.split()[0] for name in COMMANDS if " " in name})
        if argv[0] in groups:
            subs = [name for name in COMMANDS if name.startswith(argv[0] + " ")]
            if argv[1:2] and argv[1] in ("-h", "--help"):
                print(_overview(subs, argv[0]))
                return 0
            sys.stderr.write(f"octlm: error: '{argv[0]}' needs one of: {', '.join(subs)}\n")
        else:
            sys.stderr.write(f"octlm: error: unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)}\n")
        return 2

    module_name, help_ = COMMANDS[command]
    module = importlib.import_module(module_name)
    parser = _Parser(prog=f"octlm {command}", description=help_, formatter_class=HelpFormatter)
    module.add_arguments(parser)
    try:
        args = parser.parse_args(rest)
    except SystemExit as exit_:  # --help, or a usage mistake already on stderr
        sys.stdout.flush()  # so a full or closed stdout under --help is met inside the boundary too
        return exit_.code if isinstance(exit_.code, int) else 2
    for line in getattr(args, NOTES, None) or ():  # an old spelling was used (commands/options.py)
        sys.stderr.write(line + "\n")
    return int(module.run(args) or 0)


class _StdoutFile(io.FileIO):
    """The process's standard output (fd 1), whose write errors name it: writes to an open file name none."""

    def write(self, data: bytes) -> int | None:  # type: ignore[override]
        try:
            return super().write(data)
        except OSError as error:
            error.filename = STDOUT
            raise


def _named_stdout() -> io.TextIOWrapper | None:
    """A stand-in for `sys.stdout` whose errors say "standard output", or None where stdout is no real fd."""
    if sys.stdout is not sys.__stdout__ or sys.stdout is None:
        return None  # redirected in this process (tests, contextlib.redirect_stdout): leave it alone
    try:
        sys.stdout.flush()
        raw = _StdoutFile(sys.stdout.fileno(), "w", closefd=False)
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    old = sys.stdout
    # Buffered as Python's own stdout was: by line on a terminal, by block into a file or a pipe, not at all
    # under `python -u` or PYTHONUNBUFFERED (where Python itself puts the text layer straight on the fd).
    layer = raw if old.write_through else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        layer,
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=old.line_buffering,
        write_through=old.write_through,
    )


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null, so the interpreter's flush at exit cannot fail again on a dead stdout."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.__stdout__.fileno())
    os.close(devnull)


def run_command(command: str | None, call: Callable[[], object]) -> int:
    """Run one command's `call` inside the one error boundary (see the module docstring); its exit status.

    `command` names it in the messages ("octlm generate: error: ..."); None for octlm itself.
    """
    prefix = f"octlm {command}" if command else "octlm"
    named = _named_stdout()
    before = sys.stdout
    if named is not None:
        sys.stdout = named
    try:
        with raising_signals():
            result = call()
        sys.stdout.flush()  # a buffered stdout fails here, inside the boundary, not at interpreter exit
        return int(result or 0)
    except UserError as error:
        line = str(error)
    except KeyboardInterrupt:
        sys.stderr.write(f"{prefix}: interrupted\n")
        return 130
    except Stopped as stop:
        sys.stderr.write(f"{prefix}: stopped by {stop}\n")
        return 128 + stop.signum
    except OSError as error:
        on_stdout = error.filename == STDOUT
        if on_stdout:
            _silence_stdout()
            if isinstance(error, BrokenPipeError):
                return CLOSED_PIPE  # the reader has all it wanted: end quietly, like any Unix tool
        line = describe_os_error(error)
        if line is None:
            raise
    except (MemoryError, RuntimeError) as error:
        line = describe_memory_error(error)
        if line is None:
            raise
    finally:
        if named is not None:
            sys.stdout = before
            try:
                named.flush()  # what a failing command printed before it failed
            except OSError:
                _silence_stdout()  # its reader is gone or its device full: nothing more can reach it
    sys.stderr.write(f"{prefix}: error: {line}\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
