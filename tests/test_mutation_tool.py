"""scripts/mutation.py: which functions it picks, how it reads mutmut's results, and the record CI checks.

Most tests work on a two-function project made in a temporary folder; the slow one runs mutmut on it for real.
The last tests check the repository's own record and settings.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mutmut")
import mutmut.configuration  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "mutation.py"

PYPROJECT = """
[tool.octlm.mutation]
not_core = ["pkg.m.x_cli"]

[tool.mutmut]
source_paths = ["pkg"]
only_mutate = ["pkg/m.py"]
pytest_add_cli_args = ["-p", "no:cacheprovider"]
"""
MODULE = """def add(a, b):
    return a + b


class C:
    def scale(self, x):
        # twice
        return x * 2


def cli():
    print("hi")
"""
# test_scale is weak on purpose: `x * 3` and `x / 2` still give a positive number.
TESTS = """from pkg.m import C, add


def test_add():
    assert add(2, 3) == 5


def test_scale():
    assert C().scale(3) > 0
"""


def load_tool():
    spec = importlib.util.spec_from_file_location("mutation_tool", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tool = load_tool()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with one core module (add, C.scale, and cli, which is not core), its tests, and the script,
    as the working directory; mutmut's settings are read afresh from it."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text(MODULE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_m.py").write_text(TESTS)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "docs").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "mutation.py").write_text(SCRIPT.read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mutmut.configuration, "_config", None)  # mutmut caches the first project's settings
    return tmp_path


def functions(root: Path) -> dict[str, tool.Function]:
    settings = tool.Settings.read(root)
    return {f.key: f for f in tool.module_functions(settings, "pkg/m.py")}


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "mutation.py"), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_meta(root: Path, codes: dict[str, int], hashes: dict[str, str]) -> None:
    """mutants/pkg/m.py.meta as mutmut 3 writes it after a run."""
    meta = root / "mutants" / "pkg" / "m.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(
        json.dumps(
            {
                "exit_code_by_key": codes,
                "hash_by_function_name": hashes,
                "type_check_error_by_key": {},
                "durations_by_key": {},
                "estimated_durations_by_key": {},
            }
        )
    )


def test_core_functions_are_named_hashed_and_counted_as_mutmut_does(project: Path):
    found = functions(project)
    # cli is listed as not core; `a + b` has one mutant (`a - b`), `x * 2` two (`x / 2`, `x * 3`).
    assert {k: f.mutants for k, f in found.items()} == {"pkg.m.x_add": 1, "pkg.m.xǁCǁscale": 2}
    assert all(f.path == "pkg/m.py" and len(f.digest) == 12 for f in found.values())
    (project / "pkg" / "m.py").write_text(MODULE.replace("# twice", "# doubled"))
    assert {k: f.digest for k, f in functions(project).items()} == {k: f.digest for k, f in found.items()}
    (project / "pkg" / "m.py").write_text(MODULE.replace("a + b", "b + a"))
    changed = functions(project)
    assert changed["pkg.m.x_add"].digest != found["pkg.m.x_add"].digest
    assert changed["pkg.m.xǁCǁscale"].digest == found["pkg.m.xǁCǁscale"].digest


def test_unrecorded_is_what_is_new_or_changed_since_it_was_recorded():
    add, scale = tool.Function("m.x_add", "m.py", "aaa", 1), tool.Function("m.xǁCǁscale", "m.py", "bbb", 2)
    assert tool.unrecorded([add, scale], {}) == [add, scale]
    assert tool.unrecorded([add, scale], {"m.x_add": {"hash": "aaa"}, "m.xǁCǁscale": {"hash": "old"}}) == [
        scale
    ]
    assert tool.unrecorded([add, scale], {"m.x_add": {"hash": "aaa"}, "m.xǁCǁscale": {"hash": "bbb"}}) == []


def test_results_are_scored_and_only_fully_tested_functions_go_on_record(project: Path):
    found = functions(project)
    add, scale = found["pkg.m.x_add"], found["pkg.m.xǁCǁscale"]
    # add's one mutant killed; scale's first killed, its second survived (exit codes as mutmut writes them).
    write_meta(
        project,
        {"pkg.m.x_add__mutmut_1": 1, "pkg.m.xǁCǁscale__mutmut_1": 1, "pkg.m.xǁCǁscale__mutmut_2": 0},
        {"x_add": add.digest, "xǁCǁscale": scale.digest},
    )
    settings = tool.Settings.read(project)
    results = {o.function.key: o for o in tool.outcomes(settings, [add, scale])}
    assert results["pkg.m.x_add"].live == []
    assert results["pkg.m.xǁCǁscale"].live == ["pkg.m.xǁCǁscale__mutmut_2"]
    assert results["pkg.m.xǁCǁscale"].counts == {"mutants": 2, "killed": 1, "timeout": 0, "equivalent": 0}
    assert tool.write_record(settings, [add, scale], list(results.values())) == 1
    written = json.loads((project / "docs" / "mutation-record.json").read_text())
    assert written["mutmut"] == tool.MUTMUT == "3.8.1"  # the version pyproject.toml pins
    assert written["functions"] == {
        "pkg.m.x_add": {"hash": add.digest, "mutants": 1, "killed": 1, "timeout": 0, "equivalent": 0}
    }
    assert not list((project / "docs").glob("*.tmp"))

    # Listed as equivalent (with a reason) in docs/MUTANTS.md, the survivor no longer counts against scale.
    (project / "docs" / "MUTANTS.md").write_text("| `pkg.m.xǁCǁscale__mutmut_2` | `x * 3` | a reason |\n")
    again = tool.outcomes(settings, [add, scale])
    assert [o.live for o in again] == [[], []]
    assert tool.write_record(settings, [add, scale], again) == 2
    record = json.loads((project / "docs" / "mutation-record.json").read_text())["functions"]
    assert record["pkg.m.xǁCǁscale"] == {
        "hash": scale.digest,
        "mutants": 2,
        "killed": 1,
        "timeout": 0,
        "equivalent": 1,
    }


def test_results_for_other_source_are_not_checked_and_gone_functions_leave_the_record(project: Path):
    add = functions(project)["pkg.m.x_add"]
    write_meta(project, {"pkg.m.x_add__mutmut_1": 1}, {"x_add": "another-hash"})
    settings = tool.Settings.read(project)
    (outcome,) = tool.outcomes(settings, [add])
    assert outcome.status == {"pkg.m.x_add__mutmut_1": "not checked"}
    assert outcome.live == ["pkg.m.x_add__mutmut_1"]
    stale = {"pkg.m.x_gone": {"hash": "x", "mutants": 1, "killed": 1, "timeout": 0, "equivalent": 0}}
    settings.record.write_text(json.dumps({"functions": stale}))
    assert tool.write_record(settings, [add], [outcome]) == 0
    assert json.loads(settings.record.read_text())["functions"] == {}


def test_a_hand_broken_record_is_one_line_naming_it(project: Path):
    settings = tool.Settings.read(project)
    settings.record.write_text('{"functions": [')
    with pytest.raises(SystemExit) as stop:
        tool.load_record(settings)
    assert "mutation-record.json is not a mutation record" in str(stop.value)
    assert "git checkout" in str(stop.value)
    # Another mutmut may hash and number mutants differently, so a record it made does not apply.
    settings.record.write_text('{"mutmut": "2.5.0", "functions": {}}')
    with pytest.raises(SystemExit) as stop:
        tool.load_record(settings)
    assert f"was made with mutmut 2.5.0, this is mutmut {tool.MUTMUT}; install mutmut==2.5.0" in str(
        stop.value
    )


def test_nothing_unrecorded_runs_nothing_and_passes(project: Path):
    settings = tool.Settings.read(project)
    found = list(functions(project).values())
    settings.record.write_text(
        json.dumps(
            {
                "functions": {
                    f.key: {
                        "hash": f.digest,
                        "mutants": f.mutants,
                        "killed": f.mutants,
                        "timeout": 0,
                        "equivalent": 0,
                    }
                    for f in found
                }
            }
        )
    )
    done = run(project, "--unrecorded")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing to mutate: every core function is on record as it is now" in done.stdout
    assert "pkg/m.py" in done.stdout and "2 of 2" in done.stdout and "100.0%" in done.stdout
    assert not (project / "mutants").exists()


def test_a_reader_that_goes_away_ends_it_quietly(project: Path):
    """`| true` exits before the script (a second or so of importing mutmut) writes its first line: that write
    meets a closed pipe. The script ends as a shell pipeline's writer does, 141 and no traceback."""
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {sys.executable} scripts/mutation.py --unrecorded --report | true"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stderr) == (141, "")


