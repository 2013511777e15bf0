"""Gates: loading, execution (real subprocesses), process cleanup, JUnit, feedback, fingerprints."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import junitparser
import pytest

from conftest import wait_until, wait_until_async
from prime_ci.errors import ConfigError
from prime_ci.gates.junit import github_annotations, parse_junit_failures, write_gates_junit
from prime_ci.gates.runner import (
    GateResult,
    GateSpec,
    feedback_message,
    gates_from_commands,
    load_gate_files,
    load_gate_files_from_ref,
    run_gate,
    run_gates,
    workspace_fingerprint,
)
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.procs import enable_subreaper
from prime_ci.isolation.worktree import Worktree, create_worktree, git

REPO = Path(__file__).resolve().parents[1]
PY = shlex.quote(sys.executable)


@pytest.fixture(scope="module", autouse=True)
def subreaper() -> Iterator[None]:
    """Orphans of the gates re-parent to this process (and are reaped by the gate code) during this module."""
    assert enable_subreaper()
    yield
    ctypes.CDLL(None, use_errno=True).prctl(36, 0, 0, 0, 0)


_started_before: set[str] = set()


@pytest.fixture(autouse=True)
def no_zombies_left() -> Iterator[None]:
    _started_before.clear()
    _started_before.update(entry for entry in os.listdir("/proc") if entry.isdigit())
    yield
    assert _zombie_children() == []


@pytest.fixture()
def env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}


def _zombie_children() -> list[str]:
    """This process's zombie children started during the test: a run driven in process earlier in this worker
    (tests/runs) leaves its orphans to this process, the subreaper, after its last reap."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            fields = raw[raw.rfind(b")") + 2 :].split()
            if fields[0] == b"Z" and int(fields[1]) == me and entry not in _started_before:
                found.append(f"{entry} {raw[raw.find(b'(') : raw.rfind(b')') + 1].decode()}")
    return found


def _alive_with(marker: str) -> list[str]:
    proc = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True, check=False)
    return [line for line in proc.stdout.splitlines() if "pgrep" not in line]


def _assert_clean(marker: str) -> None:
    wait_until(lambda: not _alive_with(marker), timeout=30, what=f"no process with {marker} left")
    assert _zombie_children() == []


def run(spec: GateSpec, cwd: Path, env: dict[str, str], log_dir: Path, kill_grace: float = 2.0) -> GateResult:
    return asyncio.run(run_gate(spec, cwd=cwd, env=env, log_dir=log_dir, kill_grace=kill_grace, limits=Limits()))


# --- loading ---------------------------------------------------------------------------------------------


def test_load_valid_file(tmp_path: Path) -> None:
    f = tmp_path / "gates.toml"
    f.write_text(
        '[[gate]]\nname = "tests"\ncommand = "pytest -q"\ntimeout = "5m"\njunit = ".prime-ci/j.xml"\n'
        'reruns = 1\nenv = { CI = "1" }\n\n'
        '[[gate]]\nname = "lint"\ncommand = "ruff check ."\ntimeout = 30\n\n'
        '[[gate]]\nname = "types"\ncommand = "mypy"\n'
    )
    specs = load_gate_files([f])
    assert [s.name for s in specs] == ["tests", "lint", "types"]
    assert specs[0].timeout == 300 and specs[0].junit == ".prime-ci/j.xml" and specs[0].reruns == 1
    assert specs[0].env == {"CI": "1"}
    assert specs[1].timeout == 30 and specs[2].timeout == 600 and specs[2].reruns == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('[[gate]]\nname = "t"\n', "gates.toml: gate[0].command: field required"),
        ('[[gate]]\nname = "t"\ncommand = "x"\n[[gate]]\ncommand = "y"\n', "gates.toml: gate[1].name: field required"),
        ('[[gate]]\nname = "a b/c"\ncommand = "x"\n', "gates.toml: gate[0].name: string should match pattern"),
        ('[[gate]]\nname = "t"\ncommand = "  "\n', "gates.toml: gate[0].command: must not be blank"),
        ('[[gate]]\nname = "t"\ncommand = "x"\ntimeout = "5x"\n', "gates.toml: gate[0].timeout: expected a duration"),
        ('[[gate]]\nname = "t"\ncommand = "x"\ntimeout = -1\n', "gates.toml: gate[0].timeout: must be a positive"),
        ('[[gate]]\nname = "t"\ncommand = "x"\nreruns = -1\n', "gates.toml: gate[0].reruns: input should be greater"),
        ('[[gate]]\nname = "t"\ncommand = "x"\ncomand = "y"\n', "gates.toml: gate[0].comand: unknown field"),
        ('[[gate]]\nname = "t"\ncommand = "x"\njunit = "../out.xml"\n', "gates.toml: gate[0].junit: must be a path"),
        ('[[gate]]\nname = "t"\ncommand = "x"\nenv = { A = 1 }\n', "gates.toml: gate[0].env.A: input should be"),
        ('[[gate]]\nname = "t"\ncommand = "x\n', "gates.toml: invalid TOML"),
        ('title = "x"\n', "gates.toml: unknown top-level key 'title'"),
        ("# nothing\n", "gates.toml: no [[gate]], [[setup]] or [[build]] tables"),
        ('gate = "x"\n', "gates.toml: gate: must be [[gate]] tables"),
    ],
)
def test_load_errors_name_file_and_field(tmp_path: Path, content: str, expected: str) -> None:
    f = tmp_path / "gates.toml"
    f.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_gate_files([f])
    message = str(info.value)
    assert message.startswith(str(f)), message
    assert expected.split(": ", 1)[1].lower() in message.lower(), message
    assert "\n" not in message


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: gate file not found"):
        load_gate_files([tmp_path / "nope.toml"])


