"""Issue 36: a kernel that never started is exit 5 (the sandbox) or 9 (its environment), never 70, and its log
is kept in the artifacts (``engine/kernel_start.py``)."""

from __future__ import annotations

from pathlib import Path

from prime_ci.engine.kernel_start import kernel_failed
from prime_ci.errors import KernelLost
from prime_ci.stops import StopReason


def lost(tmp_path: Path, log: str | None) -> KernelLost:
    path = tmp_path / "wt" / "kernel.log"
    if log is not None:
        path.parent.mkdir(parents=True)
        path.write_text(log)
    return KernelLost("kernel did not start: the kernel process exited (exit 1)", path)


def test_bwraps_own_error_in_a_sandbox_is_exit_5_naming_the_line_and_the_kept_log(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    log = "bwrap: Can't mkdir /opt/private/job: Permission denied\n"
    stop = kernel_failed(lost(tmp_path, log), out, sandboxed=True)
    assert stop.reason is StopReason.SANDBOX_UNAVAILABLE and stop.reason.exit_code == 5
    assert "Can't mkdir /opt/private/job" in stop.detail and str(out / "kernel.log") in stop.detail
    assert (out / "kernel.log").read_text() == log


def test_the_interpreters_own_failure_is_exit_9_with_its_last_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    log = "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'ipykernel'\n"
    stop = kernel_failed(lost(tmp_path, log), out, sandboxed=True)
    assert stop.reason is StopReason.SETUP_FAILED and stop.reason.exit_code == 9
    assert "No module named 'ipykernel'" in stop.detail and str(out / "kernel.log") in stop.detail
    # a loader-looking line without the sandbox is not the sandbox's
    assert kernel_failed(lost(tmp_path / "b", "bwrap: x\n"), out, sandboxed=False).reason is StopReason.SETUP_FAILED


def test_a_log_that_is_gone_still_leaves_a_kernel_log_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    stop = kernel_failed(lost(tmp_path, None), out, sandboxed=False)
    assert stop.reason is StopReason.SETUP_FAILED and "printed nothing" in stop.detail
    assert (out / "kernel.log").exists()
