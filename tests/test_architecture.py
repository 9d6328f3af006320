"""The shape of the code, checked: rooms small enough to hold in your head, no import circle, one owner per name.

These read the source with `ast`; nothing is imported. Each failure names the offender.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "octlm"
MAX_MODULE_LINES = 700  # rewritten later in this issue
MAX_FUNCTION_LINES = 80
# The folders whose *.py files the length limits cover: the package, and the code around it.
LENGTH_CHECKED = (PACKAGE, ROOT / "benchmarks", ROOT / "tests", ROOT / "scripts")
# Every file name of a run folder is spelled in octlm/storage/run.py alone; everything else asks a `Run`.
RUN_FILE_NAMES = ("metrics.jsonl", "config.json", "model.safetensors", "optimizer.pt")


def sources(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imports_of(path: Path) -> set[str]:
    """The octlm modules `path` imports anywhere (function bodies included), except under TYPE_CHECKING."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_block(node):
            return  # never executed: annotations only
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("octlm"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("octlm"):
            found.add(node.module)
            # `from octlm import x` imports the submodule octlm.x
            found.update(f"{node.module}.{a.name}" for a in node.names if node.module == "octlm")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
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


def test_imports_of_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nimport octlm.a\nif TYPE_CHECKING:\n    from octlm.b import B\n"
        "def f():\n    from octlm.c import g\n    import os\n"
    )
    assert imports_of(source) == {"octlm.a", "octlm.c"}


def test_no_import_circle_in_the_package() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_run_folder_file_names_are_spelled_in_one_module() -> None:
    offenders = []
    for path in sources(PACKAGE):
        if path == PACKAGE / "storage" / "run.py":
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
    run_source = (PACKAGE / "storage" / "run.py").read_text(encoding="utf-8")
    assert all(f'"{name}"' in run_source for name in RUN_FILE_NAMES)
