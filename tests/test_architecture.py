"""The shape of the code, checked: the layers docs/ARCHITECTURE.md draws, no import circle, rooms small enough to
hold in your head, one owner per name, and tests that mirror the tree.

These read the source with `ast` and the layer table from docs/ARCHITECTURE.md; nothing is imported. Each failure
names the offender.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "octlm"
TESTS = ROOT / "tests"
# Past ~600 lines a module most likely holds two concepts: split it by concept, never to meet the number.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# The folders whose *.py files the length limits cover: the package, and the code around it.
LENGTH_CHECKED = (PACKAGE, ROOT / "benchmarks", TESTS, ROOT / "scripts")
# Every file name of a run folder is spelled in octlm/storage/run.py alone; everything else asks a `Run`.
RUN_FILE_NAMES = ("metrics.jsonl", "config.json", "model.safetensors", "optimizer.pt")
# Test files at the top of tests/ that test what lies outside the package.
OUTSIDE_THE_PACKAGE = {
    "test_architecture.py",
    "test_benchmarks.py",
    "test_mutation_tool.py",
    "test_readme.py",
}


def sources(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layers(doc: str | None = None) -> dict[str, int]:
    """docs/ARCHITECTURE.md's layer table as {top-level module or subpackage of octlm: rank from the bottom}."""
    doc = doc if doc is not None else (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = doc.split("## The layers, bottom to top", 1)[1].split("\n\n", 2)[1]
    ranks: dict[str, int] = {}
    for rank, row in enumerate(line for line in table.splitlines()[2:] if line.startswith("|")):
        where = row.split("|")[2]
        for place in re.findall(r"`([\w.]+/?)`", where):
            ranks[place.removesuffix("/").removesuffix(".py")] = rank
    return ranks


def layer_of(module: str, ranks: dict[str, int]) -> int | None:
    """The rank of `octlm.x...`'s layer: its subpackage's, or its own as a top-level module."""
    parts = module.split(".")
    return ranks.get(parts[1]) if len(parts) > 1 else None


def test_layers_parse_the_table_in_its_order() -> None:
    doc = (
        "## The layers, bottom to top\n\n| layer | where | owns |\n| --- | --- | --- |\n"
        "| ground | `a.py`, `b.py` | x |\n| mid | `m/` | y `z/` |\n| top | `t/`, `c.py` | z |\n\nafter"
    )
    assert layers(doc) == {"a": 0, "b": 0, "m": 1, "t": 2, "c": 2}  # the owns column names nothing


def test_every_module_is_in_a_layer_of_the_table() -> None:
    ranks = layers()
    missing = [
        module_name(p)
        for p in sources(PACKAGE)
        if p != PACKAGE / "__init__.py" and layer_of(module_name(p), ranks) is None
    ]
    assert not missing, f"{missing} belong to no layer of docs/ARCHITECTURE.md's table"


def test_few_modules_sit_at_the_top() -> None:
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert top == ["cli", "errors", "files", "hashing", "runtime", "signals"], top


def test_every_subpackage_says_what_it_owns_and_may_import() -> None:
    offenders = []
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if len(doc.splitlines()) < 2 or "May import:" not in doc:
            offenders.append(str(init.relative_to(ROOT)))
    assert not offenders, f"{offenders}: a docstring says what the subpackage owns, then `May import: ...`"


def test_no_module_or_function_is_too_long() -> None:
    offenders = []
    for path in sources(*LENGTH_CHECKED):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        where = path.relative_to(ROOT)
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{where} has {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    offenders.append(f"{where}:{node.lineno} {node.name}() has {length} lines")
    assert not offenders, "; ".join(offenders)


def imports_of(path: Path) -> set[str]:
    """The octlm modules `path` imports anywhere: at the top, inside functions, and under TYPE_CHECKING (an
    annotation is a dependency too). `from octlm.x import y` counts octlm.x and, if it is one, octlm.x.y."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("octlm"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("octlm"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in sources(PACKAGE)}
    return {
        name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path a -> b -> ... -> a, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_a_planted_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_imports_of_sees_lazy_and_type_only_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nimport octlm.a\nif TYPE_CHECKING:\n    from octlm.b import B\n"
        "def f():\n    from octlm.c import g\n    import os\n"
    )
    assert imports_of(source) == {"octlm.a", "octlm.b", "octlm.b.B", "octlm.c", "octlm.c.g"}


def test_no_import_circle_in_the_package_type_only_imports_included() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_imports_go_down_the_layers_only() -> None:
    ranks = layers()
    upward = [
        f"{a} ({layer_of(a, ranks)}) imports {b} ({layer_of(b, ranks)})"
        for a, targets in import_graph().items()
        for b in sorted(targets)
        if None not in (layer_of(a, ranks), layer_of(b, ranks)) and layer_of(b, ranks) > layer_of(a, ranks)
    ]
    assert not upward, "imports up the layers of docs/ARCHITECTURE.md: " + "; ".join(upward)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_run_folder_file_names_are_spelled_in_one_module() -> None:
    owner = PACKAGE / "storage" / "run.py"
    offenders = []
    for path in sources(PACKAGE):
        if path == owner:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                offenders += [
                    f"{path.relative_to(ROOT)}:{node.lineno} spells {name!r}"
                    for name in RUN_FILE_NAMES
                    if name in node.value
                ]
    assert not offenders, "; ".join(offenders) + " (ask octlm.storage.run.Run instead)"
    run_source = owner.read_text(encoding="utf-8")
    assert all(f'"{name}"' in run_source for name in RUN_FILE_NAMES)


def test_tests_mirror_the_tree() -> None:
    """tests/<subpackage>/test_<module>[_<aspect>].py for a module of that subpackage, and at the top
    tests/test_<module>[_<aspect>].py for a top-level module (or what lies outside the package)."""
    offenders = []
    for path in sorted(TESTS.rglob("test_*.py")):
        folder = path.parent.relative_to(TESTS)
        package = PACKAGE / folder if folder.parts else PACKAGE
        modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
        stem = path.stem.removeprefix("test_")
        fits = any(stem == m or stem.startswith(m + "_") for m in modules)
        if len(folder.parts) > 1 or not package.is_dir() or not (fits or path.name in OUTSIDE_THE_PACKAGE):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, (
        f"{offenders} test no module of the folder they are in (tests/<layer>/test_<module>.py)"
    )
