"""Kernel-side state snapshots: user variables saved per name with dill, restored after a restart.

Runs inside the kernel. Unpicklable values, modules and oversized values are listed, never fatal;
modules are recorded by name and re-imported.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from typing import Any

MAX_TOTAL = 256 * 1024 * 1024
MAX_VAR = 16 * 1024 * 1024
SKIP = {"In", "Out", "get_ipython", "exit", "quit", "open", "gates", "goal", "rlm", "agent_message", "harness",
        "refine", "compact", "history"}


def _names(ns: dict[str, Any], hidden: set[str]) -> list[str]:
    return sorted(n for n in ns if not n.startswith("_") and n not in SKIP and n not in hidden)


def save(ns: dict[str, Any], directory: str, hidden: set[str] | None = None) -> dict[str, Any]:
    import dill

    blobs: dict[str, bytes] = {}
    modules: dict[str, str] = {}
    skipped: list[dict[str, str]] = []
    total = 0
    for name in _names(ns, hidden or set()):
        value = ns[name]
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            continue
        try:
            blob = dill.dumps(value, recurse=True)
        except Exception as exc:  # noqa: BLE001 - any object may refuse to pickle; it is reported, not fatal
            skipped.append({"name": name, "reason": f"{type(exc).__name__}: {str(exc)[:120]}"})
            continue
        if len(blob) > MAX_VAR or total + len(blob) > MAX_TOTAL:
            skipped.append({"name": name, "reason": f"too large ({len(blob)} bytes)"})
            continue
        blobs[name] = blob
        total += len(blob)
    os.makedirs(directory, exist_ok=True)
    state = os.path.join(directory, "kernel-state.dill")
    with open(state + ".tmp", "wb") as fh:
        dill.dump({"vars": blobs, "modules": modules}, fh)
    os.replace(state + ".tmp", state)
    manifest = {"version": 1, "savedNames": sorted(blobs), "modules": modules, "skipped": skipped, "bytes": total,
                "pythonVersion": sys.version.split()[0], "timestamp": time.time()}
    with open(os.path.join(directory, "kernel-state.json.tmp"), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh)
    os.replace(os.path.join(directory, "kernel-state.json.tmp"), os.path.join(directory, "kernel-state.json"))
    return manifest


def restore(ns: dict[str, Any], directory: str) -> dict[str, Any]:
    import importlib

    import dill

    state = os.path.join(directory, "kernel-state.dill")
    if not os.path.exists(state):
        return {"restored": [], "failed": [], "note": "no snapshot"}
    with open(state, "rb") as fh:
        data = dill.load(fh)
    restored, failed = [], []
    for name, module in data["modules"].items():
        try:
            ns[name] = importlib.import_module(module)
            restored.append(name)
        except Exception as exc:  # noqa: BLE001 - reported to the model
            failed.append({"name": name, "reason": f"{type(exc).__name__}: {exc}"})
    for name, blob in data["vars"].items():
        try:
            ns[name] = dill.loads(blob)
            restored.append(name)
        except Exception as exc:  # noqa: BLE001 - reported to the model
            failed.append({"name": name, "reason": f"{type(exc).__name__}: {str(exc)[:120]}"})
    manifest_path = os.path.join(directory, "kernel-state.json")
    skipped = []
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as fh:
            skipped = json.load(fh)["skipped"]
    return {"restored": sorted(restored), "failed": failed + skipped}