def test_duplicate_names_within_and_across_files(tmp_path: Path) -> None:
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text('[[gate]]\nname = "t"\ncommand = "x"\n[[gate]]\nname = "t"\ncommand = "y"\n')
    with pytest.raises(ConfigError, match=r"a\.toml: gate\[1\]\.name: duplicate gate name 't'"):
        load_gate_files([a])
    a.write_text('[[gate]]\nname = "t"\ncommand = "x"\n')
    b.write_text('[[gate]]\nname = "u"\ncommand = "x"\n[[gate]]\nname = "t"\ncommand = "y"\n')
    with pytest.raises(ConfigError, match=r"b\.toml: gate\[1\]\.name: duplicate gate name 't' \(also in .*a\.toml\)"):
        load_gate_files([a, b])


def _make_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    git(["init", "-q", "-b", "main"], cwd=path)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(["add", "-A"], cwd=path)
    git(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init"], cwd=path)
    return path


def test_load_from_ref_ignores_worktree_edit(tmp_path: Path) -> None:
    repo = _make_repo(tmp_path / "repo", {"ci/gates.toml": '[[gate]]\nname = "tests"\ncommand = "pytest"\n'})
    (repo / "ci/gates.toml").write_text('[[gate]]\nname = "tests"\ncommand = "true"\n')
    specs = load_gate_files_from_ref(repo / ".git", "HEAD", ["ci/gates.toml"])
    assert [(s.name, s.command) for s in specs] == [("tests", "pytest")]
    assert load_gate_files([repo / "ci/gates.toml"])[0].command == "true"
    with pytest.raises(ConfigError, match=r"missing\.toml: not found at HEAD"):
        load_gate_files_from_ref(repo / ".git", "HEAD", ["missing.toml"])
    (repo / "bad.toml").write_text("[[gate]]\n")
    git(["add", "bad.toml"], cwd=repo)
    git(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "bad"], cwd=repo)
    with pytest.raises(ConfigError, match=r"^HEAD:bad.toml: gate\[0\]\.name: field required"):
        load_gate_files_from_ref(repo / ".git", "HEAD", ["bad.toml"])


def test_gates_from_commands_names() -> None:
    specs = gates_from_commands(
        ["pytest -q", "ruff check .", "python -m pytest tests", "npm test", "FOO=1 ./run.sh", "'!!'", "uv run mypy"]
    )
    assert [s.name for s in specs] == ["pytest", "ruff", "pytest-3", "npm-test", "run.sh", "gate-6", "mypy"]
    assert all(s.timeout == 600 for s in specs)
    with pytest.raises(ConfigError, match="--gate #2: empty command"):
        gates_from_commands(["true", " "])


