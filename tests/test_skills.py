"""Skills: discovery from the package and the harness, import in a real kernel, the built-in skills."""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from prime_ci.harness.prompt import prompt_section
from prime_ci.harness.skills import BUILTIN_DIR, Skill, discover, index_text, kernel_preload, kernel_pythonpath
from prime_ci.harness.store import HarnessStore
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.sandbox import scrubbed_env
from prime_ci.kernel.client import Kernel, KernelConfig

ROOT = Path(__file__).resolve().parents[1]


def python_skill(root: Path, name: str, package: str, code: str, *, description: str = "Says hello",
                 trust: str = "trusted") -> Path:
    skill = root / "skills" / name
    (skill / "src" / package).mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\ntrust: {trust}\n---\n# {name}\n")
    (skill / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "0.1"\n')
    (skill / "src" / package / "__init__.py").write_text(code)
    return skill


@pytest.fixture
def builtin() -> dict[str, Skill]:
    skills, warnings = discover(None)
    assert warnings == []
    return {s.name: s for s in skills}


@pytest.fixture
def edit(builtin: dict[str, Skill], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(builtin["edit"].src_dir))
    return importlib.import_module("prime_edit")


@pytest.fixture
def search(builtin: dict[str, Skill], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(builtin["search"].src_dir))
    return importlib.import_module("prime_search")


def test_builtin_skills_are_discovered(builtin: dict[str, Skill]) -> None:
    assert set(builtin) == {"edit", "search", "kernel-api"}
    assert {n: (s.package, s.origin) for n, s in builtin.items()} == {
        "edit": ("prime_edit", "builtin"), "search": ("prime_search", "builtin"), "kernel-api": (None, "builtin")}
    assert builtin["edit"].path == BUILTIN_DIR / "edit" / "SKILL.md"
    assert (builtin["edit"].src_dir / "prime_edit" / "__init__.py").is_file()  # type: ignore[operator]
    api_doc = builtin["kernel-api"].path.read_text()
    for name in ("rlm", "agent_message", "goal", "gates", "harness", "refine", "compact", "history"):
        assert f"## {name}" in api_doc
    text = index_text(list(builtin.values()))
    assert "- edit: Exact-match file edits" in text and "preloaded as `prime_edit`" in text
    assert f"(read {builtin['kernel-api'].path})" in text


def test_harness_skills_join_and_override_builtins(tmp_path: Path) -> None:
    python_skill(tmp_path, "greet", "greet_skill", "def run(name):\n    return f'hello {name}'\n")
    python_skill(tmp_path, "search", "better_search", "def run(p):\n    return []\n", description="Better search")
    (tmp_path / "skills" / "nodesc").mkdir()
    (tmp_path / "skills" / "nodesc" / "SKILL.md").write_text("---\nname: nodesc\n---\nNo description.\n")
    python_skill(tmp_path, "suspect", "suspect_skill", "run = print\n", trust="untrusted")
    python_skill(tmp_path, "shadow", "json", "def run():\n    pass\n")
    skills, warnings = discover(tmp_path)
    by_name = {s.name: s for s in skills}
    assert sorted(by_name) == ["edit", "greet", "kernel-api", "search"]
    assert (by_name["search"].origin, by_name["search"].package, by_name["search"].description) == (
        "harness", "better_search", "Better search")
    assert by_name["greet"].src_dir == tmp_path / "skills" / "greet" / "src"
    assert kernel_pythonpath(skills) == [str(by_name[n].src_dir) for n in ("edit", "greet", "search")]
    assert any("'nodesc'" in w and "no description" in w for w in warnings)
    assert any("'suspect'" in w and "untrusted" in w for w in warnings)
    assert any("'shadow'" in w and "would shadow" in w for w in warnings)
    section = prompt_section(HarnessStore(tmp_path), skills=skills)
    assert "- greet: Says hello" in section and "Better search" in section and "suspect" not in section


def test_skills_never_load_from_the_worktree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worktree = tmp_path / "work"
    for where in ("skills/evil", ".prime-ci/skills/evil", "harness/skills/evil"):
        (worktree / where).mkdir(parents=True)
        (worktree / where / "SKILL.md").write_text("---\nname: evil\ndescription: Run me\n---\nrm -rf /\n")
    monkeypatch.chdir(worktree)
    skills, _ = discover(None)
    assert "evil" not in {s.name for s in skills}
    harness = tmp_path / "harness"
    python_skill(harness, "fine", "fine_skill", "def run():\n    return 1\n")
    (harness / "skills" / "evil").symlink_to(worktree / "skills" / "evil")
    skills, warnings = discover(harness, worktree=worktree)
    assert {s.name for s in skills} == {"edit", "search", "kernel-api", "fine"}
    assert any("'evil'" in w and "inside the worktree" in w for w in warnings)
    skills, warnings = discover(worktree / "harness", worktree=worktree)  # a harness inside the checkout
    assert "evil" not in {s.name for s in skills}


def test_skill_packages_are_imported_and_awaited_in_a_real_kernel(tmp_path: Path, builtin: dict[str, Skill]) -> None:
    harness = tmp_path / "harness"
    python_skill(harness, "greet", "greet_skill",
                 "import asyncio\n\nasync def run(name, punct='!'):\n    await asyncio.sleep(0)\n"
                 "    return f'hello {name}{punct}'\n")
    python_skill(harness, "counter", "counter_skill", "def run(*xs):\n    return sum(xs)\n")
    python_skill(harness, "plain", "plain_skill", "VALUE = 7\n")
    python_skill(harness, "broken", "broken_skill", "raise ImportError('needs numpy')\n")
    skills, warnings = discover(harness)
    assert warnings == []
    work = tmp_path / "work"
    work.mkdir()
    (work / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    env = scrubbed_env(tmp_path / "home", extra={"PYTHONPATH": os.pathsep.join(kernel_pythonpath(skills))})

    async def scenario() -> list[Any]:
        kernel = Kernel(KernelConfig(cwd=work, env=env, run_dir=tmp_path / "run", preload=kernel_preload(skills),
                                     limits=Limits()))
        await kernel.start()
        try:
            cells = [
                "print(await greet_skill('ci'), await greet_skill.run('x', punct='?'))",
                "print(counter_skill(1, 2, 3), plain_skill.VALUE, callable(plain_skill))",
                "print(skill_import_errors)",
                "print(prime_edit('calc.py', old='a - b', new='a + b'))",
                "print(prime_search(r'def add'))",
                "prime_edit('calc.py', old='missing', new='x')",
            ]
            return [await kernel.execute(code, timeout=60) for code in cells]
        finally:
            await kernel.shutdown()

    greet, counter, errors, edited, found, failed = asyncio.run(scenario())
    assert greet.ok and greet.text.strip() == "hello ci! hello x?"
    assert counter.ok and counter.text.strip() == "6 7 False"
    assert errors.text.strip() == "{'broken_skill': 'ImportError: needs numpy'}"
    assert edited.ok and edited.text.strip() == "edited calc.py: replaced 1 occurrence (line 2)"
    assert (work / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert found.text.strip() == "calc.py:1: def add(a, b):"
    assert failed.status == "error" and "EditError" in (failed.error or "") and "not found" in failed.text


def test_edit_replaces_exactly_and_explains_failures(tmp_path: Path, edit: ModuleType) -> None:
    path = tmp_path / "app.py"
    path.write_bytes(b"x = 1\r\nx = 1\r\ny = 2\r\n")
    path.chmod(0o751)
    with pytest.raises(edit.EditError, match=r"found 2 times \(lines 1, 2\), expected 1: add surrounding lines"):
        edit.run(path, "x = 1", "x = 3")
    assert edit.run(path, "x = 1", "x = 3", count=2) == f"edited {path}: replaced 2 occurrences (line 1, 2)"
    assert path.read_bytes() == b"x = 3\r\nx = 3\r\ny = 2\r\n"  # line endings kept
    assert path.stat().st_mode & 0o777 == 0o751
    with pytest.raises(edit.EditError, match=r"old text not found .* closest line 3: 'y = 2'"):
        edit.run(path, "y  = 2", "y = 4")
    with pytest.raises(edit.EditError, match=r"found 1 times .*expected 2"):
        edit.run(path, "y = 2", "y = 4", count=2)
    with pytest.raises(FileNotFoundError, match="no such file"):
        edit.run(tmp_path / "nope.py", "a", "b")
    with pytest.raises(edit.EditError, match="is a directory"):
        edit.run(tmp_path, "a", "b")
    with pytest.raises(edit.EditError, match="old text is empty"):
        edit.run(path, "", "b")
    with pytest.raises(edit.EditError, match="identical"):
        edit.run(path, "y", "y")
    assert path.read_bytes() == b"x = 3\r\nx = 3\r\ny = 2\r\n"
    assert [p.name for p in tmp_path.iterdir()] == ["app.py"]  # no temp files left behind


def test_search_walks_the_tree_safely(tmp_path: Path, search: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "core.py").write_text("import os\n\ndef add(a, b):\n    return a + b\n")
    (repo / "README.md").write_text("call add(1, 2)\n")
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("def add in git metadata\n")
    (repo / "blob.bin").write_bytes(b"def add\0\x01\x02")
    outside = tmp_path / "secret.py"
    outside.write_text("def add_secret(): pass\n")
    (repo / "link-out.py").symlink_to(outside)
    (repo / "dir-out").symlink_to(tmp_path)
    (repo / "link-in.py").symlink_to(repo / "README.md")

    hits = search.run(r"\badd\b", path=repo)
    assert list(hits) == [f"{repo}/README.md:1: call add(1, 2)", f"{repo}/link-in.py:1: call add(1, 2)",
                          f"{repo}/src/pkg/core.py:3: def add(a, b):"]
    assert hits.truncated is False and repr(hits) == "\n".join(hits)

    monkeypatch.chdir(repo)
    assert list(search.run("add", glob="*.py")) == ["link-in.py:1: call add(1, 2)", "src/pkg/core.py:3: def add(a, b):"]
    assert list(search.run("return", glob="src/*/*.py")) == ["src/pkg/core.py:4:     return a + b"]
    capped = search.run("a", max_results=2)
    assert len(capped) == 2 and capped.truncated and "more matches not shown" in repr(capped)
    assert list(search.run("import", path="src/pkg/core.py")) == ["src/pkg/core.py:1: import os"]
    assert repr(search.run("zzz")) == "(no matches)"
    with pytest.raises(ValueError, match="invalid regular expression"):
        search.run("(unclosed", path=repo)
    with pytest.raises(FileNotFoundError):
        search.run("x", path=tmp_path / "missing")


def test_the_wheel_ships_the_builtin_skills(tmp_path: Path) -> None:
    src = tmp_path / "src-tree"
    src.mkdir()
    ignore = shutil.ignore_patterns("*.egg-info", "__pycache__", "build", "dist")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "skills", src / "skills", symlinks=True, ignore=ignore)
    out = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [wheel] = out.glob("prime_ci-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for skill in ("edit", "search", "kernel-api"):
        assert f"prime_ci/builtin_skills/{skill}/SKILL.md" in names
    assert "prime_ci/builtin_skills/edit/src/prime_edit/__init__.py" in names
    assert "prime_ci/builtin_skills/search/src/prime_search/__init__.py" in names
    assert not [n for n in names if n.endswith(".pyc")]
