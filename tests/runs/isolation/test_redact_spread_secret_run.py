"""Issue 24 item 8, a whole run: a secret spread with Unicode format characters never reaches the patch or the gate
log."""

from __future__ import annotations

import uuid
from pathlib import Path

from conftest import BUGGY, LOGGED, make_repo, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply
from unit.isolation.format_chars import FOLD

SPREAD_GATE = """import os, sys
log, token = sys.argv[1], os.environ["HARDEN_TEST_TOKEN"]
spread = "\\u200b".join(token).encode()
""" + LOGGED + """
cut = len(spread) // 2 + 1  # inside a zero-width space's three bytes
sys.stdout.buffer.write(b"BEFORE " + spread[:cut]); sys.stdout.flush()
logged(b"BEFORE")  # the host has read the first part: the rest comes in another read
sys.stdout.buffer.write(spread[cut:] + b"\\nAFTER\\n"); sys.stdout.flush()
logged(b"AFTER")
as_written = open(log, encoding="utf-8", errors="replace").read().replace("\\u200b", "")
print("STREAM", "LEAK" if token in as_written else "CLEAN")
"""


WRITE_SPREAD = ("import os\nopen('leak.txt', 'w').write('\\u2063'.join(os.environ['HARDEN_TEST_TOKEN']) + '\\n')\n"
                "print('written')")


def test_a_spread_secret_never_reaches_the_patch_or_the_gate_log(tmp_path: Path) -> None:
    """Found in the patch it stops the run (exit 7), as the plain secret does; masked in every artifact."""
    secret = f"tok-{uuid.uuid4().hex}"
    repo = make_repo(tmp_path / "repo", {**BUGGY, "spread.py": SPREAD_GATE})
    out = tmp_path / "out-0"
    with ScriptedServer([ipython(WRITE_SPREAD), reply("done")]) as server:
        run = run_inproc(tmp_path, repo, server, "--gate", f"python spread.py {out}/gates/spread.py.log",
                        "--pass-env", "HARDEN_TEST_TOKEN", "--sandbox", "off", env={"HARDEN_TEST_TOKEN": secret})
    assert run.out == out and run.code == 7, run.proc.stderr
    assert run.result["stop_reason"] == "security_stop" and "secret" in run.result["detail"], "as for the plain secret"
    assert "+[REDACTED]" in (out / "patch.diff").read_text()
    (log,) = (out / "gates").glob("*.log")
    assert log.read_text() == "BEFORE [REDACTED]\nAFTER\nSTREAM CLEAN\n", "masked as written, not only at the end"
    for path in [p for p in out.rglob("*") if p.is_file()]:
        assert secret not in FOLD.sub("", path.read_bytes().decode(errors="replace")), path
