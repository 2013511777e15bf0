"""The verdict on the worktree after the loop: the patch, the changed files and the flags; a registered secret
or a protected path in the diff turns any stop into a security stop. Then the worktree's files go (said when slow)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prime_ci.durations import format_duration
from prime_ci.engine.prepare import Prepared
from prime_ci.gates import protect
from prime_ci.gates.judge import Judge
from prime_ci.isolation import redact
from prime_ci.isolation.worktree import GitError, Worktree
from prime_ci.stops import Stop, StopReason

SLOW_REMOVAL_S, MANY_ENTRIES = 2.0, 5_000  # when removing the worktree is worth a line


def settle(prep: Prepared, judge: Judge, stop: Stop) -> tuple[str, list[str], list[str], Stop]:
    """(patch, changed files, flags, the stop as the diff leaves it)."""
    cfg, wt = prep.cfg, prep.worktree
    flags: list[str] = []
    try:
        patch, changed = wt.diff()
        hidden = judge.builds.hidden() if judge.builds else []
    except GitError as exc:
        patch, changed, hidden = "", [], []
        flags.append(f"diff unavailable: {exc}")
        if stop.reason is StopReason.COMPLETED:  # a verdict without its patch is never a success
            stop = Stop(StopReason.PERSISTENCE_ERROR, f"the patch could not be produced: {exc}")
    outside = judge.builds.outside_changes() if judge.builds else []
    verdict = protect.check(wt, changed, cfg.gates_file, cfg.allow_protected, hidden)
    flags += verdict.flags() + [f"outside the worktree: {change}" for change in outside]
    if redact.contains_secret(patch) and stop.reason is not StopReason.INTERRUPTED:
        stop = Stop(StopReason.SECURITY_STOP, "a registered secret (or an encoding of one) is in the patch")
    elif outside and stop.reason is not StopReason.INTERRUPTED:
        stop = Stop(StopReason.SECURITY_STOP, "changed outside the worktree, and no file in the patch explains it: "
                    + ", ".join(outside[:5]))
    elif stop.reason is StopReason.COMPLETED and judge.specs and judge.changed_since_verdict():
        stop = Stop(StopReason.SECURITY_STOP, "the worktree changed after the gates passed (a process the model "
                    "left running): the patch is not what they tested")
    elif verdict.protected and stop.reason is not StopReason.INTERRUPTED:
        stop = Stop(StopReason.SECURITY_STOP, "protected paths changed: " + ", ".join(verdict.protected[:10]))
    elif stop.reason is StopReason.COMPLETED and cfg.require_changes and not changed:
        stop = Stop(StopReason.NO_CHANGES, "--require-changes and the diff is empty")
    return patch, changed, flags, stop


async def clear_worktree(worktree: Worktree, say: Callable[[str], None]) -> None:
    """Delete the worktree's files (what remains, the git data and harness state, goes after the artifacts)."""
    started = time.monotonic()
    removal = asyncio.ensure_future(asyncio.to_thread(worktree.clear))
    done, _ = await asyncio.wait({removal}, timeout=SLOW_REMOVAL_S)
    if not done:
        say("removing the worktree (its files, node_modules, caches and the run environment)...")
    entries = await removal
    elapsed = time.monotonic() - started
    if not done or entries >= MANY_ENTRIES:
        say(f"worktree removed: {entries} entries in {format_duration(elapsed)}")
