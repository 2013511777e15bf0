"""How a run's conversation opens: the system prompt, then a new run's task (after the session it goes on from, with
the untrusted text fenced as data), or a resumed run's logged conversation, kernel snapshot and note to the model."""

from __future__ import annotations

from prime_ci.engine.environment import environment_section
from prime_ci.engine.from_session import go_on
from prime_ci.engine.prepare import Prepared
from prime_ci.engine.resume import ResumeState, last_assistant
from prime_ci.engine.setup import SetupOutcome
from prime_ci.gates.builds import BuildOutcome
from prime_ci.gates.judge import Judge
from prime_ci.isolation.untrusted import fence
from prime_ci.kernel.client import Kernel
from prime_ci.loop.agent import Agent
from prime_ci.loop.system_prompt import base_prompt
from prime_ci.model.routes import ReplayModel
from prime_ci.session.log import SessionLog


def system_prompt(prep: Prepared, setup: list[SetupOutcome], built: list[BuildOutcome] | None = None) -> str:
    """The system prompt: prime-ci's own, the project's environment (the setup and builds that ran), the harness."""
    return base_prompt() + environment_section(prep, setup, built) + prep.harness.prompt_section()


def begin(agent: Agent, prep: Prepared, log: SessionLog) -> None:
    """A new run: the conversation it goes on from (``--from-session``), the task, the untrusted text."""
    cfg = prep.cfg
    if prep.origin is not None:
        go_on(agent, prep.origin, prep.worktree.base_commit)
    if cfg.task_text() or prep.origin is None:
        agent.give_task(cfg.task_text())
    if cfg.untrusted_file is not None:
        log.custom("prime_ci.untrusted", {"file": cfg.untrusted_file.name})
        text = cfg.untrusted_file.read_text(encoding="utf-8", errors="replace")
        agent.say("prime_ci.untrusted", fence(text, f"--untrusted-file {cfg.untrusted_file.name}"))


async def resumed(agent: Agent, state: ResumeState, prep: Prepared, judge: Judge, kernel: Kernel) -> None:
    """Resume: the logged conversation again (not re-logged), the kernel's snapshot, a note to the model."""
    for message, eid in zip(state.messages, state.ids, strict=True):
        if eid is None:  # a call the interruption left unanswered: its answer is logged with the rest
            agent.answer_unanswered(message["tool_call_id"], message["content"])
        else:
            agent.conversation.add(message, eid)
    if (last := last_assistant(state.session.entries)) is not None:
        agent.adopt(*last)
    judge.rounds, judge.failed_rounds = state.gate_rounds, state.failed_rounds
    judge.round_log, judge.round_failing = state.round_log, state.round_failing
    if isinstance(prep.model, ReplayModel):
        prep.model.position = state.replayed_replies
    restored = await kernel.restore()
    lost = f" Sub-agents that were running were lost: {', '.join(state.children)}." if state.children else ""
    agent.say("prime_ci.resumed", " ".join([
        "[prime-ci] This run was interrupted and has been resumed. The Python kernel was restarted;",
        f"{restored}.{lost}", *state.notes, "Check the state of the work, then continue the task."]))
