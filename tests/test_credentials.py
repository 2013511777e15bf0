"""Issue 15: a missing key is found before anything is cloned, and said with the variable's name; a refused key
is never retried and the console's last line says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli, run_prime
from prime_ci.model.credentials import KEYS, missing_credentials
from prime_ci.testing import ScriptedServer, error
from runs.engine.test_run_budgets import ROUTES, assert_stopped


def test_the_key_table_is_what_litellm_itself_requires() -> None:
    """Every row of the fast table equals litellm.validate_environment's answer for that provider."""
    probe = (
        "import json, os, sys\n"
        "os.environ['LITELLM_LOCAL_MODEL_COST_MAP'] = 'True'\n"
        "import litellm\n"
        "print(json.dumps({p: litellm.validate_environment(p + '/some-model')['missing_keys'] "
        "for p in json.loads(sys.argv[1])}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_KEY_ID", "_ACCESS_KEY"))}
    proc = subprocess.run([sys.executable, "-c", probe, json.dumps(sorted(KEYS))], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    litellm_says = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {p: sorted(v) for p, v in litellm_says.items()} == {p: sorted(v) for p, v in KEYS.items()}


def test_missing_credentials_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert "ANTHROPIC_API_KEY" in (missing_credentials("anthropic/claude-sonnet-4-5", None) or "")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    assert missing_credentials("anthropic/claude-sonnet-4-5", None) is None
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert missing_credentials("openai/local-model", "http://127.0.0.1:8080/v1") is None  # own endpoint: keyless
    assert "OPENAI_API_KEY" in (missing_credentials("openai/gpt-4o", None) or "")
    assert missing_credentials("hosted_vllm/m", "http://127.0.0.1:8000/v1") is None


def test_no_anthropic_key_exits_2_before_cloning(tmp_path: Path) -> None:
    # REPO does not even exist: the key check comes before any clone, so it is what the user hears about
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = run_cli(["run", str(tmp_path / "no-such-repo"), "--task", "x", "--model", "anthropic/claude-sonnet-4-5",
                    "--out", str(tmp_path / "out")], cwd=tmp_path, env=env | {"ANTHROPIC_API_KEY": ""})
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "ANTHROPIC_API_KEY" in last and "no-such-repo" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@ROUTES
def test_a_401_is_one_request_and_the_last_line_says_why(tmp_path: Path, buggy_repo: Path, route: str) -> None:
    with ScriptedServer(default=error(401, "Incorrect API key provided: sk-te****nary.")) as srv:
        run = run_prime(tmp_path, buggy_repo, srv, env={"PRIME_CI_ROUTE": route})
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
        run = run_prime(tmp_path, buggy_repo, srv, env={"PRIME_CI_ROUTE": route})
        requests = srv.chat_requests
    assert_stopped(run, 4, "model_error")
    assert len(requests) == 1
    assert "api_key client option must be set" in run.proc.stderr.strip().splitlines()[-1]


def test_identical_retryable_errors_are_reported_once_with_the_url(tmp_path: Path, buggy_repo: Path) -> None:
    with ScriptedServer(default=error(503, "model is loading")) as srv:
        run = run_prime(tmp_path, buggy_repo, srv, timeout=150)
        url = srv.url
    assert_stopped(run, 4, "model_error")
    detail = run.result["detail"]
    assert detail.count("model is loading") == 1 and f"{url}/chat/completions" in detail, detail
    assert "attempts 1-4" in detail, detail
    assert detail in run.proc.stderr.strip().splitlines()[-1]
