"""The import graph of ``tracekit/`` is a stack in the order of the data flow, as the README's Layout block says.

The block (between ``<!-- layers -->`` markers in README.md) lists the layers top-down, one per line:
``name: module module ...``. Every module of tracekit/ is in exactly one layer, imports (at the top or inside a
function; ``if TYPE_CHECKING:`` imports excepted) only modules of its own layer or the layers below, and no two
modules import each other through any chain.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tracekit"


def layers(readme: str) -> list[tuple[str, list[str]]]:
    """The README's layers, top first: (name, modules)."""
    block = re.search(r"<!-- layers -->\s*```text\n(.*?)```\s*<!-- /layers -->", readme, re.S)
    assert block, "README.md has no <!-- layers --> block"
    out = []
    for line in block.group(1).strip().splitlines():
        name, _, modules = line.partition(":")
        out.append((name.strip(), modules.split()))
    return out


def imports(path: Path, modules: set[str]) -> set[str]:
    """The tracekit modules ``path`` imports at run time."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for child in node.body for n in ast.walk(child)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1 or base == "tracekit":
                found |= {base.split(".")[0]} if base and base != "tracekit" else {a.name for a in node.names}
            elif base.startswith("tracekit."):
                found.add(base.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("tracekit.")}
    return (found & modules) - {path.stem}


def graph() -> dict[str, set[str]]:
    files = {p.stem: p for p in PACKAGE.glob("*.py")}
    return {name: imports(path, set(files)) for name, path in files.items()}


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


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_every_module_is_in_one_layer_of_the_readme():
    listed = [m for _, modules in layers((ROOT / "README.md").read_text()) for m in modules]
    assert sorted(listed) == sorted(set(listed)), "a module is listed twice"
    assert set(listed) == set(graph()), (f"not in the README: {sorted(set(graph()) - set(listed))}; "
                                         f"no such module: {sorted(set(listed) - set(graph()))}")


def test_no_module_imports_a_layer_above_its_own():
    stack = layers((ROOT / "README.md").read_text())
    level = {m: len(stack) - i for i, (_, modules) in enumerate(stack) for m in modules}
    climbing = sorted(f"{m} -> {d}" for m, deps in graph().items() for d in deps if level[d] > level[m])
    assert climbing == []


def test_the_checks_see_a_cycle_and_a_climb(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    module = tmp_path / "render.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tracekit.summary import S\n"
                      "def f():\n    from tracekit import api\n    from .fmt import ms\n")
    assert imports(module, {"summary", "api", "fmt", "render"}) == {"api", "fmt"}
