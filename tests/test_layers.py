"""The import graph of ``tracekit/`` is a stack of folders in the order of the data flow.

The layers are read from the folders themselves: each subpackage of ``tracekit/`` is one stage, and its
``__init__.py`` docstring opens with ``Stage N, <folder>:`` (its place in the data flow) and says what comes in,
what goes out and which module to open first. The modules at the package's root are the base (shared vocabulary:
errors, fmt, schema, ...), below every stage, except the front door (``__init__``, ``__main__``, ``api``), above
them all. A module imports (at the top or inside a function) only modules of its own stage or a stage below; an
import under ``if TYPE_CHECKING:`` is for type checkers only, never runs, and is allowed. No modules and no folders
import each other through any chain.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tracekit"
# The root modules that make up the front door; every other root module is the base.
FRONT_DOOR = {"__init__", "__main__", "api"}
STAGE = re.compile(r"Stage (\d+), (\w+): ")


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name below ``tracekit`` (``read.reader``, ``fmt``, ``read`` for its
    ``__init__``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        out[".".join(parts[:-1]) if parts[-1] == "__init__" and len(parts) > 1 else ".".join(parts)] = path
    return out


def stages(package: Path) -> dict[str, int]:
    """Each folder's stage number, from the docstring of its ``__init__.py``."""
    out = {}
    for init in sorted(package.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        match = STAGE.match(doc)
        assert match and match.group(2) == init.parent.name, (
            f"{init.relative_to(package.parent)}: its docstring must open with 'Stage N, {init.parent.name}: '")
        out[init.parent.name] = int(match.group(1))
    return out


def level(module: str, stage_of: dict[str, int]) -> int:
    """The module's layer: 0 for the base, its folder's stage; the front door shares the last stage (the CLI's)."""
    if module in FRONT_DOOR:
        return max(stage_of.values(), default=0)
    folder = module.split(".")[0]
    return stage_of[folder] if folder in stage_of else 0


def imports(path: Path, known: set[str], package: Path = PACKAGE) -> set[str]:
    """The tracekit modules ``path`` imports at run time, as dotted names of ``known``."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for child in node.body for n in ast.walk(child)}
    here = path.relative_to(package).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + tuple(filter(None, [node.module])))
            elif node.module == "tracekit" or (node.module or "").startswith("tracekit."):
                base = node.module.removeprefix("tracekit").lstrip(".")
            else:
                continue
            for alias in node.names:
                name = f"{base}.{alias.name}" if base else alias.name
                found.add(name if name in known else base)
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("tracekit.") for a in node.names if a.name.startswith("tracekit.")}
    this = path.relative_to(package).with_suffix("").parts
    this = ".".join(this[:-1]) if this[-1] == "__init__" and len(this) > 1 else ".".join(this)
    return {m for m in found if m in known} - {this, ""}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(package)
    return {name: imports(path, set(found), package) for name, path in found.items()}


def folder_graph(edges: dict[str, set[str]], stage_of: dict[str, int]) -> dict[str, set[str]]:
    """Imports between folders. The root's front-door modules count as the last stage's folder (the CLI's: together
    they are the front door), the rest of the root as one folder, the base."""
    last = max(stage_of, key=stage_of.get)

    def folder(m):
        top = m.split(".")[0]
        return top if top in stage_of else last if m in FRONT_DOOR else "(base)"

    out: dict[str, set[str]] = {}
    for m, deps in edges.items():
        out.setdefault(folder(m), set()).update(folder(d) for d in deps if folder(d) != folder(m))
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    state, stack, found = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def climbing(package: Path = PACKAGE) -> list[str]:
    stage_of = stages(package)
    return sorted(f"{m} -> {d}" for m, deps in graph(package).items() for d in deps
                  if level(d, stage_of) > level(m, stage_of))


def test_every_folder_is_a_numbered_stage_with_its_docstring():
    stage_of = stages(PACKAGE)
    assert sorted(stage_of.values()) == list(range(1, len(stage_of) + 1)), stage_of
    for folder in stage_of:
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
        for part in ("In: ", "Out: ", "Open first: "):
            assert part in doc, f"tracekit/{folder}/__init__.py says nothing after {part!r}"
    assert not [p for p in PACKAGE.glob("*/*/__init__.py")], "stages are one folder deep"


def test_no_import_cycle_between_modules_or_folders():
    edges = graph()
    assert cycles(edges) == []
    assert cycles(folder_graph(edges, stages(PACKAGE))) == []


def test_no_module_imports_a_later_stage():
    assert climbing() == []


def test_every_module_is_at_most_300_lines():
    long = {m: n for m, p in modules(PACKAGE).items() if (n := len(p.read_text().splitlines())) > 300}
    assert long == {}


def test_the_checks_see_a_planted_climb_and_a_planted_cycle(tmp_path):
    copy = tmp_path / "tracekit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    files = copy / "read" / "files.py"
    files.write_text(files.read_text() + "\n\ndef _planted():\n    from tracekit.cli.main import main\n")
    assert climbing(copy) == ["read.files -> cli.main"]

    # A cycle inside one stage climbs nothing, so only the cycle check sees it.
    kineto = copy / "read" / "kineto.py"
    kineto.write_text(kineto.read_text() + "\nfrom tracekit.read import reader\n")
    assert any({"read.kineto", "read.reader"} <= set(c) for c in cycles(graph(copy)))

    # A type-only import never runs: it neither climbs nor closes a cycle.
    categories = copy / "read" / "categories.py"
    categories.write_text(categories.read_text() + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    from tracekit.summary.model import Summary\n")
    assert "read.categories -> summary.model" not in climbing(copy)


def test_a_cycle_between_folders_is_seen():
    edges = {"read.a": {"events.b"}, "events.b": {"read.c"}, "read.c": set()}
    assert cycles(edges) == []
    assert cycles(folder_graph(edges, {"read": 1, "events": 2})) == [["events", "read", "events"]]


def test_imports_are_resolved_to_modules(tmp_path):
    (tmp_path / "summary").mkdir()
    module = tmp_path / "summary" / "text.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tracekit.summary.model import S\n"
                      "def f():\n    from tracekit import api\n    from tracekit.read import reader\n"
                      "    from .model import Summary\n    import tracekit.fmt\n")
    known = {"summary.text", "summary.model", "api", "fmt", "read.reader", "read"}
    assert imports(module, known, tmp_path) == {"api", "fmt", "read.reader", "summary.model"}
