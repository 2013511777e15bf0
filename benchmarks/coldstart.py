"""Cold start with and without the sandbox, against a raw floor, in one run (issue 25). Not a test: it reports.

    python benchmarks/coldstart.py [--repeat 5] [--modes off,on,auto] [--json FILE]

Cold start = from just before ``subprocess.Popen`` of ``prime-ci run`` to a ``prime_ci.testing.ScriptedServer``
(a thread of this process, loopback) receiving the first chat request. Each mode and both raw floors (a fresh
process: httpx + a kernel + one request, ``coldfloor.py``) run once per round, in an order rotated every round,
so that a busy machine's drift falls on all of them alike. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (
    PRIME_CI,
    PY,
    REPO_FILES,
    TASK,
    bench_env,
    header_mono,
    machine,
    make_repo,
    measured_at,
    require_clean,
    say,
    workspace,
    write_numbers,
)
from tree import become_subreaper, kill_tree

from prime_ci.loop.agent import TOOL
from prime_ci.loop.system_prompt import base_prompt
from prime_ci.testing import ScriptedServer, reply

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "coldstart.json"
FLOORS = ("floor-stock", "floor-own")
TIMEOUT = 120.0
LIMIT = 1.1  # acceptance: sandboxed cold start <= 1.1 x --sandbox off


@dataclass
class Sample:
    first_request_s: float
    session_s: float | None = None  # launch -> session.jsonl created (imports, clone, settings, sandbox check)
    kernel_ready_s: float | None = None  # prime-ci's own line: setup done -> kernel ready
    cpu_s: float | None = None  # CPU (user + system) of every process of the run, start to exit


def spawn(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, int]:
    """Run ``argv`` to its end; the launch time (monotonic) and exit code."""
    with log.open("wb") as err:
        launched = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait()
    return launched, code


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one(kind: str, tmp: Path, repo: Path, template: Path, n: int, baseline: Path | None) -> Sample:
    cpu = children_cpu()
    with ScriptedServer([reply("done")], default=reply("done")) as srv:
        log = tmp / f"{n}-{kind}.stderr"
        if kind in FLOORS:
            argv = [PY, str(HERE / "coldfloor.py"), "--url", srv.url, "--template", str(template),
                    "--kernel", kind.removeprefix("floor-")]
            launched, code = spawn(argv, tmp, bench_env(), log)
            out = None
        else:
            out = tmp / f"out-{n}-{kind}"
            argv = [PRIME_CI, "run", str(repo), "--task", TASK, "--model", "openai/scripted", "--api-base", srv.url,
                    "--out", str(out), "--sandbox", kind.removeprefix("base-")]
            env = bench_env(OPENAI_API_KEY="sk-bench-not-a-key")
            if kind.startswith("base-") and baseline is not None:
                env["PYTHONPATH"] = str(baseline)
            launched, code = spawn(argv, tmp, env, log)
        requests = srv.chat_requests
    stderr = log.read_text(errors="replace")
    require_clean(tmp, kind)
    if code != 0 or not requests:
        raise RuntimeError(f"{kind}: exit {code}, {len(requests)} request(s)\n{stderr[-2000:]}")
    sample = Sample(requests[0].t - launched, cpu_s=children_cpu() - cpu)
    if out is not None:
        sample.session_s = header_mono(out / "session.jsonl") - launched
        sample.kernel_ready_s = _kernel_ready(stderr)
        status = str(json.loads((out / "result.json").read_text()).get("sandbox"))
        sandboxed = not kind.endswith("off")
        if sandboxed and not status.startswith("on"):
            raise RuntimeError(f"{kind}: the run was not sandboxed: {status}")
        if sandboxed and os.geteuid() == 0 and "host uid" not in status:
            raise RuntimeError(f"{kind}: as root, the sandbox kept root's uid: {status}")
    return sample


def _kernel_ready(stderr: str) -> float | None:
    for line in stderr.splitlines():
        if "kernel ready in " in line:
            return float(line.split("kernel ready in ", 1)[1].split("s", 1)[0])
    return None


def summary(samples: list[Sample]) -> dict[str, Any]:
    firsts = [s.first_request_s for s in samples]
    sessions = [s.session_s for s in samples if s.session_s is not None]
    return {"median_s": statistics.median(firsts), "min_s": min(firsts), "max_s": max(firsts),
            "samples_s": [round(x, 4) for x in firsts],
            "session_median_s": statistics.median(sessions) if sessions else None,
            "cpu_median_s": statistics.median(s.cpu_s for s in samples if s.cpu_s is not None),
            "kernel_ready_median_s": statistics.median(k for s in samples if (k := s.kernel_ready_s) is not None)
            if any(s.kernel_ready_s is not None for s in samples) else None}


def render(res: dict[str, Any]) -> str:
    fig = res["figures"]
    floor = fig.get("floor-stock", {}).get("median_s")
    lines = ["| variant | median | min – max | samples (round order) | ÷ off | ÷ raw floor (stock) "
             "| launch → session log | run CPU |", "|---|---|---|---|---|---|---|---|"]
    for kind in res["order"]:
        f = fig[kind]
        off = fig.get(off_of(kind), {}).get("median_s")
        lines.append(" | ".join([
            f"| {kind}", ms(f["median_s"]), f"{ms(f['min_s'])} – {ms(f['max_s'])}",
            ", ".join(f"{x * 1000:.0f}" for x in f["samples_s"]), ratio(f["median_s"], off),
            ratio(f["median_s"], floor), ms(f.get("session_median_s")), ms(f.get("cpu_median_s"))]) + " |")
    return "\n".join(lines) + "\n\n" + "; ".join(verdicts(res))


def verdicts(res: dict[str, Any]) -> list[str]:
    out = []
    for kind, value in res["ratios_to_off"].items():
        paired = res["paired_ratios_to_off"][kind]
        out.append(f"{kind} ÷ {off_of(kind)} {value:.2f}× ({'pass' if value <= LIMIT else 'FAIL'}, target ≤ {LIMIT}×; "
                   f"per round {', '.join(f'{r:.2f}' for r in paired)}, median {statistics.median(paired):.2f}×)")
    return out


def off_of(kind: str) -> str:
    return "base-off" if kind.startswith("base-") else "off"


def ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1000:.0f} ms"


def ratio(x: float, of: float | None) -> str:
    return f"{x / of:.2f}×" if of else "—"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="rounds; every figure is the median (default 5)")
    parser.add_argument("--modes", default="off,on,auto", help="--sandbox values measured (default off,on,auto)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"numbers file (default {DEFAULT_JSON})")
    parser.add_argument("--baseline", type=Path, metavar="SRC",
                        help="also run every mode with PYTHONPATH=SRC (another checkout's src/): rows base-MODE")
    parser.add_argument("--nice", type=int, default=0,
                        help="run this benchmark and everything it starts at this niceness (negative: root only), "
                             "so that other jobs on a shared machine disturb it less")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (each run's stderr and artifacts)")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("off", "on", "auto") for m in modes):
        parser.error("--modes: a list of off, on, auto")
    if args.baseline is not None and not (args.baseline / "prime_ci" / "__init__.py").is_file():
        parser.error(f"--baseline: no prime_ci package in {args.baseline}")
    base = [f"base-{m}" for m in modes] if args.baseline is not None else []
    kinds = [*FLOORS, *modes, *base]
    if args.nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # inherited by every process it starts
    become_subreaper()
    load_before = os.getloadavg()
    started = time.monotonic()
    samples: dict[str, list[Sample]] = {k: [] for k in kinds}
    rounds: list[list[str]] = []
    with workspace(args.keep, prefix="prime-ci-bench-cold-") as tmp:
        template = tmp / "template.json"
        template.write_text(json.dumps({"system": base_prompt(), "task": TASK, "tools": [TOOL]}))
        repo = make_repo(tmp / "repo", REPO_FILES)
        for r in range(args.repeat):
            order = kinds[r % len(kinds):] + kinds[: r % len(kinds)]
            rounds.append(order)
            say(f"round {r + 1}/{args.repeat}: {', '.join(order)}")
            for kind in order:
                samples[kind].append(one(kind, tmp, repo, template, r, args.baseline))
    figures = {k: summary(v) for k, v in samples.items()}
    sandboxed = [k for k in [*modes, *base] if not k.endswith("off") and off_of(k) in figures]
    res: dict[str, Any] = {
        "what": "cold start: launch of the process -> first model request received by a ScriptedServer; "
                "median of the rounds, each round runs every variant once in a rotated order",
        "machine": machine(), "repeat": args.repeat, "order": kinds, "rounds": rounds, "figures": figures,
        "ratios_to_off": {k: figures[k]["median_s"] / figures[off_of(k)]["median_s"] for k in sandboxed},
        # each round's sandboxed run against the same round's run without the sandbox
        "paired_ratios_to_off": {k: [round(a.first_request_s / b.first_request_s, 3)
                                     for a, b in zip(samples[k], samples[off_of(k)], strict=True)]
                                 for k in sandboxed},
        "baseline": str(args.baseline) if args.baseline else None, "nice": args.nice,
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    m = res["machine"]
    print(f"\nprime-ci cold start, {m['date']}, {m['nproc']} cores, Python {m['python']}, commit {measured_at(m)}"
          + (f"; niceness {args.nice}" if args.nice else "")
          + f"; median of {args.repeat} rounds, took {res['elapsed_s']:.0f} s; load average (1 min) "
          f"{load_before[0]:.2f} before, {res['loadavg_after'][0]:.2f} after\n")
    print(render(res))
    write_numbers(args.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
