"""Mutation testing of octlm's core with mutmut 3, and the record of what it has shown.

mutmut plants one small bug at a time in a function (a flipped sign, an off-by-one, a dropped argument) and
runs the tests that reach that function; a mutant that no test fails *survives*. This script picks the
functions, runs mutmut on them, scores each module, and keeps `docs/mutation-record.json`: for each core
function whose every mutant was killed (or is listed as equivalent in docs/MUTANTS.md), mutmut's hash of its
source. A function whose current hash is not on record has not been shown to be tested; CI mutates those.

    scripts/mutation [MODULE.py ...]           every function of these core modules (default: all of them)
    scripts/mutation --changed REF             the core modules changed since the merge base with REF
    scripts/mutation --unrecorded              the core functions whose source is not on record (what CI runs)
    scripts/mutation --report [MODULE.py ...]  the scores of the last run (in mutants/), running nothing
    --record                                   put what the run (or, with --report, the last run) showed on
                                               record in docs/mutation-record.json
    --max-mutants N                            refuse, in one line, a run of more than N mutants

The core modules are `[tool.mutmut] only_mutate` in pyproject.toml, less the command-line functions listed in
`[tool.octlm.mutation] not_core`. Score = (killed + timed out) / (mutants - listed equivalents). Exit status:
0 when every mutant is killed or listed, 1 when one is not (each is printed; `.venv/bin/mutmut show NAME`
prints its diff), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from mutmut.mutation.file_mutation import mutate_file_contents
from mutmut.stats import status_by_exit_code

KILLED = ("killed", "timeout")
MUTMUT = importlib.metadata.version("mutmut")


@dataclass(frozen=True)
class Function:
    """One function mutmut mutates: its mutant-name prefix, the module it is in, its source hash, its mutants."""

    key: (
        str  # mutmut's name, e.g. "octlm.model.decoder.xǁDecoderǁforward" (its mutants: key + "__mutmut_<n>")
    )
    path: str  # "octlm/model/decoder.py"
    digest: str  # mutmut's hash of the function's source
    mutants: int


@dataclass(frozen=True)
class Outcome:
    """What a run showed for one function: its mutants' statuses (mutmut's words) and which are listed."""

    function: Function
    status: dict[str, str]  # mutant name -> "killed", "survived", "timeout", "not checked", ...
    listed: frozenset[str]  # mutant names listed as equivalent in docs/MUTANTS.md

    @property
    def live(self) -> list[str]:
        """Mutants neither killed nor listed, in mutmut's order."""
        live = [k for k, s in self.status.items() if k not in self.listed and s not in KILLED]
        return sorted(live, key=lambda k: int(k.rsplit("_", 1)[1]))

    @property
    def counts(self) -> dict[str, int]:
        listed = sum(k in self.listed for k in self.status)
        done = Counter(s for k, s in self.status.items() if k not in self.listed)
        return {
            "mutants": len(self.status),
            "killed": done["killed"],
            "timeout": done["timeout"],
            "equivalent": listed,
        }


@dataclass(frozen=True)
class Settings:
    """The project's mutation settings: core modules, what in them is not core, where the record lives."""

    root: Path
    modules: list[str]
    not_core: frozenset[str]
    record: Path
    equivalents: Path

    @classmethod
    def read(cls, root: Path) -> Settings:
        tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]
        ours = tool.get("octlm", {}).get("mutation", {})
        return cls(
            root,
            list(tool["mutmut"]["only_mutate"]),
            frozenset(ours.get("not_core", [])),
            root / ours.get("record", "docs/mutation-record.json"),
            root / ours.get("equivalents", "docs/MUTANTS.md"),
        )


def module_functions(settings: Settings, path: str) -> list[Function]:
    """The core functions of `path` (relative to the root) that have mutants, as mutmut names and hashes them
    (mutmut reads its settings from the working directory's pyproject.toml: run from the root)."""
    mutated = mutate_file_contents(path, (settings.root / path).read_text())
    module = path.removesuffix(".py").replace("/", ".")
    per_function = Counter(name.partition("__mutmut_")[0] for name in mutated.mutant_names)
    functions = [
        Function(f"{module}.{name}", path, digest, per_function[name])
        for name, digest in mutated.hash_by_function_name.items()
    ]
    return [f for f in functions if f.key not in settings.not_core and f.mutants]


