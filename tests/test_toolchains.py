"""Issue 38: the project's own toolchain, first time, inside the sandbox. A uv project (uv.lock) set up as its CI
does (``uv sync --frozen``): the environment uv made is the one the run's ``python`` is layered on, the gates run
with uv offline, and the model is told so. Offline here: a virtual project without dependencies (the realworld
tier has projects whose setup downloads)."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUGGY, FIX, PYTEST_GATE, make_repo, run_prime
from prime_ci.isolation.sandbox import bwrap_binary
from prime_ci.testing import ScriptedServer, contains, ipython, reply

UV = shutil.which("uv", path=str(Path(sys.executable).parent))
PYPROJECT = ('[project]\nname = "calc"\nversion = "0.1.0"\nrequires-python = ">=3.11"\ndependencies = []\n\n'
             '[tool.uv]\npackage = false\n')
FILES = {
    "pyproject.toml": PYPROJECT,
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
                    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    ".gitignore": "__pycache__/\n.venv/\n",
    # as in Kludex/python-multipart: a noxfile for other sessions, never run here
    "noxfile.py": "import nox\n",
}
# the gate checks where its python is: the environment uv made, through the run's layer
WHERE = ("import os, sys; print('LAYERED ON', [p for p in sys.path if '/.venv/lib/' in p][:1], "
         "'UV_OFFLINE', os.environ.get('UV_OFFLINE'), 'VIRTUAL_ENV', os.environ.get('VIRTUAL_ENV'))")
# uv made .venv from the project's Python (the job's), not from another one it found on the sandbox's PATH
BASE = "!.venv/bin/python -c 'import sys; print(\"VENV BASE\", sys.base_prefix)'"


@pytest.mark.skipif(UV is None, reason="uv is in the dev environment's lock")
def test_a_uv_project_set_up_as_its_ci_does_runs_in_the_environment_uv_made(tmp_path: Path,
                                                                              server: ScriptedServer) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    subprocess.run([str(UV), "lock", "--offline", "-q"], cwd=repo, check=True, timeout=120)
    make_repo(repo, FILES)
    server.add(ipython(f"!python -c {WHERE!r}"), ipython(BASE), ipython(FIX), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on" if bwrap_binary() else "off",
                    "--setup", "uv sync --frozen", "--gate", "uv run --offline python -m unittest -q")
    assert run.code == 0, run.proc.stderr
    base = str(server.chat_requests[2].body["messages"][-1]["content"])
    assert f"VENV BASE {sys.base_prefix}\n" in base, (base, sys.base_prefix)
    system = server.chat_requests[0].body["messages"][0]["content"]
    assert "The project uses uv (uv.lock); setup made its environment at" in system and "/.venv" in system
    assert "uv run --offline pytest" in system
    assert "- nox:" not in system, "nox is not used by the run: the model is not told to run the tests with it"
    seen = str(server.chat_requests[1].body["messages"][-1]["content"])
    assert "LAYERED ON ['" in seen and "/.venv/lib/" in seen and "UV_OFFLINE 1" in seen, seen
    # VIRTUAL_ENV names the environment uv made, so `uv run` does not warn, every round, that it ignores another one
    # (Kludex/python-multipart's gates said so atop the model's feedback)
    assert "/work/.venv" in seen.split("VIRTUAL_ENV", 1)[1], seen
    log = "".join(p.read_text(encoding="utf-8") for p in (run.out / "gates").glob("*.log"))
    assert log and "does not match the project environment" not in log, log


@pytest.mark.skipif(UV is None, reason="uv is in the dev environment's lock")
def test_a_childs_kernel_gets_the_tools_offline_switches_and_environment(tmp_path: Path,
                                                                         server: ScriptedServer) -> None:
    """An rlm child's kernel is given what the root's is after setup: the tools' offline switches and the
    VIRTUAL_ENV of the environment uv made (its environment was copied before setup and got neither)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    subprocess.run([str(UV), "lock", "--offline", "-q"], cwd=repo, check=True, timeout=120)
    make_repo(repo, FILES)
    send = ipython("print(await agent_message.send('looked', receiver_role='parent'))")
    server.route(contains("where do you run"), [ipython(f"!python -c {WHERE!r}"), send, reply("bye")])
    server.add(ipython("await rlm('where do you run', name='w')"), reply("wait"), ipython(FIX), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on" if bwrap_binary() else "off",
                    "--setup", "uv sync --frozen", "--gate", "uv run --offline python -m unittest -q")
    assert run.code == 0, run.proc.stderr
    told = [str(m["content"]) for r in server.chat_requests if contains("where do you run")(r.body)
            for m in r.body["messages"] if m["role"] == "tool"]
    seen = next((t for t in told if "UV_OFFLINE" in t), "")
    assert "UV_OFFLINE 1" in seen and "/work/.venv" in seen.split("VIRTUAL_ENV", 1)[-1], told


