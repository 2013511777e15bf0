"""Prime Agent's own session code, run under node, for tests that hold prime-ci's output to what it reads.

Nothing of Prime Agent is kept in this repository (see fixtures/prime_agent/README.md): the modules are built
from a git copy of PrimeIntellect-ai/prime-agent at the commit the fixtures were written with, named by
``PRIME_AGENT_GIT`` (a git directory; this workplace keeps one at ``MIRROR``). ``git archive`` takes the sources,
npm installs the runtime dependencies and esbuild, and esbuild bundles, unchanged, the session manager, the
sub-agent tree with its usage sums (``core/context-tree.ts``) and the spawn ledger that lists sub-agents from
their parents' registries (``modes/daemon/rlm-ledger.ts``). One change of wiring: the module that registers
the model providers (a side-effect import of the model package) is left out, so no provider SDK is needed; no
code path used here calls a model. The build is cached per commit under ``~/.cache/prime-ci-tests``.

``fixtures/prime_agent/read.mjs`` (ours) drives those modules and prints JSON.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

COMMIT = "e319a66d7351c75abe7f040d02d9a8d6e25028e9"
MIRROR = Path("/work/.mirror/PrimeIntellect-ai+prime-agent/repo")
NPM_PACKAGES = ["esbuild@0.28.2", "uuid@14", "hosted-git-info@9", "proper-lockfile@4.1.2"]
SOURCES = ["packages/coding-agent/src", "packages/ai/src"]
DRIVER = Path(__file__).parent / "fixtures" / "prime_agent" / "read.mjs"
BUILD = """
import { build } from "esbuild";
const root = process.cwd();
const wiring = { name: "wiring", setup(b) {
  b.onResolve({ filter: /^@earendil-works\\/pi-ai$/ }, () => ({ path: root + "/packages/ai/src/stream.ts" }));
  b.onResolve({ filter: /register-builtins\\.js$/ }, () => ({ path: "providers", namespace: "left-out" }));
  b.onLoad({ filter: /.*/, namespace: "left-out" }, () => ({ contents: "", loader: "js" }));
}};
const entries = { "session-manager": "core/session-manager.ts", "context-tree": "core/context-tree.ts",
  "rlm-ledger": "modes/daemon/rlm-ledger.ts" };
for (const [name, path] of Object.entries(entries)) {
  await build({ entryPoints: ["packages/coding-agent/src/" + path], bundle: true, platform: "node", format: "esm",
    target: "node20", outfile: name + ".mjs", packages: "external", plugins: [wiring], logLevel: "error" });
}
"""


def git_dir() -> Path | None:
    named = os.environ.get("PRIME_AGENT_GIT")
    candidate = Path(named) if named else MIRROR
    return candidate if (candidate / "objects").is_dir() or (candidate / ".git").exists() else None


def unavailable() -> str | None:
    """Why Prime Agent's code cannot run here, or None."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node and npm are needed to run Prime Agent's session code"
    if git_dir() is None:
        return "no git copy of prime-agent (set PRIME_AGENT_GIT to one)"
    return None


def build_dir() -> Path:
    """The bundled modules, built once per commit (concurrent test processes wait for one build)."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cache = home / "prime-ci-tests" / f"prime-agent-{COMMIT[:12]}"
    done = cache / "built"
    if done.exists():
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            _build(cache)
            done.write_text(COMMIT + "\n")
    return cache


def _build(cache: Path) -> None:
    repo = git_dir()
    assert repo is not None
    archive = subprocess.run(["git", "--git-dir", str(repo), "archive", COMMIT, *SOURCES], check=True,
                             capture_output=True, timeout=300).stdout
    subprocess.run(["tar", "-x", "-C", str(cache)], input=archive, check=True, timeout=300)
    (cache / "package.json").write_text('{"name": "prime-agent-session-code", "private": true, "type": "module"}\n')
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", *NPM_PACKAGES], cwd=cache, check=True,
                   capture_output=True, timeout=600)
    (cache / "build.mjs").write_text(BUILD)
    subprocess.run(["node", "build.mjs"], cwd=cache, check=True, capture_output=True, timeout=300)


def read(command: str, *args: str | Path) -> Any:
    """Run one command of the driver against the built modules; its JSON answer."""
    proc = subprocess.run(["node", str(DRIVER), str(build_dir()), command, *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "RLM_DEPTH": ""})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
