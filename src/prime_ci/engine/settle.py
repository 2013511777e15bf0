"""The verdict on the worktree after the loop: the patch, the changed files and the flags; a registered secret
or a protected path in the diff turns any stop into a security stop."""

from __future__ import annotations

from prime_ci.engine.prepare import Prepared
from prime_ci.gates import protect
from prime_ci.gates.judge import Judge
from prime_ci.isolation import redact
from prime_ci.isolation.worktree import GitError
from prime_ci.stops import Stop, StopReason


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
    verdict = protect.check(wt, changed, cfg.gates_file, cfg.allow_protected, hidden)
    flags += verdict.flags()
    if redact.contains_secret(patch) and stop.reason is not StopReason.INTERRUPTED:
        stop = Stop(StopReason.SECURITY_STOP, "a registered secret (or an encoding of one) is in the patch")
    elif verdict.protected and stop.reason is not StopReason.INTERRUPTED:
        stop = Stop(StopReason.SECURITY_STOP, "protected paths changed: " + ", ".join(verdict.protected[:10]))
    elif stop.reason is StopReason.COMPLETED and cfg.require_changes and not changed:
        stop = Stop(StopReason.NO_CHANGES, "--require-changes and the diff is empty")
    return patch, changed, flags, stop
