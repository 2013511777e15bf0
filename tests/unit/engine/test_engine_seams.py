"""The agent loop, the budget, the judge, the compactor and resume's state rebuild, in process.

No kernel and no server: ``prime_ci.testing.fakes.ScriptedModel`` stands in for the provider and
``FakeExecutor`` for the kernel; the session log, the budget ledger, the judge (with ``true``/``false`` gates
in a real git repo) and the compactor are the real ones. Each test runs in milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import repo_worktree
from prime_ci.engine.resume import rebuild
from prime_ci.gates.judge import Judge
from prime_ci.gates.specs import gates_from_commands
from prime_ci.isolation.limits import Limits as BoxLimits
from prime_ci.loop.agent import MAX_MALFORMED, Agent, Conversation, Stop, StopReason
from prime_ci.loop.budget import Budget, Limits
from prime_ci.loop.compact import Compactor
from prime_ci.model.usage import Cost, Usage, session_usage
from prime_ci.session.log import SessionLog, read_session
from prime_ci.testing.fakes import FakeExecutor, ModelCall, ScriptedModel, cell, raw_tool_reply, text_reply, tool_reply

TurnEnd = Callable[[], Awaitable[Stop | str]]


async def _completed() -> Stop | str:
    return Stop(StopReason.COMPLETED, "turn ended")


def make_agent(tmp_path: Path, model: ScriptedModel, kernel: FakeExecutor, *, limits: Limits | None = None,
               turn_end: TurnEnd = _completed, log: SessionLog | None = None) -> Agent:
    log = log or SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    agent = Agent(model, kernel, Budget(limits or Limits()), log, turn_end, cell_timeout=60.0)
    agent.conversation.add({"role": "system", "content": "system prompt"})
    agent.give_task("the task")
    return agent


def run(agent: Agent) -> Stop:
    return asyncio.run(agent.run())


def make_judge(tmp_path: Path, log: SessionLog, command: str, retries: int) -> Judge:
    wt = repo_worktree(tmp_path, {"a.txt": "a\n"})
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    return Judge(gates_from_commands([command]), wt, env, tmp_path / "gates", log, retries, limits=BoxLimits())


def roles(call: ModelCall) -> list[str]:
    return [m["role"] for m in call.messages]


# --- the loop -------------------------------------------------------------------------------------------------


def test_a_cell_runs_and_its_result_goes_back_to_the_model(tmp_path: Path) -> None:
    model = ScriptedModel([tool_reply("x = 41 + 1\nprint(x)"), text_reply("done")])
    kernel = FakeExecutor(["42\n"])
    stop = run(make_agent(tmp_path, model, kernel))
    assert stop.reason == "completed"
    assert kernel.cells == ["x = 41 + 1\nprint(x)"]
    assert len(model.calls) == 2
    assert roles(model.calls[0]) == ["system", "user"]
    second = model.calls[1]
    assert roles(second) == ["system", "user", "assistant", "tool"]
    call_id = second.messages[2]["tool_calls"][0]["id"]
    assert second.messages[3] == {"role": "tool", "tool_call_id": call_id, "content": "42\n"}
    assert [t["function"]["name"] for t in second.tools] == ["ipython"]


def test_extra_tool_calls_are_refused_and_malformed_calls_stop_the_run(tmp_path: Path) -> None:
    model = ScriptedModel([raw_tool_reply('{"code": "print(1)"}', extra=1)]
                          + [raw_tool_reply("{not json") for _ in range(MAX_MALFORMED)])
    kernel = FakeExecutor()
    stop = run(make_agent(tmp_path, model, kernel))
    assert stop.reason == "model_error"
    assert stop.detail.startswith("scripted/model: 3 malformed tool calls in a row (the last: arguments are not "
                                  "valid JSON"), stop.detail  # the model and the cause, in the final line
    assert kernel.cells == ["print(1)"], "only the first call of a turn runs; malformed ones never reach the kernel"
    tool_results = [m for m in model.calls[1].messages if m["role"] == "tool"]
    assert len(tool_results) == 2 and "only one tool call per turn" in tool_results[1]["content"]
    assert len(model.calls) == 1 + MAX_MALFORMED
    assert "not valid JSON" in model.calls[-1].messages[-1]["content"]


def test_an_error_cell_is_reported_as_an_error_result(tmp_path: Path) -> None:
    model = ScriptedModel([tool_reply("1/0"), text_reply("done")])
    kernel = FakeExecutor([cell("ZeroDivisionError: division by zero", "error", error="ZeroDivisionError")])
    agent = make_agent(tmp_path, model, kernel)
    assert run(agent).reason == "completed"
    agent.log.close()
    results = [e["message"] for e in read_session(tmp_path / "session.jsonl").entries
               if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    assert len(results) == 1 and results[0]["isError"] is True
    assert results[0]["details"]["status"] == "error"


# --- the budget -----------------------------------------------------------------------------------------------


def test_max_turns_stops_after_exactly_that_many_calls(tmp_path: Path) -> None:
    model = ScriptedModel(default=tool_reply("print('working')"))
    agent = make_agent(tmp_path, model, FakeExecutor(), limits=Limits(max_turns=3))
    assert run(agent).reason == "max_turns"
    assert len(model.calls) == 3 and agent.budget.turns == 3 and agent.budget.model_calls == 3


def test_every_call_is_clamped_and_the_total_stays_within_max_tokens(tmp_path: Path) -> None:
    budget = 12_000
    # A greedy model: every answer would be far longer than allowed, so it spends the whole allowance; the
    # scripted usage counts prompts at chars/4, under the ledger's chars/3 estimate (the documented bound).
    model = ScriptedModel(default=tool_reply("print('greedy')", completion_tokens=10**6))
    agent = make_agent(tmp_path, model, FakeExecutor(["y" * 500]),
                       limits=Limits(max_tokens=budget, max_completion=2000))
    spent_before: list[int] = []
    model.on_call = lambda call: spent_before.append(agent.budget.total_tokens)
    assert run(agent).reason == "max_tokens"
    assert len(model.calls) >= 3
    assert 0 < agent.budget.total_tokens <= budget, agent.budget.usage()
    for call, spent in zip(model.calls, spent_before, strict=True):
        chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in call.messages) + len(json.dumps(call.tools))
        estimate = -(-chars // 3)
        assert 0 < call.max_tokens <= min(2000, budget - spent - estimate), (call.index, call.max_tokens, spent)


def test_budget_warnings_reach_the_model(tmp_path: Path) -> None:
    model = ScriptedModel(default=tool_reply("pass"))
    run(make_agent(tmp_path, model, FakeExecutor(), limits=Limits(max_turns=10)))
    notes = [m["content"] for m in model.calls[-1].messages if m["role"] == "user" and "[budget]" in m["content"]]
    assert [n.split("%")[0] for n in notes] == ["[budget] 50", "[budget] 80"], notes


def test_no_wall_clock_left_means_no_model_call(tmp_path: Path) -> None:
    model = ScriptedModel()
    assert run(make_agent(tmp_path, model, FakeExecutor(), limits=Limits(max_wall=0))).reason == "max_wall"
    assert model.calls == []


def test_a_cell_never_gets_more_time_than_the_wall_clock_has_left(tmp_path: Path) -> None:
    kernel = FakeExecutor()
    agent = make_agent(tmp_path, ScriptedModel([tool_reply("pass")]), kernel, limits=Limits(max_wall=30))
    run(agent)
    assert kernel.timeouts and all(0 < t <= 30 for t in kernel.timeouts)


def test_child_calls_fold_into_the_assistant_entry_that_spawned_them(tmp_path: Path) -> None:
    """Prime Agent's ``aggregateUsage``: the entry's own usage plus each child call so far; totalTokens its own."""
    child = session_usage(Usage(40, 5, cache_read_tokens=10), Cost(input=0.125, output=0.0625, cache_read=0.25))
    agent: Agent | None = None

    def spawn(code: str) -> str:
        assert agent is not None and agent.last_assistant is not None
        for _ in range(2):
            agent.attribute(agent.last_assistant, child, origin="spawn_task")
        agent.attribute("not-an-entry-of-this-process", child, origin="spawn_task")
        return "spawned"

    model = ScriptedModel([tool_reply("spawn()", prompt_tokens=100, completion_tokens=10), text_reply("done")],
                          cost_usd=0.5)
    agent = make_agent(tmp_path, model, FakeExecutor(spawn))
    assert run(agent).reason == "completed"
    agent.log.close()
    entries = read_session(agent.log.path).entries
    (own,) = [e["message"]["usage"] for e in entries if e.get("message", {}).get("stopReason") == "toolUse"]
    folded = [e for e in entries if e["type"] == "child_usage_attributed"]
    assert [e["childUsage"] for e in folded] == [child, child]
    assert [list(e["aggregateUsage"]) for e in folded] == [list(own)] * 2  # the same keys, in the same order
    assert [list(e["aggregateUsage"]["cost"]) for e in folded] == [list(own["cost"])] * 2
    assert [{k: v for k, v in e["aggregateUsage"].items() if k != "cost"} for e in folded] == [
        {"input": 130, "output": 15, "cacheRead": 10, "cacheWrite": 0, "totalTokens": 110},
        {"input": 160, "output": 20, "cacheRead": 20, "cacheWrite": 0, "totalTokens": 110}]
    assert [e["aggregateUsage"]["cost"] for e in folded] == [
        {"input": 0.625, "output": 0.0625, "cacheRead": 0.25, "cacheWrite": 0.0, "total": 0.9375},
        {"input": 0.75, "output": 0.125, "cacheRead": 0.5, "cacheWrite": 0.0, "total": 1.375}]
    assert own == session_usage(Usage(100, 10), Cost(input=0.5)), "the entry's own usage is not changed"


# --- the judge ------------------------------------------------------------------------------------------------


def test_a_passing_gate_completes_the_run(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    judge = make_judge(tmp_path, log, "true", retries=1)
    model = ScriptedModel([text_reply("done")])
    assert run(make_agent(tmp_path, model, FakeExecutor(), turn_end=judge, log=log)).reason == "completed"
    assert judge.rounds == 1 and judge.failed_rounds == 0 and [r.passed for r in judge.last] == [True]


def test_a_failing_gate_is_fed_back_until_the_retries_run_out(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    judge = make_judge(tmp_path, log, "false", retries=2)
    counter = iter(range(100))

    def touch(code: str) -> str:  # the model "changes" the workspace every turn, so the gates really rerun
        (judge.worktree.path / f"scratch_{next(counter)}.txt").write_text(code)
        return "written"

    model = ScriptedModel([tool_reply("touch()"), text_reply("fixed")] * 3)
    stop = run(make_agent(tmp_path, model, FakeExecutor(touch), turn_end=judge, log=log))
    assert stop.reason == "gates_failed"
    assert len(model.calls) == 6 and judge.rounds == 3 and judge.failed_rounds == 3
    feedback = model.calls[2].messages[-1]
    assert feedback["role"] == "user" and "Gate round 1: failed (retry 1/2)" in feedback["content"]


def test_an_unchanged_workspace_round_counts_without_rerunning(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    judge = make_judge(tmp_path, log, "false", retries=1)
    model = ScriptedModel([text_reply("done"), text_reply("still done"), text_reply("never asked")])
    assert run(make_agent(tmp_path, model, FakeExecutor(), turn_end=judge, log=log)).reason == "gates_failed"
    assert len(model.calls) == 2 and judge.rounds == 1 and judge.failed_rounds == 2


# --- the compactor --------------------------------------------------------------------------------------------


def compacting_model(summary: str = "SUMMARY: x holds the answer") -> ScriptedModel:
    """Cells while it works, the summary when asked to compact (a call without tools), then done."""

    turns = iter(range(100))

    def step(call: ModelCall) -> Any:
        if not call.tools:
            return text_reply(summary)
        turn = next(turns)
        return tool_reply(f"print('turn {turn}')") if turn < 6 else text_reply("done")

    return ScriptedModel(step)


def test_compaction_keeps_the_system_prompt_and_task_and_names_kernel_variables(tmp_path: Path) -> None:
    model = compacting_model()
    kernel = FakeExecutor(default=cell("o" * 3000), names=["x", "frame"])
    agent = make_agent(tmp_path, model, kernel)
    agent.compactor = Compactor(model, agent.budget, agent.log, window=2500)
    assert run(agent).reason == "completed"
    summaries = [c for c in model.calls if not c.tools]
    assert summaries, "the context should have been compacted"
    after = model.calls[model.calls.index(summaries[0]) + 1]
    assert after.messages[0]["content"] == "system prompt"
    summary = after.messages[1]["content"]  # the task lives on inside the summary, the one head after the system
    assert after.messages[1]["role"] == "user" and "<summary>\nThe task, as it was given:\nthe task" in summary
    assert "SUMMARY: x holds the answer" in summary and "x, frame" in summary
    for i, m in enumerate(after.messages):  # the cut never orphans a tool result
        if m["role"] == "tool":
            assert after.messages[i - 1]["role"] in ("assistant", "tool"), roles(after)
    assert len(agent.conversation.record) > len(agent.conversation.messages), "history keeps everything"
    assert agent.budget.model_calls == len(model.calls) and agent.budget.turns == len(model.calls) - len(summaries)


def test_a_compaction_records_the_size_that_crossed_the_threshold(tmp_path: Path) -> None:
    """``tokensBefore`` is the conversation's own count at the model's calibrated rate (here 0.4 tokens a
    character, above the scripted model's 0.25)."""
    model = compacting_model()
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    budget = Budget(Limits())
    rate = budget.rate(model)
    rate.observed = 0.4
    agent = Agent(model, FakeExecutor(default=cell("o" * 3000)), budget, log, _completed,
                  cell_timeout=60.0, conversation=Conversation(rate=rate))
    agent.conversation.add({"role": "system", "content": "system prompt"})
    agent.give_task("the task")
    agent.compactor = Compactor(model, agent.budget, log, window=3500, rate=rate)
    crossed: list[int] = []
    model.on_call = lambda call: None if call.tools else crossed.append(agent.conversation.tokens)
    assert run(agent).reason == "completed"
    log.close()
    compactions = [e for e in read_session(log.path).entries if e["type"] == "compaction"]
    assert compactions and [e["tokensBefore"] for e in compactions] == crossed
    assert all(tokens > 0.8 * 3500 for tokens in crossed)


# --- resume's state rebuild -----------------------------------------------------------------------------------


def usage(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "attempts"}


def rebuilt(agent: Agent) -> Any:
    agent.log.close()
    return rebuild(read_session(agent.log.path, strict=True))


def test_rebuild_gives_back_the_conversation_and_the_counters(tmp_path: Path) -> None:
    log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
    judge = make_judge(tmp_path, log, "false", retries=2)
    model = ScriptedModel([tool_reply("a = 1", text="first"), text_reply("done"), tool_reply("b = 2"),
                           text_reply("done again"), text_reply("and again")])
    agent = make_agent(tmp_path, model, FakeExecutor(["one", "two"]), turn_end=judge, log=log)
    assert run(agent).reason == "gates_failed"
    state = rebuilt(agent)
    assert state.messages == agent.conversation.messages[1:], "every message but the system prompt, in order"
    assert state.ids == agent.conversation.ids[1:]
    assert usage(state.usage) == agent.budget.usage() and state.usage["turns"] == 5
    assert (state.gate_rounds, state.failed_rounds) == (judge.rounds, judge.failed_rounds) == (1, 3)


def test_rebuild_applies_a_compaction_as_it_happened(tmp_path: Path) -> None:
    model = compacting_model()
    agent = make_agent(tmp_path, model, FakeExecutor(default=cell("o" * 3000)))
    agent.compactor = Compactor(model, agent.budget, agent.log, window=2500)
    run(agent)
    state = rebuilt(agent)
    assert any(not c.tools for c in model.calls)
    assert state.messages == agent.conversation.messages[1:]
    assert usage(state.usage) == agent.budget.usage()


def test_rebuild_answers_a_tool_call_the_interruption_left_open(tmp_path: Path) -> None:
    class HostDied(Exception):
        pass

    def killed(code: str) -> str:
        raise HostDied  # the host died while the cell ran: the call is logged, its result is not

    agent = make_agent(tmp_path, ScriptedModel([tool_reply("long()")]), FakeExecutor(killed))
    with pytest.raises(HostDied):
        run(agent)
    state = rebuilt(agent)
    assert [m["role"] for m in state.messages] == ["user", "assistant", "tool"]
    assert "interrupted" in state.messages[-1]["content"]
    assert state.usage["turns"] == 1
