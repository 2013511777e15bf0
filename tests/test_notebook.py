"""cells.ipynb from a real kernel: valid nbformat, written after every cell, re-runnable with the same output."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from pathlib import Path
from typing import Any

import nbformat as _nbformat
import pytest

from prime_ci.artifacts.notebook import NotebookWriter
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.redact import register
from prime_ci.kernel.client import CellResult, Kernel, KernelConfig

nbformat: Any = _nbformat

CELLS = [
    "print('hello')",
    "x = 21\nx * 2",
    "import sys\nprint('to stderr', file=sys.stderr)\nfor i in range(3):\n    print(i, flush=True)",
    "from IPython.display import display\ndisplay('shown')\nprint('after display')",
    "print('before the error')\n1 / 0",
    "print(x + 1)",
    "print('z' * 300_000)",
]


def _run(tmp: Path, cells: list[str], name: str) -> list[CellResult]:
    async def scenario() -> list[CellResult]:
        kernel = Kernel(KernelConfig(cwd=tmp, env={"PATH": os.environ["PATH"], "HOME": str(tmp)}, run_dir=tmp / name,
                                     limits=Limits()))
        await kernel.start()
        try:
            return [await kernel.execute(code, timeout=60) for code in cells]
        finally:
            await kernel.shutdown()

    return asyncio.run(scenario())


def _text(outputs: list[Any], kind: str, name: str = "") -> str:
    parts = []
    for out in outputs:
        if out["output_type"] == kind == "stream" and out["name"] == name:
            parts.append(out["text"])
        elif out["output_type"] == kind and kind in ("execute_result", "display_data"):
            parts.append(out["data"]["text/plain"])
        elif out["output_type"] == kind == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
    return "".join(parts)


def test_notebook_of_real_cells_validates_and_reexecutes(tmp_path: Path) -> None:
    results = _run(tmp_path, CELLS, "first")
    path = tmp_path / "cells.ipynb"
    writer = NotebookWriter(path)
    assert nbformat.read(path, as_version=4).cells == []
    for count, (code, result) in enumerate(zip(CELLS, results, strict=True), 1):
        writer.add(code, result.outputs, count)
        writer.flush()
        on_disk = nbformat.read(path, as_version=4)
        nbformat.validate(on_disk)
        assert len(on_disk.cells) == count, "written after every cell"

    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.kernelspec.name == "python3" and nb.metadata.language_info.name == "python"
    stored = [cell.outputs for cell in nb.cells]
    assert [cell.execution_count for cell in nb.cells] == list(range(1, len(CELLS) + 1))
    assert _text(stored[0], "stream", "stdout") == "hello\n"
    assert _text(stored[1], "execute_result") == "42" and stored[1][0]["execution_count"] == 2
    assert _text(stored[2], "stream", "stdout") == "0\n1\n2\n" and _text(stored[2], "stream", "stderr") == "to stderr\n"
    assert _text(stored[3], "display_data") == "'shown'"
    assert _text(stored[4], "error") == "ZeroDivisionError: division by zero"
    assert _text(stored[5], "stream", "stdout") == "22\n"

    big = stored[6]
    assert len(json.dumps(big)) <= 100_000
    assert "characters of this cell's output were not stored" in _text(big, "stream", "stderr")
    assert _text(big, "stream", "stdout").startswith("z" * 90_000)

    rerun = _run(tmp_path, [cell.source for cell in nb.cells if cell.cell_type == "code"], "second")
    for i, (cell, fresh) in enumerate(zip(nb.cells, rerun, strict=True)):
        if i == 6:
            assert _text(fresh.outputs, "stream", "stdout").startswith(_text(cell.outputs, "stream", "stdout"))
            continue
        for kind, name in (("stream", "stdout"), ("stream", "stderr"), ("execute_result", ""),
                           ("display_data", ""), ("error", "")):  # fmt: skip
            assert _text(fresh.outputs, kind, name) == _text(cell.outputs, kind, name), (i, kind, name)


def test_outputs_are_normalised_and_capped(tmp_path: Path) -> None:
    path = tmp_path / "cells.ipynb"
    writer = NotebookWriter(path, max_cell_output=2_000)
    chunks: list[dict[str, Any]] = [{"output_type": "stream", "name": "stdout", "text": f"line {i}\n"}
                                    for i in range(5)]  # fmt: skip
    writer.add("for i in range(5): print(f'line {i}')", chunks, 1)
    flood = [{"output_type": "stream", "name": "stdout", "text": "\\" * 900}] * 4
    writer.add("flood()", [*flood, {"output_type": "execute_result", "data": {"text/plain": "1"}}], 2)
    writer.flush()
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert [o["text"] for o in nb.cells[0].outputs] == ["".join(f"line {i}\n" for i in range(5))]
    assert len(json.dumps(nb.cells[1].outputs)) <= 2_000
    assert nb.cells[1].outputs[-1]["name"] == "stderr" and "not stored" in nb.cells[1].outputs[-1]["text"]
    secret = "nb-" + secrets.token_hex(12)
    register(secret)
    writer.add(f"print('{secret}')", [{"output_type": "stream", "name": "stdout", "text": secret + "\n"}], 3)
    writer.flush()
    assert secret not in path.read_text() and nbformat.read(path, as_version=4).cells[2].outputs[0]["text"] == (
        "[REDACTED]\n")
    with pytest.raises(ValueError, match="not an nbformat v4 output type"):
        writer.add("x", [{"output_type": "clear_output"}], 4)
    assert writer.cells == 3
