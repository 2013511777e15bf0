"""Issue 14, the metered call in whole runs through the CLI's entry point (refinement is metered and skipped when it
would exceed a budget; a child's first call carries the shared ledger's note), and a call that times out (waits its
one-second floor)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import Outcome, run_inproc
from prime_ci.errors import ModelError
from prime_ci.loop import budget as budget_module
from prime_ci.loop.budget import Budget, Limits
from prime_ci.model.usage import estimate_tokens
from prime_ci.testing import ScriptedServer, contains, reply, tool_call
from unit.engine.metered_fakes import MESSAGES, MINI, FakeModel, prompt_text


def test_the_reservation_is_released_when_the_call_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget_module, "GRACE_S", 0.0)
    budget = Budget(Limits())

    async def main() -> None:
        model = FakeModel(gate=asyncio.Event())  # never released: a model that ignores its timeout
        with pytest.raises(ModelError, match=r"^fake/model: no answer since 1s$"):
            await budget.call(model, MESSAGES, [], turn=True, timeout=0.01)

    asyncio.run(main())
    # released; the abandoned call is charged its estimated prompt (the provider may bill it)
    assert budget.reserved == 0 and budget.abandoned_calls == 1 and budget.turns == 1
    assert (budget.spent.prompt_tokens, budget.spent.completion_tokens) == (estimate_tokens(prompt_text()), 0)


def _root_reply(prompt_tokens: int) -> Any:
    return reply("done", usage={"prompt_tokens": prompt_tokens, "completion_tokens": 10})


def _refine_run(tmp_path: Path, repo: Path, server: ScriptedServer, *extra: str, route: str = "direct") -> Outcome:
    harness = tmp_path / "harness"
    model = ["--model", "openai/gpt-4o-mini"] if route == "litellm" else []
    return run_inproc(tmp_path, repo, server, "--harness", str(harness), "--refine", *model, *extra,
                     env={"PRIME_CI_ROUTE": route})


def _refinement_requests(server: ScriptedServer) -> list[Any]:
    return [r for r in server.chat_requests if "submit_refinement" in json.dumps(r.body.get("tools"))]


def _harness_records(run: Outcome) -> list[dict[str, Any]]:
    return [e["data"] for e in run.session() if e.get("customType") == "prime_ci.harness"]


def test_refinement_is_a_metered_call_counted_and_charged(tmp_path: Path, buggy_repo: Path,
                                                          server: ScriptedServer) -> None:
    server.add(_root_reply(1000), reply(None, [tool_call("submit_refinement", {"rationale": "r", "ops": []})],
                                        usage={"prompt_tokens": 2000, "completion_tokens": 30}))
    run = _refine_run(tmp_path, buggy_repo, server, route="litellm")  # litellm knows gpt-4o-mini's prices
    assert run.code == 0, run.proc.stderr
    assert len(_refinement_requests(server)) == 1
    usage = run.result["usage"]
    assert usage["model_calls"] == len(server.chat_requests) == 2 and usage["turns"] == 1
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (3000, 40)
    assert usage["cost_usd"] == pytest.approx(3000 * MINI[0] + 40 * MINI[1])
    assert _harness_records(run)[-1]["refine"] == "rejected"  # an empty plan: still a call, still charged


def test_a_max_cost_the_refinement_would_exceed_skips_it(tmp_path: Path, buggy_repo: Path,
                                                         server: ScriptedServer) -> None:
    # the root's call leaves under $0.00002 of --max-cost 0.01: less than the refinement's prompt alone
    server.add(_root_reply(66_500))
    run = _refine_run(tmp_path, buggy_repo, server, "--max-cost", "0.01", route="litellm")
    assert run.code == 0, run.proc.stderr
    assert run.result["stop_reason"] == "completed"
    assert _refinement_requests(server) == [] and len(server.chat_requests) == 1
    assert run.result["usage"]["model_calls"] == 1 and run.result["usage"]["cost_usd"] < 0.01
    assert "refinement skipped" in run.proc.stderr and "max_cost" in run.proc.stderr
    assert _harness_records(run)[-1] == {"refine": "skipped", "reason": "max_cost",
                                         "detail": "not enough cost budget left for another call"}


def test_a_max_tokens_the_refinement_would_exceed_skips_it(tmp_path: Path, buggy_repo: Path,
                                                           server: ScriptedServer) -> None:
    server.add(_root_reply(19_500))
    run = _refine_run(tmp_path, buggy_repo, server, "--max-tokens", "20000")
    assert run.code == 0, run.proc.stderr
    assert run.result["stop_reason"] == "completed" and run.result["usage"]["total_tokens"] <= 20_000
    assert _refinement_requests(server) == [] and run.result["usage"]["model_calls"] == 1
    assert _harness_records(run)[-1]["reason"] == "max_tokens"
    assert "refinement skipped" in run.proc.stderr


NOTE = re.compile(r"\[budget\] 50% of the tokens budget used \((\d+)/200000 tokens\)\.")


def _is_child(body: dict[str, Any]) -> bool:
    return str(body["messages"][1].get("content", "")).startswith("[task from parent]")


def test_a_childs_first_call_carries_the_shared_ledgers_budget_note(tmp_path: Path, buggy_repo: Path,
                                                                    server: ScriptedServer) -> None:
    server.route(contains("count the files"), [reply("there are two")])
    spawn = tool_call("ipython", {"code": "await rlm('count the files', name='counter')"})
    # the root's first call spends 55% of --max-tokens before it spawns the child
    server.add(reply(None, [spawn], usage={"prompt_tokens": 110_000, "completion_tokens": 10}),
               reply("waiting"), reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--max-tokens", "200000")
    assert run.code == 0, run.proc.stderr
    first_child = next(r.body for r in server.chat_requests if _is_child(r.body))
    notes = [m["content"] for m in first_child["messages"] if m["role"] == "user" and NOTE.fullmatch(m["content"])]
    assert len(notes) == 1, [m["content"] for m in first_child["messages"]]
    match = NOTE.fullmatch(notes[0])
    assert match is not None and int(match.group(1)) >= 110_010  # the root's spend, not a ledger of its own
