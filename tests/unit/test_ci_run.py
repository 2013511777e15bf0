"""Issue 36: ``.ci/run`` runs exactly the README's test command, from a fresh clone it makes under ``/tmp``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    intro = readme[:readme.index("\n---\n")]
    blocks = re.findall(r"```bash\n(.*?)\n```", intro, re.S)
    assert len(blocks) >= 2, "the README starts with the demo command and the test command"
    return blocks[1].strip()


def test_ci_run_runs_the_readmes_test_command_in_a_clone_under_tmp() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    lines = [line.strip() for line in script.splitlines()]
    command = readme_test_command()
    assert command in lines, "the README's test command, verbatim, on a line of its own"
    clone = next(i for i, line in enumerate(lines) if line.startswith("git clone"))
    into = next(i for i, line in enumerate(lines) if line.startswith("cd \"$work/"))
    assert 'mktemp -d /tmp/' in script and clone < into < lines.index(command)
    # the exit 5 of a pytest that collected nothing is a failure, not a pass
    assert '"$rc" -eq 5' in script
