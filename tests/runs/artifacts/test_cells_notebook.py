"""Issue 6 acceptance 6: cells.ipynb opens with nbformat and re-executes to the same printed outputs."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import nbformat

from conftest import run_inproc
from prime_ci.isolation.limits import Limits
from prime_ci.kernel.client import Kernel, KernelConfig
from prime_ci.kernel.output import cell_text
from prime_ci.testing import ScriptedServer, ipython, reply

CELLS = [
    "values = [n * n for n in range(6)]\nprint(values)",
    "import statistics\nprint('mean', statistics.mean(values))",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nprint([fib(i) for i in range(10)])",
    "print(open('calc.py').read())",
    "1 / 0",
    "sorted(values, reverse=True)",
]


async def _reexecute(cells: list[str], cwd: Path) -> list[str]:
    kernel = Kernel(KernelConfig(cwd=cwd, env={"PATH": os.environ["PATH"], "HOME": str(cwd)}, run_dir=cwd / ".k",
                                  limits=Limits()))
    await kernel.start()
    try:
        return [cell_text((await kernel.execute(code, timeout=30)).outputs) for code in cells]
    finally:
        await kernel.shutdown()


def test_notebook_reexecutes_to_the_same_outputs(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(*[ipython(code) for code in CELLS], reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server)
    assert run.code == 0, run.proc.stderr
    nb = nbformat.read(run.out / "cells.ipynb", as_version=4)
    nbformat.validate(nb)
    assert [c.source for c in nb.cells] == CELLS
    stored = [cell_text([dict(o) for o in c.outputs]) for c in nb.cells]
    fresh = asyncio.run(_reexecute([c.source for c in nb.cells], buggy_repo))

    def normal(text: str) -> str:  # tracebacks name the cell number of the kernel they ran in
        return "\n".join(line for line in text.splitlines() if not line.startswith("Cell In["))

    assert [normal(t) for t in fresh] == [normal(t) for t in stored]
    assert "[0, 1, 4, 9, 16, 25]" in stored[0] and "ZeroDivisionError" in stored[4]
