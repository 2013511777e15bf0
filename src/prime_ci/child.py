"""``python -m prime_ci.child SPEC``: the entry point of one rlm sub-agent process.

It starts the child's kernel before importing anything heavy, so the kernel boots while this process loads
the agent (``prime_ci.children.host``): when several children start at once, the two overlap instead of adding up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from prime_ci.children.token import claim


def main(spec_path: Path) -> int:
    # the token proving this child to the root never touches the disk (spec.json is readable in the sandbox when
    # --out is) nor the environment: it comes over a pipe, read once this process is undumpable; that is done
    # before anything else is imported, so the moments after the exec in which a process of the same user could
    # attach to this one are as few as they can be
    secret = claim(os.environ)
    from prime_ci.isolation.box import RUN_VAR
    from prime_ci.isolation.limits import Limits
    from prime_ci.isolation.sandbox import Sandbox
    from prime_ci.kernel.bridge import run_dir, socket_base
    from prime_ci.kernel.launch import KernelConfig, launch

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    spec["token"] = secret
    marker = os.environ.get(RUN_VAR, "")
    bridge_dir = run_dir(marker) if marker else Path(tempfile.mkdtemp(prefix="pci-", dir=socket_base()))
    scratch = Path(spec["scratch"])
    scratch.mkdir(parents=True, exist_ok=True)
    sandbox = Sandbox.from_json(spec.get("sandbox"))
    if sandbox is not None:
        sandbox.writable += [spec["cwd"], str(scratch), str(bridge_dir)]
        sandbox.give(scratch, bridge_dir)
        if sandbox.uid is not None and Path(spec["cwd"]).stat().st_uid != sandbox.uid:  # an isolated worktree
            sandbox.give(spec["cwd"], tree=True)
    config = KernelConfig(cwd=Path(spec["cwd"]), env={**os.environ, "PRIME_CI_BRIDGE": str(bridge_dir / "bridge.sock")},
                          run_dir=scratch, snapshot_dir=scratch / "state", wrap=sandbox.wrap if sandbox else None,
                          limits=Limits.from_json(spec["limits"]),  # the run's, as the root recorded them
                          uid=sandbox.uid if sandbox else None)
    launched = launch(config, 1)
    try:
        from prime_ci.children import host as child_host

        return child_host.run(spec, spec_path.parent, config, launched, bridge_dir)
    except BaseException:
        if launched.proc.poll() is None:
            os.killpg(launched.proc.pid, signal.SIGKILL)
            launched.proc.wait()
        shutil.rmtree(bridge_dir, ignore_errors=True)
        raise


if __name__ == "__main__":  # skips the CLI's imports on the spawn path
    raise SystemExit(main(Path(sys.argv[1])))
