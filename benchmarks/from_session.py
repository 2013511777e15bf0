"""How long ``--from-session`` takes to load a long session (issue 37: under 5 s for 100,000 entries). Not a test:
it reports.

    python benchmarks/from_session.py [--entries 100000] [--repeat 3] [--baseline OTHER/src] [--json FILE]

Two sessions of N entries each, written as Prime Agent writes them (a header, then ``message`` entries chained by
``parentId``):

- ``conversation``: turns of a user message, an assistant message with a text part and a tool call, and the
  call's result; the active branch is the whole file.
- ``leaf-first``: every entry names the entry after it as its parent and the last one is a new root, so all but
  the leaf are off the active branch and each one's walk to the root passes every entry after it (the crafted
  session of issue 37: 239 s when that walk was quadratic).

Figures, each the median of ``--repeat`` samples, every sample in a fresh interpreter:

- ``load``: ``engine.from_session.load_origin`` (read, checks, the active branch, the context): what the run's
  wall clock charges before it starts (``Origin.load_s``);
- ``write``: ``Continuation.write`` into a new session log (every context entry written again, new ids, checksums,
  redaction): the first thing the run does with it, inside its clock.

Each is given as wall time and as the CPU time of the measuring process (``time.process_time``), which other work
on a shared machine disturbs much less.

``--baseline SRC`` runs the same with ``PYTHONPATH=SRC`` (e.g. ``git archive REV src | tar -x -C /tmp/old``); a
sample that takes longer than ``--timeout`` seconds is reported as such. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import machine, measured_at, say, write_numbers

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "from_session.json"
SHAPES = ("conversation", "leaf-first")
TARGET_S = 5.0

# Run in a fresh interpreter: argv = session file, out dir; prints wall and CPU seconds of each step.
MEASURE = """
import json, sys, time
from pathlib import Path
from prime_ci.engine.from_session import Continuation, load_origin
from prime_ci.session.log import SessionLog
started, cpu0 = time.monotonic(), time.process_time()
origin = load_origin(Path(sys.argv[1]))
loaded, cpu1 = time.monotonic(), time.process_time()
log = SessionLog.create(Path(sys.argv[2]) / "session.jsonl", cwd="/bench")
written, cpu2 = time.monotonic(), time.process_time()
Continuation(origin, log).write("note")
log.close()
done, cpu3 = time.monotonic(), time.process_time()
print(json.dumps({"load_s": loaded - started, "write_s": done - written, "load_cpu_s": cpu1 - cpu0,
                  "write_cpu_s": cpu3 - cpu2, "context": len(origin.after)}))
"""


def entry(i: int, parent: str | None, message: dict[str, Any]) -> str:
    return json.dumps({"type": "message", "id": f"e{i:07d}", "parentId": parent,
                       "timestamp": "2026-12-01T00:00:00.000Z", "message": message}, separators=(",", ":"))


def turn_message(i: int) -> dict[str, Any]:
    """The i-th message of a conversation: user, assistant with a tool call, the call's result, ..."""
    if i % 3 == 0:
        return {"role": "user", "content": [{"type": "text", "text": f"step {i}: go on"}], "timestamp": 1}
    if i % 3 == 1:
        return {"role": "assistant", "content": [{"type": "text", "text": f"running step {i}"}, {
            "type": "toolCall", "id": f"call_{i}", "name": "ipython", "arguments": {"code": f"x = {i}\nprint(x)"}}],
            "api": "openai-completions", "provider": "openai", "model": "m", "stopReason": "toolUse",
            "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15},
            "timestamp": 2}
    return {"role": "toolResult", "toolCallId": f"call_{i - 1}", "toolName": "ipython",
            "content": [{"type": "text", "text": f"{i - 1}\n"}], "isError": False, "timestamp": 3}


def write_session(path: Path, shape: str, n: int) -> None:
    header = {"type": "session", "version": 3, "id": "bench", "timestamp": "2026-12-01T00:00:00.000Z", "cwd": "/b"}
    with path.open("w") as f:
        f.write(json.dumps(header) + "\n")
        for i in range(n):
            if shape == "conversation":
                parent = f"e{i - 1:07d}" if i else None
            else:  # leaf-first: each entry's parent is the next one; the last starts a new root
                parent = f"e{i + 1:07d}" if i < n - 1 else None
            f.write(entry(i, parent, turn_message(i)) + "\n")


def sample(session: Path, src: str | None, timeout: float) -> dict[str, Any] | None:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    with tempfile.TemporaryDirectory(prefix="pci-bench-from-") as out:
        try:
            proc = subprocess.run([sys.executable, "-c", MEASURE, str(session), out], env=env, capture_output=True,
                                  text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return None
    if proc.returncode != 0:
        raise RuntimeError(f"measurement failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


def fmt(value: float | None, timeout: float) -> str:
    return f"> {timeout:.0f} s" if value is None else f"{value:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000, help="entries per session (default 100000)")
    parser.add_argument("--repeat", type=int, default=3, help="samples per figure; the median is reported")
    parser.add_argument("--baseline", metavar="SRC", help="also measure another checkout's src (PYTHONPATH)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a sample is given up")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"numbers file (default {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    variants = {"this": None, **({"base": args.baseline} if args.baseline else {})}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pci-bench-sessions-") as tmp:
        for shape in SHAPES:
            session = Path(tmp) / f"{shape}.jsonl"
            write_session(session, shape, args.entries)
            for name, src in variants.items():
                samples = []
                for k in range(args.repeat):
                    figures = sample(session, src, args.timeout)
                    say(f"{shape} {name} #{k + 1}: " + (json.dumps(figures) if figures else "timed out"))
                    samples.append(figures)
                    if figures is None:
                        break  # the next would time out too
                done = [s for s in samples if s is not None]
                results[f"{shape}/{name}"] = {
                    **{f"{key}_median_s": statistics.median(s[f"{key}_s"] for s in done) if done else None
                       for key in ("load", "write", "load_cpu", "write_cpu")},
                    "samples": samples, "size_bytes": session.stat().st_size}
    m = machine()
    print(f"\n--from-session, {args.entries} entries, median of {args.repeat}, {measured_at(m)}, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("| session | variant | load | load, CPU | write into the new session | write, CPU | load + write |")
    print("|---|---|---|---|---|---|---|")
    for key, r in results.items():
        shape, name = key.split("/")
        load, write = r["load_median_s"], r["write_median_s"]
        total = None if load is None or write is None else load + write
        print(f"| {shape} | {name} | {fmt(load, args.timeout)} | {fmt(r['load_cpu_median_s'], args.timeout)} "
              f"| {fmt(write, args.timeout)} | {fmt(r['write_cpu_median_s'], args.timeout)} "
              f"| {fmt(total, args.timeout)} |")
    print(f"\ntarget: load under {TARGET_S:.0f} s for {args.entries} entries")
    write_numbers(args.json, {"what": "--from-session load (load_origin) and the write into the new session, "
                                      "median seconds", "entries": args.entries, "repeat": args.repeat,
                              "machine": m, "loadavg": os.getloadavg()[0], "baseline": args.baseline,
                              "target_load_s": TARGET_S, "figures": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
