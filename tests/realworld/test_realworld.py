"""Issue 23, the realworld tier: real projects from pinned sdists (cases.toml), each committed to a git repo with a
one-line regression its own tests catch, run through `prime-ci run` as the project's CI sets it up (a fresh job
venv given with --python, its install line as --setup, its test command as --gate, compiled code rebuilt with
--build). Issue 38: a project driven by its own tool (uv, poetry, tox, nox) has the job's venv activated instead,
with the tool in it, and the tool's lines as setup and gate; the environment the tool made is the run's (the
model is told so). The scripted model makes a wrong fix, sees the gates still fail, then reverts the regression:
exit 0, the patch is exactly the revert, and round 1's feedback named the failing test.

Select with `-m realworld`; the sdists are cached (corpus.cache_dir) and the setup installs from the package
index, so a case skips only when the index cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from corpus import Case, load_cases, sdist, skip_if_offline, unpack

from conftest import make_repo, run_prime
from prime_ci.testing import ScriptedServer, ipython, reply

pytestmark = [pytest.mark.realworld, pytest.mark.timeout(1200)]


def regressed_repo(case: Case, root: Path) -> Path:
    """The sdist committed as released, then the regression committed on top of it."""
    repo = unpack(sdist(case), root / "unpacked").rename(root / "repo")
    gitignore = repo / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("".join(f"{pattern}\n" for pattern in (*case.ignore, ".prime-ci/")))
    make_repo(repo, {}, message=f"{case.sdist} {case.version} as released")
    target = repo / case.file
    lines = target.read_text().split("\n")
    assert lines.count(case.old) == 1, f"the regression's line is not once in {case.file}: {case.old!r}"
    lines[lines.index(case.old)] = case.new
    regressed = "\n".join(lines)
    # the scripted edits find their text exactly once: the regressed line, then the wrong fix's line
    assert lines.count(case.new) == 1 and regressed.count(case.wrong_old) == 1, case
    assert regressed.replace(case.wrong_old, case.wrong_new).count(case.new) == 1, case
    target.write_text(regressed)
    return make_repo(repo, {}, message="a one-line regression")


def job_venv(case: Case, root: Path) -> Path:
    """The job's own environment: a fresh venv of this interpreter, with what the job upgrades in it."""
    venv = root / "job-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    if case.job:
        proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "-U", *case.job], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
        skip_if_offline("the job's venv", proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return python


def edit(path: str, *pairs: tuple[str, str]) -> str:
    """A cell replacing, in order, each `old` (found exactly once) by its `new` in the file at `path`."""
    return ("from pathlib import Path\n"
            f"path = Path({path!r})\ntext = path.read_text()\n"
            f"for old, new in {list(pairs)!r}:\n"
            "    assert text.count(old) == 1, f'{old!r} is not once in {path}'\n"
            "    text = text.replace(old, new)\n"
            "path.write_text(text)\nprint('edited', path)\n")


def feedback_of(request_body: dict[str, Any]) -> str:
    """The last user message of a chat request: the gate feedback the model was shown."""
    users = [m for m in request_body["messages"] if m["role"] == "user"]
    content = users[-1]["content"]
    return content if isinstance(content, str) else json.dumps(content)


def diagnostics(out: Path, stderr: str) -> str:
    logs = [*sorted((out / "setup").glob("*.log")), *sorted((out / "build").glob("*.log")),
            *sorted((out / "gates").glob("*.log"))]
    return stderr[-3000:] + "".join(f"\n--- {p.relative_to(out)}\n{p.read_text()[-2500:]}" for p in logs)


def timings(case: Case, result: dict[str, Any], stderr: str) -> str:
    """One line for the report (`-rP`): the time of each setup and build step, of each gate round, and of the
    worktree's removal."""
    def steps(kind: str) -> str:
        return ", ".join(f"{s['name']} {s['duration_s']:.1f}s" for s in result.get(kind) or []) or "-"

    rounds = ", ".join(f"{r['kind']} {r.get('duration_s', 0):.1f}s" for r in result.get("rounds", []))
    removed = next((line.split(": ", 1)[-1] for line in stderr.splitlines() if "worktree removed" in line), "-")
    return (f"{case.id}: wall {result.get('wall_s', 0):.1f}s; setup: {steps('setup')}; build (last round): "
            f"{steps('build')}; rounds: {rounds}; {removed}")


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.id)
def test_wrong_fix_then_the_revert_ends_green(case: Case, tmp_path: Path) -> None:
    repo = regressed_repo(case, tmp_path)
    python = job_venv(case, tmp_path)
    wrong = (case.wrong_old, case.wrong_new)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"  # `{python}` in a command, as a CI matrix has it
    args = ["--gate", case.gate.replace("{python}", version),
            *(a for s in case.setup for a in ("--setup", s.replace("{python}", version)))]
    env = dict(case.env)
    if case.activate:  # the job's venv first on PATH: its python, and its tools (tox, nox, poetry, uv)
        env["PATH"] = os.pathsep.join([str(python.parent), os.path.dirname(sys.executable),
                                       os.environ.get("PATH", os.defpath)])
        env["VIRTUAL_ENV"] = str(python.parent.parent)
    else:
        args += ["--python", str(python)]
    args += [a for name in case.env for a in ("--pass-env", name)]
    if case.build:
        args += ["--build", case.build]
    with ScriptedServer() as server:
        server.add(
            reply("Let me see what the project's tests say first."),
            ipython(edit(case.file, wrong)),
            reply("I think that was the cause."),
            ipython(edit(case.file, (case.wrong_new, case.wrong_old), (case.new, case.old))),
            reply("Reverted the line that broke the tests."),
        )
        run = run_prime(tmp_path, repo, server, *args, task="The test suite fails: find the bug and fix it.",
                        env=env, timeout=1100)
        requests = server.chat_requests
    if run.code == 9:
        skip_if_offline("setup", diagnostics(run.out, run.proc.stderr))
    assert run.code == 0, diagnostics(run.out, run.proc.stderr)
    print(timings(case, run.result, run.proc.stderr))

    assert len(requests) == 5, "one model turn per step: round 1, the wrong fix's round, the revert"
    if case.toolchain is not None:  # the run's python is layered on the environment the tool made, and says so
        system = json.dumps(requests[0].body["messages"][0]["content"])
        assert f"The project uses {case.toolchain}" in system, system[-3000:]
    round1 = feedback_of(requests[1].body)
    assert case.failing in round1, f"round 1's feedback does not name {case.failing}:\n{round1[:4000]}"
    rounds = run.result["rounds"]
    assert not rounds[0]["passed"] and rounds[-1]["passed"] and rounds[-1]["kind"] == "full", rounds
    assert sum(not r["passed"] for r in rounds) >= 2, f"the wrong fix's round did not fail: {rounds}"

    assert run.result["changed_files"] == [case.file]
    changed = [line for line in (run.out / "patch.diff").read_text().splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == [f"-{case.new}", f"+{case.old}"], "the patch is exactly the regression's revert"
