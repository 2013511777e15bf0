"""Issue 39: the pull request hears back every time.

Acceptance 1: ``examples/workflows/pr-fixer.yml`` emulated end to end (``workflow_emulator``: its jobs, conditions,
expressions and outputs as the runner evaluates them; this checkout's actions; a real ``prime-ci run`` with the demo's
replayed model) against a fake GitHub that records every request (``fake_github``): a green run, a red run, an
over-budget run and a configuration error each leave exactly one comment on the pull request, a second run updates
it, with the verdict, the rounds, the failing tests, what stopped the run, cost and time, the links, escaped.
Acceptance 2: with pull request creation not allowed (the fake answers as GitHub does), the preflight job fails
before the run's job with one ``::error`` naming the setting. The action's side of "every error reaches the person"
is test_action_errors.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import PRIME_CI, PYTEST_GATE, job_bin, make_repo, repo_script
from fake_github import FakeGitHub
from prime_ci.demo import demo_flags
from prime_ci.durations import format_duration
from prime_ci.stops import StopReason
from rendered import NOTIFYING, render
from workflow_emulator import Emulator, Step, WorkflowRun, load_yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "workflows" / "pr-fixer.yml"
MARKER = "<!-- prime-ci:prime-ci PR fixer -->"
SETTING = '"Allow GitHub Actions to create and approve pull requests"'
HOSTILE = "cc @maintainer <img src=x> fixes #1 [see](https://evil.example/x) **bold**"


def publish_helper() -> ModuleType:
    return repo_script("publish/helper.py")


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def job_env(tmp: Path) -> dict[str, str]:
    """A runner's environment: ``python3`` on PATH sees what the tests' interpreter sees (pytest)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRIME_CI_", "INPUT_", "GITHUB_", "GH_"))}
    runner_bin = job_bin(tmp)
    (tmp / "home").mkdir(exist_ok=True)
    env.update(HOME=str(tmp / "home"), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=str(tmp / "home" / ".gitconfig"),
               PATH=f"{runner_bin}{os.pathsep}{env.get('PATH', '')}")  # fmt: skip
    return env


@dataclass
class Project:
    """The repository on the fake GitHub (a bare origin) and pull request #7 on it."""

    origin: Path
    base: str
    head: str
    replay: str


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    tmp = tmp_path_factory.mktemp("pr-comment")
    flags, cleanup = demo_flags(None)
    demo = Path(flags["repo"])
    files = {p.name: p.read_text() for p in demo.iterdir() if p.is_file()}
    files.update({
        "test_hostile.py": f"def test_pr_text():\n    assert False, {HOSTILE!r}\n",
        ".github/prime-ci/gates.toml": f'[[gate]]\nname = "tests"\ncommand = "{PYTEST_GATE} test_calc.py"\n',
        ".github/prime-ci/red.toml": f'[[gate]]\nname = "tests"\ncommand = "{PYTEST_GATE}"\n',
    })  # fmt: skip
    work = make_repo(tmp / "work", files, message="calc")
    base = git("rev-parse", "HEAD", cwd=work)
    git("checkout", "-q", "-b", "feature", cwd=work)
    make_repo(work, {"NOTES.md": "a feature\n"}, message="feature")
    head = git("rev-parse", "HEAD", cwd=work)
    origin = tmp / "origin.git"
    git("clone", "--quiet", "--bare", str(work), str(origin))
    replay = tmp / "session.jsonl"
    replay.write_text(Path(flags["model"].removeprefix("replay:")).read_text())
    cleanup()
    yield Project(origin, base, head, f"replay:{replay}")


def event(project: Project) -> dict[str, Any]:
    pull = {"number": 7, "title": "Fix calc, cc @admin", "body": "Please. <img src=x>", "user": {"login": "octo"},
            "head": {"sha": project.head, "ref": "feature", "repo": {"full_name": "o/r"}},
            "base": {"sha": project.base, "ref": "main", "repo": {"full_name": "o/r"}}}  # fmt: skip
    return {"action": "labeled", "label": {"name": "prime-ci"}, "number": 7, "pull_request": pull,
            "repository": {"full_name": "o/r"}, "sender": {"login": "octo"}}  # fmt: skip


def github(tmp: Path, project: Project, origin: Path, *, allow_pull_requests: bool = True) -> FakeGitHub:
    pull = {"number": 7, "state": "open", "head": {"sha": project.head, "ref": "feature", "repo": {"full_name": "o/r"}},
            "base": {"sha": project.base, "ref": "main"}}  # fmt: skip
    fake = FakeGitHub.create(tmp, {**job_env(tmp), "REMOTE_URL": str(origin)}, pulls={"7": pull},
                             allow_pull_requests=allow_pull_requests, branches=["main", "feature"])  # fmt: skip
    return fake


