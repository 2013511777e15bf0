"""Issue 15, in process: the fast key table is litellm's own, a refused key is never retried and the console's last
line says why, identical retryable errors are said once (the exit-2-before-cloning check starts prime-ci:
tests/test_credentials.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_inproc
from prime_ci.model.credentials import KEYS
from prime_ci.model.routes import litellm_module
from prime_ci.testing import ScriptedServer, error
from runs.engine.test_run_budgets import ROUTES, assert_stopped


def test_the_key_table_is_what_litellm_itself_requires(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of the fast table equals litellm.validate_environment's answer for that provider."""
    for name in [k for k in os.environ if k.endswith(("_API_KEY", "_KEY_ID", "_ACCESS_KEY"))]:
        monkeypatch.delenv(name)
    litellm = litellm_module()
    litellm_says = {p: sorted(litellm.validate_environment(p + "/some-model")["missing_keys"]) for p in KEYS}
    assert litellm_says == {p: sorted(v) for p, v in KEYS.items()}


@ROUTES
def test_a_401_is_one_request_and_the_last_line_says_why(tmp_path: Path, buggy_repo: Path, route: str) -> None:
    with ScriptedServer(default=error(401, "Incorrect API key provided: sk-te****nary.")) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, env={"PRIME_CI_ROUTE": route})
        requests = srv.chat_requests
    assert_stopped(run, 4, "model_error")
    assert len(requests) == 1
    last = run.proc.stderr.strip().splitlines()[-1]
    assert "401" in last and "Incorrect API key provided" in last, last


@ROUTES
def test_a_missing_key_reported_as_a_500_is_not_retried(tmp_path: Path, buggy_repo: Path, route: str) -> None:
    message = ("The api_key client option must be set either by passing api_key to the client or by setting the "
               "OPENAI_API_KEY environment variable")
    with ScriptedServer(default=error(500, message)) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv, env={"PRIME_CI_ROUTE": route})
        requests = srv.chat_requests
    assert_stopped(run, 4, "model_error")
    assert len(requests) == 1
    assert "api_key client option must be set" in run.proc.stderr.strip().splitlines()[-1]


def test_identical_retryable_errors_are_reported_once_with_the_url(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer(default=error(503, "model is loading")) as srv:
        run = run_inproc(tmp_path, buggy_repo, srv)
        url = srv.url
    assert_stopped(run, 4, "model_error")
    detail = run.result["detail"]
    assert detail.count("model is loading") == 1 and f"{url}/chat/completions" in detail, detail
    assert "attempts 1-4" in detail, detail
    assert detail in run.proc.stderr.strip().splitlines()[-1]
