"""Issue 39: ``-v`` shows the work on the console (each cell's code, the head of its output, the model's text),
bounded and redacted; ``-q`` prints the verdict only; the default stays as it was."""

from __future__ import annotations

from pathlib import Path

from conftest import BUGGY, FIX, PYTEST_GATE, make_repo, run_prime
from prime_ci.testing import ScriptedServer, ipython, reply

SECRET = "sk-verbose-secret-0123456789"
LEAK = "import os\nprint('key is', os.environ['VERBOSE_TOKEN'])\nprint('\\n'.join(f'row {i}' for i in range(50)))"


def test_verbose_shows_code_output_and_text_with_the_secret_masked(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.add(ipython(LEAK),
               ipython(FIX), reply("The subtraction is now an addition."))
    run = run_prime(tmp_path, repo, server, "-v", "--sandbox", "off", "--pass-env", "VERBOSE_TOKEN",
                    "--gate", PYTEST_GATE, env={"VERBOSE_TOKEN": SECRET})
    assert run.code == 0, run.proc.stderr
    err = run.proc.stderr
    assert "code  │ print('key is', os.environ['VERBOSE_TOKEN'])" in err
    assert "out   │ key is [REDACTED]" in err and SECRET not in err
    assert "out   │ row 18" in err and "row 19" not in err and "… 31 more line(s)" in err  # the head, bounded
    assert "code  │ p.write_text(p.read_text().replace('a - b', 'a + b'))" in err
    assert "model │ The subtraction is now an addition." in err


def test_quiet_prints_the_verdict_only_and_the_default_no_code(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", BUGGY)
    server.add(ipython(FIX), reply("done"), ipython(FIX), reply("done"))
    quiet = run_prime(tmp_path, repo, server, "-q", "--sandbox", "off", "--gate", PYTEST_GATE)
    assert quiet.code == 0, quiet.proc.stderr
    lines = [line for line in quiet.proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("prime-ci: completed (exit 0)"), lines
    default = run_prime(tmp_path, repo, server, "--sandbox", "off", "--gate", PYTEST_GATE)
    assert "turn 1: ipython" in default.proc.stderr and "code  │" not in default.proc.stderr
