"""prime-ci's overhead against a raw floor measured in the same run (issue 9). Not a test: it reports ratios.

    python benchmarks/run.py [--repeat 3] [--quick] [--turns 150] [--json FILE] [--variants ...] [--keep]

Everything talks to a `prime_ci.testing.ScriptedServer` in a thread of this process, on loopback only.
See benchmarks/README.md for the definitions of every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tree import MB, TreeSampler, become_subreaper, kill_tree, reap_leftovers

from prime_ci.loop.agent import TOOL
from prime_ci.loop.system_prompt import base_prompt
from prime_ci.testing import RecordedRequest, ScriptedServer, contains, hang, ipython, reply

HERE = Path(__file__).resolve().parent
PY = sys.executable
PRIME_CI = shutil.which("prime-ci", path=os.path.dirname(sys.executable)) or "prime-ci"
TASK = "Benchmark run: follow the scripted model."
GATE = "python -c \"print('x' * 1_000_000)\"; python -m pytest -q"
SPAWN = "import asyncio\nawait asyncio.gather(*(rlm(f'child task {i}', name=f'c{i}') for i in range(3)))"
CHILD_SLEEP = "import time\ntime.sleep(2)"
RUN_TIMEOUT = 600.0
LOOPBACK = "127.0.0.1,localhost,::1"
DEFAULT_VARIANTS = ("off/direct", "auto/direct", "off/litellm", "auto/litellm")

REPO_FILES = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    ".gitignore": "__pycache__/\n.pytest_cache/\n.prime-ci/\n",
}
BUGGY_FILES = {**REPO_FILES, "calc.py": "def add(a, b):\n    return a - b\n"}


def say(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def bench_env(**extra: str) -> dict[str, str]:
    """This environment without prime-ci settings, proxies or provider keys; loopback never proxied."""
    drop = ("http_proxy", "https_proxy", "all_proxy", "ftp_proxy")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PRIME_CI_") and k.lower() not in drop and not k.endswith("_API_KEY")}
    env.update(NO_PROXY=LOOPBACK, no_proxy=LOOPBACK, LITELLM_LOCAL_MODEL_COST_MAP="True",
               LITELLM_OFFLINE_MODE="true", LITELLM_TELEMETRY="False", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def remove_worktrees(tmp: Path) -> list[str]:
    """Remove prime-ci worktrees (``$TMPDIR/prime-ci-wt-*``) cloned from a repository under `tmp`."""
    found = []
    for wt in Path(tempfile.gettempdir()).glob("prime-ci-wt-*"):
        with contextlib.suppress(OSError):
            if any(str(tmp) in cfg.read_text(errors="replace") for cfg in wt.glob("*/config")):
                found.append(wt.name)
                shutil.rmtree(wt, ignore_errors=True)
    return found


def require_clean(tmp: Path, kind: str) -> None:
    """After one measured run: it must have removed its worktree and left no live process (both swept here)."""
    if stale := remove_worktrees(tmp):
        raise RuntimeError(f"{kind}: left its worktree {stale}")
    live, _ = reap_leftovers()
    if live:
        raise RuntimeError(f"{kind}: left live processes {live}")


def make_repo(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=root, check=True)
    return root


def prompt_tokens(body: dict[str, Any]) -> int:
    """The scripted server's prompt size: ceil(len(json(messages) + json(tools)) / 4)."""
    return math.ceil(len(json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", []))) / 4)


# -- the floor --------------------------------------------------------------------------------------------


def python_child(code: str) -> tuple[float, int]:
    """Wall time of `python -c CODE` and that process's own peak RSS (bytes).

    The peak is VmHWM from /proc/self/status: getrusage's ru_maxrss survives execve, so in a child it can
    report the RSS of the (large) parent it was forked from.
    """
    probe = "\nprint([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    t = time.monotonic()
    proc = subprocess.run([PY, "-c", code + probe], env=bench_env(), capture_output=True, text=True, check=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    wall = time.monotonic() - t
    return wall, int(proc.stdout.split()[-1]) * 1024


def floor_worker(client: str, template: Path, sizes: list[int], iters: int, *, turns_only: bool = False
                 ) -> dict[str, Any]:
    """Run benchmarks/floor.py against a fresh server; adds the peak RSS of its tree (process + kernel)."""
    with ScriptedServer(default=ipython("pass")) as srv:
        argv = [PY, str(HERE / "floor.py"), "--url", srv.url, "--template", str(template), "--client", client,
                "--history", ",".join(map(str, sizes)), "--iters", str(iters), *(["--turns-only"] * turns_only)]
        proc = subprocess.Popen(argv, env=bench_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        sampler = TreeSampler(proc.pid).start()
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
        finally:
            sampler.stop()
            if proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"floor worker ({client}) failed with exit {proc.returncode}:\n{err[-3000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["tree_peak_rss"] = sampler.peak_total
    result["process_peak_rss"] = sampler.peak_of_role("floor")
    result["kernel_peak_rss"] = sampler.peak_of_role("kernel")
    return result


def measure_floor(template: Path, sizes: list[int], iters: int) -> dict[str, Any]:
    bare_s, bare_rss = python_child("pass")
    import_s, import_rss = python_child("import litellm")
    host_s, host_rss = python_child("import prime_ci.cli, prime_ci.engine.run")
    child_s, child_rss = python_child("import prime_ci.child")
    fig: dict[str, Any] = {
        "python_bare_s": bare_s, "python_bare_rss": bare_rss,
        "litellm_import_s": import_s - bare_s, "litellm_import_rss": import_rss,
        "litellm_own_rss": import_rss - bare_rss,
        "host_import_s": host_s - bare_s, "host_import_rss": host_rss,
        "child_import_s": child_s - bare_s, "child_import_rss": child_rss,
    }
    httpx = floor_worker("httpx", template, sizes, iters)
    fig["kernel_start_s"] = httpx["kernel_start_s"]
    fig["stock_kernel_start_s"] = httpx["stock_kernel_start_s"]
    fig["cell_s"] = httpx["cell_s"]
    fig["floor_tree_rss"] = httpx["tree_peak_rss"]
    fig["floor_process_rss"] = httpx["process_peak_rss"]
    fig["floor_kernel_rss"] = httpx["kernel_peak_rss"]
    lite = floor_worker("litellm", template, sizes, iters)
    fig["litellm_worker_tree_rss"] = lite["tree_peak_rss"]
    fig["litellm_inprocess_import_s"] = lite["import_s"]
    for n in sizes:
        fig[f"httpx_call_s_{n}"] = httpx[f"call_s_{n}"]
        fig[f"turn_s_{n}"] = httpx[f"turn_s_{n}"]
        fig[f"litellm_call_s_{n}"] = lite[f"call_s_{n}"]
        fig[f"litellm_sync_call_s_{n}"] = lite[f"sync_call_s_{n}"]
        fig[f"litellm_turn_s_{n}"] = lite[f"turn_s_{n}"]
    return fig


# -- prime-ci ---------------------------------------------------------------------------------------------


@dataclass
class PrimeRun:
    code: int
    launched: float
    requests: list[RecordedRequest]
    sampler: TreeSampler
    out: Path
    stderr: str
    wall: float

    def check(self, expected: int, what: str) -> None:
        if self.code != expected:
            raise RuntimeError(f"{what}: prime-ci exit {self.code}, expected {expected}\n{self.stderr[-3000:]}")


@dataclass(frozen=True)
class Variant:
    """How prime-ci is run: `--sandbox` value and model route (direct OpenAI-compatible, or litellm)."""

    sandbox: str
    route: str

    @classmethod
    def parse(cls, text: str) -> Variant:
        sandbox, _, route = text.partition("/")
        if sandbox not in ("off", "auto", "on") or route not in ("direct", "litellm"):
            raise ValueError(f"bad variant {text!r}: expected SANDBOX/ROUTE, e.g. off/direct or auto/litellm")
        return cls(sandbox, route)

    def __str__(self) -> str:
        return f"{self.sandbox}/{self.route}"

    def env(self) -> dict[str, str]:
        return {"PRIME_CI_ROUTE": "litellm"} if self.route == "litellm" else {}


@dataclass
class Bench:
    tmp: Path
    turns: int
    template: Path
    iters: int
    runs: int = 0
    problems: list[str] = field(default_factory=list)
    zombies: list[str] = field(default_factory=list)

    def prime(self, srv: ScriptedServer, repo: Path, variant: Variant, *extra: str) -> PrimeRun:
        self.runs += 1
        out = self.tmp / f"out-{self.runs}"
        argv = [PRIME_CI, "run", str(repo), "--task", TASK, "--model", "openai/scripted", "--api-base", srv.url,
                "--out", str(out), "--sandbox", variant.sandbox, "--max-turns", "200",
                "--max-tokens", "1000000000", *extra]
        log = self.tmp / f"out-{self.runs}.stderr"
        with log.open("wb") as err:
            env = bench_env(OPENAI_API_KEY="sk-bench-not-a-key", **variant.env())
            launched = time.monotonic()
            proc = subprocess.Popen(argv, cwd=self.tmp, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                    start_new_session=True)
            sampler = TreeSampler(proc.pid).start()
            try:
                code = proc.wait(timeout=RUN_TIMEOUT)
            finally:
                sampler.stop()
                if proc.poll() is None:
                    kill_tree(proc.pid)
                    proc.wait()
        wall = time.monotonic() - launched
        if stale := remove_worktrees(self.tmp):
            self.problems.append(f"prime-ci run {self.runs} ({variant}, exit {code}) left its worktree: {stale}")
        live, zombies = reap_leftovers(sampler.roles)
        if live:
            self.problems.append(f"prime-ci run {self.runs} ({variant}) left live processes: {live}")
        if zombies:
            self.zombies.append(f"run {self.runs} ({variant}): {', '.join(zombies)}")
        return PrimeRun(code, launched, srv.chat_requests, sampler, out, log.read_text(errors="replace"), wall)

    def turns_run(self, repo: Path, variant: Variant) -> dict[str, Any]:
        n = self.turns
        client = "litellm" if variant.route == "litellm" else "httpx"
        # the turn floor of this route, taken right before and right after this run: the machine drifts
        # over the minute between the repeat's main floor and a later variant
        before = floor_worker(client, self.template, [10, n], self.iters, turns_only=True)
        with ScriptedServer([*(ipython("pass") for _ in range(n - 1)), reply("done")]) as srv:
            run = self.prime(srv, repo, variant)
        after = floor_worker(client, self.template, [10, n], self.iters, turns_only=True)
        run.check(0, f"{n}-turn run ({variant})")
        t = [r.t for r in run.requests]
        if len(t) != n:
            raise RuntimeError(f"{n}-turn run ({variant}): {len(t)} model requests")
        gaps = {k: t[k] - t[k - 1] for k in range(1, n)}  # gap_k = t(request k+1) - t(request k), 1-based k
        early, late = range(5, 16), range(n - 10, n)
        phases = turn_phases(run.out / "session.jsonl", t)
        fig: dict[str, Any] = {
            "launch_s": t[0] - run.launched,
            "launch_session_s": header_mono(run.out / "session.jsonl") - run.launched,
            "gap_early_s": statistics.median(gaps[k] for k in early),
            "gap_late_s": statistics.median(gaps[k] for k in late),
            "gaps_s": [round(gaps[k], 5) for k in range(1, n)],
            "kernel_ready_s": _kernel_ready(run.stderr),
            "tree_peak_rss": run.sampler.peak_total,
            "host_peak_rss": run.sampler.peak_of_role("host"),
            "kernel_peak_rss": run.sampler.peak_of_role("kernel"),
            "host_litellm": any(v for pid, v in run.sampler.litellm_mapped.items()
                                if run.sampler.roles.get(pid) == "host"),
            "wall_s": run.wall,
            "rss_samples": run.sampler.samples,
            "paired_floor_s_10": (before["turn_s_10"] + after["turn_s_10"]) / 2,
            f"paired_floor_s_{n}": (before[f"turn_s_{n}"] + after[f"turn_s_{n}"]) / 2,
        }
        for window, ks in (("early", early), ("late", late)):
            for name in ("call", "cell", "kernel_cell", "after"):
                values = [phases[k][name] for k in ks if k in phases]
                fig[f"{name}_{window}_s"] = statistics.median(values) if values else None
        return fig

    def children_run(self, repo: Path, variant: Variant) -> dict[str, Any]:
        with ScriptedServer([ipython(SPAWN), reply("waiting for the children")], default=reply("done")) as srv:
            for i in range(3):
                srv.route(contains(f"child task {i}"), [ipython(CHILD_SLEEP), reply("child finished")])
            run = self.prime(srv, repo, variant)
        run.check(0, f"children run ({variant})")
        t0 = run.requests[0].t
        firsts = []
        for i in range(3):
            mine = [r.t for r in run.requests if contains(f"child task {i}")(r.body)]
            if not mine:
                raise RuntimeError(f"children run ({variant}): child {i} never called the model\n"
                                   f"{run.stderr[-3000:]}")
            firsts.append(mine[0] - t0)
        started = sorted(header_mono(run.out / "children" / f"c{i}" / "session.jsonl") - t0 for i in range(3))
        loaded: list[bool] = []
        missing = []
        for i in range(3):
            last = json.loads((run.out / "children" / f"c{i}" / "session.jsonl").read_text().splitlines()[-1])
            if last.get("customType") == "prime_ci.stop":
                loaded.append(bool(last["data"].get("litellm_loaded")))
            else:
                missing.append(f"c{i}")
        if missing:
            self.problems.append(f"children run {self.runs} ({variant}): no prime_ci.stop entry at the end of "
                                 f"{', '.join(missing)}'s session")
        sampler = run.sampler
        mapped = [v for pid, v in sampler.litellm_mapped.items() if sampler.roles.get(pid) == "child-host"]
        subtrees = sorted(sampler.peak_subtree.values())
        if len(subtrees) != 3:
            self.problems.append(f"children run {self.runs} ({variant}): sampled {len(subtrees)} child hosts, not 3")
        hosts = [rss for pid, rss in sampler.peak_by_pid.items() if sampler.roles.get(pid) == "child-host"]
        return {
            "child_first_s": sorted(firsts),
            "child_session_s": started,
            "third_child_s": max(firsts),
            "child_rss": subtrees,
            "child_rss_max": max(subtrees, default=0),
            "child_host_rss_max": max(hosts, default=0),
            "child_litellm_loaded": any(loaded) or any(mapped),
            "child_litellm_evidence": f"stop entries of {len(loaded)}/3 children ({sum(loaded)} with litellm), "
                                      f"/proc maps of {len(mapped)}/3 ({sum(mapped)} with litellm)",
            "tree_peak_rss": sampler.peak_total,
            "wall_s": run.wall,
        }

    def gate_run(self, repo: Path) -> dict[str, Any]:
        with ScriptedServer([reply("done"), reply("done again")]) as srv:
            run = self.prime(srv, repo, Variant("off", "direct"), "--gate", GATE, "--max-gate-retries", "1")
        run.check(1, "1 MB gate run")
        if len(run.requests) < 2:
            raise RuntimeError(f"1 MB gate run: {len(run.requests)} model requests\n{run.stderr[-3000:]}")
        body = run.requests[1].body
        messages = body["messages"]
        idx = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        feedback = str(messages[idx]["content"])
        if "gates failed" not in feedback:
            raise RuntimeError(f"1 MB gate run: no gate feedback in request 2: {feedback[:300]!r}")
        logs = sorted(p for p in (run.out / "gates").glob("*.log") if ".attempt-" not in p.name)
        full = "".join(p.read_text(errors="replace") for p in logs)
        baseline = {**body, "messages": [*messages[:idx], {**messages[idx], "content": full}, *messages[idx + 1 :]]}
        prime, base = prompt_tokens(body), prompt_tokens(baseline)
        return {"prime_tokens": prime, "baseline_tokens": base, "feedback_chars": len(feedback),
                "log_chars": len(full), "token_ratio": base / prime}


def header_mono(session: Path) -> float:
    """When a session log was created (its header's wall-clock timestamp, ms), on this process's monotonic clock."""
    with session.open() as f:
        stamp = json.loads(f.readline())["timestamp"]
    return datetime.fromisoformat(stamp).timestamp() - (time.time() - time.monotonic())


def turn_phases(session: Path, t: list[float]) -> dict[int, dict[str, float]]:
    """Where turn k's gap goes, from the session log's timestamps (ms resolution, wall clock).

    call: request k received → assistant entry logged (server answer, litellm response handling, budget);
    cell: assistant entry → tool result entry logged; kernel_cell: the cell as the kernel client timed it;
    after: tool result logged → request k+1 received (commit/fsync, progress output, litellm request).
    """
    offset = time.time() - time.monotonic()

    def mono(entry: dict[str, Any]) -> float:
        return datetime.fromisoformat(entry["timestamp"]).timestamp() - offset

    entries = [json.loads(line) for line in session.read_text().splitlines()]
    messages = [e for e in entries if e.get("type") == "message"]
    calls = [e for e in messages if e["message"]["role"] == "assistant"]
    results = [e for e in messages if e["message"]["role"] == "toolResult"]
    phases: dict[int, dict[str, float]] = {}
    for k in range(1, min(len(calls), len(results) + 1, len(t))):
        a, r = mono(calls[k - 1]), mono(results[k - 1])
        details = results[k - 1]["message"].get("details") or {}
        phases[k] = {"call": a - t[k - 1], "cell": r - a, "kernel_cell": float(details.get("duration_s", "nan")),
                     "after": t[k] - r}
    return phases


def _kernel_ready(stderr: str) -> float | None:
    for line in stderr.splitlines():
        if "kernel ready in " in line:
            with contextlib.suppress(ValueError):
                return float(line.split("kernel ready in ", 1)[1].split("s", 1)[0])
    return None


# -- resume -----------------------------------------------------------------------------------------------


def resume_available() -> bool:
    proc = subprocess.run([PRIME_CI, "resume", "--help"], env=bench_env(), capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    return proc.returncode == 0


def build_session(out: Path, repo: Path, entries: int = 10_000) -> Path:
    """A session.jsonl of `entries` records shaped like a real run: tool call, usage, tool result per turn."""
    from prime_ci.session.log import SessionLog

    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
    out.mkdir(parents=True)
    log = SessionLog.create(out / "session.jsonl", cwd=str(repo))
    log.append("model_change", provider="openai", modelId="openai/scripted")
    log.custom("prime_ci.run", {"run_id": "bench-resume", "task": TASK, "base_commit": base.stdout.strip(),
                                "budgets": {"max_turns": 100_000}, "gates": []})
    log.custom_message("prime_ci.task", TASK)
    turn = 0
    while log.entries_written < entries:
        turn += 1
        call = f"call_{turn}_0"
        log.message("assistant", [{"type": "toolCall", "id": call, "name": "ipython", "arguments": {"code": "pass"}}],
                    api="openai-completions", provider="openai", model="scripted", stopReason="toolUse",
                    usage={"input": 100 + turn, "output": 5, "totalTokens": 105 + turn})
        if log.entries_written < entries:
            log.custom("prime_ci.usage", {"turns": turn, "prompt_tokens": turn * 100, "completion_tokens": turn * 5})
        if log.entries_written < entries:
            log.message("toolResult", [{"type": "text", "text": "(no output)"}], toolCallId=call, toolName="ipython",
                        isError=False)
    log.close()
    return out / "session.jsonl"


def time_session_read(path: Path) -> dict[str, float]:
    """What a resume must at least do: read and verify the log, and reopen it for appending."""
    from prime_ci.session.log import SessionLog, read_session

    t = time.monotonic()
    session = read_session(path)
    read_s = time.monotonic() - t
    sum(1 for _ in session.messages())
    t = time.monotonic()
    SessionLog.open_for_append(path).close()
    return {"read_session_s": read_s, "open_for_append_s": time.monotonic() - t}


def interrupted_run(bench: Bench, srv: ScriptedServer, repo: Path) -> Path:
    """A real run SIGKILLed (host and kernel) while its second model call hangs: resumable, no stop record."""
    bench.runs += 1
    out = bench.tmp / f"out-{bench.runs}"
    argv = [PRIME_CI, "run", str(repo), "--task", TASK, "--model", "openai/scripted", "--api-base", srv.url,
            "--out", str(out), "--sandbox", "off", "--max-turns", "100000", "--max-tokens", "1000000000"]
    with (bench.tmp / f"out-{bench.runs}.stderr").open("wb") as err:
        proc = subprocess.Popen(argv, cwd=bench.tmp, env=bench_env(OPENAI_API_KEY="sk-bench-not-a-key"),
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
        try:
            srv.wait_for_requests(2, timeout=120)
        finally:
            kill_tree(proc.pid, grace=2.0, sig=signal.SIGKILL)
            proc.wait()
    reap_leftovers()
    return out


def pad_session(path: Path, entries: int) -> int:
    """Append complete turns (tool call, usage, tool result) until the log holds `entries` records."""
    from prime_ci.session.log import SessionLog

    lines = path.read_text().splitlines()
    usage = next((json.loads(line)["data"] for line in reversed(lines) if '"prime_ci.usage"' in line), {})
    count, turn = len(lines) - 1, 0
    log = SessionLog.open_for_append(path)
    try:
        while count < entries:
            turn += 1
            call = f"call_pad_{turn}"
            log.message("assistant", [{"type": "toolCall", "id": call, "name": "ipython",
                                       "arguments": {"code": "pass"}}],
                        api="openai-completions", provider="openai", model="scripted", stopReason="toolUse",
                        usage={"input": 100, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 105,
                               "cost": {"total": 0.0}})
            usage = {**usage, "turns": int(usage.get("turns", 0)) + 1,
                     "model_calls": int(usage.get("model_calls", 0)) + 1}
            log.custom("prime_ci.usage", usage)
            log.message("toolResult", [{"type": "text", "text": "(no output)"}], toolCallId=call,
                        toolName="ipython", isError=False,
                        details={"status": "ok", "chars": 0, "duration_s": 0.003, "restarted": False})
            count += 3
    finally:
        log.close()
    return count


def measure_resume(bench: Bench, repo: Path, repeat: int) -> dict[str, Any]:
    """`prime-ci resume` of a 10,000-entry session: in-process state rebuild, and the CLI to its first request."""
    import importlib

    from prime_ci.session.log import read_session

    fig: dict[str, Any] = {}
    with ScriptedServer([ipython("pass"), hang(300)]) as srv:
        out = interrupted_run(bench, srv, repo)
        try:
            fig["entries"] = pad_session(out / "session.jsonl", 10_000)
            module = importlib.import_module("prime_ci.resume")
            steps: dict[str, Callable[[], Any]] = {}
            if callable(plan := getattr(module, "plan", None)):
                steps["plan"] = lambda: plan(out, salvage=False)  # what `prime-ci resume` does before it starts
            if callable(rebuild := getattr(module, "rebuild", None)):
                steps["rebuild"] = lambda: rebuild(read_session(out / "session.jsonl"))
            for name, step in steps.items():
                times = []
                for _ in range(max(3, repeat)):
                    t = time.monotonic()
                    step()
                    times.append(time.monotonic() - t)
                fig[f"{name}_s"] = statistics.median(times)
                fig.setdefault("rebuild_how", f"prime_ci.resume.{name}")
            fig["state_s"] = fig.get("plan_s", fig.get("rebuild_s"))
            srv.add(reply("done"))
            launched = time.monotonic()
            with (bench.tmp / "resume.stderr").open("wb") as err:
                proc = subprocess.Popen([PRIME_CI, "resume", str(out)], cwd=bench.tmp, stdin=subprocess.DEVNULL,
                                        env=bench_env(OPENAI_API_KEY="sk-bench-not-a-key"), stdout=err, stderr=err,
                                        start_new_session=True)
                try:
                    proc.wait(timeout=RUN_TIMEOUT)
                finally:
                    if proc.poll() is None:
                        kill_tree(proc.pid)
                        proc.wait()
            fig["cli_exit"] = proc.returncode
            fig["cli_wall_s"] = time.monotonic() - launched
            later = [r for r in srv.chat_requests if r.t > launched]
            fig["cli_first_request_s"] = later[0].t - launched if later else None
            if not later:
                tail = (bench.tmp / "resume.stderr").read_text(errors="replace")[-1500:]
                bench.problems.append(f"prime-ci resume (exit {proc.returncode}) made no model request: {tail}")
        finally:
            remove_worktrees(bench.tmp)  # the killed run's worktree, if the resume did not remove it
            reap_leftovers()
    return fig


# -- orchestration ----------------------------------------------------------------------------------------


def median(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    if not values:
        return None
    if isinstance(values[0], bool):
        return any(values)
    if isinstance(values[0], list | str):
        return values[len(values) // 2]
    return statistics.median(values)


def collect(samples: list[dict[str, Any]]) -> dict[str, Any]:
    keys = {k for s in samples for k in s}
    return {k: median([s.get(k) for s in samples]) for k in sorted(keys)}


@contextlib.contextmanager
def workspace(keep: bool, prefix: str = "prime-ci-bench-") -> Iterator[Path]:
    """A scratch directory; on the way out its runs' worktrees and leftover processes are swept."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        remove_worktrees(tmp)
        reap_leftovers()
        if keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def attempt(bench: Bench, what: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    say(what)
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - one broken measurement must not lose the others
        text = str(exc)
        first, _, rest = text.partition("\n")
        brief = first if not rest else f"{first}\n  ...{rest[-1200:]}"
        bench.problems.append(f"{what}: {type(exc).__name__}: {brief}")
        say(f"FAILED {what}: {first}")
        return None


def run_all(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from prime_ci.isolation.sandbox import bwrap_binary, probe

    load_before = os.getloadavg()
    variants = [Variant.parse(v) for v in args.variants.split(",") if v]
    bwrap = bwrap_binary()
    bwrap_problem = "bwrap not found" if bwrap is None else probe(bwrap)
    reap_leftovers()  # bwrap's pid-namespace init can outlive the probe and re-parent here
    if bwrap_problem is not None and any(v.sandbox != "off" for v in variants):
        say(f"skipping the sandboxed variants: {bwrap_problem}")
        variants = [v for v in variants if v.sandbox == "off"]
    template = tmp / "template.json"
    template.write_text(json.dumps({"system": base_prompt(), "task": TASK, "tools": [TOOL]}))
    bench = Bench(tmp, args.turns, template, args.iters)
    repo = make_repo(tmp / "repo", REPO_FILES)
    buggy = make_repo(tmp / "buggy", BUGGY_FILES)
    sizes = [10, args.turns]
    floors: list[dict[str, Any]] = []
    prime: dict[str, list[dict[str, Any]]] = {f"{kind}:{v}": [] for kind in ("turns", "children") for v in variants}
    gate: dict[str, Any] | None = None
    for r in range(args.repeat):
        say(f"repeat {r + 1}/{args.repeat}")
        if (f := attempt(bench, "floor", lambda: measure_floor(template, sizes, args.iters))) is not None:
            floors.append(f)
        for v in variants:
            turns = attempt(bench, f"prime-ci {args.turns}-turn run ({v})", lambda v=v: bench.turns_run(repo, v))
            if turns is not None:
                prime[f"turns:{v}"].append(turns)
            kids = attempt(bench, f"prime-ci 3 children ({v})", lambda v=v: bench.children_run(repo, v))
            if kids is not None:
                prime[f"children:{v}"].append(kids)
        if r == 0:
            gate = attempt(bench, "prime-ci 1 MB gate run", lambda: bench.gate_run(buggy))
    say("10,000-entry session: read and reopen")
    resume: dict[str, Any] = {"available": resume_available()}
    path = build_session(tmp / "resume-out", repo)
    resume.update(collect([time_session_read(path) for _ in range(max(3, args.repeat))]))
    if resume["available"]:
        resume.update(attempt(bench, "prime-ci resume of a 10,000-entry session",
                              lambda: measure_resume(bench, repo, args.repeat)) or {})
    return {
        "floor": collect(floors),
        "floor_samples": floors,
        "prime": {k: collect(v) for k, v in prime.items() if v},
        "prime_samples": prime,
        "gate": gate,
        "resume": resume,
        "variants": [str(v) for v in variants],
        "sandbox_problem": bwrap_problem,
        "turns": args.turns,
        "repeat": args.repeat,
        "problems": bench.problems,
        "unreaped_zombies": bench.zombies,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }


# -- the table ------------------------------------------------------------------------------------------


@dataclass
class Row:
    figure: str
    variant: str
    floor: str
    prime: str
    ratio: str
    target: str
    result: str


def ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def mb(x: float | None) -> str:
    return "—" if x is None else f"{x / MB:.0f} MB"


def verdict(value: float | None, limit: float, at_most: bool = True) -> str:
    if value is None:
        return "n/a"
    return "pass" if (value <= limit if at_most else value >= limit) else "**FAIL**"


def _client(variant: str) -> str:
    return "litellm acompletion" if variant.endswith("/litellm") else "httpx"


def ratio_row(figure: str, variant: str, floor: float | None, prime: float | None, limit: float,
              unit: Callable[[Any], str], target: str) -> Row:
    r = None if floor is None or prime is None or floor <= 0 else prime / floor
    return Row(figure, variant, unit(floor), unit(prime), "—" if r is None else f"{r:.2f}×", target,
               verdict(r, limit))


def target_rows(res: dict[str, Any]) -> list[Row]:
    f, n = res["floor"], res["turns"]
    launch_floor = max(f["litellm_import_s"], f["stock_kernel_start_s"]) if f else None
    mem_floor = f["floor_tree_rss"] + f["litellm_own_rss"] if f else None

    def turn_floor(variant: str, t: dict[str, Any], size: int) -> float | None:
        """Each route against the raw cost of its own client (httpx for the direct route, litellm's otherwise),
        taken beside the run itself; the repeat's main floor only if that is missing."""
        paired = t.get(f"paired_floor_s_{size}")
        if paired:
            return float(paired)
        return f.get(f"litellm_turn_s_{size}" if variant.endswith("/litellm") else f"turn_s_{size}")

    per_variant: list[tuple[str, Callable[[str, dict[str, Any], dict[str, Any]], Row]]] = [
        ("1", lambda v, t, c: ratio_row("launch → first model request", v, launch_floor, t.get("launch_s"), 1.1,
                                        ms, "≤ 1.1 × max(litellm import, kernel start)")),
        ("2", lambda v, t, c: ratio_row("per-turn gap, turns 5–15", v, turn_floor(v, t, 10), t.get("gap_early_s"),
                                        1.2, ms, f"≤ 1.2 × ({_client(v)} call + cell), 10 turns of history")),
        ("2", lambda v, t, c: ratio_row(f"per-turn gap, turns {n - 10}–{n}", v, turn_floor(v, t, n),
                                        t.get("gap_late_s"), 1.2, ms,
                                        f"≤ 1.2 × ({_client(v)} call + cell), {n} turns")),
        ("3", lambda v, t, c: ratio_row("spawn cell → 3rd child's first request", v, f.get("stock_kernel_start_s"),
                                        c.get("third_child_s"), 2.0, ms, "≤ 2 × kernel start (stock)")),
        ("3", lambda v, t, c: Row("peak RSS per child (its kernel included)", v, "—", mb(c.get("child_rss_max")),
                                  "—", "≤ 120 MB", verdict(None if c.get("child_rss_max") is None
                                                           else c["child_rss_max"] / MB, 120))),
        ("3", lambda v, t, c: Row("a child host imports litellm", v, "—", _flag(c.get("child_litellm_loaded")), "—",
                                  "no", _flag_verdict(c.get("child_litellm_loaded")))),
        ("6", lambda v, t, c: ratio_row("peak RSS of a plain run's tree", v, mem_floor, t.get("tree_peak_rss"), 1.2,
                                        mb, "≤ 1.2 × (raw floor tree + litellm's own RSS)")),
    ]
    rows: list[Row] = []
    for number in ("1", "2", "3", "6"):
        for v in res["variants"]:
            t = res["prime"].get(f"turns:{v}", {})
            c = res["prime"].get(f"children:{v}", {})
            for num, make in per_variant:
                if num == number:
                    row = make(v, t, c)
                    row.figure = f"{number}. {row.figure}"
                    rows.append(row)
        if number == "3":
            g = res["gate"]
            if g:
                rows.append(Row("4. prompt tokens, request after a 1 MB gate log", "off/direct",
                                f"{g['baseline_tokens']} (full output)", str(g["prime_tokens"]),
                                f"{g['token_ratio']:.0f}× fewer", "≥ 5× fewer",
                                verdict(g["token_ratio"], 5, at_most=False)))
            else:
                rows.append(Row("4. prompt tokens, request after a 1 MB gate log", "off/direct", "—", "—", "—",
                                "≥ 5× fewer", "n/a (run failed)"))
            rz = res["resume"]
            if rz.get("state_s") is not None:
                rows.append(Row(f"5. resume: state rebuild of a 10,000-entry session (`{rz.get('rebuild_how')}`)",
                                "off/direct", "—",
                                ms(rz["state_s"]), "—", "< 1 s", verdict(rz["state_s"], 0.999)))
            elif rz.get("cli_first_request_s") is not None:
                rows.append(Row("5. resume: `prime-ci resume` → first request, 10,000 entries", "off/direct", "—",
                                ms(rz["cli_first_request_s"]), "—", "< 1 s",
                                verdict(rz["cli_first_request_s"], 0.999)))
            else:
                why = "n/a (resume not implemented)" if not rz.get("available") else "n/a (resume run failed)"
                rows.append(Row("5. `prime-ci resume` of a 10,000-entry session", "—", "—", why, "—", "< 1 s",
                                "n/a"))
    return rows


def _ratio(value: float | None, floor: float | None) -> str:
    return "—" if value is None or not floor else f"{value / floor:.2f}×"


def _flag(value: bool | None) -> str:
    return "—" if value is None else "yes" if value else "no"


def _flag_verdict(value: bool | None) -> str:
    return "n/a" if value is None else "**FAIL**" if value else "pass"


def floor_rows(res: dict[str, Any]) -> list[tuple[str, str]]:
    f, n = res["floor"], res["turns"]
    rows = [
        ("litellm import (`python -c 'import litellm'` minus `python -c pass`)", ms(f.get("litellm_import_s"))),
        ("litellm import: process peak RSS / its own (minus bare python)",
         f"{mb(f.get('litellm_import_rss'))} / {mb(f.get('litellm_own_rss'))}"),
        ("kernel start, stock (jupyter_client `start_new_async_kernel`, `python -m ipykernel_launcher`, to ready)",
         ms(f.get("stock_kernel_start_s"))),
        ("kernel start, prime-ci's own (`prime_ci.kernel.Kernel.start`, no preload; not the floor)",
         ms(f.get("kernel_start_s"))),
        ("cell round trip (`pass`)", ms(f.get("cell_s"))),
    ]
    for size in (10, n):
        rows += [
            (f"httpx call, {size} turns of history", ms(f.get(f"httpx_call_s_{size}"))),
            (f"raw turn floor: httpx call + cell, {size} turns", ms(f.get(f"turn_s_{size}"))),
            (f"litellm acompletion, {size} turns", ms(f.get(f"litellm_call_s_{size}"))),
            (f"litellm completion (sync), {size} turns", ms(f.get(f"litellm_sync_call_s_{size}"))),
            (f"litellm acompletion + cell, {size} turns", ms(f.get(f"litellm_turn_s_{size}"))),
        ]
    rows.append(("raw floor tree peak RSS: process + kernel", f"{mb(f.get('floor_tree_rss'))} "
                 f"({mb(f.get('floor_process_rss'))} + {mb(f.get('floor_kernel_rss'))})"))
    rows.append(("litellm floor process tree peak RSS (process + kernel)", mb(f.get("litellm_worker_tree_rss"))))
    rows.append(("prime-ci's own imports, not floor: `import prime_ci.cli, prime_ci.engine.run` / "
                 "`import prime_ci.child` (minus bare python; peak RSS)",
                 f"{ms(f.get('host_import_s'))} ({mb(f.get('host_import_rss'))}) / {ms(f.get('child_import_s'))} "
                 f"({mb(f.get('child_import_rss'))})"))
    return rows


def detail_rows(res: dict[str, Any]) -> list[list[str]]:
    n, rz = res["turns"], res["resume"]

    def get(kind: str, v: str, key: str) -> Any:
        return res["prime"].get(f"{kind}:{v}", {}).get(key)

    specs: list[tuple[str, Callable[[str], str]]] = [
        ("launch → session log created (imports, clone, prepare) / → first request",
         lambda v: f"{ms(get('turns', v, 'launch_session_s'))} / {ms(get('turns', v, 'launch_s'))}"),
        ("kernel ready (prime-ci's own log line, 0.1 s resolution)",
         lambda v: ms(get("turns", v, "kernel_ready_s"))),
        ("host process imported litellm (its /proc maps)", lambda v: _flag(get("turns", v, "host_litellm"))),
        ("turn floor of the route, taken beside the run (mean of before and after), 10 / N turns of history",
         lambda v: f"{ms(get('turns', v, 'paired_floor_s_10'))} / {ms(get('turns', v, f'paired_floor_s_{n}'))}"),
        ("per-turn gap ÷ (litellm acompletion + cell) floor, early / late",
         lambda v: f"{_ratio(get('turns', v, 'gap_early_s'), res['floor'].get('litellm_turn_s_10'))} / "
                   f"{_ratio(get('turns', v, 'gap_late_s'), res['floor'].get(f'litellm_turn_s_{n}'))}"),
        ("turns 5–15: request → reply logged / cell logged / → next request",
         lambda v: " / ".join(ms(get("turns", v, f"{p}_early_s")) for p in ("call", "cell", "after"))),
        (f"turns {n - 10}–{n}: request → reply logged / cell logged / → next request",
         lambda v: " / ".join(ms(get("turns", v, f"{p}_late_s")) for p in ("call", "cell", "after"))),
        ("cell as timed by the kernel client (session details), early / late",
         lambda v: f"{ms(get('turns', v, 'kernel_cell_early_s'))} / {ms(get('turns', v, 'kernel_cell_late_s'))}"),
        ("peak RSS: host / kernel", lambda v: f"{mb(get('turns', v, 'host_peak_rss'))} / "
                                              f"{mb(get('turns', v, 'kernel_peak_rss'))}"),
        (f"{n}-turn run wall clock (launch → exit)", lambda v: ms(get("turns", v, "wall_s"))),
        ("children, after the spawn request: session log created (process up, imports)",
         lambda v: ", ".join(ms(x) for x in get("children", v, "child_session_s") or [])),
        ("children, after the spawn request: first model request",
         lambda v: ", ".join(ms(x) for x in get("children", v, "child_first_s") or [])),
        ("3rd child's first request ÷ prime-ci's own kernel start (not the target's floor)",
         lambda v: _ratio(get("children", v, "third_child_s"), res["floor"].get("kernel_start_s"))),
        ("children: peak RSS per child subtree / child host alone",
         lambda v: f"{', '.join(mb(x) for x in get('children', v, 'child_rss') or [])} / "
                   f"{mb(get('children', v, 'child_host_rss_max'))}"),
        ("children: litellm evidence read (and what it says)",
         lambda v: str(get("children", v, "child_litellm_evidence") or "—")),
        ("children run: tree peak RSS", lambda v: mb(get("children", v, "tree_peak_rss"))),
    ]
    rows = [[name, *(fn(v) for v in res["variants"])] for name, fn in specs]
    g = res["gate"] or {}
    rows.append(["1 MB gate: feedback message / full log (characters)",
                 f"{g.get('feedback_chars', '—')} / {g.get('log_chars', '—')}", *([""] * (len(res["variants"]) - 1))])
    rows.append(["10,000-entry session: read_session / open_for_append (resume's floor)",
                 f"{ms(rz.get('read_session_s'))} / {ms(rz.get('open_for_append_s'))}",
                 *([""] * (len(res["variants"]) - 1))])
    if rz.get("available"):
        rows.append([f"resume ({rz.get('entries', '?')} entries): `resume.plan` / `read_session` + `resume.rebuild`",
                     f"{ms(rz.get('plan_s'))} / {ms(rz.get('rebuild_s'))}", *([""] * (len(res["variants"]) - 1))])
        rows.append([f"`prime-ci resume` ({rz.get('entries', '?')} entries): launch → first request / exit code",
                     f"{ms(rz.get('cli_first_request_s'))} / {rz.get('cli_exit', '—')}",
                     *([""] * (len(res["variants"]) - 1))])
    return rows


def render(res: dict[str, Any]) -> str:
    lines = ["| target | variant | floor | prime-ci | ratio | target | result |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.figure} | {r.variant} | {r.floor} | {r.prime} | {r.ratio} | {r.target} | {r.result} |"
              for r in target_rows(res)]
    lines += ["", "| floor (same run) | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in floor_rows(res)]
    lines += ["", "| prime-ci detail | " + " | ".join(res["variants"]) + " |",
              "|---|" + "---|" * len(res["variants"])]
    lines += ["| " + " | ".join(row) + " |" for row in detail_rows(res)]
    return "\n".join(lines)


def wait_idle(limit: float) -> None:
    import psutil

    deadline = time.monotonic() + limit
    while (busy := psutil.cpu_percent(interval=3)) >= 25 and time.monotonic() < deadline:
        say(f"waiting for an idle machine: CPU {busy:.0f}% busy")
    if busy >= 25:
        say(f"the machine is still busy (CPU {busy:.0f}%); measuring anyway")


def machine() -> dict[str, Any]:
    root = HERE.parent
    git = ["git", "--no-optional-locks", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "src"], capture_output=True, text=True).stdout
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": platform.machine(),
            "nproc": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
            "commit": head or "?", "src_changes": len(dirty.splitlines())}


def measured_at(m: dict[str, Any]) -> str:
    """The commit a figure is of, with the uncommitted files in src/ that also count."""
    return m["commit"] + (f" + {m['src_changes']} uncommitted file(s) in src/" if m["src_changes"] else "")


def write_numbers(path: Path, res: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=2) + "\n")
    say(f"numbers written to {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is reported")
    parser.add_argument("--quick", action="store_true", help="1 repeat and a 40-turn run (development)")
    parser.add_argument("--turns", type=int, help="length of the per-turn run (default 150, --quick 40)")
    parser.add_argument("--iters", type=int, default=40, help="timed iterations per floor loop")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="SANDBOX/ROUTE list; sandboxed ones are skipped when bwrap does not work here")
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (artifacts, stderr of each run)")
    parser.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                        help="first wait up to this long for the machine to be idle (CPU < 25%% over 3 s)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.iters = 1, min(args.iters, 20)
    args.turns = args.turns or (40 if args.quick else 150)
    if args.turns < 26:
        parser.error("--turns must be at least 26")
    try:
        [Variant.parse(v) for v in args.variants.split(",") if v]
    except ValueError as exc:
        parser.error(str(exc))
    if args.wait_idle > 0:
        wait_idle(args.wait_idle)
    become_subreaper()
    started = time.monotonic()
    with workspace(args.keep) as tmp:
        res = run_all(args, tmp)
    res["machine"] = machine()
    res["elapsed_s"] = time.monotonic() - started
    m = res["machine"]
    print(f"\nprime-ci benchmarks, {m['date']}, {m['machine']}, {m['nproc']} cores, Python {m['python']}; "
          f"median of {res['repeat']}; {res['turns']}-turn run; took {res['elapsed_s']:.0f} s; prime-ci at "
          f"{measured_at(m)}\n")
    print(render(res))
    load = f"load average (1 min) {res['loadavg_before'][0]:.2f} before, {res['loadavg_after'][0]:.2f} after"
    busy = res["loadavg_before"][0] > 0.5 * (os.cpu_count() or 1)
    print(f"\n{load}" + (": the machine was busy, figures are noisy" if busy else ""))
    if res["problems"]:
        print("\nproblems:\n" + "\n".join(f"- {p}" for p in res["problems"]))
    if res["unreaped_zombies"]:
        print("\nexited but unreaped when their parent exited (re-parented here as zombies): "
              + "; ".join(res["unreaped_zombies"]))
    if args.json:
        rows = [r.__dict__ for r in target_rows(res)]
        args.json.write_text(json.dumps({**res, "table": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