def installed(step: Step, given: dict[str, str]) -> dict[str, str]:
    """The install step, stood in for: prime-ci is this checkout's, installed next to the tests."""
    return {"bin": PRIME_CI, "python": sys.executable}


def pr_fixer(project: Project, **prime: str) -> dict[str, Any]:
    """pr-fixer.yml as written, but for the inputs of its prime-ci step that need the network or a real model: the
    demo's replayed model, no sandbox, no dependencies to install; ``prime`` changes more of them."""
    workflow: dict[str, Any] = load_yaml(WORKFLOW)
    step = next(s for s in workflow["jobs"]["fix"]["steps"] if s.get("id") == "prime")
    step["with"].update({"model": project.replay, "sandbox": "off", "setup": "true", **prime})
    return workflow


def run_workflow(tmp: Path, project: Project, fake: FakeGitHub, origin: Path, workflow: dict[str, Any], *,
                 attempt: int = 1) -> WorkflowRun:  # fmt: skip
    emulator = Emulator(tmp / f"attempt-{attempt}", event_name="pull_request", event=event(project), repository="o/r",
                        env=fake.env, gh_dir=fake.dir, origin=origin, run_attempt=attempt,
                        secrets_={"ANTHROPIC_API_KEY": "sk-ant-never-used"}, overrides={"fix/install": installed})
    return emulator.run(workflow)


def our_comments(fake: FakeGitHub) -> list[dict[str, Any]]:
    return [c for c in fake.comments(7) if c["body"].startswith(MARKER) and c["user"]["login"] == "github-actions[bot]"]


def comment_writes(fake: FakeGitHub, since: int = 0) -> list[tuple[str, str]]:
    return [(r["method"], r["path"]) for r in fake.requests()[since:] if "comments" in str(r.get("path"))
            and r["method"] in ("POST", "PATCH")]  # fmt: skip


def assert_escaped(body: str) -> None:
    """No markup, mention, reference or link of the repository's or the model's text is read in the comment, as
    GitHub renders it (cmark-gfm): run text shows in code, where nothing of it links or notifies."""
    page = render(body.removeprefix(MARKER))
    assert not {"img"} & set(page.tags), "no HTML from the run"
    assert not [href for href in page.links if "evil.example" in href], "no links to other hosts"
    loud = [m.group() for text in page.prose for m in NOTIFYING.finditer(text)]
    assert not loud, f"mentions or references in the prose: {loud}"


@pytest.fixture
def origin(project: Project, tmp_path: Path) -> Path:
    dest = tmp_path / "origin.git"
    git("clone", "--quiet", "--bare", str(project.origin), str(dest))
    return dest


WRITER = {"contents": "write", "pull-requests": "write"}
PREVIOUS = {"id": 77, "issue": 7, "user": {"login": "github-actions[bot]", "type": "Bot"},
            "body": MARKER + "\n## ✅ prime-ci: an older run"}  # fmt: skip


# --- acceptance 1: one comment, every outcome -------------------------------------------------------------------


