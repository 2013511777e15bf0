"""Issue 39: the demo gives no advice it does not accept (it used to say "set --context-window", which
``prime-ci demo`` rejects)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from conftest import cli_inproc
from prime_ci.cli.commands import demo


def test_every_flag_the_demo_names_is_one_it_takes(tmp_path: Path) -> None:
    proc = cli_inproc(["demo", "--out", str(tmp_path / "out")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = re.sub(r"^```.*?^```", "", (tmp_path / "out" / "summary.md").read_text(), flags=re.M | re.S)
    said = proc.stdout + proc.stderr + summary  # the summary's prose: not the task, the patch or the model's text
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", said))
    taken = {name for p in demo.params if isinstance(p, click.Option) for name in p.opts}
    assert named <= taken, f"the demo names {sorted(named - taken)}, which `prime-ci demo` does not take"
