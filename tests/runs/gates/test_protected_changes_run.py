"""Issue 24 item 10, a whole run: a workflow edit stops the run."""

from __future__ import annotations

from pathlib import Path

from conftest import BUGGY, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply
from unit.gates.protected_files import FILES


def test_a_workflow_edit_stops_the_run(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, **FILES})
    edit = "open('.github/workflows/ci.yml', 'a').write('# harmless?\\n')\nprint('edited')"
    with ScriptedServer([ipython(edit), reply("done")]) as server:
        run = run_inproc(tmp_path, repo, server)
    assert run.code == 7, run.proc.stderr
    assert run.result["stop_reason"] == "security_stop"
    assert "protected path changed: .github/workflows/ci.yml" in run.result["flags"]
