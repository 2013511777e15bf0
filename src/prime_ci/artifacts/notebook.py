"""``cells.ipynb``: the executed cells with their outputs, re-runnable (DESIGN §5).

The notebook is rewritten atomically after every cell, so a crash leaves the previous complete notebook;
each new cell is serialised once, with secrets redacted. The shapes (nbformat 4.5) are fixed here and the tests
validate what this writes with nbformat: importing nbformat and validating a notebook header cost ~0.15 s of
CPU per run, for a constant.
Outputs are stored without terminal control sequences (colours, titles, progress-bar redraws).
Each cell's stored outputs are capped (``max_cell_output`` characters of JSON) so a rewrite stays
proportional to the number of cells; whatever is cut is counted in a note appended to the cell's outputs.
"""

from __future__ import annotations

import json
import platform
import secrets
import time
from pathlib import Path
from typing import Any

from prime_ci.isolation import durable
from prime_ci.isolation.redact import redact
from prime_ci.isolation.untrusted import clean_terminal_text

NBFORMAT, NBFORMAT_MINOR = 4, 5  # the minor version that gives cells an "id"
REWRITE_EVERY = 1.0
MAX_CELL_OUTPUT = 100_000
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
_NOTE_ROOM = 200


class NotebookWriter:
    """Builds an nbformat v4 notebook one executed cell at a time and keeps it on disk."""

    def __init__(self, path: Path, *, max_cell_output: int = MAX_CELL_OUTPUT, keep_existing: bool = False) -> None:
        self.path = path
        self.max_cell_output = max_cell_output
        metadata = {"kernelspec": dict(KERNELSPEC),
                    "language_info": {"name": "python", "version": platform.python_version()}}
        # everything but the cells, as a JSON object body: '"metadata": {...}, "nbformat": 4, ...}'
        rest = {"metadata": metadata, "nbformat": NBFORMAT, "nbformat_minor": NBFORMAT_MINOR}
        self._rest = json.dumps(rest, sort_keys=True, indent=1)[1:]
        self._cells: list[str] = []  # each cell serialised (and redacted) once
        if keep_existing and path.is_file():  # a resumed run continues the notebook of the interrupted one
            old = json.loads(path.read_text(encoding="utf-8"))
            self._cells = [json.dumps(c, sort_keys=True, indent=1, ensure_ascii=False) for c in old.get("cells", [])]
        self._written = 0.0
        self.flush()

    @property
    def cells(self) -> int:
        return len(self._cells)

    def add(self, code: str, outputs: list[dict[str, Any]], execution_count: int) -> None:
        """Append a code cell; ``outputs`` as in ``kernel.CellResult.outputs`` (nbformat v4 output dicts)."""
        stored = _cap([_output(o, execution_count) for o in _merge_streams(outputs)], self.max_cell_output)
        # Plain v4 dicts: nbformat's per-object jsonschema validation cost more than a whole turn of prime-ci's
        # own work.
        cell = {"cell_type": "code", "execution_count": execution_count, "id": secrets.token_hex(8),
                "metadata": {}, "outputs": stored, "source": code}
        self._cells.append(redact(json.dumps(cell, sort_keys=True, indent=1, ensure_ascii=False)))
        if time.monotonic() - self._written >= REWRITE_EVERY:
            self.flush(sync=False)

    def flush(self, *, sync: bool = True) -> None:
        """Rewrite the file (atomically). Per cell it is rewritten at most once a second without fsync: it is
        derived data; the session log is the durable record. The run's end flushes with fsync."""
        # A rewrite only joins the already serialised cells: validating and re-encoding the whole notebook
        # on every cell made each rewrite several times slower. Sources stay single strings (v4 allows it).
        text = '{\n"cells": [\n' + ",\n".join(self._cells) + "\n]," + self._rest + "\n"
        durable.write(self.path, text, redacted=True, sync=sync)  # each cell was redacted once, in add()
        self._written = time.monotonic()


def _merge_streams(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive stream chunks of the same name become one output, as Jupyter front ends store them."""
    merged: list[dict[str, Any]] = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (out.get("output_type") == "stream" and prev is not None and prev.get("output_type") == "stream"
                and prev.get("name") == out.get("name")):  # fmt: skip
            merged[-1] = {**prev, "text": prev["text"] + out.get("text", "")}
        else:
            merged.append(out)
    return merged


def _output(out: dict[str, Any], execution_count: int) -> Any:
    kind = out.get("output_type")
    if kind == "stream":
        name = out.get("name") if out.get("name") in ("stdout", "stderr") else "stdout"
        return {"output_type": "stream", "name": name, "text": clean_terminal_text(str(out.get("text", "")))}
    if kind in ("execute_result", "display_data"):
        data = {str(k): v if isinstance(v, dict | list) else clean_terminal_text(str(v))
                for k, v in (out.get("data") or {}).items()}
        metadata = out.get("metadata") if isinstance(out.get("metadata"), dict) else {}
        if kind == "display_data":
            return {"output_type": "display_data", "data": data, "metadata": metadata}
        count = out.get("execution_count")
        return {"output_type": "execute_result", "data": data, "metadata": metadata,
                "execution_count": count if isinstance(count, int) else execution_count}
    if kind == "error":
        return {"output_type": "error", "ename": clean_terminal_text(str(out.get("ename", ""))),
                "evalue": clean_terminal_text(str(out.get("evalue", ""))),
                "traceback": [clean_terminal_text(str(line)) for line in out.get("traceback", [])]}
    raise ValueError(f"not an nbformat v4 output type: {kind!r}")


def _size(out: Any) -> int:
    return len(json.dumps(out, ensure_ascii=False))


def _cap(outputs: list[Any], limit: int) -> list[Any]:
    """Keep outputs in order within ``limit`` characters of JSON; a stream that straddles the limit is cut."""
    total = sum(_size(o) for o in outputs)
    if total <= limit:
        return outputs
    kept: list[Any] = []
    used = 0
    for out in outputs:
        room = limit - _NOTE_ROOM - used
        size = _size(out)
        if size <= room:
            kept.append(out)
            used += size
            continue
        if out["output_type"] == "stream" and room > _NOTE_ROOM:
            part = {"output_type": "stream", "name": out["name"], "text": ""}
            budget = room - _size(part)
            text = out["text"][:budget]
            while (excess := _size(text) - 2 - budget) > 0:  # escapes make the JSON longer than the text
                text = text[: len(text) - excess]
            part["text"] = text
            kept.append(part)
            used += _size(part)
        break
    dropped = total - used
    note = f"\n[prime-ci: about {dropped:,} characters of this cell's output were not stored in the notebook]\n"
    kept.append({"output_type": "stream", "name": "stderr", "text": note})
    return kept
