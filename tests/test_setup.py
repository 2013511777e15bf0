"""Issue 13, through the CLI: --include-dirty with a ref is a usage error, and the gates command runs in the
run's sandbox (the rest is in process: tests/runs/engine/test_setup_runs.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli

GATES = Path(__file__).resolve().parents[1] / "gates"


def test_include_dirty_refuses_a_ref(tmp_path: Path, buggy_repo: Path) -> None:
    proc = run_cli(["run", str(buggy_repo), "--task", "x", "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1",
                    "--ref", "HEAD", "--include-dirty"], cwd=tmp_path)
    assert proc.returncode == 2 and "--include-dirty" in proc.stderr


def test_gates_command_uses_the_run_sandbox_and_reach(tmp_path: Path, buggy_repo: Path) -> None:
    """`prime-ci gates` has a run's semantics: the project's interpreter, the sandbox (CWD writable, the rest of
    the host read-only), files named by absolute path and $RUNNER_TEMP visible, other host temp files not."""
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    (runner_temp / "baseline.txt").write_text("from runner temp\n")
    named = tmp_path / "named.txt"
    named.write_text("named by path\n")
    hidden = tmp_path / "hidden.txt"
    hidden.write_text("not named\n")
    gate = (f"cat {named} && cat $RUNNER_TEMP/baseline.txt && python -c 'import sys; print(sys.executable)' && "
            f'echo written > here.txt && ! test -e "$(dirname {named})/{hidden.name}" && '  # not named: hidden
            f"(touch {tmp_path}/outside.txt || true)")  # the sandbox's private /tmp, not the host's
    proc = run_cli(["gates", "--sandbox", "on", "--gate", gate, "--logs", str(tmp_path / "logs")],
                   cwd=buggy_repo, env={"RUNNER_TEMP": str(runner_temp)})
    log = next((tmp_path / "logs").glob("*.log")).read_text()
    assert proc.returncode == 0, proc.stderr + log
    assert "named by path" in log and "from runner temp" in log
    assert "/env/bin/python" in log, "python is the run environment layered on the project's interpreter"
    assert (buggy_repo / "here.txt").read_text() == "written\n"
    assert not (tmp_path / "outside.txt").exists()