def test_presets_load() -> None:
    presets = sorted((REPO / "gates").glob("*.toml"))
    assert {p.stem for p in presets} >= {"python", "ruff-check", "mypy", "node", "benchmark"}
    specs = load_gate_files(presets)
    python = next(s for s in specs if s.junit)
    assert python.junit and python.junit in python.command and python.junit.startswith(".prime-ci/")


# --- running ---------------------------------------------------------------------------------------------


def test_gate_passes_and_fails(tmp_path: Path, env: dict[str, str]) -> None:
    ok = run(GateSpec(name="ok", command="echo hello; echo err >&2"), tmp_path, env, tmp_path / "logs")
    assert ok.passed and ok.exit_code == 0 and not ok.timed_out and ok.attempts == 1 and not ok.flaky
    assert "hello" in ok.output and "err" in ok.output
    assert ok.log_path == tmp_path / "logs" / "ok.log" and "hello" in ok.log_path.read_text()
    bad = run(GateSpec(name="bad", command="echo nope; exit 3"), tmp_path, env, tmp_path / "logs")
    assert not bad.passed and bad.exit_code == 3 and bad.output == "nope\n" and bad.output_bytes == 5
    data = json.loads(json.dumps(bad.to_dict()))
    assert data["exit_code"] == 3 and "output" not in data and data["log_path"].endswith("bad.log")


def test_gate_env_is_exact(tmp_path: Path, env: dict[str, str]) -> None:
    os.environ["PRIME_CI_TEST_SECRET"] = "s3cret"
    try:
        spec = GateSpec(
            name="env", command='test -z "$PRIME_CI_TEST_SECRET" && test "$FOO" = bar && pwd', env={"FOO": "bar"}
        )
        result = run(spec, tmp_path, env, tmp_path / "logs")
    finally:
        del os.environ["PRIME_CI_TEST_SECRET"]
    assert result.passed, result.output
    assert result.output.strip() == str(tmp_path)


def test_large_output_is_logged_in_full_and_bounded_in_memory(tmp_path: Path, env: dict[str, str]) -> None:
    size = 5 * 1024 * 1024
    spec = GateSpec(name="big", command=f"yes 0123456789abcdef | head -c {size}; echo; echo END")
    result = run(spec, tmp_path, env, tmp_path / "logs")
    assert result.passed
    assert result.log_path.stat().st_size == size + 5 == result.output_bytes
    assert len(result.output) < 70 * 1024
    assert f"[... {size + 5 - 64 * 1024} bytes elided" in result.output
    assert result.output.startswith("0123456789abcdef\n") and result.output.endswith("\nEND\n")


def test_timeout_kills_a_gate_that_traps_term(tmp_path: Path, env: dict[str, str]) -> None:
    marker = f"prime-ci-test-{uuid.uuid4().hex}"
    spec = GateSpec(name="slow", command=f"trap '' TERM; echo started; bash -c 'sleep 30; :' {marker}", timeout=1)
    result = run(spec, tmp_path, env, tmp_path / "logs", kill_grace=0.5)
    # killed after timeout + grace (1.5 s), not after the 30 s the gate would take: relative, not tight
    assert result.duration_s < 30 / 2, result.duration_s
    assert result.timed_out and not result.passed and result.exit_code is None
    assert "started" in result.output
    _assert_clean(marker)
    assert "timed out after 1s" in feedback_message([result])


def test_escaped_setsid_processes_are_killed(tmp_path: Path, env: dict[str, str]) -> None:
    marker = f"prime-ci-test-{uuid.uuid4().hex}"
    # the gate ends once its escapee is up (it says so in a file), not after a guessed delay
    spec = GateSpec(name="escape", command=f"setsid bash -c 'touch up; sleep 1000; :' {marker} & "
                    "until [ -e up ]; do sleep 0.02; done; echo done")
    result = run(spec, tmp_path, env, tmp_path / "logs")
    assert result.passed and "done" in result.output
    assert result.duration_s < 1000 / 10, "the gate waited for its escaped background process"
    _assert_clean(marker)


