"""Issue 7 acceptance: sandbox, unreachable secrets, exfiltration attempts, hostile worktrees."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import BUGGY, PYTEST_GATE, make_repo, run_prime
from prime_ci.isolation.sandbox import bwrap_binary, probe
from prime_ci.testing import ScriptedServer, contains, ipython, reply

CANARIES = {
    "OPENAI_API_KEY": "sk-canary-openai-7f3a9c2e11d04b",
    "ANTHROPIC_API_KEY": "sk-ant-canary-0c9e8d7f6a5b4c3d",
    "GITHUB_TOKEN": "ghp_canaryTOKEN1234567890abcdef",
}
SANDBOX = bwrap_binary() is not None and probe(bwrap_binary() or "") is None
needs_sandbox = pytest.mark.skipif(not SANDBOX, reason="bubblewrap cannot run on this machine")


def encodings(value: str) -> dict[str, str]:
    raw = value.encode()
    return {"raw": value, "base64": base64.b64encode(raw).decode(), "hex": raw.hex(), "reversed": value[::-1],
            "url": quote(value + "/x", safe="")[:-4], "json": json.dumps(value)[1:-1]}


def hits(root: Path, extra: list[bytes] = ()) -> list[str]:  # type: ignore[assignment]
    """Every (file, canary encoding) pair found under root; symlinks not followed."""
    needles = [(f"{name}:{kind}", enc.encode()) for name, value in CANARIES.items()
               for kind, enc in encodings(value).items()] + [("extra", e) for e in extra]
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for fname in files:
            path = Path(dirpath) / fname
            if path.is_symlink():
                continue
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {label}" for label, needle in needles if needle in data]
    return found


def request_hits(server: ScriptedServer) -> list[str]:
    blob = "\n".join(json.dumps(r.body) for r in server.requests)
    return [f"{n}:{k}" for n, v in CANARIES.items() for k, e in encodings(v).items() if e in blob]


PROBE_CELL = """
import os, glob, subprocess
print('ENV', {k: v for k, v in os.environ.items()})
print(subprocess.run(['env'], capture_output=True, text=True).stdout)
for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):
    try:
        print(path, open(path, 'rb').read().replace(b'\\0', b' ')[:4000])
    except OSError as e:
        print(path, 'unreadable', e.errno)
