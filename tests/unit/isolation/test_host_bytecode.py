"""Gates run under a pycache prefix (a forged ``__pycache__`` in the worktree is never read), but the project
interpreter's own compiled standard library and packages are: the run environment's start-up hook sends only
sources under the interpreter's directories, and outside the run's, back to the bytecode beside them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from prime_ci.isolation import project_layer
from unit.isolation.layered_env import env_python, trust

PROBE = """
import csv, json, os, sys
sys.path.insert(0, sys.argv[1])
import inwork
print(json.dumps({"csv": csv.__cached__, "inwork": inwork.__cached__}))
"""


def cached(python: Path, path_entry: str, prefix: Path) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([str(python), "-c", PROBE, path_entry], capture_output=True, text=True, env=env,
                          check=True)
    found: dict[str, str] = json.loads(proc.stdout)
    return found


def test_stdlib_bytecode_beside_its_source_worktree_bytecode_under_the_prefix(tmp_path: Path) -> None:
    python, run = env_python(tmp_path)
    found = cached(python, str(run / "work"), tmp_path / "prefix")
    stdlib = os.path.realpath(sysconfig.get_path("stdlib"))
    assert found["csv"].startswith(os.path.join(stdlib, "__pycache__", "csv.")), found
    assert found["inwork"].startswith(str(tmp_path / "prefix")), found


def test_a_dotdot_path_through_a_trusted_directory_into_the_run_keeps_the_prefix(tmp_path: Path) -> None:
    python, run = env_python(tmp_path)
    stdlib = sysconfig.get_path("stdlib")
    climb = os.path.join(stdlib, *[".."] * len(Path(stdlib).parts), *Path(run / "work").parts[1:])
    found = cached(python, climb, tmp_path / "prefix")
    assert found["inwork"].startswith(str(tmp_path / "prefix")), found


def test_a_symlink_in_a_trusted_directory_is_judged_by_where_it_leads(tmp_path: Path) -> None:
    python, run = env_python(tmp_path)
    trusted = tmp_path / "host"
    trusted.mkdir()
    (trusted / "inwork.py").symlink_to(run / "work" / "inwork.py")
    trust(run, trusted)
    found = cached(python, str(trusted), tmp_path / "prefix")
    assert found["inwork"].startswith(str(tmp_path / "prefix")), found


def test_a_trusted_root_holding_the_run_directory_is_not_trusted(tmp_path: Path) -> None:
    python, run = env_python(tmp_path)
    trust(run, tmp_path)  # holds run/ (and a directory beside it)
    (tmp_path / "beside").mkdir()
    (tmp_path / "beside" / "inwork.py").write_text("VALUE = 2\n")
    found = cached(python, str(tmp_path / "beside"), tmp_path / "prefix")
    assert found["inwork"].startswith(str(tmp_path / "prefix")), found


def test_a_trusted_root_inside_the_run_directory_is_not_trusted(tmp_path: Path) -> None:
    python, run = env_python(tmp_path)
    trust(run, run / "work")
    found = cached(python, str(run / "work"), tmp_path / "prefix")
    assert found["inwork"].startswith(str(tmp_path / "prefix")), found


def test_what_the_gates_write_in_their_tmpdir_keeps_its_bytecode_beside_it(tmp_path: Path) -> None:
    """pypa/installer's test_main installs a wheel into its tmp_path with bytecode compiled and looks for the
    ``.pyc`` files there: under the gates' prefix they went to the prefix and the test failed in every round (the
    patch right or not). The gates' TMPDIR (the scratch home's tmp/) holds only what the run's processes wrote, no
    source the verdict reads: its sources compile beside themselves; the worktree's and the home's others keep
    the prefix."""
    python, run = env_python(tmp_path)
    for where in ("home/tmp/pytest-of-x/pytest-0/dest", "home/elsewhere"):
        (run / where).mkdir(parents=True)
        (run / where / "inwork.py").write_text("VALUE = 3\n")
    dest = run / "home/tmp/pytest-of-x/pytest-0/dest"
    compiled = subprocess.run([str(python), "-c", "import py_compile, sys; print(py_compile.compile(sys.argv[1]))",
                               str(dest / "inwork.py")], capture_output=True, text=True, check=True,
                              env={"PATH": os.environ["PATH"], "PYTHONPYCACHEPREFIX": str(tmp_path / "prefix")})
    assert compiled.stdout.startswith(str(dest / "__pycache__" / "inwork.")), compiled
    assert cached(python, str(run / "home" / "elsewhere"), tmp_path / "prefix")["inwork"].startswith(
        str(tmp_path / "prefix"))
    assert cached(python, str(run / "work"), tmp_path / "prefix")["inwork"].startswith(str(tmp_path / "prefix"))


def test_an_environment_a_tool_made_gets_the_same_rule(tmp_path: Path) -> None:
    """nox runs pypa/installer's tests with the interpreter of its own environment in the worktree
    (.nox/test-3-11), not layered on the run's: the ``bytecode`` setup step gives it the rule, so the wheel its
    tests install into tmp_path gets its ``.pyc`` files there, while the worktree's stay under the prefix."""
    run = tmp_path / "run"
    env = run / "work" / ".nox" / "test-3-11"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    dest = run / "home" / "tmp" / "pytest-of-x" / "pytest-0" / "dest"
    dest.mkdir(parents=True)
    for where in (dest, run / "work"):
        (where / "inwork.py").write_text("VALUE = 4\n")
    step = subprocess.run([sys.executable, project_layer.__file__, str(run), *project_layer.TOOL_ENVS],
                          cwd=run / "work", capture_output=True, text=True, check=True)
    assert ".nox/test-3-11/lib/python" in step.stdout, step
    compile_both = "import py_compile, sys; print(*(py_compile.compile(f) for f in sys.argv[1:]))"
    compiled = subprocess.run([str(env / "bin" / "python"), "-c", compile_both, str(dest / "inwork.py"),
                               str(run / "work" / "inwork.py")], capture_output=True, text=True, check=True,
                              env={"PATH": os.environ["PATH"], "PYTHONPYCACHEPREFIX": str(tmp_path / "prefix")})
    beside, worktree = compiled.stdout.split()
    assert beside.startswith(str(dest / "__pycache__" / "inwork.")), compiled
    assert worktree.startswith(str(tmp_path / "prefix")), compiled


