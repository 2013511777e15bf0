"""Prompt caching on the Anthropic route (issue 15): what share of each turn's prompt is served from the cache,
and what the run costs against the uncached price.

A 40-turn run of ``prime-ci run --model anthropic/claude-sonnet-4-5`` goes through litellm's real Messages
transformation to a ``ScriptedServer`` that simulates Anthropic's cache (breakpoints, 20-block lookback,
writes at every breakpoint); the same script runs again with ``--no-cache`` as the uncached baseline. Every
figure comes from the run's own session log (per-reply usage and cost). Not a test: nothing asserts.

    python benchmarks/cache.py [--turns 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from prime_ci.testing import ScriptedServer, ipython, reply

MODEL = "anthropic/claude-sonnet-4-5"
PRICE_IN, PRICE_OUT = 3e-6, 15e-6  # litellm's table for this model, USD per token (uncached)
FILES = {"calc.py": "def add(a, b):\n    return a - b\n",
         "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"}


def make_repo(root: Path) -> Path:
    root.mkdir(parents=True)
    for name, text in FILES.items():
        (root / name).write_text(text)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    return root


def script(turns: int) -> list[Any]:
    # cells whose output varies in size, like reading files and running tests
    cells = [ipython(f"print(open('calc.py').read() * {1 + i % 7})\nprint('step {i}: ' + 'x' * {200 + 37 * i})")
             for i in range(turns - 1)]
    return [*cells, reply("done")]


def run(tmp: Path, turns: int, *extra: str) -> list[dict[str, Any]]:
    repo = make_repo(tmp / f"repo{len(extra)}")
    out = tmp / f"out{len(extra)}"
    prime_ci = str(Path(sys.executable).parent / "prime-ci")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    env.update(ANTHROPIC_API_KEY="sk-ant-bench", LITELLM_LOCAL_MODEL_COST_MAP="True", NO_PROXY="127.0.0.1")
    with ScriptedServer(script(turns)) as srv:
        proc = subprocess.run([prime_ci, "run", str(repo), "--task", "Fix the failing test.", "--model", MODEL,
                               "--api-base", srv.root_url, "--max-turns", str(turns + 5), "--out", str(out), *extra],
                              env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    entries = [json.loads(line) for line in (out / "session.jsonl").read_text().splitlines()]
    return [e["message"]["usage"] for e in entries if e.get("type") == "message"
            and e["message"].get("role") == "assistant"]


def summarize(usages: list[dict[str, Any]], start: int) -> dict[str, Any]:
    prompts = [u["input"] + u["cacheRead"] + u["cacheWrite"] for u in usages]
    shares = [u["cacheRead"] / p if p else 0.0 for u, p in zip(usages, prompts, strict=True)]
    late = slice(start - 1, None)
    cost = sum(u["cost"]["total"] for u in usages)
    uncached = sum(p * PRICE_IN + u["output"] * PRICE_OUT for u, p in zip(usages, prompts, strict=True))
    return {"turns": len(usages), "prompt_tokens": sum(prompts),
            "cache_read_tokens": sum(u["cacheRead"] for u in usages),
            "cache_write_tokens": sum(u["cacheWrite"] for u in usages),
            "share_from_turn": start, "cache_share": sum(u["cacheRead"] for u in usages[late]) / sum(prompts[late]),
            "min_turn_share": min(shares[late]), "cost_usd": cost, "uncached_price_usd": uncached,
            "per_turn_share": [round(s, 3) for s in shares]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--from-turn", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="prime-ci-cache-bench-") as tmp:
        cached = summarize(run(Path(tmp), args.turns), args.from_turn)
        plain = summarize(run(Path(tmp), args.turns, "--no-cache"), args.from_turn)
    print(f"{MODEL}, {cached['turns']} turns, scripted Messages server with Anthropic's cache rules")
    print(f"{'':24}{'cached':>14}{'--no-cache':>14}")
    for key, label in (("prompt_tokens", "prompt tokens"), ("cache_read_tokens", "read from cache"),
                       ("cache_write_tokens", "written to cache")):
        print(f"{label:24}{cached[key]:>14,}{plain[key]:>14,}")
    label = f"share from cache, t>={args.from_turn}"
    print(f"{label:24}{cached['cache_share']:>14.1%}{plain['cache_share']:>14.1%}")
    print(f"{'lowest turn share':24}{cached['min_turn_share']:>14.1%}{plain['min_turn_share']:>14.1%}")
    print(f"{'cost (litellm)':24}{cached['cost_usd']:>14.6f}{plain['cost_usd']:>14.6f}")
    print(f"{'uncached price':24}{cached['uncached_price_usd']:>14.6f}{plain['uncached_price_usd']:>14.6f}")
    print(f"cost / uncached price: {cached['cost_usd'] / cached['uncached_price_usd']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"cached": cached, "no_cache": plain}, indent=2))


if __name__ == "__main__":
    main()