def load_record(settings: Settings) -> dict[str, dict]:
    """The record's functions: key -> {"hash", "mutants", "killed", "timeout", "equivalent"}; {} when absent."""
    if not settings.record.exists():
        return {}
    try:
        record = json.loads(settings.record.read_text())
        made_with, functions = record.get("mutmut", MUTMUT), dict(record["functions"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit(
            f"scripts/mutation: {settings.record} is not a mutation record ({e}); restore it "
            "with git checkout, or delete it to mutate every core function"
        ) from None
    if made_with != MUTMUT:
        # Another mutmut may hash and number mutants differently: the record and docs/MUTANTS.md would not apply.
        raise SystemExit(
            f"scripts/mutation: {settings.record} was made with mutmut {made_with}, this is "
            f"mutmut {MUTMUT}; install mutmut=={made_with} (pyproject's dev extra pins it), or "
            "record every core function again with this one"
        )
    return functions


def unrecorded(functions: list[Function], record: dict[str, dict]) -> list[Function]:
    """The functions whose source is not on record as it is now (new, or changed since they were recorded)."""
    return [f for f in functions if record.get(f.key, {}).get("hash") != f.digest]


def changed_modules(settings: Settings, ref: str) -> list[str]:
    """The core modules that differ (committed or not) from the merge base of HEAD with `ref`."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=settings.root, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(
                f"scripts/mutation: '{ref}' is not a git ref here; fetch it first "
                "(git fetch origin main), or use --unrecorded, which needs no ref"
            )
        return done.stdout

    base = git("merge-base", ref, "HEAD").strip()
    return [p for p in git("diff", "--name-only", base, "--", *settings.modules).split() if p]


def equivalents(settings: Settings) -> frozenset[str]:
    """The mutant names docs/MUTANTS.md lists (backquoted) as equivalent to the original."""
    text = settings.equivalents.read_text() if settings.equivalents.exists() else ""
    return frozenset(re.findall(r"`([\w.ǁ]+__mutmut_\d+)`", text))


def outcomes(settings: Settings, functions: list[Function]) -> list[Outcome]:
    """Each function's mutant statuses from mutmut's results in mutants/. Results for another version of a
    function's source (its hash in the results differs) count as "not checked"."""
    listed, metas, found = equivalents(settings), {}, []
    for f in functions:
        if f.path not in metas:
            meta = settings.root / "mutants" / f"{f.path}.meta"
            metas[f.path] = json.loads(meta.read_text()) if meta.exists() else {}
        meta = metas[f.path]
        fresh = meta.get("hash_by_function_name", {}).get(f.key.rsplit(".", 1)[1]) == f.digest
        codes = meta.get("exit_code_by_key", {}) if fresh else {}
        names = [f"{f.key}__mutmut_{n}" for n in range(1, f.mutants + 1)]
        status = {n: status_by_exit_code[codes.get(n)] for n in names}
        found.append(Outcome(f, status, frozenset(n for n in names if n in listed)))
    return found


def run_mutmut(root: Path, functions: list[Function], jobs: int) -> int:
    """Run mutmut on exactly these functions' mutants; mutmut's exit status."""
    globs = [f"{f.key}__mutmut_*" for f in functions]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread per worker: the workers are the parallelism
    print(
        f"== mutmut run --max-children {jobs}: {len(functions)} functions, "
        f"{sum(f.mutants for f in functions)} mutants",
        flush=True,
    )
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *globs]
    with subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, text=True, errors="replace"
    ) as mutmut:
        assert mutmut.stdout is not None
        # mutmut redraws its progress line with carriage returns; pass on only the lines it ends.
        tail = [line.rsplit("\r", 1)[-1] for line in mutmut.stdout]
    for line in tail[-12:]:
        print("   ", line.rstrip())
    return mutmut.returncode


def mutation_score(total: Counter) -> float:
    """(killed + timed out) / (mutants - listed equivalents), in percent; 100 when nothing is left to count."""
    counted = total["mutants"] - total["equivalent"]
    return 100.0 * (total["killed"] + total["timeout"]) / counted if counted else 100.0


def print_scores(found: list[Outcome]) -> bool:
    """One row per module, then every mutant that is neither killed nor listed; True when there is none."""
    print(
        f"\n{'module':<26} {'functions':>9} {'mutants':>7} {'killed':>6} {'timeout':>7} {'live':>5} "
        f"{'equiv':>5} {'score':>7}"
    )
    clean = True
    for path in dict.fromkeys(o.function.path for o in found):
        mine = [o for o in found if o.function.path == path]
        total = Counter()
        for o in mine:
            total.update(o.counts)
        live = [k for o in mine for k in o.live]
        score = mutation_score(total)
        print(
            f"{path:<26} {len(mine):>9} {total['mutants']:>7} {total['killed']:>6} {total['timeout']:>7} "
            f"{len(live):>5} {total['equivalent']:>5} {score:>6.1f}%"
        )
        for o in mine:
            if o.live and all(o.status[k] == "not checked" for k in o.live):
                print(f"    not checked: {o.function.key} ({len(o.live)} mutants)")
                continue
            for key in o.live:
                print(f"    {o.status[key]}: {key}")
            for key in sorted(k for k in o.listed if o.status[k] in KILLED):
                print(f"    listed as equivalent in {Path('docs/MUTANTS.md')} but killed: {key}")
        clean &= not live
    return clean


