"""The raw floor, run as a separate process so its memory and imports are its own.

    python benchmarks/floor.py --url URL --template T.json --client httpx|litellm --history 10,150 --iters 40

Times a stock kernel start (jupyter_client's ``start_new_async_kernel``), then starts one kernel
(``prime_ci.kernel.Kernel``, no preload, no snapshots, also timed) and times, at each history size N:
one model call alone, one trivial cell (``pass``) alone, and a turn (call + cell) in a loop. The model call is
a plain OpenAI-format POST with httpx, or a litellm ``acompletion`` (the call prime-ci makes) plus a sync
``completion`` (reported separately). Prints one JSON object on stdout. Only loopback is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

WARMUP = 3


def history(template: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """System prompt + task + n turns, each an `ipython("pass")` call and its "(no output)" result."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": template["system"]},
        {"role": "user", "content": template["task"]},
    ]
    for i in range(n):
        call_id = f"call_{i}_0"
        fn = {"name": "ipython", "arguments": json.dumps({"code": "pass"})}
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [{"id": call_id, "type": "function", "function": fn}]})  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "(no output)"})
    return messages


async def timed_loop(step: Callable[[], Awaitable[Any]], iters: int) -> list[float]:
    """Per-iteration wall time of `step`, after WARMUP untimed iterations."""
    for _ in range(WARMUP):
        await step()
    times = []
    for _ in range(iters):
        t = time.monotonic()
        await step()
        times.append(time.monotonic() - t)
    return times


async def stock_kernel_start(cwd: Path, env: dict[str, str]) -> float:
    """A kernel started the standard way: jupyter_client's ``start_new_async_kernel`` (the ``python3`` kernel
    spec, ``python -m ipykernel_launcher``) until its client's ``wait_for_ready`` returns."""
    from jupyter_client.manager import start_new_async_kernel

    t = time.monotonic()
    manager, client = await start_new_async_kernel(kernel_name="python3", cwd=str(cwd), env=env)
    elapsed = time.monotonic() - t
    client.stop_channels()
    await manager.shutdown_kernel(now=True)
    return elapsed


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    template = json.loads(Path(args.template).read_text())
    result: dict[str, Any] = {"client": args.client, "pid": os.getpid()}
    sizes = [int(x) for x in args.history.split(",")]

    call: Callable[[list[dict[str, Any]]], Awaitable[Any]]
    sync_call: Callable[[list[dict[str, Any]]], Any] | None = None
    if args.client == "httpx":
        import httpx

        client = httpx.AsyncClient(base_url=args.url, timeout=30, trust_env=False)

        async def call(messages: list[dict[str, Any]]) -> Any:
            body = {"model": "scripted", "messages": messages, "tools": template["tools"], "tool_choice": "auto",
                    "max_tokens": 4096}  # fmt: skip
            response = await client.post("/chat/completions", json=body)
            response.raise_for_status()
            return response.json()

    else:
        t = time.monotonic()
        import litellm

        result["import_s"] = time.monotonic() - t
        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.drop_params = True
        kw = {"model": "openai/scripted", "api_base": args.url, "api_key": "sk-bench-not-a-key",
              "tools": template["tools"], "tool_choice": "auto", "max_tokens": 4096, "max_retries": 0,
              "num_retries": 0}  # fmt: skip

        async def call(messages: list[dict[str, Any]]) -> Any:
            return await litellm.acompletion(messages=messages, **kw)

        def sync_call(messages: list[dict[str, Any]]) -> Any:
            return litellm.completion(messages=messages, **kw)

    from prime_ci.isolation.limits import resolve as resolve_limits
    from prime_ci.kernel.client import Kernel, KernelConfig

    with tempfile.TemporaryDirectory(prefix="prime-ci-bench-floor-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
        if not args.turns_only:
            result["stock_kernel_start_s"] = await stock_kernel_start(Path(tmp), env)
        kernel = Kernel(KernelConfig(cwd=Path(tmp), env=env, run_dir=Path(tmp), limits=resolve_limits(None)))
        t = time.monotonic()
        await kernel.start()
        result["kernel_start_s"] = time.monotonic() - t
        result["kernel_pid"] = kernel.pid
        try:

            async def cell() -> None:
                r = await kernel.execute("pass", timeout=30)
                if not r.ok:
                    raise RuntimeError(f"floor cell failed: {r.text}")

            if not args.turns_only:
                result["cell_s"] = statistics.median(await timed_loop(cell, args.iters))
            for n in sizes:
                messages = history(template, n)

                async def one_call(messages: list[dict[str, Any]] = messages) -> None:
                    await call(messages)

                async def turn(messages: list[dict[str, Any]] = messages) -> None:
                    await call(messages)
                    await cell()

                result[f"turn_s_{n}"] = statistics.median(await timed_loop(turn, args.iters))
                if args.turns_only:
                    continue
                result[f"call_s_{n}"] = statistics.median(await timed_loop(one_call, args.iters))
                if sync_call is not None:

                    async def sync_one(messages: list[dict[str, Any]] = messages) -> None:
                        assert sync_call is not None
                        sync_call(messages)

                    result[f"sync_call_s_{n}"] = statistics.median(await timed_loop(sync_one, args.iters))
        finally:
            await kernel.shutdown()
    if args.client == "httpx":
        await client.aclose()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--template", required=True)
    parser.add_argument("--client", choices=["httpx", "litellm"], default="httpx")
    parser.add_argument("--history", default="10,150")
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--turns-only", action="store_true",
                        help="only the turn loops (the floor taken right beside each prime-ci turn run)")
    args = parser.parse_args()
    result = asyncio.run(measure(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