def test_escapees_killed_on_failure_with_background_group_members(tmp_path: Path, env: dict[str, str]) -> None:
    marker = f"prime-ci-test-{uuid.uuid4().hex}"
    command = f"bash -c 'sleep 1000; :' {marker}-a & (setsid bash -c 'sleep 1000; :' {marker}-b &); exit 1"
    result = run(GateSpec(name="bg", command=command), tmp_path, env, tmp_path / "logs")
    assert result.exit_code == 1
    _assert_clean(marker)


def test_cancellation_kills_group_and_escapees(tmp_path: Path, env: dict[str, str]) -> None:
    marker = f"prime-ci-test-{uuid.uuid4().hex}"
    command = f"(setsid bash -c 'sleep 1000; :' {marker} &); bash -c 'sleep 1000; :' {marker}"
    spec = GateSpec(name="cancel", command=command)

    async def main() -> None:
        task = asyncio.create_task(run_gate(spec, cwd=tmp_path, env=env, log_dir=tmp_path / "logs", limits=Limits()))
        await wait_until_async(lambda: len(_alive_with(marker)) == 2, what="both of the gate's sleeps running")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    _assert_clean(marker)


def test_reruns_mark_a_flip_as_flaky(tmp_path: Path, env: dict[str, str]) -> None:
    counter = tmp_path / "count"
    command = (
        f'n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; echo "attempt $n"; [ $n -ge 2 ]'
    )
    logs = tmp_path / "logs"
    result = run(GateSpec(name="flip", command=command, reruns=2), tmp_path, env, logs)
    assert result.passed and result.flaky and result.attempts == 2 and result.exit_code == 0
    assert result.log_path.read_text() == "attempt 2\n"
    assert (logs / "flip.attempt-1.log").read_text() == "attempt 1\n"
    counter.unlink()
    always = run(GateSpec(name="flip", command="echo no; exit 1", reruns=1), tmp_path, env, logs)
    assert not always.passed and not always.flaky and always.attempts == 2
    assert sorted(p.name for p in logs.iterdir()) == ["flip.attempt-1.log", "flip.log"]


def test_log_is_written_while_the_gate_runs(tmp_path: Path, env: dict[str, str]) -> None:
    release = tmp_path / "release"
    # the gate waits for the test (not for a fixed time) between its two lines
    spec = GateSpec(name="stream", command=f"echo first; while [ ! -e {release} ]; do sleep 0.05; done; echo second")
    log = tmp_path / "logs" / "stream.log"

    async def main() -> tuple[str, GateResult]:
        task = asyncio.create_task(run_gate(spec, cwd=tmp_path, env=env, log_dir=tmp_path / "logs", limits=Limits()))
        await wait_until_async(lambda: log.exists() and log.read_text(), what="the gate's first output in its log")
        early = log.read_text()
        release.touch()
        return early, await task

    early, result = asyncio.run(main())
    assert early == "first\n" and result.passed and log.read_text() == "first\nsecond\n"


def test_launcher_prefix(tmp_path: Path, env: dict[str, str]) -> None:
    spec = GateSpec(name="wrapped", command='echo "$WRAPPED"')
    launcher = ["env", "WRAPPED=yes"]
    result = asyncio.run(run_gate(spec, cwd=tmp_path, env=env, log_dir=tmp_path / "logs", launcher=launcher,
                                  limits=Limits()))
    assert result.passed and result.output == "yes\n"


def test_run_gates_in_order_and_only(tmp_path: Path, env: dict[str, str]) -> None:
    specs = gates_from_commands(["echo a >> order", "echo b >> order"])
    results = asyncio.run(run_gates(specs, cwd=tmp_path, env=env, log_dir=tmp_path / "logs", limits=Limits()))
    assert [r.passed for r in results] == [True, True]
    assert (tmp_path / "order").read_text() == "a\nb\n"
    only = asyncio.run(run_gates(specs, cwd=tmp_path, env=env, log_dir=tmp_path / "logs", only=specs[1].name,
                                 limits=Limits()))
    assert [r.name for r in only] == [specs[1].name]
    with pytest.raises(ConfigError, match="unknown gate 'zzz'"):
        asyncio.run(run_gates(specs, cwd=tmp_path, env=env, log_dir=tmp_path / "logs", only="zzz", limits=Limits()))