@pytest.mark.skipif(UV is None or bwrap_binary() is None, reason="uv is in the dev environment's lock; needs bwrap")
def test_the_gates_write_in_the_environment_the_tool_made_and_the_cells_do_not(tmp_path: Path,
                                                                              server: ScriptedServer) -> None:
    """tox writes its logs in its environment and reinstalls the package there every round, `nox -r` and uv too:
    in the sandbox the gates and builds keep the environment setup made writable (it lies in the worktree), while
    the model's cells see it read-only."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    subprocess.run([str(UV), "lock", "--offline", "-q"], cwd=repo, check=True, timeout=120)
    make_repo(repo, FILES)
    cell = "!touch .venv/from-a-cell 2>&1 | tail -1; ls .venv"
    server.add(ipython(cell), ipython(FIX), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on", "--setup", "uv sync --frozen",
                    "--gate", "touch .venv/lib/from-the-gate && uv run --offline python -m unittest -q")
    assert run.code == 0, run.proc.stderr  # the gate's touch would fail on a read-only environment
    seen = str(server.chat_requests[1].body["messages"][-1]["content"])
    assert "Read-only file system" in seen and "pyvenv.cfg" in seen and seen.count("from-a-cell") == 1, seen


@pytest.mark.parametrize("lock", ["poetry.lock", "pdm.lock"])
def test_a_poetry_or_pdm_project_has_no_virtual_env_so_the_tool_makes_its_own(tmp_path: Path, server: ScriptedServer,
                                                                              lock: str) -> None:
    """poetry installs into the activated environment (VIRTUAL_ENV) when there is one: with the run environment's,
    `poetry install` put the project's packages there, beside poetry's own in the job's venv beneath it, and the
    gate's pytest failed on a plugin of poetry's platformdirs (the realworld tier's pyshacl case); pdm reuses it
    too (pdm-project/pdm-backend's `pdm sync`), and the run never adopted the .venv the README describes. With
    their lock file, setup, the gates and the cells have none, and the tool makes (then the run adopts) its own."""
    repo = make_repo(tmp_path / "repo", {**BUGGY, lock: "# a poetry or pdm project\n"})
    server.add(ipython("!echo VENV=[$VIRTUAL_ENV]"), ipython(FIX), reply("done"))
    unset = 'test -z "${VIRTUAL_ENV+set}"'
    run = run_prime(tmp_path, repo, server, "--setup", unset, "--gate", f"{unset} && {PYTEST_GATE}")
    assert run.code == 0, run.proc.stderr
    assert "VENV=[]" in str(server.chat_requests[1].body["messages"][-1]["content"])


def wheel(directory: Path, name: str, files: dict[str, bytes]) -> str:
    """A pure-Python wheel of ``files`` (``NAME-1.0``) in ``directory``, its RECORD written as pip checks it."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-1.0.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for path, data in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,", ""]).encode()
    filename = f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(directory / filename, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return filename


# a PEP 517 backend, published as a wheel of its own: a project's wheel holds its src/calc.py
BACKEND = """import os, sys
sys.path.insert(0, os.path.dirname(__file__))
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    import importlib.util
    spec = importlib.util.spec_from_file_location("maker", os.path.join(os.path.dirname(__file__), "tinymaker.py"))
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    with open(os.path.join("src", "calc.py"), "rb") as handle:
        return maker.wheel(__import__("pathlib").Path(wheel_directory), "calc", {"calc.py": handle.read()})
"""
# what nox's default (virtualenv) backend does for `session.install(".")` and `session.run(...)`: -r reuses the
# environment and installs the project again, pip building it in isolation
FAKE_NOX = """#!/bin/sh
set -e
[ -d .nox/tests ] || python -m venv .nox/tests
.nox/tests/bin/python -m pip install --quiet --disable-pip-version-check .
case " $* " in *" --install-only "*) exit 0;; esac
exec .nox/tests/bin/python -m unittest -q
"""


@pytest.mark.skipif(bwrap_binary() is None, reason="needs bwrap")
def test_nox_reinstalling_the_project_offline_finds_its_build_requirements(tmp_path: Path,
                                                                          server: ScriptedServer) -> None:
    """pypa/installer set up as its CI does (`nox -s test-3.11 --install-only`, gate `nox -s test-3.11 -r`, nox's
    default backend): each round `session.install(".")` builds the project with pip in isolation, which fetched
    flit_core from the index and ended the run with exit 10 before the model's first fix was tested. With nox in
    setup, the project's [build-system].requires are downloaded into a wheelhouse (setup has the network), which
    the gates' pip reads offline."""
    wheels = tmp_path / "wheels"  # the job's package index
    wheels.mkdir()
    maker = f"from pathlib import Path\n\n\n{inspect.getsource(wheel)}"
    wheel(wheels, "tinybackend", {"tinybackend.py": BACKEND.encode(), "tinymaker.py": maker.encode()})
    nox = tmp_path / "bin" / "nox"
    nox.parent.mkdir()
    nox.write_text(FAKE_NOX)
    nox.chmod(0o755)
    repo = make_repo(tmp_path / "repo", {
        "pyproject.toml": '[build-system]\nrequires = ["tinybackend"]\nbuild-backend = "tinybackend"\n',
        "noxfile.py": "import nox\n\n\n@nox.session\ndef tests(session):\n    session.install('.')\n",
        "src/calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
                        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
        ".gitignore": "__pycache__/\n.nox/\n",
    })
    fix = "from pathlib import Path\np = Path('src/calc.py')\np.write_text(p.read_text().replace('a - b', 'a + b'))\n"
    server.add(reply("Let me see what the tests say."), ipython(fix), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on", "--sandbox-ro", str(wheels),
                    "--setup", f"{nox} -s tests --install-only", "--gate", f"{nox} -s tests -r",
                    env={"PIP_FIND_LINKS": str(wheels), "PIP_INDEX_URL": (tmp_path / "no-index").as_uri()})
    assert run.code == 0, run.proc.stderr + "".join(p.read_text()[-2000:] for p in (run.out / "gates").glob("*.log"))
    assert [s["name"] for s in run.result["setup"]] == ["nox-tests", "wheelhouse", "bytecode"]
    assert not run.result["rounds"][0]["passed"] and run.result["rounds"][-1]["passed"]