def test_a_configuration_error_then_a_green_run_keep_one_comment(project: Project, origin: Path,
                                                                 tmp_path: Path) -> None:
    fake = github(tmp_path, project, origin)
    spoof = {"id": 5, "issue": 7, "user": {"login": "mallory", "type": "User"}, "body": MARKER + "\nspoofed"}
    fake.update(comments=[spoof])

    # 1. an invalid sandbox value: prime-ci exits 2 before anything starts, and the pull request hears why
    run = run_workflow(tmp_path, project, fake, origin, pr_fixer(project, sandbox="sometimes"))
    assert [(j, run.jobs[j].result) for j in ("preflight", "fix", "publish")] == [
        ("preflight", "success"), ("fix", "failure"), ("publish", "success")]  # fmt: skip
    error = run.jobs["fix"].outputs["error"]
    assert "Invalid value for '--sandbox'" in error and "sometimes" in error
    errors = run.jobs["fix"].commands("error")
    assert len(errors) == 1 and "prime-ci exited 2: Invalid value for '--sandbox'" in errors[0], errors
    assert "configuration error (exit 2)" in run.jobs["fix"].summary() and "Invalid value for" in run.jobs[
        "fix"].summary()  # fmt: skip
    [first] = our_comments(fake)
    body = first["body"]
    assert body.startswith(MARKER + "\n## ❌ prime-ci: configuration error, nothing ran (exit 2)")
    assert "Invalid value for '--sandbox'" in body and "No model call was made" in body
    assert "https://github.com/o/r/actions/runs/4242" in body
    assert comment_writes(fake) == [("POST", "repos/o/r/issues/7/comments")]
    assert_escaped(body)

    # 2. the same pull request, run again, green: the fix pull request, and the same comment updated
    before = len(fake.requests())
    run = run_workflow(tmp_path, project, fake, origin, pr_fixer(project), attempt=2)
    assert [run.jobs[j].result for j in ("preflight", "fix", "publish")] == ["success"] * 3, run.jobs["publish"].log()
    [again] = our_comments(fake)
    assert again["id"] == first["id"] and comment_writes(fake, before) == [
        ("PATCH", f"repos/o/r/issues/comments/{first['id']}")]  # fmt: skip
    assert next(c for c in fake.comments(7) if c["id"] == 5) == spoof, "another author's marker is not ours"
    writers = {r["token"] for r in fake.requests()[before:] if r["method"] in ("POST", "PATCH")}
    assert writers == {run.jobs["publish"].token} | {run.jobs["preflight"].token}, "only the writer jobs write"
    assert not [r for r in fake.requests()[before:] if r["token"] == run.jobs["fix"].token and r["method"] != "GET"]
    body = again["body"]
    assert body.startswith(MARKER + "\n## ✅ prime-ci: gates green (`completed`, exit 0)")
    assert re.search(r"\*\*Rounds:\*\* ❌ `full` → .* → ✅ `full` \(\d gate runs, green after [\d.]+s\)", body), body
    assert re.search(r"\*\*Spent:\*\* \d+ turn\(s\) · [\d,]+ tokens · \$[\d.]+ · [\d.]+s", body), body
    [opened] = fake.state["opened"]
    assert (opened["base"], opened["head"]) == ("feature", "prime-ci/pr-7")
    assert f"**Fix pull request:** <{opened['url']}>" in body
    assert "[the workflow run](https://github.com/o/r/actions/runs/4242/attempts/2)" in body
    assert "[its artifacts](https://github.com/o/r/actions/runs/4242#artifacts)" in body
    assert "Last failing tests" not in body and "Stopped by" not in body
    assert_escaped(body)


@pytest.mark.parametrize("outcome", ["red", "over budget"])
def test_a_red_or_over_budget_run_updates_the_one_comment(project: Project, origin: Path, tmp_path: Path,
                                                          outcome: str) -> None:  # fmt: skip
    fake = github(tmp_path, project, origin)
    fake.update(comments=[PREVIOUS])
    inputs = ({"gates-file": ".github/prime-ci/red.toml", "extra-args": "--max-gate-retries 0"} if outcome == "red"
              else {"budgets": "max-turns=1"})  # fmt: skip
    run = run_workflow(tmp_path, project, fake, origin, pr_fixer(project, **inputs))
    assert [run.jobs[j].result for j in ("preflight", "fix", "publish")] == ["success", "failure", "success"]
    assert comment_writes(fake) == [("PATCH", "repos/o/r/issues/comments/77")]
    [comment] = fake.comments(7)
    body = comment["body"]
    assert "fake gh: unexpected" not in run.jobs["publish"].log()
    assert "opened" not in fake.state, "no fix pull request from an unsuccessful run"
    assert "No fix pull request: the run did not succeed." in body
    if outcome == "red":
        assert body.startswith(MARKER + "\n## ❌ prime-ci: gates still red (`gates_failed`, exit 1)")
        assert "> `gates still failing after 0 retries`" in body
        assert "**Rounds:** ❌ `full` (1 gate run, never green)" in body
        assert "**Last failing tests** (round 1):" in body
        hostile = next(line for line in body.splitlines() if "test_hostile.py::test_pr_text" in line)
        assert hostile.startswith("- `test_hostile.py::test_pr_text` (gate `tests`): `AssertionError: cc @")
        assert hostile.endswith("**bold**`"), "the model's and the repository's text is a code span, never markup"
    else:
        assert body.startswith(MARKER + "\n## ⏱️ prime-ci: stopped by a budget (`max_turns`, exit 3)")
        assert "**Stopped by:** the turn budget, 1 of 1 turns" in body
        assert "prime-ci exited 3 (max_turns)" in run.jobs["fix"].commands("error")[-1]
    assert re.search(r"\*\*Spent:\*\* 1 turn\(s\)|\*\*Spent:\*\* \d turn\(s\)", body)
    assert "[its artifacts](https://github.com/o/r/actions/runs/4242#artifacts)" in body
    assert_escaped(body)


