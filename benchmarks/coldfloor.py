"""The raw cold-start floor, run as a fresh process: interpreter start, httpx, a kernel, one model request.

    python benchmarks/coldfloor.py --url URL --template T.json --kernel stock|own

The benchmark times this process from just before it is spawned to the scripted server's receipt of its one
chat request, the same span it times for ``prime-ci run``. ``stock``: jupyter_client's ``start_new_async_kernel``
(the ``python3`` kernel spec) until ``wait_for_ready`` returns, which is what starting a kernel costs anyone.
``own``: prime-ci's ``Kernel.start()`` without preload, sandbox or box (the kernel start prime-ci optimises).
The request carries the system prompt, the task and the ``ipython`` tool, like prime-ci's first one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any


async def start_kernel(kind: str, cwd: Path) -> Any:
    """Start a kernel in ``cwd``; returns a coroutine function that shuts it down."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_CI_")}
    if kind == "stock":
        from jupyter_client.manager import start_new_async_kernel

        manager, client = await start_new_async_kernel(kernel_name="python3", cwd=str(cwd), env=env)

        async def stop_stock() -> None:
            client.stop_channels()
            await manager.shutdown_kernel(now=True)

        return stop_stock
    from prime_ci.isolation.limits import resolve
    from prime_ci.kernel.client import Kernel, KernelConfig

    kernel = Kernel(KernelConfig(cwd=cwd, env=env, run_dir=cwd, limits=resolve(None)))
    await kernel.start()
    return kernel.shutdown


async def main_async(args: argparse.Namespace) -> None:
    import httpx

    template = json.loads(Path(args.template).read_text())
    with tempfile.TemporaryDirectory(prefix="prime-ci-bench-coldfloor-") as tmp:
        stop = await start_kernel(args.kernel, Path(tmp))
        try:
            async with httpx.AsyncClient(base_url=args.url, timeout=30, trust_env=False) as client:
                body = {"model": "scripted", "tool_choice": "auto", "max_tokens": 4096, "tools": template["tools"],
                        "messages": [{"role": "system", "content": template["system"]},
                                     {"role": "user", "content": template["task"]}]}
                response = await client.post("/chat/completions", json=body)
                response.raise_for_status()
        finally:
            await stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--template", required=True)
    parser.add_argument("--kernel", choices=["stock", "own"], default="stock")
    asyncio.run(main_async(parser.parse_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
