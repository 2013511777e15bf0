"""Issue 37: in a GitHub Actions log no line prime-ci prints is a workflow command it did not write.

Two ``prime-ci`` processes with ``GITHUB_ACTIONS=true`` carry every untrusted source at once, each with
``::add-mask::``, ``##[add-mask]``, ``::set-output``, ``%0A``, CR, LF, U+2028, NEL and a zero-width space: file
names in the uncommitted-changes warning, an unknown ``prime-ci.toml`` key, setup names and commands, a setup
command's output (passing, echoed) and a failing one's, a gate's output, the model's text, a cell's code and
output, tool-call names in the ``model_error`` line. Their stdout and stderr, read as the runner reads them (and
more eagerly: ``actions_runner``), hold no command but prime-ci's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from shlex import quote

from actions_runner import commands, foreign
from conftest import make_repo, run_prime
from prime_ci.testing import ScriptedServer, ipython, reply, tool_call

ACTIONS = {"GITHUB_ACTIONS": "true"}


def payload(tag: str) -> str:
    """Every form of a forged command, each with its own name (``tag`` + a digit) to find where it ended up."""
    return (f"::add-mask::{tag}1 ##[add-mask]{tag}2 %0A::set-output name=o::{tag}3\r::add-mask::{tag}4"
            f"\u2028::add-mask::{tag}5\u0085##[set-output name=o]{tag}6\n::add-mask::{tag}7 :\u200b:add-mask::{tag}8"
            f"%0D##[add-mask]{tag}9")


def toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string (\\uXXXX escapes, no raw controls)


def forged_repo(tmp_path: Path) -> Path:
    """A repository whose settings, gate file and uncommitted file names carry the payload."""
    failing = f"printf %s {quote(payload('F'))}; exit 1"
    gate_file = f'[[setup]]\nname = "forged"\ncommand = {toml_string(failing)}\n'
    repo = make_repo(tmp_path / "repo", {
        "a.txt": "a\n",
        "prime-ci.toml": f"{toml_string('k ' + payload('K'))} = 1\n",
        "gates.toml": gate_file,
        "gate.py": f"import sys\nprint({payload('G')!r})\nsys.exit(1)\n",
    })
    for tag in ("D", "E"):  # REPO's untracked files: the warning lists them
        (repo / f"x{payload(tag).replace('/', '_')}").write_text("x\n")
    return repo


def assert_only_own(output: str, *, what: str) -> None:
    assert foreign(output) == [], f"{what}:\n{output}"


def test_a_failing_setup_run_prints_no_forged_command(tmp_path: Path, server: ScriptedServer) -> None:
    """Exit 9: dirty-file warning, unknown key, an operator setup echoing the payload, the repository's failing setup
    (its command and output), the setup_failed line."""
    repo = forged_repo(tmp_path)
    run = run_prime(tmp_path, repo, server, "--setup", f"echo {quote(payload('S'))}", "--gates-file",
                    str(repo / "gates.toml"), "--gate", "python gate.py", env=ACTIONS)
    assert run.code == 9, run.proc.stderr
    both = run.proc.stdout + run.proc.stderr
    for tag in ("D", "K", "S", "F"):  # each source reached the log
        assert f"{tag}7" in both, tag
    assert_only_own(run.proc.stdout, what="stdout")
    assert_only_own(run.proc.stderr, what="stderr")
    assert [c.name for c in commands(run.proc.stdout) if c.name in ("group", "endgroup", "notice")] == \
        ["group", "endgroup", "group", "endgroup", "notice"]


def test_a_model_error_run_prints_no_forged_command(tmp_path: Path) -> None:
    """Exit 4: a red gate printing the payload, the model's text, a cell's code and output, then three calls to
    tools named with the payload (the model_error line quotes the last)."""
    repo = forged_repo(tmp_path)
    cell = f"x = {payload('C')!r}\nprint(x)"
    odd = [tool_call(name, {"code": "1"}) for name in (payload("T"), "##[add-mask]T0", payload("U"))]
    with ScriptedServer([ipython(cell), reply(payload("M")), *[reply(tool_calls=[c]) for c in odd]]) as srv:
        run = run_prime(tmp_path, repo, srv, "--gate", "python gate.py", "--max-gate-retries", "1", env=ACTIONS)
    assert run.code == 4, run.proc.stderr
    both = run.proc.stdout + run.proc.stderr
    for tag in ("D", "K", "G", "U"):
        assert f"{tag}7" in both, tag
    assert_only_own(run.proc.stdout, what="stdout")
    assert_only_own(run.proc.stderr, what="stderr")
    own = [c.name for c in commands(run.proc.stdout) if c.name in ("group", "error", "notice")]
    assert own[0] == "group" and own[-2:] == ["error", "notice"], run.proc.stdout
