"""``prime-ci show`` takes the run directory every run prints (as resume, export and report do) and renders its
records for a person: in words, wrapped to the terminal, no word or number cut (DESIGN §14; issue 39)."""

from __future__ import annotations

from pathlib import Path

from conftest import cli_inproc
from prime_ci.session.log import SessionLog

WORDS = ("zebra", "walrus", "8879051292", "yakety")
LONG = " ".join(WORDS * 40)


def test_show_takes_a_run_directory_and_never_cuts_a_word(tmp_path: Path) -> None:
    run = tmp_path / "prime-ci-out" / "20260101-000000-abcdef"
    log = SessionLog.create(run / "session.jsonl", cwd="/work")
    log.custom("prime_ci.gate", {"round": 1, "kind": "full", "duration_s": 75.3, "passed": False, "gates": ["tests"],
                                 "failing": [{"gate": "tests", "test": "t.py::test_a", "message": LONG}]})
    log.custom("prime_ci.usage", {"turns": 2, "model_calls": 2, "prompt_tokens": 1200, "completion_tokens": 34,
                                  "total_tokens": 1234, "cost_usd": 0.0097})
    log.custom("someone.else", {"note": LONG, "nested": {"deeper": {"deepest": {"end": LONG}}}, "ids": list(range(20))})
    log.close()

    proc = cli_inproc(["show", "prime-ci-out/20260101-000000-abcdef"], cwd=tmp_path, env={"COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all(len(line) <= 60 for line in lines), "wrapped to the terminal"
    text = " ".join(proc.stdout.split())
    assert f"session {log.session_id} · v3 · " in text, "the heading whole"
    assert "gates round 1 (full): red in 1m15s" in text and "t.py::test_a: zebra walrus" in text
    assert "usage so far: 2 turn(s)" in text and "1,234 tokens (1,200 prompt, 34 completion) · $0.0097" in text
    assert "someone.else: note: zebra walrus" in text and "deepest: (1 fields)" in text
    tokens = {t.strip(",;:()…·") for t in text.split()}
    cut = sorted(t for t in tokens for w in WORDS if len(t) > 1 and t != w and (w.startswith(t) or w.endswith(t)))
    assert not cut, f"words cut: {cut}"
    assert "{" not in text and '"' not in text, "a record is not raw JSON"