def test_without_a_prefix_nothing_changes(tmp_path: Path) -> None:
    python, run = env_python(tmp_path)
    proc = subprocess.run([str(python), "-c", PROBE, str(run / "work")], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"}, check=True)
    found = json.loads(proc.stdout)
    assert found["inwork"] == str(run / "work" / "__pycache__" / Path(found["inwork"]).name), found


def other_pythons() -> list[str]:
    """Working interpreters of the oldest and newest other 3.X versions found: on PATH, in /usr/bin, or
    installed by pyenv (whose shim of an inactive version does not run)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found: dict[str, str] = {}
    for minor in range(8, 15):
        version = f"3.{minor}"
        if version == sysconfig.get_python_version():
            continue
        candidates = [shutil.which(f"python{version}"), f"/usr/bin/python{version}",
                      *map(str, sorted(pyenv.glob(f"{version}.*/bin/python{version}")))]
        for python in filter(None, candidates):
            if version not in found and os.access(python, os.X_OK) and subprocess.run(
                    [python, "-c", "pass"], capture_output=True, check=False).returncode == 0:
                found[version] = python
    versions = sorted(found, key=lambda v: int(v.split(".")[1]))
    return [found[v] for v in dict.fromkeys(versions[:1] + versions[-1:])]  # the oldest and the newest


def test_the_hook_works_in_other_project_interpreters(tmp_path: Path) -> None:
    """The hook runs in the project's interpreter, whatever its version."""
    pythons = other_pythons()
    if not pythons:
        pytest.skip("no other working python3.X on PATH")
    for python in pythons:
        env, run = env_python(tmp_path / python.replace("/", "_"), python)
        found = cached(env, str(run / "work"), tmp_path / "prefix")
        assert "/__pycache__/csv." in found["csv"] and not found["csv"].startswith(str(tmp_path)), (python, found)
        assert found["inwork"].startswith(str(tmp_path / "prefix")), (python, found)
