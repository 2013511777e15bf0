"""Issue 38: which failed commands failed for want of their environment (``gates/environment_errors.py``)."""

from __future__ import annotations

import pytest

from prime_ci.gates.environment_errors import recognise, recognise_gate

NETWORK = [
    "pip._vendor.urllib3.exceptions.NewConnectionError: <HTTPSConnection(host='pypi.org', port=443)>: Failed to "
    "establish a new connection: [Errno -3] Temporary failure in name resolution",
    "error: Failed to fetch: `https://pypi.org/simple/pytest/`\n  Caused by: dns error: failed to lookup address "
    "information: Temporary failure in name resolution",
    "npm error code EAI_AGAIN\nnpm error request to https://registry.npmjs.org/jest failed, reason: getaddrinfo "
    "EAI_AGAIN registry.npmjs.org",
    "fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com",
    "socket.gaierror: [Errno -2] Name or service not known",
    "OSError: [Errno 101] Network is unreachable",
    "error: Failed to download `iniconfig==2.0.0`\n  Caused by: Network connectivity is disabled, but the requested "
    "data wasn't found in the cache",
    "ERROR: Could not find a version that satisfies the requirement pytest-mock (from versions: none)",
]
NOT_THE_ENVIRONMENT = [
    "ConnectionRefusedError: [Errno 111] Connection refused",
    "E       assert 5 == -1\nFAILED test_calc.py::test_add",
    "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=8000): Max retries exceeded "
    "with url: / (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] Connection "
    "refused'))",
]


@pytest.mark.parametrize("output", NETWORK)
def test_resolver_and_routing_failures_are_the_network(output: str) -> None:
    fault = recognise("collecting ...\n" + output + "\nexit", 1)
    assert fault is not None and fault.kind == "network"
    assert fault.line in output


@pytest.mark.parametrize("output", NOT_THE_ENVIRONMENT)
def test_a_refused_local_connection_or_a_failing_test_is_the_models(output: str) -> None:
    assert recognise(output, 1) is None


def test_a_program_that_cannot_start_is_named_only_with_the_shells_exit_code() -> None:
    fault = recognise("bash: line 1: tox: command not found\n", 127)
    assert fault is not None and fault.kind == "cannot run" and "tox" in fault.line
    assert "--sandbox-ro" in fault.detail("gate tox", "tox -e py")
    # a test that ran a missing command and failed on it is a failing test
    assert recognise("sh: 1: frobnicate: not found\nFAILED test_x.py::test_tool", 1) is None


@pytest.mark.parametrize(("command", "advice"), [
    ("tox -e py", "tox -e ENV --notest -x testenv.package=wheel"), ("uv run pytest", "uv sync --frozen"),
    ("python -m tox", "gate with `tox -e ENV -x testenv.package=wheel`"), ("nox -s tests", "`nox -s SESSION -r`"),
    ("CI=1 npx jest", "npm ci"), ("./run-tests.sh", "prepare what it fetches in --setup"),
])
def test_the_line_says_how_to_prepare_it_in_setup(command: str, advice: str) -> None:
    fault = recognise("getaddrinfo ENOTFOUND registry.npmjs.org", 1)
    assert fault is not None and advice in fault.detail("gate x", command)


# pypa/installer's nox gate: its test session failed on the model's code, then its doctest session (passing)
# warned that sphinx could not fetch an intersphinx inventory
DOCS_WARNING = ("WARNING: failed to reach any of the inventories with the following issues:\nintersphinx inventory "
                "'https://docs.python.org/3/objects.inv' not fetchable due to <class 'requests.exceptions."
                "ConnectionError'>: HTTPSConnectionPool(host='docs.python.org', port=443): Max retries exceeded "
                "(Caused by NameResolutionError(\"Failed to resolve 'docs.python.org' ([Errno -3] Temporary failure "
                "in name resolution)\"))\n")
PYTEST_FAILED = "FAILED tests/test_utils.py::test_valid_cases[ABC..12-abc-12] - AssertionError: assert 'abc..12'\n"


def test_a_network_warning_beside_a_failing_test_is_the_models() -> None:
    output = PYTEST_FAILED + DOCS_WARNING + "nox > Session doctest-3.11 was successful\n"
    assert recognise(output, 1) is not None  # the output alone says network
    assert recognise_gate(output, 1, ["AssertionError: assert 'abc..12' == 'abc-12'\n"]) is None
    # a failing test that failed on the network needed it; a failure read with nothing of its own is no evidence
    fault = recognise_gate(output, 1, ["socket.gaierror: [Errno -3] Temporary failure in name resolution"])
    assert fault is not None and fault.kind == "network"
    assert recognise_gate(output, 1, []) is not None


def test_a_nox_session_that_installs_with_session_run_is_told_to_prepare_that_install() -> None:
    """unearth's session runs `pdm install -Gtest` with session.run, which `nox --install-only` skips: set up as
    the toolchain table says, its gate needed the network and the hint said to do what had been done."""
    fault = recognise("nox > Running session test-3.11\nnox > Reusing existing virtual environment at .nox/test-3-11.\n"
                      "nox > pdm install -Gtest\n[ConnectError]: [Errno -3] Temporary failure in name resolution\n"
                      "nox > Command pdm install -Gtest failed with exit code 1\n", 1)
    assert fault is not None and fault.step == "pdm install -Gtest"
    line = fault.detail("gate nox-test-3.11", "nox -s test-3.11 -r")
    assert "`nox --install-only` does not run it" in line and "run `pdm install -Gtest` in --setup" in line
    # a session.install that fetched (offline pip) keeps the nox advice
    pip = recognise("nox > python -m pip install .\nERROR: No matching distribution found for flit_core (from "
                    "versions: none)\n", 1)
    assert pip is not None and "nox -s SESSION --install-only" in pip.detail("gate nox", "nox -s tests -r")
