"""Issue 38, a real repository (python-poetry/cleo): its workflow sets ``PYTHONWARNDEFAULTENCODING`` for every step,
so that its tests warn on a text file opened without an encoding. prime-ci's step gets it too: its console filled
with EncodingWarnings from prime-ci's own reads of /proc and the cgroup files, of the kernel's connection file, and
from the libraries it runs on. The job's setting is for the project: the gates it is passed to see it, prime-ci's
console does not."""

from __future__ import annotations

from pathlib import Path

from conftest import BUGGY, make_repo, run_prime
from prime_ci.isolation.sandbox import bwrap_binary
from prime_ci.testing import ScriptedServer, ipython, reply

FIX = ("from pathlib import Path\np = Path('calc.py')\n"
       "p.write_text(p.read_text(encoding='utf-8').replace('a - b', 'a + b'), encoding='utf-8')\n")
# the gate sees the job's setting, as the project's CI has it
GATE = ("python -c \"import sys; assert sys.flags.warn_default_encoding, 'not passed'\" && "
        "python -m unittest -q test_calc")
TESTS = "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n" \
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"


def test_a_job_warning_on_default_encodings_reaches_the_gates_not_prime_cis_console(tmp_path: Path,
                                                                                     server: ScriptedServer) -> None:
    repo = make_repo(tmp_path / "repo", {**BUGGY, "test_calc.py": TESTS})
    server.add(ipython(FIX), reply("fixed"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "on" if bwrap_binary() else "off",
                    "--pass-env", "PYTHONWARNDEFAULTENCODING", "--gate", GATE,
                    env={"PYTHONWARNDEFAULTENCODING": "1"})
    assert run.code == 0, run.proc.stderr
    assert "EncodingWarning" not in run.proc.stderr + run.proc.stdout, run.proc.stderr
    assert "EncodingWarning" not in (run.out / "session.jsonl").read_text(encoding="utf-8")
