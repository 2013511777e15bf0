"""Issue 23 items 5 and 7: setup gets the job's CA and proxy settings (never provider keys), credentials in
them never reach the artifacts, a failed setup's last lines and hint are said (the hint names --pass-env for a
certificate problem), bracketed text reaches the console as written, setup's PYTHONPATH carries no skill
directories, and no lock file is left among the artifacts. Picking the network settings and the run through a real
HTTPS server on loopback with its own CA are in tests/runs/engine/test_setup_network_runs.py."""

from __future__ import annotations

from prime_ci.engine.setup import NETWORK_HINT, failure_hint, last_lines


def test_failure_hints() -> None:
    out = "Collecting x\n  SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED]'))\n"
    assert failure_hint(out) == NETWORK_HINT and "--pass-env" in NETWORK_HINT
    assert failure_hint("ERR_PNPM_META_FETCH_FAIL  GET https://registry.npmjs.org/x: SELF_SIGNED_CERT_IN_CHAIN")
    build = failure_hint("ValueError: invalid pyproject.toml config: `project.license`.\nGetting requirements to "
                         "build editable did not run successfully.")
    assert build is not None and "build backend" in build
    assert failure_hint("AssertionError: 1 != 2") is None
    assert failure_hint("npm ERR! request to https://registry.npmjs.org/x failed, reason: getaddrinfo ENOTFOUND "
                        "registry.npmjs.org") == NETWORK_HINT


def test_a_missing_build_backend_is_not_called_a_network_problem() -> None:
    """pip install --no-build-isolation -e . where the job's interpreter lacks the backend (hatchling): the
    traceback's ModuleNotFoundError once read as npm's ENOTFOUND."""
    out = ("ERROR: Exception:\nTraceback (most recent call last):\n"
           "  File \"/venv/lib/python3.11/site-packages/pip/_vendor/pyproject_hooks/_impl.py\", line 321, in "
           "_call_hook\n    raise BackendUnavailable(data.get('traceback', ''))\n"
           "pip._vendor.pyproject_hooks._impl.BackendUnavailable: Traceback (most recent call last):\n"
           "ModuleNotFoundError: No module named 'hatchling'\n")
    hint = failure_hint(out)
    assert hint is not None and "build backend" in hint and "--no-build-isolation" in hint, hint
    assert last_lines("a\n\n\x1b[31mb\x1b[0m\n" + "c\n" * 30, 3) == ["c", "c", "c"]