# --- JUnit -----------------------------------------------------------------------------------------------

FAILING_TESTS = """
def test_ok():
    assert True

def test_alpha():
    assert 1 == 2, "alpha broke"

def test_beta():
    raise RuntimeError("beta exploded")
"""


def _pytest_project(path: Path) -> Path:
    path.mkdir(exist_ok=True)
    (path / "test_sample.py").write_text(FAILING_TESTS)
    return path


def _pytest_cmd(junit: str | None = None) -> str:
    report = f" --junitxml={junit}" if junit else ""
    return f"{PY} -m pytest -q -p no:cacheprovider test_sample.py{report}"


def test_parse_real_pytest_junit(tmp_path: Path, env: dict[str, str]) -> None:
    project = _pytest_project(tmp_path / "p")
    subprocess.run(["bash", "-c", _pytest_cmd("report.xml")], cwd=project, env=env, capture_output=True, check=False)
    failures = parse_junit_failures(project / "report.xml")
    assert [f.test for f in failures] == ["test_sample::test_alpha", "test_sample::test_beta"]
    alpha, beta = failures
    assert alpha.kind == "failure" and "alpha broke" in alpha.message
    assert alpha.file == "test_sample.py" and alpha.line == 6
    assert "beta exploded" in beta.message and beta.line == 9
    assert len(failures[0].text) <= 2048
    assert parse_junit_failures(project / "report.xml", limit=1) == failures[:1]


