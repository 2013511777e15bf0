"""Issue 23 item 1: a project's own install line, given as ``--setup``, builds as it does with the job's
interpreter outside prime-ci: pip's isolated build sees only the build requirements (not the job venv's older
setuptools), ``--no-build-isolation`` installs into the run environment, ``uv pip`` works too.

The job's interpreter is a real ``python -m venv`` (setuptools 65.5 from ensurepip); the newer setuptools is a
wheel repacked from prime-ci's own installed copy, so no index is needed."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import built_once, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, reply

MIT_PROJECT = {
    "pyproject.toml": '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n\n'
                      '[project]\nname = "mitpkg"\nversion = "0.1"\nlicense = "MIT"\n',
    "src/mitpkg/__init__.py": "ANSWER = 42\n",
    ".gitignore": "*.egg-info/\n__pycache__/\n",
}
OLD_STYLE = {**MIT_PROJECT, "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\n'
             'build-backend = "setuptools.build_meta"\n\n[project]\nname = "mitpkg"\nversion = "0.1"\n'}
GATE = ["--gate", "python -c 'import mitpkg; assert mitpkg.ANSWER == 42'"]


def repack(name: str, dest: Path) -> Path:
    """A wheel of an installed distribution (its files as installed, bytecode left out)."""
    dist = importlib.metadata.distribution(name)
    wheel = dest / f"{name}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for item in dist.files or []:
            if not str(item).startswith("..") and "__pycache__" not in str(item):
                archive.write(Path(str(item.locate())), str(item))
    return wheel


def _job(root: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, capture_output=True)
    python = root / "venv" / "bin" / "python"
    old = subprocess.run([str(python), "-c", "import setuptools; print(setuptools.__version__)"],
                         capture_output=True, text=True, check=True).stdout
    assert int(old.split(".")[0]) < 77, f"the job venv must ship an older setuptools, not {old}"
    own = root / "own"
    own.mkdir()  # setuptools 65 builds wheels with the `wheel` package: the job installed it, as jobs do
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    *(str(repack(name, own)) for name in ("wheel", "packaging"))], check=True, capture_output=True)
    wheels = root / "wheels"
    wheels.mkdir()
    assert int(repack("setuptools", wheels).name.split("-")[1].split(".")[0]) >= 77


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the job's python: a venv with ensurepip's setuptools and ``wheel``, a directory with setuptools >= 77),
    built once for the session: each test checks that its run left the venv as it found it."""
    root = built_once(tmp_path_factory, "build-isolation-job", _job)
    return root / "venv" / "bin" / "python", root / "wheels"


def _venv_packages(python: Path) -> str:
    return subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_isolated_build_sees_its_requirements_not_the_job_venv(
    tmp_path: Path, server: ScriptedServer, job: tuple[Path, Path], tool: str
) -> None:
    python, wheels = job
    if tool == "uv" and shutil.which("uv", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("uv is not installed next to this Python")
    repo = make_repo(tmp_path / "repo", MIT_PROJECT)
    before = _venv_packages(python)
    command = {"pip": "python -m pip install --disable-pip-version-check", "uv": "uv pip install"}[tool]
    server.add(reply("nothing to do"))
    run = run_inproc(tmp_path, repo, server, "--python", str(python), *GATE,
                    "--setup", f"{command} --no-index --find-links {wheels} -e .")
    log = next((run.out / "setup").glob("*.log")).read_text()
    assert run.code == 0, log[-3000:] + run.proc.stderr
    assert "invalid pyproject.toml" not in log
    assert [g["passed"] for g in run.result["gates"]] == [True], "the editable install is importable by gates"
    assert _venv_packages(python) == before, "setup installed into the run environment, not the job's venv"


def test_no_build_isolation_installs_into_the_run_environment(
    tmp_path: Path, server: ScriptedServer, job: tuple[Path, Path]
) -> None:
    python, _ = job
    repo = make_repo(tmp_path / "repo", OLD_STYLE)
    before = _venv_packages(python)
    server.add(reply("nothing to do"))
    run = run_inproc(tmp_path, repo, server, "--python", str(python), *GATE, "--setup",
                    "python -m pip install --disable-pip-version-check --no-build-isolation --no-index -e .")
    log = next((run.out / "setup").glob("*.log")).read_text()
    assert run.code == 0, log[-3000:] + run.proc.stderr
    assert "Successfully installed mitpkg" in log
    assert [g["passed"] for g in run.result["gates"]] == [True]
    assert _venv_packages(python) == before
