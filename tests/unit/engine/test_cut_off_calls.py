"""Issue 23 item 8: a reply cut off inside a tool call never goes back to the provider in a form it rejects
(the strict server's whole run is in tests/runs/engine/test_cut_off_calls_run.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from prime_ci.engine.resume import rebuild
from prime_ci.loop.agent import Agent, wire_arguments
from prime_ci.loop.budget import Budget, Limits
from prime_ci.model.protocol import ModelReply, ToolCall
from prime_ci.model.providers import OpenAICompatModel, RetryPolicy
from prime_ci.model.usage import Usage
from prime_ci.session.log import SessionLog, read_session
from prime_ci.stops import Stop, StopReason
from prime_ci.testing import ScriptedServer, error, ipython, reply
from prime_ci.testing.fakes import FakeExecutor, ScriptedModel, text_reply
from unit.engine.cut_off_call import CUT


@pytest.mark.parametrize(("raw", "sent"), [
    ('{"code": "print(1)"}', '{"code": "print(1)"}'),  # whole: the model's own text, byte for byte
    (CUT, json.dumps({"code": "open('big.py', 'w').write('''\nline 1\nli"})),
    ('{"code": "x = \'\\u00', json.dumps({"code": "x = '"})),  # an escape cut in half is dropped
    ('{"code": "a\\', json.dumps({"code": "a"})),
    ('{"code": "print(2)", "cod', json.dumps({"code": "print(2)"})),  # broken after a whole string
    ('"print(3)"', json.dumps({"code": "print(3)"})),
    ("", "{}"),
    ("{", "{}"),
    ("[1, 2]", "{}"),
    ("[" * 100_000, "{}"),  # too deep for the parser
])
def test_arguments_sent_back_are_a_json_object(raw: str, sent: str) -> None:
    assert wire_arguments(raw) == sent
    assert isinstance(json.loads(wire_arguments(raw)), dict)


async def _completed() -> Stop | str:
    return Stop(StopReason.COMPLETED, "turn ended")


def test_a_cut_off_call_is_sent_back_readable_told_as_cut_off_and_logged_raw(tmp_path: Path) -> None:
    cut = ModelReply("", [ToolCall("call_cut", "ipython", CUT)], Usage(), None, "length", "scripted/model")
    model = ScriptedModel([cut, text_reply("done")])
    kernel = FakeExecutor()
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    agent = Agent(model, kernel, Budget(Limits()), log, _completed, cell_timeout=60.0)
    agent.conversation.add({"role": "system", "content": "system prompt"})
    agent.give_task("the task")

    assert asyncio.run(agent.run()).reason is StopReason.COMPLETED
    assert kernel.cells == []  # nothing of a cut-off call runs
    *_, sent, told = model.calls[1].messages
    arguments = json.loads(sent["tool_calls"][0]["function"]["arguments"])
    assert arguments == {"code": "open('big.py', 'w').write('''\nline 1\nli"}
    assert told["role"] == "tool" and "cut off at the completion token limit" in told["content"]
    assert "not run" in told["content"]
    log.close()
    session = read_session(log.path, strict=True)
    logged = next(p for e in session.entries if e.get("type") == "message"
                  for p in e["message"]["content"] if p.get("type") == "toolCall")
    assert logged["arguments"] == {"__raw__": CUT}  # the session keeps what the model wrote
    assert rebuild(session).messages == agent.conversation.messages[1:]  # a resume sends the same


LLAMA_UNREADABLE = "The model produced output that does not match the expected peg-native format"


def _agent_on(srv: ScriptedServer, tmp_path: Path) -> tuple[Agent, FakeExecutor, SessionLog]:
    model = OpenAICompatModel("openai/m", srv.url, policy=RetryPolicy(base_delay=0.01, max_delay=0.01))
    kernel = FakeExecutor()
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    agent = Agent(model, kernel, Budget(Limits()), log, _completed, cell_timeout=60.0)
    agent.conversation.add({"role": "system", "content": "system prompt"})
    agent.give_task("the task")
    return agent, kernel, log


def test_a_reply_the_server_cannot_read_is_told_to_the_model_and_the_run_goes_on(tmp_path: Path) -> None:
    """A llama.cpp build whose parser cannot read a tool call cut at the cap answers 500, the same for the same
    request: after a second such answer the model is told, charged the worst case, and its next reply runs."""
    steps = [error(500, LLAMA_UNREADABLE, times=2), ipython("print(1)"), reply("done")]
    with ScriptedServer(steps, strict=True) as srv:
        agent, kernel, log = _agent_on(srv, tmp_path)
        stop = asyncio.run(agent.run())
        requests = srv.chat_requests
    assert stop.reason is StopReason.COMPLETED
    assert kernel.cells == ["print(1)"]
    assert len(requests) == 4  # two unreadable attempts, the reply after the note, the final one
    *_, sent, told = requests[2].body["messages"]
    assert sent == {"role": "assistant", "content": ""}
    assert told["role"] == "user" and "could not read your last reply" in told["content"]
    assert "cut off at the completion token limit" in told["content"]
    log.close()
    session = read_session(log.path, strict=True)
    failed = [e["message"] for e in session.entries if e.get("type") == "message"
              and e["message"].get("stopReason") == "error"]
    assert len(failed) == 1 and LLAMA_UNREADABLE in failed[0]["errorMessage"]
    first = next(e["data"] for e in session.entries if e.get("customType") == "prime_ci.usage")
    assert first["model_calls"] == 1 and first["completion_tokens"] > 0  # charged its worst case
    assert rebuild(session).messages == agent.conversation.messages[1:]  # a resume sends the same


def test_replies_the_server_cannot_read_again_and_again_are_a_model_error(tmp_path: Path) -> None:
    with ScriptedServer([error(500, LLAMA_UNREADABLE, times=6)], strict=True) as srv:
        agent, kernel, log = _agent_on(srv, tmp_path)
        stop = asyncio.run(agent.run())
    log.close()
    assert stop.reason is StopReason.MODEL_ERROR
    assert "3 replies in a row the server could not read" in stop.detail
    assert kernel.cells == []
