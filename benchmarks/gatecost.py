"""What one pytest gate costs inside a run, against the same pytest run bare, in one run. Not a test: it reports.

    python benchmarks/gatecost.py [--repeat 5] [--modes off,auto] [--baseline OTHER/src] [--json FILE]

Floor: ``python -m pytest -q -p no:cacheprovider`` in a checkout of a one-test repository, with this
benchmark's interpreter and environment (``PYTHONDONTWRITEBYTECODE=1``, as on these machines and in many
images), wall time of the process. prime-ci: ``prime-ci run`` on the same repository with the same interpreter
(``--python``) and that command as its gate; the scripted model ends its turn at once, so there is one gate
round, and the figure is the round's ``duration_s`` in result.json (prime-ci's own clock around the round:
the gate's environment, limits, sandbox and pytest). Every variant runs once per round, in an order rotated
every round. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (
    PRIME_CI,
    PY,
    REPO_FILES,
    bench_env,
    machine,
    make_repo,
    measured_at,
    require_clean,
    say,
    workspace,
    write_numbers,
)
from tree import become_subreaper

from prime_ci.testing import ScriptedServer, reply

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "gatecost.json"
GATE = "python -m pytest -q -p no:cacheprovider"
TIMEOUT = 300.0


def floor(checkout: Path) -> float:
    started = time.monotonic()
    proc = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=checkout, env=bench_env(),
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"floor: pytest exit {proc.returncode}\n{proc.stdout[-2000:]}")
    return took


def gate_round(kind: str, tmp: Path, repo: Path, n: int, baseline: Path | None) -> float:
    out = tmp / f"out-{n}-{kind}"
    env = bench_env(OPENAI_API_KEY="sk-bench-not-a-key")
    if kind.startswith("base-") and baseline is not None:
        env["PYTHONPATH"] = str(baseline)
    with ScriptedServer([reply("done")], default=reply("done")) as srv:
        argv = [PRIME_CI, "run", str(repo), "--task", "Benchmark run: end the turn.", "--model", "openai/scripted",
                "--api-base", srv.url, "--out", str(out), "--sandbox", kind.removeprefix("base-"), "--python", PY,
                "--gate", GATE, "--max-gate-retries", "0"]
        proc = subprocess.run(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)
    require_clean(tmp, kind)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    result = json.loads((out / "result.json").read_text())
    sandboxed = not kind.endswith("off")
    if sandboxed and not str(result.get("sandbox")).startswith("on"):
        raise RuntimeError(f"{kind}: the run was not sandboxed: {result.get('sandbox')}")
    rounds = result["rounds"]
    if len(rounds) != 1 or not rounds[0]["passed"]:
        raise RuntimeError(f"{kind}: expected one passing gate round, got {rounds}")
    return float(rounds[0]["duration_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="rounds; every figure is the median (default 5)")
    parser.add_argument("--modes", default="off,auto", help="--sandbox values measured (default off,auto)")
    parser.add_argument("--baseline", type=Path, metavar="SRC",
                        help="also run every mode with PYTHONPATH=SRC (another checkout's src/): rows base-MODE")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"numbers file (default {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("off", "on", "auto") for m in modes):
        parser.error("--modes: a list of off, on, auto")
    if args.baseline is not None and not (args.baseline / "prime_ci" / "__init__.py").is_file():
        parser.error(f"--baseline: no prime_ci package in {args.baseline}")
    kinds = ["floor", *modes, *([f"base-{m}" for m in modes] if args.baseline is not None else [])]
    become_subreaper()
    load_before = os.getloadavg()
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    with workspace(False, prefix="prime-ci-bench-gate-") as tmp:
        repo = make_repo(tmp / "repo", REPO_FILES)
        checkout = tmp / "checkout"
        shutil.copytree(repo, checkout, ignore=shutil.ignore_patterns(".git"))
        for r in range(args.repeat):
            order = kinds[r % len(kinds):] + kinds[: r % len(kinds)]
            say(f"round {r + 1}/{args.repeat}: {', '.join(order)}")
            for kind in order:
                samples[kind].append(floor(checkout) if kind == "floor" else
                                     gate_round(kind, tmp, repo, r, args.baseline))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    res: dict[str, Any] = {
        "what": "one pytest gate round inside a run (result.json rounds[0].duration_s) against the same pytest "
                "run bare (process wall time); median of the rounds, each runs every variant once, rotated",
        "machine": machine(), "repeat": args.repeat, "gate": GATE, "medians_s": medians,
        "samples_s": {k: [round(x, 4) for x in v] for k, v in samples.items()},
        "ratios_to_floor": {k: medians[k] / medians["floor"] for k in kinds if k != "floor"},
        "baseline": str(args.baseline) if args.baseline else None,
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    m = res["machine"]
    print(f"\nprime-ci gate cost, {m['date']}, {m['nproc']} cores, Python {m['python']}, commit {measured_at(m)}; "
          f"median of {args.repeat} rounds; load average (1 min) {load_before[0]:.2f} before, "
          f"{res['loadavg_after'][0]:.2f} after\n")
    print("| variant | median | samples | ÷ floor |\n|---|---|---|---|")
    for kind in kinds:
        ratio = "1.00×" if kind == "floor" else f"{res['ratios_to_floor'][kind]:.2f}×"
        print(f"| {kind} | {medians[kind] * 1000:.0f} ms | "
              f"{', '.join(f'{x * 1000:.0f}' for x in samples[kind])} | {ratio} |")
    write_numbers(args.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
