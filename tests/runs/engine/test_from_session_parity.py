"""Issue 40, acceptance 2: ``--from-session``'s first request is, message for message, the request Prime Agent's
own code makes at the session's leaf: ``buildSessionContext``, its agent's ``convertToLlm`` and its OpenAI
chat-completions provider's ``convertMessages`` (``transformMessages`` inside), run under node
(``prime_agent_code``; ``fixtures/prime_agent/read.mjs request``).

The comparison is in the chat-completions shape prime-ci sends, the system prompt and prime-ci's closing note
(what is new: the fresh clone and kernel) aside, with two readings of Prime Agent's side, both the same request
to the API: a user message whose content is a list of text parts is its text (prime-ci sends strings), and the
answer its provider layer invents for a call that got no result, "No result provided", is prime-ci's ``NOT_RUN``
(which says why; it sits at the same place, right after the call's turn).

What the run wrote is read back by ``prime-ci resume`` as the same conversation.

The sessions: every message kind Prime Agent writes, written by its own SessionManager and message creators
(``fixtures/prime_agent/corpus.mjs``), and the fixtures it wrote (``fixtures/prime_agent/*.jsonl``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import prime_agent_code
from conftest import cli_inproc
from prime_ci.engine.from_session import NOT_RUN
from prime_ci.engine.resume import rebuild
from prime_ci.session.log import read_session
from prime_ci.testing import ScriptedServer, reply
from unit.engine.prime_agent_fixtures import FIXTURES

CORPUS = ["tools", "compactions", "branches", "bash", "custom"]
FIXTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.jsonl"))


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every session of the comparison by its name, the corpus written (once) with Prime Agent's code."""
    prime_agent_code.require()
    written: dict[str, str] = prime_agent_code.read("corpus", tmp_path_factory.mktemp("corpus"))
    assert sorted(written) == sorted(CORPUS)
    return {**{name: Path(path) for name, path in written.items()}, **{name: FIXTURES / name for name in FIXTURE_FILES}}


@pytest.fixture(scope="module")
def prime_agent(sessions: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    """Prime Agent's request at the leaf of each session (one node process for all)."""
    answers = prime_agent_code.read("request", *sessions.values())
    return {name: [read_as_prime_ci(m) for m in answers[str(path)]] for name, path in sessions.items()}


def read_as_prime_ci(m: dict[str, Any]) -> dict[str, Any]:
    """A message of Prime Agent's request, read as prime-ci writes the same request."""
    m = dict(m)
    if m["role"] == "user" and isinstance(m["content"], list):
        assert all(p["type"] == "text" for p in m["content"]), m
        m["content"] = "".join(p["text"] for p in m["content"])
    if m["role"] == "tool" and m["content"] == "No result provided":
        m["content"] = NOT_RUN
    return m


def first_request(tmp_path: Path, repo: Path, server: ScriptedServer, session: Path) -> list[dict[str, Any]]:
    server.add(reply("done"))
    proc = cli_inproc(["run", str(repo), "--from-session", str(session), "--gate", "true", "--max-turns", "1",
                       "--model", "openai/scripted", "--api-base", server.url, "--out", str(tmp_path / "out"),
                       "--sandbox", "off"], cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    assert server.chat_requests, proc.stderr
    messages: list[dict[str, Any]] = server.chat_requests[0].body["messages"]
    assert messages[0]["role"] == "system" and "Python kernel is new" in messages[-1]["content"]
    # what the run wrote is read back the same: `prime-ci resume` goes on with the conversation it sent
    assert rebuild(read_session(tmp_path / "out" / "session.jsonl")).messages[:len(messages) - 1] == messages[1:]
    return messages[1:-1]


@pytest.mark.parametrize("name", CORPUS + FIXTURE_FILES)
def test_the_first_request_is_prime_agents_own_at_the_leaf(
    name: str, sessions: dict[str, Path], prime_agent: dict[str, list[dict[str, Any]]], tmp_path: Path,
    buggy_repo: Path, server: ScriptedServer
) -> None:
    assert first_request(tmp_path, buggy_repo, server, sessions[name]) == prime_agent[name]
