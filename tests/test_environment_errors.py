"""Issue 38: a gate that fails for want of its environment (the network, a program that cannot run) is not the
model's to fix: the run stops after the model's turn with exit 10 and one line saying what to prepare in setup,
and the failure is never fed back to the model."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from conftest import BUGGY, FIX, PYTEST_GATE, make_repo, run_prime
from prime_ci.testing import ScriptedServer, ipython, reply
from test_sandbox_root import bwrap_runs

# what tox, uvx or a test that downloads does in the sandbox: ask the resolver for a host
RESOLVE = "python -c \"import socket; socket.getaddrinfo('files.pythonhosted.org', 443)\""


def stopped_for_the_environment(tmp_path: Path, server: ScriptedServer, gate: str) -> str:
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.add(ipython(FIX), reply("done"), reply("must never be asked"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on", "--gate", gate)
    assert run.code == 10, run.proc.stderr
    assert run.result["stop_reason"] == "environment_error"
    assert len(server.chat_requests) == 2, "the failure went back to the model"
    said = [line for line in run.proc.stderr.splitlines() if line.startswith("prime-ci: environment_error:")]
    assert len(said) == 1, run.proc.stderr
    return said[0]


@pytest.mark.skipif(not bwrap_runs(), reason="bubblewrap cannot make a user namespace here")
def test_a_gate_that_needs_the_network_stops_the_run_with_exit_10(tmp_path: Path, server: ScriptedServer) -> None:
    line = stopped_for_the_environment(tmp_path, server, RESOLVE)
    assert "gate python needed the network" in line and "name resolution" in line.lower(), line
    assert "--setup" in line


@pytest.mark.skipif(not bwrap_runs(), reason="bubblewrap cannot make a user namespace here")
def test_a_gate_whose_program_cannot_run_stops_the_run_with_exit_10(tmp_path: Path, server: ScriptedServer) -> None:
    line = stopped_for_the_environment(tmp_path, server, "prime-ci-no-such-tool -e py")
    assert "could not start its program" in line and "prime-ci-no-such-tool" in line, line


def test_a_build_that_cannot_import_what_it_builds_with_stops_before_the_model(tmp_path: Path,
                                                                               server: ScriptedServer) -> None:
    """A missing build requirement (setuptools-scm, Cython) is not the model's: exit 10 before any model call."""
    repo = make_repo(tmp_path / "repo", {**BUGGY, "setup.py": "import prime_ci_no_such_build_helper\n"})
    run = run_prime(tmp_path, repo, server, "--sandbox", "off", "--build", "python setup.py build_ext --inplace",
                    "--gate", "python -m pytest -q")
    assert run.code == 10, run.proc.stderr
    assert not server.chat_requests
    said = [line for line in run.proc.stderr.splitlines() if line.startswith("prime-ci: environment_error:")]
    assert len(said) == 1 and "prime_ci_no_such_build_helper" in said[0] and "[build-system].requires" in said[0]


def test_a_network_warning_beside_a_test_the_model_broke_goes_back_to_the_model(tmp_path: Path,
                                                                                server: ScriptedServer) -> None:
    """pypa/installer's CI line runs its tests and its doctests in one nox gate; sphinx, which passed, warned that
    it could not fetch an intersphinx inventory. The run stopped with exit 10 "needed the network" although the
    gate failed on the test the model broke. The failing tests pytest named say why the gate failed."""
    warning = ("WARNING: intersphinx inventory 'https://docs.python.org/3/objects.inv' not fetchable: Failed to "
               "resolve 'docs.python.org' ([Errno -3] Temporary failure in name resolution)")
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.add(reply("Let me see what the gates say."), ipython(FIX), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "off",
                    "--gate", f"{PYTEST_GATE}; status=$?; echo {shlex.quote(warning)}; exit $status")
    assert run.code == 0, run.proc.stderr
    assert "test_add" in str(server.chat_requests[1].body["messages"][-1]["content"])
