"""Issue 37: a registered secret a committed conftest prints split (spaces between its letters, or over two lines)
is masked in every artifact: the gate's log, summary.md, junit.xml, the session log the model's feedback is in.
(The model's own view is the operator's choice: --pass-env gave the gates the secret.)"""

from __future__ import annotations

from pathlib import Path

from conftest import BUGGY, FIX, PYTEST_GATE, make_repo, run_prime
from prime_ci.testing import ScriptedServer, ipython, reply

TOKEN = "ghp_splitTokenValue4242abcd"
CONFTEST = ("import os\n"
            "def pytest_runtest_logreport(report):\n"
            "    t = os.environ['SPLIT_TOKEN']\n"
            "    if report.when == 'call' and report.failed:\n"
            "        print(' '.join(t), t[:10] + '\\n' + t[10:])\n")


def test_a_secret_printed_split_is_masked_in_every_artifact(tmp_path: Path, server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "conftest.py": CONFTEST,
                                          "test_calc.py": BUGGY["test_calc.py"] + "\ndef test_fails():\n    1/0\n"})
    server.add(ipython(FIX), reply("done"), reply("done"), reply("done"), reply("done"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "off", "--pass-env", "SPLIT_TOKEN", "--gate", PYTEST_GATE,
                    "--max-gate-retries", "1", env={"SPLIT_TOKEN": TOKEN})
    assert run.code == 1, run.proc.stderr
    spine = "".join(c for c in TOKEN if c.isalnum())
    for path in [p for p in run.out.rglob("*") if p.is_file()]:
        text = path.read_text(errors="replace")
        folded = "".join(c for c in text if c.isalnum())
        assert spine not in folded, f"{path.relative_to(run.out)} holds the token"
    log = next((run.out / "gates").glob("*.log")).read_text()
    assert "[REDACTED]" in log
