"""Issue 13: the project's own environment (its interpreter, setup, editable installs), through the CLI with the
scripted server, real packages installed from local paths, and real pip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_repo, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "mylib"
version = "0.1"
"""
SRC_LIB = {
    "pyproject.toml": PYPROJECT,
    "src/mylib/__init__.py": "from mylib.core import double\n",
    "src/mylib/core.py": "def double(x):\n    return x + x + 1\n",
    "tests/test_double.py": "from mylib import double\n\n\ndef test_double():\n    assert double(4) == 8\n",
    ".gitignore": "*.egg-info/\n__pycache__/\n.pytest_cache/\n",
}
# a package whose directory is not its name: setuptools installs it editable through a finder (MAPPING)
MAPPED_LIB = {
    "pyproject.toml": PYPROJECT + '\n[tool.setuptools]\npackages = ["mylib"]\npackage-dir = {mylib = "impl"}\n',
    "impl/__init__.py": "from mylib.core import double\n",
    "impl/core.py": "def double(x):\n    return x + x + 1\n",
    "tests/test_double.py": "from mylib import double\n\n\ndef test_double():\n    assert double(4) == 8\n",
    ".gitignore": "*.egg-info/\n__pycache__/\n.pytest_cache/\n",
}
OFFLINE_PIP = {"PIP_NO_BUILD_ISOLATION": "0", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
PASS_PIP = [arg for name in OFFLINE_PIP for arg in ("--pass-env", name)]
GATE = ["--gate", "python -m pytest -q -p no:cacheprovider"]


def fix(path: str, new: str) -> str:
    return f"from pathlib import Path\nPath({path!r}).write_text({new!r})\n"


def job_python(root: Path) -> Path:
    """A virtualenv standing for the job's own Python: prime-ci's packages (pytest, pip, setuptools) visible
    through a path line, its own site-packages for what the job installs."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python*/site-packages"))
    base = [p for p in sys.path if p.endswith("site-packages")]
    (site / "_job_base.pth").write_text("\n".join(base) + "\n")
    return root / "bin" / "python"


def pip_install(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    *args], check=True, capture_output=True)


def own_packages() -> str:
    return subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                          check=True).stdout


# each sandbox mode and each outcome in the PR tier; the other two pairs nightly (each run is a real pip install)
@pytest.mark.parametrize(("correct", "sandbox"), [
    (True, "auto"), (False, "off"),
    pytest.param(True, "off", marks=pytest.mark.nightly), pytest.param(False, "auto", marks=pytest.mark.nightly),
])
def test_setup_editable_install_in_the_worktree(
    tmp_path: Path, server: ScriptedServer, sandbox: str, correct: bool
) -> None:
    repo = make_repo(tmp_path / "repo", SRC_LIB)
    before = own_packages()
    body = "def double(x):\n    return 2 * x\n" if correct else "def double(x):\n    return 3 * x\n"
    server.add(ipython(fix("src/mylib/core.py", body)), reply("done"))
    run = run_inproc(tmp_path, repo, server, "--setup", "pip install -e .", "--sandbox", sandbox,
                    "--max-gate-retries", "0", *PASS_PIP, *GATE, env=OFFLINE_PIP)
    assert run.code == (0 if correct else 1), run.proc.stderr
    result = run.result
    assert [s["passed"] for s in result["setup"]] == [True]
    assert result["changed_files"] == ["src/mylib/core.py"], "setup's egg-info must not be in the patch"
    assert "Successfully installed mylib" in (run.out / "setup" / "pip.log").read_text()
    assert own_packages() == before, "a setup or gate changed prime-ci's own environment"
    first = json.dumps(server.chat_requests[0].body["messages"][0])
    assert "pip install -e ." in first, "the model is told which setup ran"


def test_gate_plugin_from_the_job_interpreter(tmp_path: Path, server: ScriptedServer) -> None:
    """A pytest plugin installed only in the job's Python: with --python the gate sees it, and so does
    `!python` in a cell; with prime-ci's own Python on PATH it does not."""
    plugin = tmp_path / "plugin"
    make_repo(plugin, {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
                          '[project]\nname = "pytest-needed"\nversion = "0.1"\n'
                          '[project.entry-points.pytest11]\nneeded = "pytest_needed"\n',
        "pytest_needed.py": "import pytest\n\n\n@pytest.fixture\ndef needed_value():\n    return 42\n",
    })
    job = job_python(tmp_path / "job")
    pip_install(job, str(plugin))
    repo = make_repo(tmp_path / "repo", {"test_it.py": "def test_it(needed_value):\n    assert needed_value == 42\n"})
    cell = '!python -c "import sys, pytest_needed; print(\'EXE\', sys.executable, sys.prefix)"'
    server.add(ipython(cell), reply("done"))
    run = run_inproc(tmp_path, repo, server, "--python", str(job), "--max-gate-retries", "0", *GATE)
    assert run.code == 0, (run.out / "gates" / "pytest.log").read_text()
    assert run.result["python"] == str(job)
    tool = [m for m in server.chat_requests[1].body["messages"] if m["role"] == "tool"][-1]["content"]
    exe, prefix = tool.split("EXE ", 1)[1].split()[:2]
    assert exe.endswith("/env/bin/python") and "prime-ci-wt-" in exe, tool
    assert Path(prefix).name == "env"

    server.add(reply("done"))
    plain = run_inproc(tmp_path, repo, server, "--max-gate-retries", "0", *GATE)
    assert plain.code == 1, "without --python the plugin must be missing (the control case)"
    assert "fixture 'needed_value' not found" in (plain.out / "gates" / "pytest.log").read_text()


@pytest.mark.parametrize("files", [SRC_LIB, MAPPED_LIB], ids=["src-layout-pth", "mapped-finder"])
def test_editable_install_of_repo_resolves_to_the_worktree(
    tmp_path: Path, server: ScriptedServer, files: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", files)
    job = job_python(tmp_path / "job")
    pip_install(job, "-e", str(repo))
    check = subprocess.run([str(job), "-c", "import mylib, sys; print(mylib.__file__)"], capture_output=True,
                           text=True, check=True)
    assert check.stdout.startswith(str(repo)), "the job's editable install points at REPO"
    core = "src/mylib/core.py" if "src/mylib/core.py" in files else "impl/core.py"
    server.add(ipython("import mylib, mylib.core\nprint('KERNEL', mylib.core.__file__)"),
               ipython(fix(core, "def double(x):\n    return 2 * x\n")), reply("fixed"))
    run = run_inproc(tmp_path, repo, server, "--python", str(job), "--max-gate-retries", "0", *GATE)
    assert run.code == 0, (run.out / "gates" / "pytest.log").read_text()
    tool = [m for m in server.chat_requests[1].body["messages"] if m["role"] == "tool"][-1]["content"]
    kernel_file = tool.split("KERNEL ", 1)[1].split()[0]
    assert "prime-ci-wt-" in kernel_file and kernel_file.endswith(core), tool
    assert "return x + x + 1" in (repo / core).read_text(), "REPO itself is untouched"


def test_a_virtualenv_inside_repo_keeps_its_own_packages(tmp_path: Path, server: ScriptedServer) -> None:
    """uv/poetry's in-project `.venv`: found by default, and its site-packages are not redirected to the
    worktree (which has no `.venv`) while the editable install of REPO is."""
    helper = make_repo(tmp_path / "helper", {
        "pyproject.toml": PYPROJECT.replace('name = "mylib"', 'name = "helperpkg"'),
        "helperpkg/__init__.py": "ANSWER = 42\n"})
    files = {**SRC_LIB, ".gitignore": SRC_LIB[".gitignore"] + ".venv/\n",
             "tests/test_helper.py": "import helperpkg\n\n\ndef test_helper():\n    assert helperpkg.ANSWER == 42\n"}
    repo = make_repo(tmp_path / "repo", files)
    venv = job_python(repo / ".venv")
    pip_install(venv, str(helper))
    pip_install(venv, "-e", str(repo))
    server.add(ipython("import helperpkg, mylib\nprint('KERNEL', helperpkg.__file__, mylib.__file__)"),
               ipython(fix("src/mylib/core.py", "def double(x):\n    return 2 * x\n")), reply("fixed"))
    run = run_inproc(tmp_path, repo, server, "--max-gate-retries", "0", *GATE)
    assert run.code == 0, (run.out / "gates" / "pytest.log").read_text()
    assert run.result["python"] == str(venv)
    assert "2 passed" in (run.out / "gates" / "pytest.log").read_text()
