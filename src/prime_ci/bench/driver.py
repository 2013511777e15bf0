"""The bench driver: every (task, harness, repeat) as an ordinary ``prime-ci run`` subprocess, N at a time,
then the verdict; a finished job's record is written last, so a bench run again skips what it finished."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import hashlib
import json
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_ci.bench.model import HiddenCheck, TaskResult
from prime_ci.bench.suite import Suite, Task
from prime_ci.bench.verdict import gates_passed, hidden_check, python_of, solved
from prime_ci.engine.environment import Standalone
from prime_ci.errors import ConfigError
from prime_ci.isolation import durable, spawn

# outcomes that say nothing about the harness or the model's work: a bench run again runs these again
RETRY = {"bench_error", "model_error", "internal_error", "interrupted", "persistence_error", "sandbox_unavailable"}


def final(record: TaskResult, task: Task) -> bool:
    """A record that stands: the same task definition, and an outcome that is a verdict."""
    return (record.fingerprint == task.fingerprint() and record.stop_reason not in RETRY
            and not (record.hidden is not None and record.hidden.error))


class Interrupted(Exception):
    """The bench was stopped by a signal; unfinished jobs have no record and run again next time."""


@dataclass(frozen=True)
class HarnessState:
    label: str  # unique in this bench: paths and the report
    name: str  # what the user named (directory or branch name): recordings are looked up by it
    source: str
    path: Path | None  # the snapshot every run of this harness starts from; None: no harness


@dataclass(frozen=True)
class Job:
    index: int  # the task's position in the suite
    task: Task
    harness: HarnessState
    repeat: int
    seed: int
    key: str  # the task id, with ".r<k>" when the bench repeats

    def run_dir(self, out: Path) -> Path:
        return out / "runs" / self.harness.label / self.key

    def record(self, out: Path) -> Path:
        return out / "records" / self.harness.label / f"{self.key}.json"

    def log(self, out: Path) -> Path:
        return out / "logs" / self.harness.label / f"{self.key}.log"


@dataclass
class Plan:
    suite: Suite
    out: Path
    harnesses: list[HarnessState]
    model: str | None
    api_base: str | None
    repeat: int = 1
    shard: tuple[int, int] | None = None
    sandbox: str = "auto"
    python: str | None = None  # the interpreter of tasks that name none (--python)
    repos: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # task id -> (repo, ref) to run on

    def jobs(self) -> list[Job]:
        """Deterministic: the shard takes every N-th task of the suite (all its harnesses and repeats, so the
        pairs of an A/B stay in one shard); jobs of one task and repeat are adjacent, harness by harness."""
        tasks = list(enumerate(self.suite.tasks))
        if self.shard is not None:
            index, count = self.shard
            tasks = [(i, t) for i, t in tasks if i % count == index - 1]
        return [Job(i, t, h, k, seed_of(t.id, k), t.id if self.repeat == 1 else f"{t.id}.r{k}")
                for i, t in tasks for k in range(self.repeat) for h in self.harnesses]

    def task_of(self, job: Job) -> Task:
        """The job's task as it runs: --python for a task that names no interpreter."""
        if job.task.python is None and self.python is not None:
            return job.task.model_copy(update={"python": self.python})
        return job.task

    def repo_of(self, task: Task) -> tuple[str, str | None]:
        """Where a task runs: its repository and ref, or the git repository made of its plain directory."""
        return self.repos.get(task.id, (task.repo, task.ref))

    def model_for(self, job: Job) -> str:
        if self.model:
            return self.model
        if job.task.model:
            return job.task.model
        recording = job.task.replay_dir(job.harness.name)
        if recording is None:
            raise ConfigError(f"task {job.task.id}: no model (give --model, or a model or replay in the suite)")
        return f"replay:{recording / 'session.jsonl'}"

    def recorded(self) -> bool:
        jobs = self.jobs()
        return bool(jobs) and all(self.model_for(j).startswith("replay:") for j in jobs)

    def argv(self, job: Job, harness_copy: Path | None) -> list[str]:
        t = self.task_of(job)
        repo, ref = self.repo_of(t)
        model = self.model_for(job)
        argv = [sys.executable, "-m", "prime_ci", "run", repo, "--out", str(job.run_dir(self.out)),
                "--model", model, "--seed", str(job.seed), "--sandbox", self.sandbox]
        if ref:
            argv += ["--ref", ref]
        if t.task_file:
            argv += ["--task-file", t.task_file]
        else:
            argv += ["--task", t.text()]
        if self.api_base and not model.startswith("replay:"):
            argv += ["--api-base", self.api_base]
        for flag, values in (("--gate", t.gates), ("--gates-file", t.gates_file), ("--setup", t.setup)):
            for value in values:
                argv += [flag, value]
        options: dict[str, object] = {
            "--python": python_of(t), "--max-turns": t.max_turns, "--max-wall": t.max_wall, "--max-cost": t.max_cost,
            "--max-tokens": t.max_tokens, "--max-gate-retries": t.max_gate_retries, "--harness": harness_copy}
        for flag, option in options.items():
            if option is not None:
                argv += [flag, str(option)]
        return argv


