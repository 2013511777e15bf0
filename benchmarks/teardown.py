"""Removing a worktree that holds a uv environment (issue 38), against ``rm -rf`` of the same tree in the same run.
Not a test: it reports.

    python benchmarks/teardown.py [--entries 40000] [--repeat 3] [--baseline OTHER/src] [--json FILE]

Each round builds identical trees shaped like a worktree with a ``.venv`` (``bin/`` with scripts and a ``python``
symlink out of the tree, ``lib64 -> lib``, ``site-packages`` of packages nested three levels deep with modules,
``__pycache__`` and ``dist-info``), one per variant, all written and synced before any is timed. ``rm`` is
``rm -rf`` of ``work/`` (process wall time); ``prime-ci`` is ``Worktree.clear()`` on it, which is what a
run's teardown calls, in a fresh process (this checkout, or ``--baseline SRC`` for another). Each variant runs once
per round, in an order rotated every round. Two figures each: ``returned``, until the removal returns (what a run
waits for), and ``synced``, until a ``sync`` after it is done too (what it left to write back is charged to it,
never to the next variant: on ext4 mounted with ``discard`` that is most of the work, and when it lands is luck).
Reported: the median time and the median of the rounds' ratios to ``rm`` (a shared disk makes whole rounds slower
or faster together). ``--dir /dev/shm`` takes the disk out: what is left is each variant's own cost in system
calls and CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import machine, measured_at, say, write_numbers

HERE = Path(__file__).resolve().parent
METRICS = ("returned", "synced")  # until the removal returns (what a run waits for); until a sync after it is done
CLEAR = """
import sys, time
from pathlib import Path
from prime_ci.isolation.worktree import Worktree
root = Path(sys.argv[1])
wt = Worktree(path=root / "work", git_dir=root / "git", base_commit="", root=root, source="")
started = time.monotonic()
count = wt.clear()
print(time.monotonic() - started, count)
"""


def build(root: Path, entries: int) -> int:
    """A worktree root (``work/`` with a uv-like ``.venv``, and ``git/``, which teardown keeps): how many
    entries ``work/`` holds."""
    work = root / "work"
    venv = work / ".venv"
    (root / "git").mkdir(parents=True)
    (venv / "bin").mkdir(parents=True)
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (venv / "lib64").symlink_to("lib")
    (venv / "bin" / "python").symlink_to(sys.executable)  # out of the tree: removed, never followed
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    count = 7  # work, .venv, bin, lib, python3.12, site-packages, lib64 ... and the files below
    for i in range(40):
        (venv / "bin" / f"tool{i}").write_text("#!/bin/sh\nexec python -m tool\n")
    count += 42
    package = 0
    while count < entries:
        top = site / f"pkg{package}"
        info = site / f"pkg{package}-1.0.dist-info"
        info.mkdir()
        for name in ("METADATA", "RECORD", "WHEEL", "INSTALLER"):
            (info / name).write_bytes(b"m" * (300 + 40 * package % 900))
        count += 5
        for a in range(3):
            for b in range(3):
                leaf = top / f"sub{a}" / f"mod{b}"
                cache = leaf / "__pycache__"
                cache.mkdir(parents=True)
                count += 2
                for f in range(8):
                    (leaf / f"m{f}.py").write_bytes(b"x" * (120 + 211 * f))
                    (cache / f"m{f}.cpython-312.pyc").write_bytes(b"y" * (200 + 150 * f))
                    count += 2
            count += 1  # sub{a}
        count += 1  # pkg
        package += 1
    return count


def time_rm(root: Path) -> float:
    started = time.monotonic()
    subprocess.run(["rm", "-rf", "--", str(root / "work")], check=True)
    return time.monotonic() - started


def time_clear(root: Path, src: Path) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", CLEAR, str(root)], env=env, check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[0]), int(out[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout's src/: also measured (rows base)")
    parser.add_argument("--dir", type=Path, help="where the trees are built (default: the temp directory)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "teardown.json")
    args = parser.parse_args()
    variants = ["rm", "prime-ci"] + (["base"] if args.baseline else [])
    samples: dict[str, dict[str, list[float]]] = {m: {v: [] for v in variants} for m in METRICS}
    removed: dict[str, int] = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="prime-ci-bench-teardown-", dir=args.dir) as tmp:
        for round_no in range(args.repeat):
            order = variants[round_no % len(variants):] + variants[:round_no % len(variants)]
            roots = {v: Path(tmp) / f"{round_no}-{v}" for v in order}
            made = {v: build(roots[v], args.entries) for v in order}
            os.sync()
            for variant in order:
                if variant == "rm":
                    seconds = time_rm(roots[variant])
                else:
                    src = HERE.parent / "src" if variant == "prime-ci" else args.baseline
                    seconds, removed[variant] = time_clear(roots[variant], src)
                started = time.monotonic()
                os.sync()  # what the removal left to write back: charged to it here, never to the next one
                samples["returned"][variant].append(seconds)
                samples["synced"][variant].append(seconds + time.monotonic() - started)
                if (roots[variant] / "work").exists() or not Path(sys.executable).exists():
                    raise RuntimeError(f"{variant}: the tree is not gone, or a link out of it was followed")
            say(f"round {round_no + 1}: {made['rm']} entries; " + ", ".join(
                f"{v} {samples['returned'][v][-1]:.2f}s (synced {samples['synced'][v][-1]:.2f}s)" for v in variants))
    load.append(os.getloadavg()[0])
    rows: dict[str, dict[str, Any]] = {}
    for metric, by_variant in samples.items():
        for variant, times in by_variant.items():
            ratios = [x / r for x, r in zip(times, by_variant["rm"], strict=True)]
            rows[f"{variant} ({metric})"] = {"median_s": round(statistics.median(times), 3),
                                             "samples_s": [round(x, 3) for x in times],
                                             "ratio": round(statistics.median(ratios), 2)}
    m = machine()
    print(f"Removing a {args.entries}-entry worktree (uv-like .venv), {measured_at(m)}, load {load[0]:.1f} -> "
          f"{load[1]:.1f}, {args.repeat} round(s), in {args.dir or tempfile.gettempdir()}:\n")
    print("| variant | median | samples (s) | ÷ rm -rf (median of rounds) |\n|---|---|---|---|")
    for variant, row in rows.items():
        print(f"| {variant} | {row['median_s']:.2f} s | {', '.join(f'{x:.2f}' for x in row['samples_s'])} "
              f"| {row['ratio']:.2f}× |")
    result: dict[str, Any] = {"machine": m, "load": load, "entries": args.entries, "removed": removed, **rows}
    write_numbers(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