def write_record(settings: Settings, functions: list[Function], found: list[Outcome]) -> int:
    """Put every function the run showed fully tested on record (and drop functions that no longer exist);
    written whole to a temporary file and renamed, so an interrupted write leaves the old record. How many
    functions were added."""
    record = load_record(settings)
    present = {f.key for f in functions}
    record = {k: v for k, v in record.items() if k in present}
    proved = [o for o in found if not o.live and all(s != "not checked" for s in o.status.values())]
    for o in proved:
        record[o.function.key] = {"hash": o.function.digest, **o.counts}
    lines = ",\n".join(
        f"  {json.dumps(k, ensure_ascii=False)}: {json.dumps(record[k])}" for k in sorted(record)
    )
    about = (
        "Core functions whose every mutmut mutant was killed or is listed in docs/MUTANTS.md, with mutmut's "
        "hash of the source that showed it. Written by scripts/mutation --record."
    )
    head = f'{{\n "about": {json.dumps(about)},\n "mutmut": {json.dumps(MUTMUT)},\n "functions": {{\n'
    text = head + lines + "\n }\n}\n"
    temporary = settings.record.with_name(settings.record.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, settings.record)
    return len(proved)


def record_summary(settings: Settings, functions: list[Function], record: dict[str, dict]) -> None:
    """Per module: how many of its core functions and mutants are on record, and their recorded score."""
    print(f"{'module':<26} {'on record':>13} {'mutants':>7} {'killed':>6} {'equiv':>5} {'score':>7}")
    for path in settings.modules:
        mine = [f for f in functions if f.path == path]
        kept = [record[f.key] for f in mine if record.get(f.key, {}).get("hash") == f.digest]
        total = Counter()
        for entry in kept:
            total.update({k: entry[k] for k in ("mutants", "killed", "timeout", "equivalent")})
        score = mutation_score(total)
        print(
            f"{path:<26} {f'{len(kept)} of {len(mine)}':>13} {total['mutants']:>7} "
            f"{total['killed'] + total['timeout']:>6} {total['equivalent']:>5} {score:>6.1f}%"
        )


def parse(argv: list[str], settings: Settings) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/mutation", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "modules", nargs="*", metavar="MODULE.py", help=f"core modules: {' '.join(settings.modules)}"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--changed", metavar="REF", help="the core modules changed since the merge base with REF"
    )
    which.add_argument(
        "--unrecorded", action="store_true", help="the core functions not on record as they are"
    )
    parser.add_argument("--report", action="store_true", help="score the last run's results; run nothing")
    parser.add_argument("--record", action="store_true", help="put what the run showed on record")
    parser.add_argument("--max-mutants", type=int, metavar="N", help="refuse a run of more than N mutants")
    parser.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("MUTATION_JOBS", os.cpu_count() or 1)),
        help="mutmut's parallel workers (default: $MUTATION_JOBS or the core count)",
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in settings.modules]
    if unknown:
        parser.error(f"{' '.join(unknown)} is not a core module; use one of: {' '.join(settings.modules)}")
    if args.modules and (args.changed or args.unrecorded):
        parser.error("name modules, or use --changed / --unrecorded, not both")
    return args


ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str], root: Path = ROOT) -> int:
    os.chdir(root)  # mutmut finds its settings and writes mutants/ in the working directory
    settings = Settings.read(root)
    args = parse(argv, settings)
    modules = changed_modules(settings, args.changed) if args.changed else args.modules or settings.modules
    functions = [f for path in settings.modules for f in module_functions(settings, path)]
    record = load_record(settings)
    chosen = unrecorded(functions, record) if args.unrecorded else [f for f in functions if f.path in modules]
    if not chosen:
        print(
            "nothing to mutate: every core function is on record as it is now"
            if args.unrecorded
            else f"no core module changed since {args.changed}"
        )
        record_summary(settings, functions, record)
        return 0
    total = sum(f.mutants for f in chosen)
    if not args.report:
        if args.max_mutants is not None and total > args.max_mutants:
            print(
                f"scripts/mutation: {total} mutants in {len(chosen)} functions are more than --max-mutants "
                f"{args.max_mutants}; run `bash scripts/mutation --unrecorded --record` on a machine with the "
                f"time (or by module) and commit {settings.record.relative_to(root)}"
            )
            return 1
        code = run_mutmut(root, chosen, args.jobs)
        if code:
            print(f"scripts/mutation: mutmut stopped with exit status {code} (its output is above)")
            return 1
    found = outcomes(settings, chosen)
    clean = print_scores(found)
    if args.record:
        added = write_record(settings, functions, found)
        print(f"\n{added} of {len(chosen)} functions put on record in {settings.record.relative_to(root)}")
    return 0 if clean else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # `| head`: the reader has gone; end quietly, as a shell pipeline does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
