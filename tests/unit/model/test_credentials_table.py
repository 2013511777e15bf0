"""Issue 15: a missing key is named by its variable, and an own endpoint needs none (the fast table, in process)."""

from __future__ import annotations

import pytest

from prime_ci.model.credentials import missing_credentials


def test_missing_credentials_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert "ANTHROPIC_API_KEY" in (missing_credentials("anthropic/claude-sonnet-4-5", None) or "")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    assert missing_credentials("anthropic/claude-sonnet-4-5", None) is None
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert missing_credentials("openai/local-model", "http://127.0.0.1:8080/v1") is None  # own endpoint: keyless
    assert "OPENAI_API_KEY" in (missing_credentials("openai/gpt-4o", None) or "")
    assert missing_credentials("hosted_vllm/m", "http://127.0.0.1:8000/v1") is None
