"""ARCHITECTURE.md's rules, checked on the source: the layers (which package may import which), what runs inside the
kernel or the project's interpreter, who imports litellm, no import cycles, module size."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "prime_ci"


def modules() -> dict[str, Path]:
    found = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(SRC)
        if (rel.parts[1] in {"demo", "bench_demo"} and len(rel.parts) > 3) or "builtin_skills" in rel.parts:
            continue  # the bundled projects and skills are data, not prime-ci's code
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


# The layers, top to bottom, as ARCHITECTURE.md draws them: a package (or top-level module) of ``prime_ci`` imports
# only from layers below its own, never from one above and never from another package of its own layer.
LAYERS: list[tuple[str, ...]] = [
    ("__main__",),
    ("cli",),
    ("child", "demo", "bench_demo", "testing"),
    ("bench",),
    ("engine",),
    ("children", "harness"),
    ("loop", "artifacts"),
    ("gates", "kernel", "model"),
    ("session",),
    ("activity", "durations", "money", "stops"),
    ("isolation",),
    ("errors",),
]


def layer_of(module: str) -> str | None:
    """The layer unit of a ``prime_ci`` module: its subpackage or top-level module (None for ``prime_ci``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_package_has_one_layer() -> None:
    named = [unit for layer in LAYERS for unit in layer]
    assert len(named) == len(set(named)), "a package is in two layers"
    found = {unit for name in modules() if (unit := layer_of(name))}
    assert found == set(named), f"not in LAYERS: {sorted(found - set(named))}; gone: {sorted(set(named) - found)}"


def test_the_drawing_in_architecture_md_is_the_layer_list() -> None:
    text = (SRC.parent / "ARCHITECTURE.md").read_text()
    drawing = text.split("```\n")[1]
    drawn = [tuple(unit.strip().removesuffix("/").removesuffix(".py") for unit in columns[0].split("│"))
             for line in drawing.splitlines() if line.strip() and not line.strip().startswith("▼")
             for columns in [re.split(r"\s{2,}", line.strip())]]
    assert drawn == LAYERS


def test_imports_go_down_the_layers() -> None:
    """Every import (module level, ``TYPE_CHECKING`` and inside functions) goes to a lower layer."""
    rank = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    broken = []
    for name, path in sorted(modules().items()):
        for dep in sorted(prime_imports(name, path)):
            mine, theirs = layer_of(name), layer_of(dep)
            if mine is None or theirs is None or mine == theirs or rank[theirs] > rank[mine]:
                continue
            where = "its own layer" if rank[theirs] == rank[mine] else "a layer above"
            broken.append(f"{name} -> {dep} ({mine} imports {theirs}, {where})")
    assert not broken, "imports against the layer order:\n" + "\n".join(broken)


RULES = [
    # (importer prefix, forbidden prefixes, why): what the layer order cannot say
    ("prime_ci.bench", ("prime_ci.model", "prime_ci.kernel", "prime_ci.children", "prime_ci.loop"),
     "the bench drives runs as processes: it never calls a model or a kernel itself"),
]


@pytest.mark.parametrize(("owner", "forbidden", "why"), RULES, ids=[r[0] for r in RULES])
def test_dependency_rules(owner: str, forbidden: tuple[str, ...], why: str) -> None:
    broken = [f"{name} -> {dep}" for name, path in modules().items() if name.startswith(owner)
              for dep in prime_imports(name, path) if dep.startswith(forbidden)]
    assert not broken, f"{why}: {broken}"


def test_code_that_runs_inside_the_kernel_or_the_project_interpreter_is_self_contained() -> None:
    for name, path in modules().items():
        if name.startswith("prime_ci.kernel.api") or name in ("prime_ci.isolation.project_layer",
                                                               "prime_ci.engine.build_hooks"):
            outside = {m for m in imports(path, function_level=True)
                       if m.startswith("prime_ci") and not m.startswith("prime_ci.kernel.api")}
            assert not outside, f"{name} imports {outside}"


def test_the_markdown_rule_loads_by_its_path_alone() -> None:
    """publish/helper.py and action/helper.py run without prime-ci installed and load ``artifacts/markup.py`` (the
    one escaping rule for the markdown prime-ci writes) by its path: it imports the standard library only."""
    path = modules()["prime_ci.artifacts.markup"]
    outside = {m for m in imports(path, function_level=True) if m.split(".")[0] not in sys.stdlib_module_names}
    assert not outside, f"artifacts/markup.py imports {outside}"
    for helper in ("publish/helper.py", "action/helper.py"):
        assert '"src" / "prime_ci" / "artifacts" / "markup.py"' in (SRC.parent / helper).read_text(), helper


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


def test_one_module_imports_litellm() -> None:
    importers = {name for name, path in modules().items()
                 if any(m == "litellm" or m.startswith("litellm.") for m in imports(path, function_level=True))}
    assert importers == {"prime_ci.model.routes"}


def test_the_model_protocol_has_one_import_path() -> None:
    names = {"Model", "ModelReply", "ToolCall"}
    files = [*modules().values(), *SRC.parent.joinpath("tests").rglob("*.py")]
    elsewhere = [f"{path.name}: from {node.module} import {alias.name}" for path in files
                 for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
                 and (node.module or "").startswith("prime_ci.model") and node.module != "prime_ci.model.protocol"
                 for alias in node.names if alias.name in names]
    assert not elsewhere, elsewhere


def test_children_never_import_litellm() -> None:
    code = ("import sys, prime_ci.child, prime_ci.children.host\n"
            "bad = sorted(m for m in sys.modules if m.startswith('litellm'))\nassert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_module_names_do_not_repeat() -> None:
    """One ``run.py`` in the tree, not one per package: a name in a traceback or a grep says which module."""
    seen: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name not in {"__init__.py", "__main__.py"}:
            seen.setdefault(path.name, []).append(name)
    assert not {base: names for base, names in seen.items() if len(names) > 1}


def test_modules_stay_small() -> None:
    big = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 420}
    assert not big, big


PROJECT_FILES = {"conftest.py", "manage.py"}  # files of the projects prime-ci runs on, named in its docs


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """The comments and docstrings of a module, with their line numbers."""
    source = path.read_text()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value:
                names |= {e.value for e in ast.walk(node.value)
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _broken_references(texts: Iterable[tuple[str, str]]) -> list[str]:
    known = modules()
    persisted = {node.value for path in known.values() for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str)
                 and re.fullmatch(r"prime_ci\.\w+", node.value)}  # customType values, never module paths
    basenames = {path.name for path in known.values()} | PROJECT_FILES
    packages = {p.name for p in PKG.iterdir() if p.is_dir()}
    broken = []
    for where, text in texts:
        for dotted in re.findall(r"\bprime_ci(?:\.\w+)+", text):
            parts = dotted.split(".")
            found = next((n for n in range(len(parts), 1, -1) if ".".join(parts[:n]) in known), None)
            ok = dotted in persisted or (found is not None and (
                found == len(parts) or parts[found] in _top_level_names(known[".".join(parts[:found])])))
            if not ok:
                broken.append(f"{where}: {dotted}")
        for ref in re.findall(r"(?<![\w./-])((?:\w+/)*\w+\.py)\b", text):
            first = ref.split("/")[0]
            if "/" in ref and first in packages | {"prime_ci"}:
                if not (PKG / ref.removeprefix("prime_ci/")).is_file():
                    broken.append(f"{where}: {ref}")
            elif "/" not in ref and ref not in basenames:
                broken.append(f"{where}: {ref}")
    return broken


def test_references_to_modules_resolve() -> None:
    """Module paths named in comments, docstrings and ARCHITECTURE.md (``engine/run.py``, ``run.py``,
    ``prime_ci.kernel.api``, ``prime_ci.loop.agent.Agent``) name modules (and their top-level names) that exist."""
    texts = [(f"{path.relative_to(SRC)}:{line}", text) for path in modules().values() for line, text in _prose(path)]
    texts.append(("ARCHITECTURE.md", (SRC.parent / "ARCHITECTURE.md").read_text()))
    broken = _broken_references(texts)
    assert not broken, "references to modules that do not exist:\n" + "\n".join(broken)