def test_a_run_over_the_budget_is_refused_in_one_line_before_mutmut_starts(project: Path):
    done = run(project, "--unrecorded", "--max-mutants", "2")
    assert done.returncode == 1
    assert done.stdout.strip().splitlines() == [done.stdout.strip()]
    assert "3 mutants in 2 functions are more than --max-mutants 2" in done.stdout
    assert "bash scripts/mutation --unrecorded --record" in done.stdout
    assert not (project / "mutants").exists() and done.stderr == ""


def test_usage_mistakes_exit_2_with_the_fix(project: Path):
    done = run(project, "pkg/other.py")
    assert done.returncode == 2
    assert "pkg/other.py is not a core module; use one of: pkg/m.py" in done.stderr
    done = run(project, "pkg/m.py", "--unrecorded")
    assert done.returncode == 2 and "not both" in done.stderr
    done = run(project, "--changed", "no-such-ref")
    assert done.returncode != 0 and "'no-such-ref' is not a git ref here" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_mutmut_for_real_records_what_the_tests_kill_and_names_what_survives(project: Path):
    done = run(project, "--unrecorded", "--record", "--jobs", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    # `x * 3` and `x / 2` both pass the weak test; `a - b` fails test_add.
    assert "survived: pkg.m.xǁCǁscale__mutmut_1" in done.stdout
    assert "survived: pkg.m.xǁCǁscale__mutmut_2" in done.stdout
    assert "1 of 2 functions put on record" in done.stdout
    record = json.loads((project / "docs" / "mutation-record.json").read_text())["functions"]
    assert list(record) == ["pkg.m.x_add"]

    (project / "tests" / "test_m.py").write_text(TESTS.replace("> 0", "== 6"))
    done = run(project, "--unrecorded", "--record", "--jobs", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mutmut run --max-children 1: 1 functions, 2 mutants" in done.stdout  # add is on record already
    assert "1 of 1 functions put on record" in done.stdout
    done = run(project, "--unrecorded")
    assert done.returncode == 0 and "nothing to mutate" in done.stdout


def test_the_repository_record_and_settings_agree_with_the_code(monkeypatch: pytest.MonkeyPatch):
    """Every recorded function is fully accounted for and in the core; every `not_core` name is a real function
    (a renamed one would silently join the core, a misspelt one would leave nothing out)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(mutmut.configuration, "_config", None)
    from mutmut.mutation.file_mutation import mutate_file_contents

    settings = tool.Settings.read(ROOT)
    every: set[str] = set()
    for path in settings.modules:
        names = mutate_file_contents(path, (ROOT / path).read_text()).hash_by_function_name
        every |= {f"{path.removesuffix('.py').replace('/', '.')}.{name}" for name in names}
    assert settings.not_core <= every, sorted(settings.not_core - every)
    for key, entry in tool.load_record(settings).items():
        assert key in every and key not in settings.not_core, key
        assert entry["killed"] + entry["timeout"] + entry["equivalent"] == entry["mutants"] > 0, key
