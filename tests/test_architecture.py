"""ARCHITECTURE.md's rules, checked on the source: what must never depend on what, no import cycles, module size."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "prime_ci"


def modules() -> dict[str, Path]:
    found = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(SRC)
        if {"demo", "bench_demo"} & set(rel.parts[:2]) or "builtin_skills" in rel.parts:
            continue
        name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def imports(path: Path, *, function_level: bool) -> Iterator[str]:
    """Modules imported by ``path``: module level (``TYPE_CHECKING`` blocks included), and optionally those
    imported inside functions."""
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree) if function_level else _module_level(tree.body)
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            yield from _module_level(node.body)
            yield from _module_level(node.orelse)


def prime_imports(name: str, path: Path, *, function_level: bool = True) -> set[str]:
    known = modules()
    return {m for m in imports(path, function_level=function_level) if m in known and m != name}


RULES = [
    # (importer prefix, forbidden prefixes, why)
    ("prime_ci.kernel", ("prime_ci.model",), "nothing in the kernel reaches the provider"),
    ("prime_ci.session", ("prime_ci.engine", "prime_ci.gates", "prime_ci.children", "prime_ci.model"),
     "the session log does not know the loop"),
    ("prime_ci.model", ("prime_ci.engine", "prime_ci.kernel", "prime_ci.gates", "prime_ci.children",
                        "prime_ci.harness"), "the model layer knows nothing of runs"),
    ("prime_ci.isolation", ("prime_ci.engine", "prime_ci.kernel", "prime_ci.gates", "prime_ci.children",
                            "prime_ci.harness", "prime_ci.model", "prime_ci.session", "prime_ci.artifacts"),
     "isolation is a leaf"),
    ("prime_ci.bench", ("prime_ci.model", "prime_ci.kernel", "prime_ci.children"),
     "the bench drives runs as processes: it never calls a model or a kernel itself"),
]


@pytest.mark.parametrize(("owner", "forbidden", "why"), RULES, ids=[r[0] for r in RULES])
def test_dependency_rules(owner: str, forbidden: tuple[str, ...], why: str) -> None:
    broken = [f"{name} -> {dep}" for name, path in modules().items() if name.startswith(owner)
              for dep in prime_imports(name, path) if dep.startswith(forbidden)]
    assert not broken, f"{why}: {broken}"


def test_code_that_runs_inside_the_kernel_or_the_project_interpreter_is_self_contained() -> None:
    for name, path in modules().items():
        if name.startswith("prime_ci.kernel.api") or name == "prime_ci.isolation.project_layer":
            outside = {m for m in imports(path, function_level=True)
                       if m.startswith("prime_ci") and not m.startswith("prime_ci.kernel.api")}
            assert not outside, f"{name} imports {outside}"


def test_no_import_cycles() -> None:
    graph = {name: prime_imports(name, path, function_level=False) for name, path in modules().items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, cycles


def test_children_never_import_litellm() -> None:
    code = ("import sys, prime_ci.child, prime_ci.children.host\n"
            "bad = sorted(m for m in sys.modules if m.startswith('litellm'))\nassert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_modules_stay_small() -> None:
    big = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 420}
    assert not big, big
