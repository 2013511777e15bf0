"""Record the demo's replay session: drive the real CLI with the scripted provider, keep its session.jsonl.

    python scripts/record_demo.py

The bundled src/prime_ci/demo/session.jsonl is the output of this script; `prime-ci demo` replays it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from prime_ci.demo import TASK, demo_flags
from prime_ci.testing import ScriptedServer, ipython, reply

STEPS = [
    ipython("print(open('calc.py').read())", text="Let me read the code under test first."),
    reply("calc.py looks straightforward; I think the repository is fine as it is."),
    ipython(
        "from pathlib import Path\n"
        "p = Path('calc.py')\n"
        "p.write_text(p.read_text().replace('return a - b', 'return a + b'))\n"
        "print(p.read_text())",
        text="The gate shows test_add failing: add() subtracts instead of adding. Fixing it.",
    ),
    ipython("!python -m pytest -q", text="Running the test suite to confirm."),
    reply("Fixed add() in calc.py: it now returns a + b, and the whole test suite passes."),
]


def main() -> int:
    flags, cleanup = demo_flags(None)
    target = Path(__file__).resolve().parents[1] / "src" / "prime_ci" / "demo" / "session.jsonl"
    out = Path(tempfile.mkdtemp(prefix="prime-ci-record-")) / "out"
    try:
        with ScriptedServer(STEPS) as srv:
            cmd = [shutil.which("prime-ci") or "prime-ci", "run", flags["repo"], "--task", TASK,
                   "--model", "openai/recorded-demo", "--api-base", srv.url, "--gate", flags["gate"][0],
                   "--out", str(out)]
            proc = subprocess.run(cmd, env={**os.environ, "OPENAI_API_KEY": "none"}, check=False)
        if proc.returncode != 0:
            print(f"recording run failed with exit {proc.returncode}", file=sys.stderr)
            return 1
        shutil.copy(out / "session.jsonl", target)
        print(f"wrote {target}")
        return 0
    finally:
        cleanup()
        shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