# --- acceptance 2: the preflight -------------------------------------------------------------------------------


def test_preflight_stops_the_workflow_before_the_run_when_pull_requests_are_not_allowed(
    project: Project, origin: Path, tmp_path: Path
) -> None:
    fake = github(tmp_path, project, origin, allow_pull_requests=False)
    run = run_workflow(tmp_path, project, fake, origin, pr_fixer(project))
    preflight = run.jobs["preflight"]
    assert [run.jobs[j].result for j in ("preflight", "fix", "publish")] == ["failure", "skipped", "success"]
    errors = preflight.commands("error")
    assert len(errors) == 1 and SETTING in errors[0] and "Settings → Actions → General" in errors[0], errors
    assert preflight.outputs["error"].startswith("publishing would fail: the repository setting " + SETTING)
    assert SETTING in preflight.summary()
    requests = fake.requests()
    probe = next(r for r in requests if r["path"] == "repos/o/r/pulls" and r["method"] == "POST")
    assert probe["token"] == preflight.token and ".." in probe["fields"]["head"], "a probe that cannot open one"
    assert not any(r["path"] == "pr create" for r in requests), "no pull request was asked for"
    assert not any(r["token"] == run.jobs["fix"].token for r in requests), "the run's job never started"
    # the publish job still tells the pull request why nothing ran
    [comment] = our_comments(fake)
    assert comment["body"].startswith(MARKER + "\n## ❌ prime-ci: the run did not start")
    assert SETTING in comment["body"] and "No model call was made" in comment["body"]


def preflight(tmp: Path, fake: FakeGitHub, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp / "output").write_text("")
    (tmp / "summary").write_text("")
    full = {**fake.env, "GITHUB_OUTPUT": str(tmp / "output"), "GITHUB_STEP_SUMMARY": str(tmp / "summary"),
            "GITHUB_REPOSITORY": "o/r", "GH_TOKEN": "ghs_job", "DEFAULT_TOKEN": "true", "PR_NUMBER": "7",
            "BRANCH": "prime-ci/pr-7", **env}  # fmt: skip
    return subprocess.run(["bash", str(ROOT / "publish" / "preflight.sh")], env=full, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("allow", "pull", "permissions", "env", "needle"),
    [
        (False, {}, WRITER, {}, SETTING + " is off (Settings → Actions → General → Workflow permissions)"),
        (True, {"state": "closed"}, WRITER, {}, "pull request #7 is closed"),
        (True, {"head": {"sha": "a" * 40, "ref": "feature", "repo": {"full_name": "mallory/r"}}}, WRITER, {},
         "comes from mallory/r"),
        (True, {}, {"contents": "write"}, {}, "cannot open pull requests in o/r (HTTP 403: Resource not accessible "
         "by integration): give the preflight and publish jobs `pull-requests: write`"),
        (True, {}, WRITER, {"REMOTE_URL": "/nonexistent/origin.git"}, "cannot push prime-ci/pr-7 to o/r"),
        (True, {}, WRITER, {"BRANCH": "fix-7"}, "must be a valid branch name under prime-ci/"),
        (False, {}, WRITER, {"GH_TOKEN": "ghp_user", "DEFAULT_TOKEN": "false"}, None),  # the setting is not for it
        (True, {}, WRITER, {}, None),
    ],
)
def test_preflight_names_what_publishing_would_miss(project: Project, origin: Path, tmp_path: Path, allow: bool,
                                                    pull: dict[str, Any], permissions: dict[str, str],
                                                    env: dict[str, str], needle: str | None) -> None:  # fmt: skip
    fake = github(tmp_path, project, origin, allow_pull_requests=allow)
    fake.update(pulls={"7": {**fake.state["pulls"]["7"], **pull}})
    fake.add_job_token("ghs_job", permissions)
    fake.add_token("ghp_user", "octo")
    proc = preflight(tmp_path, fake, **env)
    out = (tmp_path / "output").read_text()
    if needle is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert out == "error=\n" and "::error" not in proc.stdout
        assert "can push prime-ci/pr-7 and open a pull request into feature of o/r" in proc.stdout
        assert git("for-each-ref", "--format=%(refname:short)", "refs/heads", cwd=origin).split() == [
            "feature", "main"], "a dry run pushes nothing"  # fmt: skip
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and needle in errors[0], proc.stdout
    assert needle in out and needle[:12] in (tmp_path / "summary").read_text()