def test_parse_refuses_entities_and_reads_bare_testsuite(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.xml"
    bomb.write_text('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><testsuite>&a;</testsuite>')
    with pytest.raises(ValueError, match="DOCTYPE"):
        parse_junit_failures(bomb)
    bare = tmp_path / "bare.xml"
    bare.write_text(
        '<testsuite name="s"><testcase name="t1" file="src/a.py" line="7"><error message="boom">x</error>'
        '</testcase><testcase name="t2"/></testsuite>'
    )
    [failure] = parse_junit_failures(bare)
    assert (failure.test, failure.kind, failure.message, failure.file, failure.line) == (
        "t1", "error", "boom", "src/a.py", 7,
    )


def test_gate_with_junit_reports_failures_and_ignores_stale_reports(tmp_path: Path, env: dict[str, str]) -> None:
    project = _pytest_project(tmp_path / "p")
    spec = GateSpec(name="tests", command=_pytest_cmd(".prime-ci/junit.xml"), junit=".prime-ci/junit.xml")
    result = run(spec, project, env, tmp_path / "logs")
    assert not result.passed and result.exit_code == 1
    assert [f.test for f in result.failures] == ["test_sample.py::test_alpha", "test_sample.py::test_beta"]
    stale = run(GateSpec(name="tests", command="exit 1", junit=".prime-ci/junit.xml"), project, env, tmp_path / "l2")
    assert stale.failures == []
    escape = tmp_path / "p" / ".prime-ci" / "out.xml"
    escape.symlink_to(tmp_path / "p" / ".prime-ci" / "junit.xml")
    linked = run(
        GateSpec(name="tests", command=f"touch {tmp_path}/p/.prime-ci/junit.xml; exit 1", junit=".prime-ci/out.xml"),
        project, env, tmp_path / "l3",
    )
    assert len(linked.failures) == 2


def _result(name: str, passed: bool, **kw: object) -> GateResult:
    fields: dict[str, object] = dict(
        name=name, command=f"run-{name}", passed=passed, exit_code=0 if passed else 1, timed_out=False,
        output="", output_bytes=0, duration_s=1.23456, attempts=1, flaky=False, log_path=Path("/nonexistent.log"),
    )
    fields.update(kw)
    return GateResult(**fields)  # type: ignore[arg-type]


def test_write_gates_junit_reads_back(tmp_path: Path, env: dict[str, str]) -> None:
    project = _pytest_project(tmp_path / "p")
    spec = GateSpec(name="tests", command=_pytest_cmd(".prime-ci/j.xml"), junit=".prime-ci/j.xml")
    tests = run(spec, project, env, tmp_path / "logs")
    flaky = _result("lint", True, attempts=2, flaky=True)
    dirty = _result("dirty", False, output="bad\x00char\x1b[31m red \x07" + "é€" * 50_000, exit_code=2)
    out = tmp_path / "out" / "junit.xml"
    write_gates_junit([tests, flaky, dirty], out)
    raw = out.read_text()
    assert "disabled" not in raw and "\x00" not in raw and "\x07" not in raw
    xml = junitparser.JUnitXml.fromfile(str(out))
    cases = {c.name: c for suite in xml for c in suite}
    assert set(cases) == {"tests", "lint", "dirty"}
    assert all(c.classname == "prime-ci.gates" for c in cases.values())
    assert cases["lint"].is_passed and cases["lint"].time == 1.235
    [failure] = cases["tests"].result
    assert isinstance(failure, junitparser.Failure) and "exit code 1" in (failure.message or "")
    assert failure.text is not None and failure.text.index("test_alpha") < failure.text.index("output:")
    [dirty_failure] = cases["dirty"].result
    assert dirty_failure.text is not None and len(dirty_failure.text.encode()) <= 8192
    properties = cases["lint"].child(junitparser.Properties)  # type: ignore[no-untyped-call]
    props = {p.name: p.value for p in properties}
    assert props["flaky"] == "true" and props["attempts"] == "2"
    assert list(out.parent.iterdir()) == [out]


def test_github_annotations() -> None:
    from prime_ci.gates.junit import JUnitFailure

    located = _result(
        "tests",
        False,
        failures=[JUnitFailure("t::a", "failure", "50% worse\r\nnext", "", "src/a,b.py", 12)],
    )
    plain = _result("lint", False, output="line1\r\nline2: 100%\n", exit_code=2)
    lines = github_annotations([located, plain, _result("ok", True)])
    assert lines == [
        "::error file=src/a%2Cb.py,line=12,title=tests%3A t%3A%3Aa::t: :a: 50%25 worse%0D%0Anext",
        "::error title=gate lint::run-lint: exit code 2%0Aline1%0Aline2: 100%25",
    ]
    titled = github_annotations([_result("a:b,c", False)])
    assert titled[0].startswith("::error title=gate a%3Ab%2Cc::")


# --- feedback --------------------------------------------------------------------------------------------


def test_feedback_names_every_failing_gate_and_failing_tests(tmp_path: Path, env: dict[str, str]) -> None:
    project = _pytest_project(tmp_path / "p")
    noise = "yes 'noise line of output' | head -c 5000000"
    specs = [
        GateSpec(name="tests", command=f"{noise}; {_pytest_cmd()}; rc=$?; {noise}; exit $rc"),
        GateSpec(name="lint", command=f"echo LINT-HEAD; {noise}; echo LINT-TAIL; exit 3"),
        GateSpec(name="fine", command="true"),
    ]
    results = asyncio.run(run_gates(specs, cwd=project, env=env, log_dir=tmp_path / "logs", limits=Limits()))
    assert results[0].output_bytes > 10_000_000 and "test_alpha" not in results[0].output
    message = feedback_message(results)
    assert len(message) <= 6000
    for needle in ("tests", "lint", "exit code 1", "exit code 3", "test_sample.py::test_alpha",
                   "test_sample.py::test_beta", "gates/tests.log", "gates/lint.log", "gates.last",
                   "LINT-HEAD", "LINT-TAIL", "elided"):
        assert needle in message, needle
    assert "## gate fine" not in message
    elided = [int(n) for n in re.findall(r"\[\.\.\. (\d+) bytes elided", message)]
    assert len(elided) == 2 and min(elided) > 4_900_000, elided
    small = feedback_message(results, limit=1500, log_hint="out/gates/")
    assert len(small) <= 1500 and "test_alpha" in small and "out/gates/lint.log" in small
    assert len(feedback_message(results * 10, limit=800)) <= 800
    assert feedback_message(results[2:]) == "All 1 gates passed."


def test_feedback_uses_junit_failures(tmp_path: Path, env: dict[str, str]) -> None:
    project = _pytest_project(tmp_path / "p")
    spec = GateSpec(name="tests", command=_pytest_cmd("r.xml"), junit="r.xml")
    message = feedback_message([run(spec, project, env, tmp_path / "logs")], limit=3000)
    assert len(message) <= 3000
    assert "test_sample.py::test_alpha: AssertionError: alpha broke" in message
    assert "(test_sample.py:6)" in message and "beta exploded" in message


# --- fingerprint -----------------------------------------------------------------------------------------


@pytest.fixture()
def worktree(tmp_path: Path) -> Iterator[Worktree]:
    repo = _make_repo(tmp_path / "origin", {"a.txt": "a\n", "src/b.py": "b = 1\n"})
    wt = create_worktree(str(repo), None, parent=tmp_path)
    yield wt
    wt.remove()


def test_fingerprint_tracks_changes_only(worktree: Worktree, tmp_path: Path) -> None:
    path = worktree.path
    first = workspace_fingerprint(worktree, [])
    assert workspace_fingerprint(worktree, []) == first
    (path / "a.txt").write_text("changed\n")
    edited = workspace_fingerprint(worktree, [])
    assert edited != first
    (path / "a.txt").write_text("a\n")
    assert workspace_fingerprint(worktree, []) == first
    (path / "new.txt").write_text("one")
    untracked = workspace_fingerprint(worktree, [])
    assert untracked != first
    (path / "new.txt").write_text("two")
    assert workspace_fingerprint(worktree, []) not in (first, untracked)
    (path / "new.txt").unlink()
    assert workspace_fingerprint(worktree, []) == first


def test_fingerprint_ignores_excluded_paths_and_caches(worktree: Worktree, tmp_path: Path) -> None:
    path = worktree.path
    first = workspace_fingerprint(worktree, ["scratch"])
    (path / "scratch").mkdir()
    (path / "scratch" / "x.log").write_text("noise")
    (path / ".prime-ci").mkdir()
    (path / ".prime-ci" / "junit.xml").write_text("<testsuite/>")
    (path / "src" / "__pycache__").mkdir()
    (path / "src" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0")
    (path / ".pytest_cache").mkdir()
    (path / ".pytest_cache" / "v").write_text("1")
    assert workspace_fingerprint(worktree, ["scratch"]) == first
    assert workspace_fingerprint(worktree, []) != first


def test_fingerprint_never_follows_symlinks(worktree: Worktree, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret one")
    (worktree.path / "link").symlink_to(outside)
    (worktree.path / "dirlink").symlink_to(tmp_path)
    first = workspace_fingerprint(worktree, [])
    outside.write_text("secret two")
    assert workspace_fingerprint(worktree, []) == first
    (worktree.path / "link").unlink()
    (worktree.path / "link").symlink_to(tmp_path / "elsewhere")
    assert workspace_fingerprint(worktree, []) != first


# --- benchmark threshold script --------------------------------------------------------------------------

BENCH = [sys.executable, str(REPO / "gates" / "benchmark_threshold.py")]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, check=False)


def test_benchmark_threshold(tmp_path: Path) -> None:
    data = tmp_path / "bench.json"
    data.write_text(json.dumps({"results": {"mean_ms": 120.0}, "benchmarks": [{"stats": {"ops": 900}}]}))
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"results": {"mean_ms": 100.0}, "benchmarks": [{"stats": {"ops": 1000}}]}))
    assert _bench(str(data), "results.mean_ms", "--max", "150").returncode == 0
    over = _bench(str(data), "results.mean_ms", "--max", "110")
    assert over.returncode == 1 and "results.mean_ms = 120 is above the maximum 110" in over.stderr
    assert _bench(str(data), "benchmarks.0.stats.ops", "--min", "1000").returncode == 1
    regress = _bench(str(data), "results.mean_ms", "--baseline", str(base), "--max-regression", "10")
    assert regress.returncode == 1 and "20.0% worse than the baseline 100" in regress.stderr
    assert _bench(str(data), "results.mean_ms", "--baseline", str(base), "--max-regression", "25").returncode == 0
    ops = _bench(str(data), "benchmarks.0.stats.ops", "--higher-is-better", "--baseline", str(base),
                 "--max-regression", "5")
    assert ops.returncode == 1 and "10.0% worse" in ops.stderr
    missing = _bench(str(data), "results.nope", "--max", "1")
    assert missing.returncode == 2 and "results.nope" in missing.stderr
    assert _bench(str(data), "results.mean_ms").returncode == 2
