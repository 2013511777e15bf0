"""Gates run under a pycache prefix (a forged ``__pycache__`` in the worktree is never read), but the project
interpreter's own compiled standard library and packages are: the run environment's start-up hook sends only
sources under the interpreter's directories, and outside the run's, back to the bytecode beside them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

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
