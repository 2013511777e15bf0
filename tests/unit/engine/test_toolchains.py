"""Issue 38: toolchains recognised by their files, the environment their setup made, their offline switches."""

from __future__ import annotations

import subprocess
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


@pytest.mark.parametrize(("commands", "expected"), [
    (["tox -e py --notest -x testenv.package=wheel", "tox -e py -x testenv.package=wheel"], ["tox"]),
    (["python -m tox run -e py311"], ["tox"]), (["/opt/tools/bin/uv sync --frozen", "scripts/test"], ["uv"]),
    (["uvx tox-uv --version", "cat tox.ini", "pre-commit-uv run"], []), (["uv run --offline tox -e py"], ["uv", "tox"]),
])
def test_the_model_is_told_of_the_tools_the_run_uses(tmp_path: Path, commands: list[str],
                                                      expected: list[str]) -> None:
    """pytest-dev/pluggy has a uv.lock beside the tox.ini its CI runs: set up with tox, the model was told to run its
    tests with `uv run --offline pytest`, and uv was not even on PATH."""
    (tmp_path / "uv.lock").write_text("")
    (tmp_path / "tox.ini").write_text("")
    used = toolchains.named(toolchains.recognise(tmp_path), commands)
    assert [t.name for t in used] == expected
    assert ("uv run --offline" in "\n".join(toolchains.prompt_note(used, None))) == ("uv" in expected)


def test_build_requirements_are_plain_specifiers_only(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm[toml]>=8", "wheel; python_version < \'3.12\'",'
        ' "evil @ https://example.invalid/x.whl", "--index-url=https://example.invalid", "cython >=3.0, <4"]\n')
    warned: list[str] = []
    assert build_requires(tmp_path, warned.append) == [
        "setuptools>=64", "setuptools-scm[toml]>=8", "wheel; python_version < '3.12'", "cython >=3.0, <4"]
    assert len(warned) == 1


def test_the_build_backends_own_requirements_are_installed_too(tmp_path: Path) -> None:
    """`pip install --no-build-isolation` (a --build) installs none of what the backend's hooks ask for: setuptools
    older than 70.1 (a Python 3.11 venv's) needs `wheel` ("invalid command 'bdist_wheel'", the realworld tier's
    cbor2 case, where the build-requires step installs it), setup.py's setup_requires... The step reads them with
    build_hooks.py, in the project's interpreter."""
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=61"]\n'
                                             'build-backend = "setuptools.build_meta"\n')
    (tmp_path / "setup.py").write_text("from setuptools import setup\n\nsetup(name='calc', version='0.1', "
                                       "setup_requires=['calc-build-helper>=1', 'https://example.invalid/x.whl'])\n")
    step = toolchains.build_requires_step(tmp_path, lambda _: None)
    assert step is not None and step.network
    assert step.command.endswith(f"&& python {toolchains.build_hooks.__file__} setuptools.build_meta")
    listed = subprocess.run([sys.executable, toolchains.build_hooks.__file__, "--list", "setuptools.build_meta"],
                            cwd=tmp_path, capture_output=True, text=True, check=True, timeout=120)
    assert listed.stdout.splitlines()[-1] == "calc-build-helper>=1", listed  # plain specifiers only


@pytest.mark.parametrize(("system", "hooks"), [
    ("", "setuptools.build_meta:__legacy__"),  # PEP 517's default backend
    ('build-backend = "hatchling.build"\n', "hatchling.build"),
    ('build-backend = "backend"\nbackend-path = ["_build"]\n', "backend _build"),
    ('build-backend = "x; curl evil"\n', None), ('build-backend = "b"\nbackend-path = ["/etc"]\n', None),
])
def test_the_backend_the_hooks_run_is_a_plain_name(tmp_path: Path, system: str, hooks: str | None) -> None:
    (tmp_path / "pyproject.toml").write_text(f'[build-system]\nrequires = ["setuptools"]\n{system}')
    step = toolchains.build_requires_step(tmp_path, lambda _: None)
    assert step is not None
    assert (step.command.partition(" && ")[2].endswith(f"build_hooks.py {hooks}") if hooks
            else " && " not in step.command), step.command


def test_the_wheelhouse_step_comes_with_nox_in_setup(tmp_path: Path) -> None:
    from prime_ci.engine.setup import SetupSpec

    def step(*commands: str) -> str | None:
        found = toolchains.wheelhouse_step(tmp_path, tmp_path / "env" / "wheelhouse",
                                           [SetupSpec(name=f"s{i}", command=c) for i, c in enumerate(commands)],
                                           lambda _: None)
        assert found is None or (found.network and found.name == toolchains.WHEELHOUSE)
        return None if found is None else found.command

    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    assert step("pip install -e .") is None
    legacy = step("python -m nox -s tests --install-only")  # pip's own default requirements for a setup.py
    assert legacy is not None and legacy.endswith("--wheelhouse " + str(tmp_path / "env" / "wheelhouse")
                                                  + " setuptools.build_meta:__legacy__ -- 'setuptools>=40.8.0'")
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["flit_core<4,>=3.11"]\n'
                                             'build-backend = "flit_core.buildapi"\n')
    for command in ("nox -s test-3.11 --install-only", "pipx run nox -s tests", "/opt/nox/bin/nox --install-only"):
        assert str(step(command)).endswith(" flit_core.buildapi -- 'flit_core<4,>=3.11'"), command
    assert step("tox -e py --notest") is None


def test_the_bytecode_step_comes_with_a_toolchain_and_setup(tmp_path: Path) -> None:
    from prime_ci.engine.setup import SetupSpec
    from prime_ci.isolation import project_layer

    setup = [SetupSpec(name="uv", command="uv sync --frozen")]
    assert toolchains.bytecode_step(tmp_path, tmp_path / "run", setup) is None  # no tool's files
    (tmp_path / "uv.lock").write_text("")
    assert toolchains.bytecode_step(tmp_path, tmp_path / "run", []) is None  # nothing set up
    step = toolchains.bytecode_step(tmp_path, tmp_path / "run", setup)
    assert step is not None and step.name == "bytecode" and not step.network
    assert step.command.startswith(f"python {project_layer.__file__} {tmp_path / 'run'} .venv '.nox/*' '.tox/*' ")