"""


@needs_sandbox
def test_canaries_unreachable_from_kernel_gates_and_children(
    tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    server.route(contains("child probe"), [ipython(PROBE_CELL), ipython(
        "print(await agent_message.send('probed', receiver_role='parent'))"), reply("done")])
    server.add(ipython(PROBE_CELL), ipython("await rlm('child probe', name='prober')"), reply("wait"), reply("done"))
    gate = "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; true"
    run = run_prime(tmp_path, buggy_repo, server, "--gate", gate, env=CANARIES)
    assert run.code == 0, run.proc.stderr
    assert run.result["sandbox"].startswith("on")
    assert "ENV {" in json.dumps(server.chat_requests[1].body)  # the probe really ran
    assert request_hits(server) == []
    assert hits(run.out) == []
    assert CANARIES["OPENAI_API_KEY"] not in run.proc.stdout + run.proc.stderr


@needs_sandbox
def test_sandbox_on_blocks_network_and_outside_writes(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    outside = tmp_path / "outside.txt"
    cell = (
        "import urllib.request\n"
        f"try:\n    urllib.request.urlopen({server.url + '/models'!r}, timeout=5)\n    print('NET ok')\n"
        "except OSError as e:\n    print('NET blocked', type(e).__name__)\n"
        f"for target in ({str(outside)!r}, '/var/tmp/prime-ci-outside.txt', {str(buggy_repo / 'x.txt')!r}):\n"
        "    try:\n        open(target, 'w').write('x')\n        print('WRITE ok', target)\n"
        "    except OSError as e:\n        print('WRITE blocked', e.errno)\n"
        "open('inside.txt', 'w').write('fine')\n"
        "print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])\n"
    )
    server.add(ipython(cell), reply("done"))
    run = run_prime(tmp_path, buggy_repo, server, "--sandbox", "on")
    assert run.code == 0, run.proc.stderr
    out = server.chat_requests[1].body["messages"][-1]["content"]
    assert "NET blocked" in out and "WRITE ok" not in out and out.count("WRITE blocked") == 3 and "\n1\n" in out
    assert not outside.exists() and not Path("/var/tmp/prime-ci-outside.txt").exists()
    assert not (buggy_repo / "x.txt").exists()
    assert run.result["changed_files"] == ["inside.txt"]
    # the host asks /models for the context window; the kernel's urllib never got through
    assert not [r for r in server.requests if "urllib" in r.headers.get("user-agent", "")]


def test_sandbox_on_fails_closed_without_bwrap(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    server.add(reply("must never be called"))
    run = run_prime(tmp_path, buggy_repo, server, "--sandbox", "on", env={"PRIME_CI_BWRAP": "/nonexistent/bwrap"})
    assert run.code == 5
    lines = [line for line in run.proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "sandbox" in lines[0] and "Traceback" not in run.proc.stderr
    assert server.requests == []


CHANNELS = {
    "patch": "for i, v in enumerate(VALUES):\n    open(f'leak{i}.txt', 'w').write(v + '\\n')",
    "filename": "for v in VALUES:\n    open(v[:60].replace('/', '_'), 'w').write('x')",
    "cell-output": "for v in VALUES:\n    print(v)",
    "gate-log": "open('leak.txt', 'w').write('\\n'.join(VALUES))",
    "final-text": None,
    "child-message": "await rlm('relay these', name='relay')",
    "harness-note": "await harness.create('memory', 'leak', '\\n'.join(VALUES))",
}


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_exfiltration_attempts_leave_no_canary(
    channel: str, tmp_path: Path, buggy_repo: Path, server: ScriptedServer
) -> None:
    values = [enc for value in CANARIES.values() for enc in encodings(value).values()]  # 18 attempts per run
    define = f"VALUES = {values!r}"
    code = CHANNELS[channel]
    if channel == "child-message":
        relay = ipython(define + "\nprint(await agent_message.send(' '.join(VALUES), receiver_role='parent'))")
        server.route(contains("relay these"), [ipython(define + "\nfor v in VALUES:\n    print(v)"), relay,
                                               reply(" ".join(values))])
    steps = [ipython(define + "\n" + code)] if code else []
    server.add(*steps, reply("wait" if channel == "child-message" else "here: " + " ".join(values)), reply("done"))
    gate = "cat leak.txt 2>/dev/null; true"
    harness = tmp_path / "harness"
    run = run_prime(tmp_path, buggy_repo, server, "--gate", gate, "--harness", str(harness), env=CANARIES)
    assert hits(run.out) == [], f"canary reached the artifacts via {channel}"
    assert hits(harness) == [], f"canary reached the harness state via {channel}"
    if channel == "harness-note":
        assert "[REDACTED]" in (harness / "memories" / "leak.md").read_text()
    if channel in ("patch", "gate-log"):
        assert run.code == 7 and run.result["stop_reason"] == "security_stop"


def test_planted_fsmonitor_and_symlinks_do_nothing(tmp_path: Path, server: ScriptedServer) -> None:
    marker = tmp_path / "fsmonitor-ran"
    repo = make_repo(tmp_path / "repo", BUGGY)
    os.symlink("/etc", repo / "etc-link")
    os.symlink("/etc/passwd", repo / "passwd-link")
    make_repo(repo, {}, message="add symlinks")
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    subprocess.run(["git", "config", "core.fsmonitor", str(hook)], cwd=repo, check=True)
    subprocess.run(["git", "config", "core.hooksPath", str(tmp_path)], cwd=repo, check=True)
    (tmp_path / "post-checkout").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (tmp_path / "post-checkout").chmod(0o755)
    # the model plants the same in the worktree's git config and adds more symlinks
    plant = (f"import subprocess, os\nsubprocess.run(['git', 'config', 'core.fsmonitor', {str(hook)!r}])\n"
             "os.symlink('/root', 'home-link')\nos.symlink('../../../../etc/shadow', 'shadow-link')\n"
             "open('calc.py', 'a').write('# touched\\n')")
    server.add(ipython(plant), reply("done"))
    run = run_prime(tmp_path, repo, server, "--gate", f"{PYTEST_GATE} || true")
    assert run.code == 0, run.proc.stderr
    assert not marker.exists(), "a planted git hook or fsmonitor ran on the host"
    patch = (run.out / "patch.diff").read_text()
    assert "root:x:0:0" not in patch and "root:" not in hits_text(run.out)
    assert set(run.result["changed_files"]) == {"calc.py", "home-link", "shadow-link"}
    assert "new file mode 120000" in patch  # symlinks are recorded as links, never followed


def hits_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file() and not p.is_symlink())
