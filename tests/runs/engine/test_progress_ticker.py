"""Issue 26, live progress: the ticker samples the turn, the call, the cell and the budgets while each runs (waits for
a later sample of the same call)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conftest import wait_until_async
from prime_ci.activity import Activity, watch
from prime_ci.engine.progress import Status, start_ticker, stop_ticker
from prime_ci.loop.agent import Agent
from prime_ci.loop.budget import Budget, Limits
from prime_ci.model.protocol import ModelReply
from prime_ci.session.log import SessionLog
from prime_ci.stops import Stop, StopReason
from prime_ci.testing.fakes import FakeExecutor, ModelCall, ScriptedModel, text_reply, tool_reply


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Status] = []
        self.closed = False

    def update(self, status: Status) -> None:
        self.seen.append(status)

    def close(self) -> None:
        self.closed = True


async def _completed() -> Stop | str:
    return Stop(StopReason.COMPLETED, "turn ended")


def test_the_ticker_shows_the_turn_call_cell_and_budgets_while_each_runs(tmp_path: Path) -> None:
    async def main() -> None:
        activity, shown = Activity(), Recorder()
        watch(activity)
        release_call, release_cell = asyncio.Event(), asyncio.Event()

        async def slow_call(call: ModelCall) -> ModelReply:
            await release_call.wait()
            return text_reply("done")

        async def slow_cell(code: str) -> str:
            await release_cell.wait()
            return "ok"

        model = ScriptedModel([tool_reply("x = 1", prompt_tokens=900, completion_tokens=100), slow_call])
        budget = Budget(Limits(max_turns=7, max_tokens=50_000, max_wall=600.0))
        log = SessionLog.create(tmp_path / "session.jsonl", cwd=str(tmp_path))
        agent = Agent(model, FakeExecutor([slow_cell]), budget, log, _completed, cell_timeout=60.0)
        agent.give_task("the task")
        ticker = start_ticker(shown, budget, activity)
        run = asyncio.create_task(agent.run())

        await wait_until_async(lambda: shown.seen and shown.seen[-1].phase == "cell", what="the cell's status")
        in_cell = shown.seen[-1]
        assert (in_cell.turn, in_cell.max_turns, in_cell.tokens, in_cell.max_tokens) == (1, 7, 1000, 50_000)
        assert in_cell.max_wall_s == 600.0
        release_cell.set()
        await wait_until_async(lambda: shown.seen[-1].phase == "model call", what="the second call's status")
        assert shown.seen[-1].turn == 2  # the turn in progress, not the turns done
        first = shown.seen[-1].phase_s
        await wait_until_async(lambda: shown.seen[-1].phase_s > first, what="a later sample of the same call")
        release_call.set()
        assert (await run).reason is StopReason.COMPLETED
        await wait_until_async(lambda: shown.seen[-1].phase is None, what="no phase once the loop ended")
        stop_ticker(ticker, shown)
        assert shown.closed and shown.seen[-1].turn == 2
        log.close()

    asyncio.run(main())
