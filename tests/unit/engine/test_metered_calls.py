"""Issue 14, one owner per pattern: the one metered model call (``Budget.call``) and the one ``StopReason``.

The metered call itself and the child's view of the shared ledger are tested in process with a fake model; the
claims about whole runs, and a call that times out, are in tests/runs/engine/test_metered_calls_runs.py.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from conftest import repo_script
from prime_ci.artifacts.schemas import result_json
from prime_ci.children.host import SharedLedger
from prime_ci.cli.schema_registry import schemas
from prime_ci.errors import ModelError, PersistenceError, SandboxUnavailable
from prime_ci.loop.budget import MIN_COMPLETION, Budget, BudgetExhausted, Limits
from prime_ci.model.protocol import ModelReply
from prime_ci.model.usage import Usage, estimate_tokens
from prime_ci.stops import StopReason
from unit.engine.metered_fakes import MESSAGES, MINI, FakeModel, prompt_text

ROOT = Path(__file__).resolve().parents[3]


def call(budget: Budget, model: FakeModel, *, turn: bool = True, **kw: Any) -> ModelReply:
    return asyncio.run(budget.call(model, MESSAGES, [], turn=turn, **kw))


# --- the metered call -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("limits", "spent", "reason"), [
    (Limits(max_tokens=1000), {"spent": Usage(prompt_tokens=1000)}, StopReason.MAX_TOKENS),
    (Limits(max_turns=2), {"turns": 2}, StopReason.MAX_TURNS),
    (Limits(max_wall=0), {}, StopReason.MAX_WALL),
    (Limits(max_cost=0.5), {"cost_usd": 0.5}, StopReason.MAX_COST),
])
def test_a_call_is_refused_when_a_budget_is_exhausted(limits: Limits, spent: dict[str, Any],
                                                      reason: StopReason) -> None:
    budget = Budget(limits)
    for key, value in spent.items():
        setattr(budget, key, value)
    model = FakeModel()
    with pytest.raises(BudgetExhausted) as refused:
        call(budget, model)
    assert refused.value.reason is reason
    assert model.calls == [] and budget.model_calls == 0 and budget.reserved == 0


def test_the_turn_cap_binds_root_turns_only() -> None:
    budget = Budget(Limits(max_turns=1), turns=1)
    model = FakeModel()
    with pytest.raises(BudgetExhausted):
        call(budget, model, turn=True)
    call(budget, model, turn=False)  # compaction, refinement, a child's call: not a root turn
    assert budget.turns == 1 and budget.model_calls == 1


def test_the_completion_is_clamped_to_what_the_budget_has_left() -> None:
    budget = Budget(Limits(max_tokens=1000))
    model = FakeModel()
    call(budget, model)
    assert model.calls == [1000 - estimate_tokens(prompt_text())]
    call(Budget(Limits()), model, max_tokens=50)  # the caller's own cap is kept under a large budget
    assert model.calls[-1] == 50
    call(Budget(Limits(max_completion=300)), model)
    assert model.calls[-1] == 300


def test_a_known_price_clamps_the_completion_to_the_money_left() -> None:
    budget = Budget(Limits(max_cost=0.001), pricing=lambda model: MINI)
    model = FakeModel()
    call(budget, model)
    left = 0.001 - estimate_tokens(prompt_text()) * MINI[0]
    assert model.calls == [math.floor(left / MINI[1])]
    poor = Budget(Limits(max_cost=0.001), pricing=lambda model: MINI, cost_usd=0.001 - MIN_COMPLETION * MINI[1])
    with pytest.raises(BudgetExhausted) as refused:
        call(poor, model)
    assert refused.value.reason is StopReason.MAX_COST and len(model.calls) == 1


def test_a_call_that_cannot_fit_is_refused_before_it_is_made() -> None:
    budget = Budget(Limits(max_tokens=estimate_tokens(prompt_text()) + MIN_COMPLETION - 1))
    model = FakeModel()
    with pytest.raises(BudgetExhausted) as refused:
        call(budget, model)
    assert refused.value.reason is StopReason.MAX_TOKENS and model.calls == []


def test_the_charge_counts_tokens_cost_calls_and_root_turns() -> None:
    budget = Budget(Limits())
    call(budget, FakeModel(Usage(100, 20, cache_read_tokens=60, reasoning_tokens=5), 0.25), turn=True)
    call(budget, FakeModel(Usage(7, 3, cache_write_tokens=4), 0.5), turn=False)
    expected = {"turns": 1, "model_calls": 2, "prompt_tokens": 107, "completion_tokens": 23, "total_tokens": 130,
                "cache_read_tokens": 60, "cache_write_tokens": 4, "reasoning_tokens": 5, "abandoned_calls": 0,
                "cost_usd": 0.75}
    assert list(budget.usage().items()) == list(expected.items())  # in this order: result.json's and the log's
    restored = Budget(Limits())
    restored.restore(budget.usage(), 0.0)
    assert restored.usage() == budget.usage()
    call(budget, FakeModel(cost=None), turn=False)
    assert budget.usage()["cost_usd"] is None and budget.reserved == 0 and budget.reserved_cost == 0


def test_the_reservation_is_released_when_the_call_fails() -> None:
    budget = Budget(Limits(max_cost=1.0), pricing=lambda model: MINI)
    with pytest.raises(ModelError):
        call(budget, FakeModel(error=ModelError("provider kept failing")))
    assert (budget.reserved, budget.reserved_cost, budget.model_calls, budget.total_tokens) == (0, 0.0, 0, 0)


def test_the_reservation_is_released_when_the_call_is_cancelled() -> None:
    budget = Budget(Limits())

    async def main() -> None:
        model = FakeModel(gate=asyncio.Event())
        task = asyncio.create_task(budget.call(model, MESSAGES, [], turn=True))
        await model.entered.wait()
        assert budget.reserved > 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert budget.reserved == 0 and budget.abandoned_calls == 1
    assert budget.usage()["prompt_tokens"] == estimate_tokens(prompt_text())


async def settled(tasks: list[asyncio.Task[ModelReply]], models: list[FakeModel]) -> None:
    """Until every call has reserved (its model is waiting) or was refused."""
    while not all(t.done() or m.entered.is_set() for t, m in zip(tasks, models, strict=True)):
        await asyncio.sleep(0)


def test_two_concurrent_calls_cannot_both_reserve_the_last_tokens() -> None:
    budget = Budget(Limits(max_tokens=1000))

    async def main() -> None:
        gate = asyncio.Event()
        first, second = FakeModel(Usage(0, 0), gate=gate), FakeModel(Usage(0, 0), gate=gate)
        running = asyncio.create_task(budget.call(first, MESSAGES, [], turn=False))
        await first.entered.wait()
        late = asyncio.create_task(budget.call(second, MESSAGES, [], turn=False))
        await settled([late], [second])
        gate.set()  # (so a failing check below does not leave a call hanging)
        assert late.done() and second.calls == [], "the first call holds everything that is left"
        refused = late.exception()
        assert isinstance(refused, BudgetExhausted) and refused.reason is StopReason.MAX_TOKENS
        await running
        assert budget.reserved == 0
        await budget.call(second, MESSAGES, [], turn=False)  # released: the next call fits again

    asyncio.run(main())


def test_concurrent_reservations_never_hand_out_more_than_the_budget() -> None:
    budget = Budget(Limits(max_tokens=1000, max_completion=300))
    estimate = estimate_tokens(prompt_text())

    async def main() -> None:
        gate = asyncio.Event()
        models = [FakeModel(Usage(0, 0), gate=gate) for _ in range(6)]
        tasks = [asyncio.create_task(budget.call(m, MESSAGES, [], turn=False)) for m in models]
        await settled(tasks, models)
        granted = [m.calls[0] for m in models if m.calls]
        assert 1 <= len(granted) < len(models)
        assert sum(estimate + g for g in granted) <= 1000
        assert budget.reserved == sum(estimate + g for g in granted)
        gate.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert sum(isinstance(o, BudgetExhausted) for o in outcomes) == len(models) - len(granted)

    asyncio.run(main())
    assert budget.reserved == 0


# --- refinement through the CLI -------------------------------------------------------------------------------


# --- children: the shared ledger ------------------------------------------------------------------------------


def test_a_child_host_keeps_no_budget_of_its_own() -> None:
    for module in ("children/host.py", "child.py"):
        text = (ROOT / "src" / "prime_ci" / module).read_text()
        assert "Budget(" not in text and "Limits(" not in text, module


def test_the_childs_ledger_view_follows_what_the_root_returns() -> None:
    root = Budget(Limits(max_tokens=1000), spent=Usage(prompt_tokens=600))
    answers: list[dict[str, Any]] = []

    async def request(op: str, **kw: Any) -> Any:
        assert op == "child.model"
        return answers.pop(0)

    ledger = SharedLedger(request, root.snapshot(turns=0, max_turns=10).to_json())
    assert ledger.warnings() == ["[budget] 50% of the tokens budget used (600/1000 tokens)."]
    assert ledger.warnings() == [], "each note once"
    root.spent = Usage(prompt_tokens=850)
    answers.append({"text": "hi", "tool_calls": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1},
                    "cost_usd": None, "finish_reason": "stop", "model": "m", "attempts": 1,
                    "budget": root.snapshot(turns=1, max_turns=10).to_json()})
    asyncio.run(ledger.call(FakeModel(), MESSAGES, [], turn=True))
    assert ledger.warnings() == ["[budget] 80% of the tokens budget used (850/1000 tokens)."]
    assert list(ledger.usage().items()) == [  # the child's usage records, in this order
        ("turns", 1), ("model_calls", 1), ("prompt_tokens", 5), ("completion_tokens", 1), ("cache_read_tokens", 0),
        ("cache_write_tokens", 0), ("reasoning_tokens", 0), ("total_tokens", 6), ("cost_usd", None)]
    root.spent = Usage(prompt_tokens=1000)
    answers.append({"stop": "max_tokens", "detail": "used up",
                    "budget": root.snapshot(turns=1, max_turns=10).to_json()})
    with pytest.raises(BudgetExhausted) as refused:
        asyncio.run(ledger.call(FakeModel(), MESSAGES, [], turn=True))
    assert refused.value.reason is StopReason.MAX_TOKENS and ledger.exhausted() is StopReason.MAX_TOKENS


# --- one StopReason -------------------------------------------------------------------------------------------

DOCUMENTED = {"completed": 0, "gates_failed": 1, "max_turns": 3, "max_tokens": 3, "max_wall": 3, "max_cost": 3,
              "model_error": 4, "sandbox_unavailable": 5, "persistence_error": 6, "security_stop": 7,
              "no_changes": 8, "setup_failed": 9, "environment_error": 10, "internal_error": 70, "interrupted": 130}


def test_stop_reasons_and_exit_codes_are_the_documented_ones() -> None:
    assert {r.value: r.exit_code for r in StopReason} == DOCUMENTED
    assert {r for r in StopReason if r.budget} == {StopReason(r) for r in DOCUMENTED if DOCUMENTED[r] == 3}
    for error, reason in ((PersistenceError, StopReason.PERSISTENCE_ERROR), (ModelError, StopReason.MODEL_ERROR),
                          (SandboxUnavailable, StopReason.SANDBOX_UNAVAILABLE)):
        assert error.exit_code == reason.exit_code, error


def test_the_result_schema_enumerates_the_one_type() -> None:
    schema = schemas()["result"]
    stop = schema["properties"]["stop_reason"]
    enum = schema["$defs"][stop["$ref"].rsplit("/", 1)[1]]["enum"] if "$ref" in stop else stop["enum"]
    assert enum == [r.value for r in StopReason]


def test_result_json_through_the_model_keeps_every_key_and_its_order() -> None:
    gate = {"name": "tests", "command": "pytest -q", "passed": False, "exit_code": 1, "timed_out": False,
            "output_bytes": 10, "duration_s": 0.25, "attempts": 2, "flaky": True, "log_path": "/o/gates/tests.log",
            "timeout_s": None, "failures": [{"test": "t::a"}], "failures_source": "log"}
    given: dict[str, Any] = {
        "version": 1, "run_id": "r1", "stop_reason": StopReason.MAX_TURNS, "exit_code": 3, "success": False,
        "detail": "", "task": "t", "model": "openai/m", "base_commit": "abc", "wall_s": 1.5,
        "usage": {"turns": 2, "model_calls": 3, "prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
                  "cost_usd": None},
        "budgets": {"max_turns": 2, "max_tokens": 100, "max_wall_s": 60.0, "max_cost_usd": None},
        "gates": [gate], "children": [{"name": "c", "id": "sub-1", "status": "completed", "session": "s"}],
        "changed_files": ["a.py"], "flags": [], "sandbox": "off", "python": "/usr/bin/python3",
        "setup": [{"name": "s", "command": "true", "passed": True, "exit_code": 0, "timed_out": False,
                   "duration_s": 0.5, "log": "setup/s.log"}],
        "rounds": [{"round": 1, "kind": "full", "duration_s": 0.5, "passed": False, "gates": ["tests"],
                    "on_demand": False},
                   {"round": 2, "kind": "fast", "duration_s": 0.1, "passed": False, "gates": ["tests"],
                    "on_demand": False, "tests": 1, "still_failing": ["tests"]}],
        "dirty": [], "snapshot_of": None, "out_dir": "/o", "worktree": None,
    }
    out = result_json(**given)
    assert json.dumps(out) == json.dumps({**given, "stop_reason": "max_turns"})
    assert type(out["stop_reason"]) is str
    with pytest.raises(ValueError, match="stop_reason"):
        result_json(**{**given, "stop_reason": "exploded"})


def _load_helper() -> Any:
    return repo_script("action/helper.py")


def test_the_actions_exit_codes_match_the_one_type(tmp_path: Path) -> None:
    """action/helper.py runs without prime-ci: its notion of exit codes (2 = nothing started) is checked here,
    with the exit-code output the action documents and the setup_failed code its scripts test for."""
    action = YAML(typ="safe").load((ROOT / "action.yml").read_text())
    described = action["outputs"]["exit-code"]["description"]
    listed = re.findall(r"(\d+(?:/\d+)?) ([a-z ]+?)[,)]", described)
    codes = {int(c) for pair, _ in listed for c in pair.split("/")}
    assert codes == {r.exit_code for r in StopReason} | {2, 143}
    assert 2 not in {r.exit_code for r in StopReason}
    words = {int(pair.split("/")[0]): name for pair, name in listed}
    for reason in StopReason:
        assert words[reason.exit_code].split()[0] in reason.value.replace("_", " ") or reason.budget, reason
    helper = _load_helper()
    (tmp_path / "result.json").write_text(json.dumps({"stop_reason": "max_cost", "usage": {}}))
    assert "stop-reason=" in helper.outputs("2", str(tmp_path)), "exit 2: no run, whatever result.json says"
    assert "stop-reason=max_cost" in helper.outputs(str(StopReason.MAX_COST.exit_code), str(tmp_path))
    scripts = (ROOT / "action" / "run.sh").read_text() + (ROOT / "action" / "finish.sh").read_text()
    assert f"$code == {StopReason.SETUP_FAILED.exit_code} ]]" in scripts
    assert f"  {StopReason.SETUP_FAILED.exit_code}) " in scripts