# --- the publish step's comment, directly --------------------------------------------------------------------


def publish(tmp: Path, fake: FakeGitHub, artifacts: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp / "output").write_text("")
    (tmp / "summary").write_text("")
    full = {**fake.env, "GITHUB_OUTPUT": str(tmp / "output"), "GITHUB_STEP_SUMMARY": str(tmp / "summary"),
            "GITHUB_REPOSITORY": "o/r", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "9",
            "GITHUB_WORKFLOW": "prime-ci PR fixer", "GH_TOKEN": "ghs_pub", "DEFAULT_TOKEN": "true",
            "ARTIFACTS_DIR": str(artifacts), "PR_NUMBER": "7", "BRANCH": "prime-ci/pr-7", **env}  # fmt: skip
    return subprocess.run(["bash", str(ROOT / "publish" / "publish.sh")], env=full, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def red_artifacts(tmp: Path, project: Project) -> Path:
    """A red run's artifacts as prime-ci writes them (result.json, an empty patch, the session's last gate run)."""
    out = tmp / "artifacts"
    out.mkdir()
    usage = {"turns": 2, "total_tokens": 1270, "cost_usd": 0.0097}
    result = {"run_id": "r1", "base_commit": project.head, "stop_reason": "gates_failed", "exit_code": 1,
              "success": False, "detail": "gates still failing after 2 retries", "usage": usage,
              "budgets": {"max_turns": 30}, "wall_s": 75.0, "time_to_green_s": None,
              "rounds": [{"round": 1, "kind": "full", "passed": False}, {"round": 2, "kind": "fast", "passed": False}],
              "changed_files": []}  # fmt: skip
    (out / "result.json").write_text(json.dumps(result))
    (out / "patch.diff").write_text("")
    failing = [{"gate": "tests", "test": f"test_x.py::test_{i}", "message": f"assert {i} == 0 @team"}
               for i in range(12)]  # fmt: skip
    records = [{"type": "custom", "customType": "prime_ci.gate", "data": {"round": 1, "failing": []}},
               "not json", {"type": "custom", "customType": "prime_ci.gate", "data": {"round": 2, "failing": failing}}]
    (out / "session.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return out


def test_publish_comments_a_red_run_and_can_be_turned_off(project: Project, origin: Path, tmp_path: Path) -> None:
    fake = github(tmp_path, project, origin)
    fake.add_job_token("ghs_pub", WRITER)
    artifacts = red_artifacts(tmp_path, project)
    off = publish(tmp_path, fake, artifacts, COMMENT="false")
    assert off.returncode == 0, off.stderr
    assert comment_writes(fake) == [] and not any("comments" in str(r["path"]) for r in fake.requests())

    proc = publish(tmp_path, fake, artifacts)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [comment] = fake.comments(7)
    body = comment["body"]
    assert body.startswith(MARKER + "\n## ❌ prime-ci: gates still red (`gates_failed`, exit 1)")
    assert "**Rounds:** ❌ `full` → ❌ `fast` (2 gate runs, never green)" in body
    assert "**Last failing tests** (round 2):" in body and "`test_x.py::test_9` (gate `tests`)" in body
    assert "test_x.py::test_10" not in body and "- … and 2 more (summary.md in the artifacts)" in body
    assert "**Spent:** 2 turn(s) · 1,270 tokens · $0.0097 · 1m15s" in body
    assert "[the workflow run](https://github.com/o/r/actions/runs/9)" in body
    assert (tmp_path / "output").read_text().count(f"comment-url={comment['html_url']}") == 1
    assert_escaped(body)


def test_publish_comments_a_refusal_and_names_the_setting_when_github_refuses_the_pr(
    project: Project, origin: Path, tmp_path: Path
) -> None:
    fake = github(tmp_path, project, origin, allow_pull_requests=False)
    fake.add_job_token("ghs_pub", WRITER)
    artifacts = red_artifacts(tmp_path, project)
    result = json.loads((artifacts / "result.json").read_text())
    result.update(success=True, stop_reason="completed", exit_code=0, detail="", base_commit=project.head,
                  changed_files=["calc.py"])  # fmt: skip
    (artifacts / "result.json").write_text(json.dumps(result))
    work = tmp_path / "scratch"
    git("clone", "--quiet", str(origin), str(work))
    git("checkout", "--quiet", project.head, cwd=work)
    (work / "calc.py").write_text((work / "calc.py").read_text().replace("a - b", "a + b"))
    (artifacts / "patch.diff").write_text(git("diff", cwd=work) + "\n")

    proc = publish(tmp_path, fake, artifacts)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and SETTING in errors[0] and "GitHub refused the change pull request" in errors[0]
    [comment] = fake.comments(7)
    assert "**Not published:** `pushed prime-ci/pr-7, but GitHub refused the change pull request" in comment["body"]


def test_publish_comments_when_the_run_left_no_artifacts_and_fails_when_it_cannot(
    project: Project, origin: Path, tmp_path: Path
) -> None:
    fake = github(tmp_path, project, origin)
    fake.add_job_token("ghs_pub", WRITER)
    missing = tmp_path / "none"
    proc = publish(tmp_path, fake, missing, RUN_EXIT_CODE="9", RUN_ERROR="setup `pip` failed: exit 1 @x")
    assert proc.returncode == 0, proc.stderr
    [comment] = fake.comments(7)
    assert comment["body"].startswith(MARKER + "\n## ❌ prime-ci: setup failed before any model call (exit 9)")
    assert "> ``setup `pip` failed: exit 1 @" in comment["body"]
    # a job without pull-requests: write cannot comment: the step fails saying so
    fake.add_job_token("ghs_ro", {"contents": "write"})
    proc = publish(tmp_path, fake, missing, RUN_EXIT_CODE="2", RUN_ERROR="bad input", GH_TOKEN="ghs_ro")
    assert proc.returncode == 1
    assert "::error title=prime-ci publish::cannot update the comment on pull request #7: " in proc.stdout
    # nothing at all from the run's job (it failed before prime-ci): the comment says so, and the step fails
    proc = publish(tmp_path, fake, missing)
    assert proc.returncode == 2 and "no result.json" in proc.stderr
    [comment] = fake.comments(7)
    assert comment["body"].startswith(MARKER + "\n## ❌ prime-ci: the run's job ended without a result")


def test_publish_with_a_users_token_updates_that_users_comment(project: Project, origin: Path,
                                                              tmp_path: Path) -> None:  # fmt: skip
    fake = github(tmp_path, project, origin)
    fake.add_token("ghp_user", "octo")
    bot = {**PREVIOUS, "id": 77}
    mine = {"id": 78, "issue": 7, "user": {"login": "octo", "type": "User"}, "body": MARKER + "\nold"}
    fake.update(comments=[mine, bot])
    proc = publish(tmp_path, fake, tmp_path / "none", GH_TOKEN="ghp_user", DEFAULT_TOKEN="false", RUN_EXIT_CODE="2",
                   RUN_ERROR="bad input")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert comment_writes(fake) == [("PATCH", "repos/o/r/issues/comments/78")]
    assert ("GET", "user") in [(r["method"], r["path"]) for r in fake.requests()], "who the token is, asked"


# --- the publish step's twins of prime-ci's formats ---------------------------------------------------------------


def test_the_comment_knows_every_exit_code_and_prints_durations_as_prime_ci() -> None:
    helper = publish_helper()
    assert {reason.exit_code for reason in StopReason} | {2, 143} == set(helper.OUTCOMES)
    assert set(helper.BUDGETS) == {reason.value for reason in StopReason if reason.budget}
    for seconds in (0, 0.05, 1.5, 45, 59.96, 60, 75, 3600, 5400.4, 7261):
        assert helper.duration(seconds) == format_duration(seconds), seconds


def test_the_marker_and_the_comment_lookup() -> None:
    helper = publish_helper()
    assert helper.marker("prime-ci PR fixer") == MARKER
    assert helper.marker("x --> <script>") == "<!-- prime-ci:x - script -->"
    mark = helper.marker("w")
    pages = [[{"id": 1, "user": {"login": "github-actions[bot]", "type": "Bot"}, "body": "other"},
              {"id": 2, "user": {"login": "mallory", "type": "User"}, "body": mark + " mine!"}],
             [{"id": 3, "user": {"login": "github-actions[bot]", "type": "Bot"}, "body": mark + "\nold"}]]
    listing = "".join(json.dumps(p) + "\n" for p in pages)
    assert helper.find_comment(listing, mark, "github-actions[bot]") == "3"
    assert helper.find_comment(listing, mark, "mallory") == "2"
    assert helper.find_comment(listing, mark, "[bot]") == "3", "an app's token: any bot's, never a person's"
    assert helper.find_comment(listing, helper.marker("v"), "github-actions[bot]") == ""
