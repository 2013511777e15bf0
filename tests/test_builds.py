"""Builds through the CLI: exit codes, the sandbox (no network, the run's environment writable), the artifacts."""

from __future__ import annotations

import re
from pathlib import Path

from cext_project import BROKEN, BUILD, FILES, GATE, RIGHT, SHADOW, WRONG
from conftest import make_repo, run_prime
from prime_ci.artifacts.schemas import ResultModel
from prime_ci.isolation.sandbox import bwrap_binary
from prime_ci.testing import ScriptedServer, ipython, reply

SANDBOX = "on" if bwrap_binary() else "off"


def test_a_c_extension_is_fixed_in_the_sandbox(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    server.add(ipython(BROKEN), reply("fixed"), ipython(WRONG), reply("fixed"), reply("fixed, really"),
               ipython(RIGHT), reply("fixed"))
    run = run_prime(tmp_path, repo, server, "--build", BUILD, "--gate", GATE, "--sandbox", SANDBOX,
                    timeout=600)
    assert run.code == 0, run.proc.stderr
    result = ResultModel.model_validate(run.result)
    assert result.changed_files == ["fastcalc/_calc.c"]
    patch = (run.out / "patch.diff").read_text()
    assert "+    return PyLong_FromLong(a + b);" in patch and ".so" not in patch
    assert [(b.name, b.passed) for b in result.build] == [("setup.py", True)]
    # the project's [build-system].requires went into the run environment in setup, network on
    assert [(s.name, s.passed) for s in result.setup] == [("build-requires", True)]
    assert "'setuptools>=61'" in result.setup[0].command
    assert "running build_ext" in (run.out / "build" / "setup.py.log").read_text()
    assert [(r.kind, r.passed) for r in result.rounds][:2] == [("build", False), ("full", False)]

    system = server.chat_requests[0].body["messages"][0]["content"]
    assert "Build commands run before every gate round" in system and BUILD in system
    err = run.proc.stderr
    assert "build setup.py: FAILED (exit 1)" in err and "gates not run" in err
    assert "gates skipped: unchanged since round 2" in err
    # the skipped round repeats no gate verdict: the only FAIL line is round 2's
    assert len(re.findall(r"gate pytest: FAIL", err)) == 1, err
    assert "Build (last round)" in (run.out / "summary.md").read_text()


def test_an_ignored_module_the_model_plants_stops_the_run(tmp_path: Path,
                                                          server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    server.add(ipython(SHADOW), reply("fixed"))
    run = run_prime(tmp_path, repo, server, "--build", BUILD, "--gate", GATE, "--sandbox", SANDBOX)
    assert run.code == 7, run.proc.stderr
    assert "tests/fastcalc.py (hidden from the patch by .gitignore)" in run.result["detail"]
    assert run.result["gates"][0]["passed"] is True, "the shadow fooled the tests; the verdict did not"


def test_an_editable_install_builds_offline_into_the_run_environment(tmp_path: Path,
                                                                      server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    server.add(ipython(RIGHT), reply("fixed"))
    editable = "python -m pip install -q --no-build-isolation --no-deps -e ."
    run = run_prime(tmp_path, repo, server, "--build", editable, "--sandbox", SANDBOX,
                    "--gate", "python -c 'from fastcalc import add; assert add(2, 3) == 5'")
    assert run.code == 0, run.proc.stderr + (run.out / "build" / "pip.log").read_text()
    assert run.result["changed_files"] == ["fastcalc/_calc.c"] and ".so" not in (run.out / "patch.diff").read_text()
