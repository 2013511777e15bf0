"""``durable.append`` from concurrent processes: no record is interleaved with another (four writer processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_WRITER = """
import sys
from pathlib import Path
from prime_ci.isolation import durable
path, tag = Path(sys.argv[1]), sys.argv[2]
for i in range(int(sys.argv[3])):
    durable.append(path, (tag * 200_000) + f" {i}\\n")
"""


def test_concurrent_appenders_never_interleave_inside_a_record(tmp_path: Path) -> None:
    log = tmp_path / "shared.jsonl"
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(log), tag, "15"]) for tag in "abcd"]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0, 0]
    lines = log.read_text().splitlines()
    assert len(lines) == 60
    for line in lines:
        body, _, _n = line.rpartition(" ")
        assert len(body) == 200_000 and body == body[0] * len(body)
