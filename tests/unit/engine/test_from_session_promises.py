"""Issue 40: what ``--from-session`` promises, held by one in-process run going on from a crafted Prime Agent
session: its spend is the earlier session's and not counted again, a new ``--task`` is what the model is asked
last, and a call the session left without a result is answered right after it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import BUGGY, Outcome, make_repo, run_inproc
from prime_ci.engine.from_session import NOT_RUN
from prime_ci.testing import RecordedRequest, ScriptedServer, reply
from unit.engine.test_from_session_crafted import ASK, session

EARLIER = {"input": 1200, "output": 300, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1500,
           "cost": {"input": 0.3, "output": 0.2, "cacheRead": 0, "cacheWrite": 0, "total": 0.5}}
CALL = {"role": "assistant", "timestamp": 2, "usage": EARLIER, "stopReason": "toolUse",
        "content": [{"type": "text", "text": "Let me look."},
                    {"type": "toolCall", "id": "call-open", "name": "bash", "arguments": {"command": "ls"}}]}
NEW_TASK = "Now also make add() accept floats."


@pytest.fixture(scope="module")
def continued(tmp_path_factory: pytest.TempPathFactory) -> tuple[Outcome, RecordedRequest]:
    tmp = tmp_path_factory.mktemp("from-session")
    repo = make_repo(tmp / "repo", BUGGY)
    path = session(tmp / "earlier.jsonl", [ASK, CALL])  # the call never got its result there
    with ScriptedServer([reply("done")]) as server:
        run = run_inproc(tmp, repo, server, "--from-session", str(path), "--sandbox", "off",
                         "--price-per-mtok", "1,2", task=NEW_TASK)
        assert run.code == 0, run.proc.stderr
        [first] = server.chat_requests
    return run, first


def _assistant_usage(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["message"]["usage"] for e in entries if e.get("type") == "message"
            and e["message"].get("role") == "assistant"]


def test_the_earlier_sessions_spend_is_not_counted_again(continued: tuple[Outcome, RecordedRequest]) -> None:
    run, _ = continued
    usage = _assistant_usage(run.session())
    assert len(usage) == 2, "the copied call and the new reply"
    assert usage[0]["totalTokens"] == 0 and usage[0]["cost"]["total"] == 0, "the copy's spend was the earlier run's"
    # what Prime Agent totals from the new file is what this run spent, as result.json says
    assert sum(u["totalTokens"] for u in usage) == run.result["usage"]["total_tokens"]
    assert sum(u["cost"]["total"] for u in usage) == pytest.approx(run.result["usage"]["cost_usd"])


def test_a_new_task_is_what_the_model_is_asked_last(continued: tuple[Outcome, RecordedRequest]) -> None:
    _, first = continued
    messages = first.body["messages"]
    assert messages[-1] == {"role": "user", "content": NEW_TASK}
    assert messages[1]["content"] == "make the tests pass", "the earlier task stays where it was"


def test_an_open_call_is_answered_right_after_it(continued: tuple[Outcome, RecordedRequest]) -> None:
    _, first = continued
    messages = first.body["messages"]
    at = next(i for i, m in enumerate(messages) if m.get("tool_calls"))
    assert [c["id"] for c in messages[at]["tool_calls"]] == ["call-open"]
    assert messages[at + 1] == {"role": "tool", "tool_call_id": "call-open", "content": NOT_RUN}
    assert json.dumps(messages).count(NOT_RUN) == 1
