"""Issue 38: toolchains recognised by their files, the environment their setup made, their offline switches."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from prime_ci.engine import toolchains
from prime_ci.engine.toolchains import build_requires


def names(worktree: Path) -> list[str]:
    return [t.name for t in toolchains.recognise(worktree)]


@pytest.mark.parametrize(("files", "expected"), [
    ({"uv.lock": ""}, ["uv"]), ({"poetry.lock": ""}, ["poetry"]), ({"pdm.lock": ""}, ["pdm"]),
    ({"tox.ini": ""}, ["tox"]), ({"tox.toml": ""}, ["tox"]),
    ({"pyproject.toml": "[tool.tox]\nenv_list = []\n"}, ["tox"]),
    ({"noxfile.py": ""}, ["nox"]), ({"uv.lock": "", "noxfile.py": ""}, ["uv", "nox"]), ({"setup.py": ""}, []),
])
def test_toolchains_are_recognised_by_their_files(tmp_path: Path, files: dict[str, str], expected: list[str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert names(tmp_path) == expected


def venv(path: Path) -> Path:
    """A virtual environment's marker, all the finder reads (the run test makes real ones)."""
    path.mkdir(parents=True)
    (path / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    return path


def test_the_environment_setup_made_is_found_where_each_tool_puts_it(tmp_path: Path) -> None:
    wt, home = tmp_path / "wt", tmp_path / "home"
    wt.mkdir()
    (wt / "poetry.lock").write_text("")
    (wt / "tox.ini").write_text("")
    poetry, tox = toolchains.recognise(wt)
    made = venv(home / ".cache" / "pypoetry" / "virtualenvs" / "calc-Ab12-py3.11")
    assert poetry.environment(wt, home) == made
    assert tox.environment(wt, home) is None
    venv(wt / ".tox" / "py")
    (wt / ".tox" / ".pkg").mkdir()
    assert tox.environment(wt, home) == wt / ".tox" / "py"
    venv(wt / ".venv")  # an in-project environment wins for every tool
    assert poetry.environment(wt, home) == wt / ".venv" == tox.environment(wt, home)


def test_gates_get_the_tools_offline_switches_and_the_model_how_to_run_the_tests(tmp_path: Path) -> None:
    (tmp_path / "uv.lock").write_text("")
    (tmp_path / "tox.ini").write_text("")
    found = toolchains.recognise(tmp_path)
    assert toolchains.offline_env(found) == {"UV_OFFLINE": "1", "PIP_NO_INDEX": "1"}
    note = "\n".join(toolchains.prompt_note(found, (found[0], tmp_path / ".venv")))
    assert "uv run --offline pytest" in note and "run its tests with `tox -e py -x testenv.package=wheel`" in note
    assert f"setup made its environment at {tmp_path / '.venv'}" in note
    # in the sandbox the environment is read-only in the cells: tox (which writes there) runs through the gates
    sandboxed = "\n".join(toolchains.prompt_note(found, None, sandboxed=True))
    assert "uv: its tools stay offline here (UV_OFFLINE); run its tests with `uv run --offline pytest`" in sandboxed
    assert "read-only in your cells: run its tests as the gates do, with `await gates.run()`" in sandboxed


def test_build_requirements_are_plain_specifiers_only(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm[toml]>=8", "wheel; python_version < \'3.12\'",'
        ' "evil @ https://example.invalid/x.whl", "--index-url=https://example.invalid", "cython >=3.0, <4"]\n')
    warned: list[str] = []
    assert build_requires(tmp_path, warned.append) == [
        "setuptools>=64", "setuptools-scm[toml]>=8", "wheel; python_version < '3.12'", "cython >=3.0, <4"]
    assert len(warned) == 1
