"""Prime Agent's own session code, run under node, for tests that hold prime-ci's output to what it reads.

Nothing of Prime Agent is kept in this repository (see fixtures/prime_agent/README.md): the modules are built
from Prime Agent's sources at the commit the fixtures were written with (PrimeIntellect-ai/prime-agent, MIT),
taken from the first of:

- ``PRIME_AGENT_GIT``: a git directory of prime-agent holding that commit (``git archive``);
- ``PRIME_AGENT_TARBALL``: the path of ``prime-agent-e319a66d.tar.gz``, for a checkout that has no ``shared/``
  beside it (a clone made elsewhere, e.g. under /tmp, by the CI script);
- ``<repository root>/../shared/prime-agent/prime-agent-e319a66d.tar.gz``.

A tarball is used only if its sha256 matches its line in the ``SHA256SUMS`` beside it. npm installs the runtime
dependencies and esbuild, and esbuild bundles, unchanged, the session manager, the sub-agent tree with its usage
sums (``core/context-tree.ts``) and the spawn ledger that lists sub-agents from their parents' registries
(``modes/daemon/rlm-ledger.ts``), and what turns a session's context into a request: the agent's converter
(``core/messages.ts``: ``convertToLlm``) and the OpenAI chat-completions provider's ``convertMessages``
(``providers/openai-completions.ts``, with ``transformMessages``). Two changes of wiring: the module that
registers the model providers (a side-effect import of the model package) is left out, and the ``openai`` SDK and
``partial-json`` are stubs (only the client and the stream parser use them), so no provider SDK is needed; no code
path used here calls a model. The build is cached per commit and build recipe under ``~/.cache/prime-ci-tests``.

Where the sources or node are missing, ``require()`` skips the test, with the reason; under CI (``CI`` set to
``true`` or ``1``) it fails it instead, so that these tests never go quietly unrun there.

``fixtures/prime_agent/read.mjs`` (ours) drives those modules and prints JSON.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

COMMIT = "e319a66d7351c75abe7f040d02d9a8d6e25028e9"
TARBALL = f"prime-agent-{COMMIT[:8]}.tar.gz"
PREFIX = "prime-agent/"
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
  b.onResolve({ filter: /^(openai|partial-json)$/ }, (a) => ({ path: a.path, namespace: "stream-only" }));
  b.onLoad({ filter: /.*/, namespace: "stream-only" }, () => ({ loader: "js",
    contents: "export default class OpenAI {}; export const parse = () => ({});" }));
}};
const entries = { "session-manager": "coding-agent/src/core/session-manager.ts",
  "context-tree": "coding-agent/src/core/context-tree.ts", "rlm-ledger": "coding-agent/src/modes/daemon/rlm-ledger.ts",
  "messages": "coding-agent/src/core/messages.ts", "openai-completions": "ai/src/providers/openai-completions.ts" };
for (const [name, path] of Object.entries(entries)) {
  await build({ entryPoints: ["packages/" + path], bundle: true, platform: "node", format: "esm",
    target: "node20", outfile: name + ".mjs", packages: "external", plugins: [wiring], logLevel: "error" });
}
"""


def git_dir() -> Path | None:
    """The git directory ``PRIME_AGENT_GIT`` names, or None when it names none."""
    named = os.environ.get("PRIME_AGENT_GIT")
    if not named:
        return None
    candidate = Path(named)
    return candidate if (candidate / "objects").is_dir() or (candidate / ".git").exists() else None


def tarball() -> Path:
    named = os.environ.get("PRIME_AGENT_TARBALL")
    if named:
        return Path(named)
    return Path(__file__).resolve().parents[1].parent / "shared" / "prime-agent" / TARBALL


def unavailable() -> str | None:
    """Why Prime Agent's code cannot run here, or None."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node and npm are needed to run Prime Agent's session code"
    named = os.environ.get("PRIME_AGENT_GIT")
    if named:
        return None if git_dir() is not None else f"PRIME_AGENT_GIT={named} is no git directory"
    if not tarball().is_file():
        return f"no Prime Agent sources: {tarball()} is missing (set PRIME_AGENT_TARBALL or PRIME_AGENT_GIT)"
    return None


def require() -> None:
    """Skip the calling test where Prime Agent's code cannot run; fail it instead under CI."""
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason} (CI is set: these tests must run)", pytrace=False)
    pytest.skip(reason)


@functools.cache
def verified(path: Path) -> Path:
    """``path``, once its sha256 is the one ``SHA256SUMS`` beside it gives for its name."""
    sums = path.parent / "SHA256SUMS"
    rows = (line.split(maxsplit=1) for line in sums.read_text().splitlines() if line.strip())
    expected = {name.lstrip("*"): digest for digest, name in rows}.get(path.name)
    if expected is None:
        raise ValueError(f"{sums} gives no sha256 for {path.name}")
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != expected:
        raise ValueError(f"{path}: sha256 is {actual}, {sums} says {expected}")
    return path


def build_dir() -> Path:
    """The bundled modules, built once per commit (concurrent test processes wait for one build)."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    recipe = hashlib.sha256((BUILD + " ".join(NPM_PACKAGES)).encode()).hexdigest()[:8]  # a new module: a new build
    cache = home / "prime-ci-tests" / f"prime-agent-{COMMIT[:12]}-{recipe}"
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
    if repo is not None:
        archive = _run(["git", "-C", str(repo), "archive", COMMIT, *SOURCES], cwd=cache).stdout
        subprocess.run(["tar", "-x", "-C", str(cache)], input=archive, check=True, timeout=300)
    else:
        _run(["tar", "-xzf", str(verified(tarball())), "--strip-components=1", *(PREFIX + s for s in SOURCES)],
             cwd=cache)
    (cache / "package.json").write_text('{"name": "prime-agent-session-code", "private": true, "type": "module"}\n')
    _run(["npm", "install", "--no-audit", "--no-fund", "--silent", *NPM_PACKAGES], cwd=cache)
    (cache / "build.mjs").write_text(BUILD)
    _run(["node", "build.mjs"], cwd=cache)


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(command, cwd=cwd, capture_output=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} exited {proc.returncode} in {cwd}: "
                           f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return proc


def read(command: str, *args: str | Path) -> Any:
    """Run one command of the driver against the built modules; its JSON answer."""
    proc = subprocess.run(["node", str(DRIVER), str(build_dir()), command, *map(str, args)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "RLM_DEPTH": ""})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
