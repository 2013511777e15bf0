"""Issue 38: which programs of a command line live under the hidden home, and what they need from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prime_ci.isolation import home_tools


@pytest.mark.parametrize(("command", "words"), [
    ("tox -e py", ["tox"]),
    ("CI=1 poetry run pytest -q && ruff check . | tee log; (nox -s tests)", ["poetry", "ruff", "tee", "nox"]),
    ("env FOO=1 exec uv run pytest", ["uv"]),
    ("'unclosed", []),
])
def test_the_program_words_of_a_command_line(command: str, words: list[str]) -> None:
    assert home_tools.program_words(command) == words


def test_a_pipx_tool_needs_its_venv_and_nothing_else_of_the_home(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    venv = home / ".local" / "share" / "pipx" / "venvs" / "tool"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    script = venv / "bin" / "tool"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nprint(1)\n")
    script.chmod(0o755)
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "tool").symlink_to(script)
    (home / ".ssh").mkdir()
    monkeypatch.setenv("HOME", str(home))
    found = home_tools.hidden_tools(["tool --version && ls"], f"{home / '.local' / 'bin'}:/usr/bin:/bin")
    assert found == [str(home / ".local" / "bin" / "tool")]
    needed = home_tools.needs(found[0])
    assert str(venv) in needed
    assert not [d for d in needed if d in (str(home), str(home / ".ssh"), str(home / ".local"))]


def test_a_javascript_tool_gets_its_node_modules_tree_and_stays_a_link(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    modules = home / "setup-pnpm" / "node_modules"
    (modules / "pnpm" / "bin").mkdir(parents=True)
    (modules / "pnpm" / "bin" / "pnpm.cjs").write_text("#!/usr/bin/env node\n")
    (modules / ".bin").mkdir()
    (modules / ".bin" / "pnpm").symlink_to("../pnpm/bin/pnpm.cjs")
    (home / "bin").mkdir()
    (home / "bin" / "pnpm").symlink_to(modules / "pnpm" / "bin" / "pnpm.cjs")
    monkeypatch.setenv("HOME", str(home))
    tree = ("--ro-bind", str(modules), str(modules))
    # inside the tree bound whole: nothing more; elsewhere in the home, a link to the real path inside it
    assert home_tools.mounts(str(modules / ".bin" / "pnpm")) == [tree]
    assert home_tools.mounts(str(home / "bin" / "pnpm")) == [
        ("--symlink", str(modules / "pnpm" / "bin" / "pnpm.cjs"), str(home / "bin" / "pnpm")), tree]