def seed_of(task_id: str, repeat: int) -> int:
    """The same for every harness (pairs compare like with like) and every machine (shards agree)."""
    return int.from_bytes(hashlib.sha256(f"{task_id}:{repeat}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def load_record(path: Path) -> TaskResult | None:
    if not path.is_file():
        return None
    return TaskResult.model_validate_json(path.read_bytes())


@dataclass
class Driver:
    plan: Plan
    jobs: int
    progress: Callable[[TaskResult, int, int], None]
    procs: set[asyncio.subprocess.Process] = field(default_factory=set)
    stopping: bool = False

    @functools.cached_property
    def finished(self) -> dict[tuple[str, str], TaskResult]:
        """The jobs (key, harness) an earlier bench into this OUT finished (a final record), read once."""
        return {(j.key, j.harness.label): r for j in self.plan.jobs()
                if (r := load_record(j.record(self.plan.out))) is not None and final(r, j.task)}

    async def run(self) -> list[TaskResult]:
        """Every job of the plan; finished ones are read, not rerun."""
        all_jobs = self.plan.jobs()
        todo = [j for j in all_jobs if (j.key, j.harness.label) not in self.finished]
        results = list(self.finished.values())
        gate = asyncio.Semaphore(self.jobs)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop)

        async def one(job: Job) -> None:
            async with gate:
                if self.stopping:
                    return
                result = await self._job(job)
                if result is not None:
                    results.append(result)
                    self.progress(result, len(results), len(all_jobs))

        try:
            await asyncio.gather(*(one(j) for j in todo))
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        if self.stopping:
            raise Interrupted(f"{len(all_jobs) - len(results)} of {len(all_jobs)} runs unfinished")
        return results

    def _stop(self) -> None:
        self.stopping = True
        for proc in self.procs:  # each run ends itself on SIGTERM: artifacts written, worktree removed
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    async def _job(self, job: Job) -> TaskResult | None:
        out = self.plan.out
        run_dir = job.run_dir(out)
        if run_dir.exists():  # an unfinished attempt of an earlier bench: start the run over
            await asyncio.to_thread(shutil.rmtree, run_dir)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        copy = None
        if job.harness.path is not None:
            copy = run_dir.with_name(run_dir.name + ".harness")
            shutil.rmtree(copy, ignore_errors=True)
            await asyncio.to_thread(shutil.copytree, job.harness.path, copy, symlinks=True)
        log = job.log(out)
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        proc = await spawn.start(self.plan.argv(job, copy), env=None, out=log, append=False,
                                 preexec_fn=_die_with_parent)
        self.procs.add(proc)
        try:
            code = await proc.wait()
        finally:
            self.procs.discard(proc)
        process_s = round(time.monotonic() - started, 3)
        if copy is not None:
            shutil.rmtree(copy, ignore_errors=True)
        if self.stopping:
            return None
        result = (await self._verdict(job, run_dir, code, log)).model_copy(update={"process_s": process_s})
        durable.write_json(job.record(out), result.model_dump(mode="json"))
        return result

    async def _verdict(self, job: Job, run_dir: Path, code: int, log: Path) -> TaskResult:
        rel = str(run_dir.relative_to(self.plan.out))
        task = self.plan.task_of(job)
        ids: dict[str, Any] = {"id": task.id, "index": job.index, "fingerprint": job.task.fingerprint(),
                               "harness": job.harness.label, "repeat": job.repeat, "seed": job.seed}
        try:
            result: dict[str, Any] = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return TaskResult(**ids, solved=False, stop_reason="bench_error", exit_code=code, cost_usd=None,
                              total_tokens=0, turns=0, wall_s=0.0, time_to_green_s=None, run_dir=rel,
                              gates_passed=None, detail=f"prime-ci run exited {code} without a result.json"
                              f"{_last_error(log)}; see {log.relative_to(self.plan.out)}")
        hidden: HiddenCheck | None = None
        if task.hidden_tests() and int(result.get("exit_code", -1)) == 0:
            hidden = await hidden_check(task, self.plan.repo_of(task)[0],
                                        str(result["base_commit"]), run_dir, self.plan.out,
                                        Standalone(sandbox=self.plan.sandbox))
        usage = result.get("usage") or {}
        if hidden is not None and hidden.passed:
            detail = None
        elif hidden is not None:
            detail = hidden.error or "the hidden tests fail on the run's patch"
        else:
            detail = str(result.get("detail") or "") or None
        return TaskResult(
            **ids, solved=solved(result, hidden), stop_reason=str(result.get("stop_reason")),
            exit_code=result.get("exit_code"), cost_usd=usage.get("cost_usd"),
            total_tokens=int(usage.get("total_tokens") or 0), turns=int(usage.get("turns") or 0),
            wall_s=float(result.get("wall_s") or 0.0), time_to_green_s=result.get("time_to_green_s"), run_dir=rel,
            gates_passed=gates_passed(result), hidden=hidden, detail=detail)


def _last_error(log: Path) -> str:
    """The run's own one-line error, from the end of its console log."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
    except OSError:
        return ""
    errors = [line.removeprefix("prime-ci: error: ") for line in lines if line.startswith("prime-ci: error: ")]
    return f" ({errors[-1][:300]})" if errors else ""


def _die_with_parent() -> None:
    """In the child before exec: a SIGTERM when the bench process dies, even by SIGKILL (PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)
