"""One run end to end: worktree -> kernel + model -> agent loop -> gates -> artifacts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prime_ci.activity import Activity, doing, watch
from prime_ci.artifacts import report
from prime_ci.artifacts.notebook import NotebookWriter
from prime_ci.artifacts.schemas import result_json
from prime_ci.children.family import Family
from prime_ci.durations import format_duration
from prime_ci.engine import bridge_handlers, finish, first_estimate, opening
from prime_ci.engine.actions_log import ActionsLog, Emit
from prime_ci.engine.environment import (
    adopt_toolchain,
    gate_vars,
    open_sandbox,
    project_vars,
    run_setup,
    session_cwd,
    take_back,
    toolchain_vars,
)
from prime_ci.engine.kernel_start import kernel_failed
from prime_ci.engine.prepare import Prepared
from prime_ci.engine.progress import Progress, start_ticker, stop_ticker
from prime_ci.engine.resume import ResumeState
from prime_ci.engine.settle import clear_worktree, settle
from prime_ci.engine.setup import SetupOutcome, failure_detail
from prime_ci.errors import ConfigError, KernelLost, ModelError, PersistenceError
from prime_ci.gates.builds import Builder
from prime_ci.gates.judge import Judge, time_to_green
from prime_ci.gates.junit import ended
from prime_ci.gates.outside import Outside
from prime_ci.isolation import procs
from prime_ci.isolation.box import RUN_VAR, run_needle
from prime_ci.isolation.sandbox import colour_off, scrubbed_env
from prime_ci.isolation.untrusted import clean_terminal_text
from prime_ci.isolation.worktree import DIRTY_SHOWN
from prime_ci.kernel.api import PRELOAD
from prime_ci.kernel.bridge import Bridge, run_dir
from prime_ci.kernel.client import CellResult, Kernel, KernelConfig
from prime_ci.kernel.output import cell_text
from prime_ci.loop.agent import Agent, Conversation, log_model
from prime_ci.loop.budget import MAX_CALL_S, Budget, Limits
from prime_ci.loop.compact import Compactor
from prime_ci.model.routes import (
    child_model,
    completion_limit,
    model_options,
    prices,
)
from prime_ci.session.log import SessionLog, entry_id
from prime_ci.stops import SIGTERM_EXIT, Stop, StopReason

SIGNAL_EXIT = {signal.SIGINT: StopReason.INTERRUPTED.exit_code, signal.SIGTERM: SIGTERM_EXIT,
               signal.SIGHUP: SIGTERM_EXIT}
# a budget stop or failed gates: one more full gate round decides whether the run still passed
FINAL_ROUND = frozenset({StopReason.MAX_TURNS, StopReason.MAX_TOKENS, StopReason.MAX_COST, StopReason.GATES_FAILED})
Say = Callable[[str], None]


@dataclass
class Run:
    prep: Prepared
    say: Say
    budget: Budget = field(init=False)
    log: SessionLog = field(init=False)
    judge: Judge = field(init=False)
    kernel: Kernel | None = None
    bridge: Bridge = field(init=False)  # the root kernel's
    child_bridge: Bridge = field(init=False)  # the rlm children's hosts'
    family: Family | None = None
    resume: ResumeState | None = None
    salvage: bool = False
    signal_code: int | None = None
    stop: Stop = field(default_factory=lambda: Stop(StopReason.INTERNAL_ERROR, "the run did not start"))
    goal_done: str | None = None
    agent: Agent | None = None
    cells: list[dict[str, Any]] = field(default_factory=list)
    notebook: NotebookWriter | None = None
    marker: str = field(default_factory=lambda: entry_id() + entry_id())
    gate_env: dict[str, str] = field(default_factory=dict)
    setup: list[SetupOutcome] = field(default_factory=list)
    progress: Progress | None = None  # the console's status line
    activity: Activity = field(default_factory=Activity)
    emit: Emit | None = None  # where workflow commands go (the console's stdout) when GITHUB_ACTIONS=true
    actions: ActionsLog | None = None
    window: tuple[int, str] | None = None  # the model's context window and its source, found before the run starts

    def __post_init__(self) -> None:
        # the children's bridge knows each caller's process: a child's token is good only from its own host
        self.bridge, self.child_bridge = Bridge(run_dir(self.marker)), Bridge(run_dir(self.marker), peer=True)

    async def execute(self) -> dict[str, Any]:
        cfg, wt = self.prep.cfg, self.prep.worktree
        options = model_options(cfg)
        completion, note = completion_limit(self.prep.model, cfg.max_completion_tokens)
        if note:
            self.say(note)
        self.budget = Budget(Limits(cfg.max_turns, cfg.max_tokens, cfg.max_wall, cfg.max_cost, completion,
                                    call_timeout=max(MAX_CALL_S, 2 * cfg.model_timeout)),
                             pricing=lambda model: prices(model, options.price))
        if self.resume is None:  # creates --out; an unusable --out is a PersistenceError (exit 6)
            # before anything starts: a window too small for the system prompt is a ConfigError (exit 2)
            self.window = await first_estimate.preflight(self.prep, self.budget.rate(self.prep.model), self.say)
            origin = self.prep.origin
            self.log = SessionLog.create(self.prep.out / "session.jsonl", cwd=session_cwd(wt.source),
                                         parent_session=str(origin.path) if origin is not None else None)
            if origin is not None:  # --max-wall counts the load of the session the run goes on from
                self.budget.wall_offset = origin.load_s
        else:
            self.log = SessionLog.open_for_append(self.prep.out / "session.jsonl", salvage=self.salvage)
            self.budget.restore(self.resume.usage, self.resume.wall_spent)
        env = toolchain_vars(self.prep, scrubbed_env(wt.root / "home", cfg.pass_env, project_vars(self.prep, {
            "PRIME_CI_BRIDGE": str(self.bridge.path), RUN_VAR: self.marker})))
        gate_env = gate_vars(self.prep, env)
        env = colour_off(env, cfg.pass_env)
        sandbox = self.prep.sandbox
        open_sandbox(self.prep, self.bridge.path.parent)
        self.gate_env = gate_env
        # builds write the run's environment too (an editable install), never with network
        build_box = dataclasses.replace(sandbox, writable=[*sandbox.writable, str(self.prep.project.root)],
                                        network=False) if sandbox else None
        builder = Builder(self.prep.builds, wt, gate_env, self.prep.out / "build", cfg.limits,
                          launcher=build_box.wrap([]) if build_box else [], exclude=[".prime-ci"],
                          outside=Outside.of_run(wt.path, self.prep.project, sandboxed=sandbox is not None))
        self.judge = Judge(self.prep.gates, wt, gate_env, self.prep.out / "gates", self.log,
                           cfg.max_gate_retries, exclude=[".prime-ci"],
                           launcher=sandbox.wrap([]) if sandbox else [], limits=cfg.limits, clock=self.budget.elapsed,
                           builds=builder, hold_run=run_needle(self.marker).decode())
        if self.emit is not None and os.environ.get("GITHUB_ACTIONS") == "true":
            self.actions = ActionsLog(self.emit, wt.path)
            self.judge.on_round = self.actions.round
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in SIGNAL_EXIT:
            loop.add_signal_handler(sig, self._on_signal, sig, task)
        watch(self.activity)  # the phases of every task started from here on
        ticker = start_ticker(self.progress, self.budget, self.activity)
        try:
            self.stop = await asyncio.wait_for(self._work(env), timeout=max(0.1, self.budget.wall_left()))
        except TimeoutError:
            waiting = self.budget.waiting() or self.budget.cut_short
            why = f" ({waiting}; --model-timeout is {format_duration(cfg.model_timeout)})" if waiting else ""
            self.stop = Stop(StopReason.MAX_WALL, f"wall clock limit {format_duration(cfg.max_wall)} reached{why}")
        except asyncio.CancelledError:
            if self.signal_code is None:
                raise
            self.stop = Stop(StopReason.INTERRUPTED, f"received signal (exit {self.signal_code})")
        except ModelError as exc:
            self.stop = Stop(StopReason.MODEL_ERROR, str(exc))
        except PersistenceError as exc:
            self.stop = Stop(StopReason.PERSISTENCE_ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - any bug still ends with artifacts and exit 70
            self.stop = Stop(StopReason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            self.say(traceback.format_exc())
        finally:
            stop_ticker(ticker, self.progress)
            for sig in SIGNAL_EXIT:
                loop.remove_signal_handler(sig)
        if self.bridge.failures and self.stop.reason is StopReason.COMPLETED:
            self.stop = Stop(StopReason.INTERNAL_ERROR, f"bridge failure: {self.bridge.failures[0]!r}")
        return await self._finish()

    def _on_signal(self, sig: signal.Signals, task: asyncio.Task[Any]) -> None:
        if self.signal_code is None:
            self.signal_code = SIGNAL_EXIT[sig]
            self.say(f"received {sig.name}: stopping")
            task.cancel()

    async def _work(self, env: dict[str, str]) -> Stop:
        cfg, wt = self.prep.cfg, self.prep.worktree
        if self.resume is None:
            log_model(self.log, self.prep.model.name)
            self.log.custom("prime_ci.run", {
                "run_id": self.prep.run_id, "task": cfg.task_text(), "base_commit": wt.base_commit,
                "budgets": self.budget.limits_dict(), "gates": [g.model_dump() for g in self.prep.gates],
                "setup": [s.model_dump() for s in self.prep.setup], "build": [b.model_dump() for b in self.prep.builds],
                "project": self.prep.project.to_json(),
                "config": cfg.model_dump(mode="json"),
                "worktree": {"path": str(wt.path), "git_dir": str(wt.git_dir), "root": str(wt.root),
                             "source": wt.source}, "marker": self.marker})
        else:
            self.log.custom("prime_ci.resume", {"entries_before": len(self.resume.session.entries),
                                                "wall_spent_s": round(self.resume.wall_spent, 3)})
        await self.bridge.start(self.prep.sandbox.uid if self.prep.sandbox else None)
        await self.child_bridge.start()
        child_env = {k: v for k, v in env.items() if k != "PRIME_CI_BRIDGE"}
        self.family = Family(self.log, self.prep.out, wt, self.budget, self.prep.model,
                             lambda name: child_model(name, self.prep.model.name, cfg.api_base, model_options(cfg)),
                             child_env, str(self.child_bridge.path),
                             cfg.max_depth, cfg.max_children, cfg.max_turns, cfg.cell_timeout, self.say,
                             sandbox=self.prep.sandbox, subagent=self.prep.harness.subagent,
                             session_cwd=session_cwd(wt.source), limits=cfg.limits)
        bridge_handlers.register(self)
        if self.prep.setup and (failed := await self._setup()) is not None:
            return failed
        adopt_toolchain(self.prep, self.judge, env)
        self.family.env.update({k: v for k, v in env.items() if k != "PRIME_CI_BRIDGE"})  # children's kernels too
        started = time.monotonic()
        preload = PRELOAD + self.prep.harness.preload()
        self.kernel = Kernel(KernelConfig(cwd=wt.path, env=env, run_dir=wt.root, preload=preload,
                                          snapshot_dir=wt.root / "kernel" / "state",
                                          wrap=self.prep.sandbox.wrap if self.prep.sandbox else None,
                                          limits=cfg.limits, uid=self.prep.sandbox.uid if self.prep.sandbox else None))
        builder = self.judge.builds
        assert builder is not None
        await builder.start(self.say)
        if (fault := self.judge.environment_fault()) is not None:  # the project does not build here: not the model's
            return Stop(StopReason.ENVIRONMENT_ERROR, fault)
        with doing("kernel start"):
            try:
                await self.kernel.start()
            except KernelLost as exc:
                return kernel_failed(exc, self.prep.out, sandboxed=self.prep.sandbox is not None)
        self.say(f"kernel ready in {format_duration(time.monotonic() - started)} (pid {self.kernel.pid})")
        agent = Agent(self.prep.model, self.kernel, self.budget, self.log, self._turn_end, cfg.cell_timeout,
                      progress=self.say, inbox=lambda: self.family.drain(self.family.root) if self.family else [],
                      on_cell=self._on_cell, detail=self.say if cfg.verbose else None)
        window, source = self.window or await first_estimate.find_window(self.prep)
        self.say(f"context window {window} tokens ({source})")
        rate = self.budget.rate(self.prep.model)
        agent.compactor = Compactor(self.prep.model, self.budget, self.log, window, rate=rate, progress=self.say)
        agent.conversation = Conversation(rate=rate)
        agent.task = clean_terminal_text(cfg.task_text() or (self.prep.origin.task if self.prep.origin else ""))
        self.agent, self.family.agent, self.family.window = agent, agent, window
        agent.conversation.add({"role": "system", "content": opening.system_prompt(self.prep, self.setup,
                                                                                     builder.last)})
        if self.resume is not None:
            assert self.kernel is not None
            await opening.resumed(agent, self.resume, self.prep, self.judge, self.kernel)
            await first_estimate.calibrate(self.prep.model, agent.conversation)  # the conversation it goes on with
        else:
            opening.begin(agent, self.prep, self.log)
        try:
            stop = await agent.run()
        except KernelLost as exc:
            stop = Stop(StopReason.GATES_FAILED, f"kernel lost: {exc}")
        if stop.reason in FINAL_ROUND and self.prep.gates:
            await self.judge.final_round()
            if self.judge.passed():
                stop = Stop(StopReason.COMPLETED, f"gates passed at the end ({stop.reason.value} reached)")
        if cfg.refine and self.budget.wall_left() > 5:
            await self.prep.harness.refine(self.prep.model, self.budget, self.log, None, self.say, agent.fold)
        return stop

    async def _setup(self) -> Stop | None:
        """The setup phase (before the kernel and any model call); a Stop when a command failed."""
        if self.resume is not None and self.resume.setup_done:
            return None
        report = functools.partial(self.actions.setup, len(self.prep.setup)) if self.actions else None
        self.setup, hint = await run_setup(self.prep, self.gate_env, self.say, report)
        self.log.custom("prime_ci.setup", {"results": [o.model_dump() for o in self.setup]})
        if self.setup and not self.setup[-1].passed:
            return Stop(StopReason.SETUP_FAILED, failure_detail(self.setup[-1], hint))
        return None

    async def _on_cell(self, code: str, result: CellResult) -> None:
        self.cells.append({"code": code, "status": result.status, "output": cell_text(result.outputs)})
        if self.notebook is None:
            self.notebook = NotebookWriter(self.prep.out / "cells.ipynb", keep_existing=self.resume is not None)
        self.notebook.add(code, result.outputs, len(self.cells))

    async def _turn_end(self) -> Stop | str:
        family = self.family
        if family is not None and (family.running() or family.root.inbox):
            self.say("waiting for running children before the gates")
            with doing("waiting for sub-agents"):
                await family.wait_for_children(self.budget.wall_left())
            if family.root.inbox or family.running():
                return ""  # continue: the messages are delivered before the next model call
        harness = self.prep.harness
        if harness.refine_requested:
            harness.refine_requested = False
            assert self.agent is not None
            await harness.refine(self.prep.model, self.budget, self.log, harness.refine_instructions, self.say,
                                 self.agent.fold)
        outcome = await self.judge()
        if self.judge.skipped:
            self.say(f"gates skipped: unchanged since round {self.judge.rounds} (still failing)")
        else:  # every round is said, a passing one too: the console shows where the time went
            broken = self.judge.builds.failed() if self.judge.builds else None
            if broken is not None:
                state = "FAILED (" + ended(broken.exit_code, broken.timed_out, broken.timeout_s) + ")"
                self.say(f"build {broken.name}: {state} in {format_duration(broken.duration_s)} -> {broken.log}; "
                         "gates not run")
            for r in [] if broken else self.judge.last:
                how = ended(r.exit_code, r.timed_out, r.timeout_s)
                how += "" if r.timed_out else f", {format_duration(r.duration_s)}"
                self.say(f"gate {r.name}: {'pass' if r.passed else 'FAIL'} ({how})")
        return outcome

    async def _finish(self) -> dict[str, Any]:
        """Stop everything, settle the outcome, write the artifacts; the worktree goes whatever happens."""
        cfg = self.prep.cfg
        try:
            await self._teardown()
            patch, changed, flags, self.stop = settle(self.prep, self.judge, self.stop)
            if not cfg.keep_worktree:  # counted in wall_s, and said before the final line
                await clear_worktree(self.prep.worktree, self.say)
            else:
                take_back(self.prep)
            exit_code = self.stop.reason.exit_code
            if self.stop.reason is StopReason.INTERRUPTED and self.signal_code is not None:
                exit_code = self.signal_code
            arts = finish.Artifacts(self.prep.out, self._result(exit_code, changed, flags), self.say,
                                    inputs=finish.summary_inputs(self.judge, patch, self.agent))
            result = finish.write_all(arts, patch=patch, gates=self.judge.last, notebook=self.notebook, log=self.log,
                                      harness=self.prep.harness, push=cfg.push)
            if self.actions is not None:
                self.actions.end(result, self.judge.last)
        finally:
            if not cfg.keep_worktree:
                self.prep.worktree.remove()
        return result

    async def _teardown(self) -> None:
        if self.family is not None:
            await self.family.stop_all()
        if self.kernel is not None:
            if self.stop.reason is StopReason.INTERRUPTED:
                self.kernel.kill()
            else:
                await self.kernel.shutdown()
        await self.bridge.close()
        await self.child_bridge.close()
        if leftovers := procs.sweep(run_needle(self.marker)):
            self.say(f"killed {leftovers} leftover process(es) of this run")

    def _result(self, exit_code: int, changed: list[str], flags: list[str]) -> dict[str, Any]:
        cfg, wt = self.prep.cfg, self.prep.worktree
        compactor = self.agent.compactor if self.agent is not None else None
        window = {"context_window": compactor.window} if compactor is not None else {}
        return result_json(
            version=report.RESULT_VERSION, run_id=self.prep.run_id, stop_reason=self.stop.reason,
            exit_code=exit_code, success=exit_code == 0, detail=self.stop.detail, task=cfg.task_text(),
            model=self.prep.model.name, base_commit=wt.base_commit, wall_s=round(self.budget.elapsed(), 3),
            usage=self.budget.usage(), budgets=self.budget.limits_dict(),
            gates=[r.to_dict() for r in self.judge.last], children=self.family.summary() if self.family else [],
            changed_files=changed, flags=flags, sandbox=self.prep.sandbox_status,
            python=str(self.prep.project.interp.executable), setup=[o.model_dump() for o in self.setup],
            build=[o.model_dump() for o in self.judge.builds.last] if self.judge.builds else [],
            rounds=self.judge.round_log, time_to_green_s=time_to_green(self.judge.round_log),
            dirty=wt.dirty[:DIRTY_SHOWN], dirty_count=len(wt.dirty),
            snapshot_of=wt.snapshot_of, out_dir=str(self.prep.out),
            worktree=str(wt.path) if cfg.keep_worktree else None, **window,
        )


def execute(prep: Prepared, say: Say, *, resume: ResumeState | None = None, salvage: bool = False,
            progress: Progress | None = None, emit: Emit | None = None) -> dict[str, Any]:
    run = Run(prep, say, resume=resume, salvage=salvage, progress=progress, emit=emit)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(run.execute())
        raise SystemExit(130)
    except (ConfigError, PersistenceError):  # nothing started, or no session log: no artifacts, one line on stderr
        if not prep.cfg.keep_worktree:
            prep.worktree.remove()
        for bridge in (run.bridge, run.child_bridge):  # their private socket directories
            asyncio.run(bridge.close())
        raise
    finally:
        procs.reap_orphans()  # the event loop (and its child watcher) is gone: collect adopted zombies
