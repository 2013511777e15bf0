"""A failing test's ``file:line`` is the innermost frame of the project's own code (issue 40): not a frame in a
library, even one installed in a virtualenv inside the project (``.venv/.../site-packages``), which the path
alone would place in the project."""

from __future__ import annotations

from pathlib import Path

from prime_ci.gates.failures import scan_log_failures

LOG = """\
test_get (tests.test_api.TestApi.test_get) ... ERROR

======================================================================
ERROR: test_get (tests.test_api.TestApi.test_get)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "{root}/tests/test_api.py", line 12, in test_get
    response = fetch(self.url)
  File "{root}/api/client.py", line 40, in fetch
    return requests.get(url).json()
  File "{root}/.venv/lib/python3.12/site-packages/requests/models.py", line 978, in json
    raise RequestsJSONDecodeError(e.msg, e.doc, e.pos)
requests.exceptions.JSONDecodeError: Expecting value: line 1 column 1 (char 0)

----------------------------------------------------------------------
Ran 1 test in 0.003s

FAILED (errors=1)
"""


def test_the_location_is_the_projects_innermost_frame_not_a_virtualenvs(tmp_path: Path) -> None:
    root = tmp_path / "project"
    log = tmp_path / "gate.log"
    log.write_text(LOG.format(root=root))
    [failure] = scan_log_failures(log, cwd=root)
    assert failure.test == "tests.test_api.TestApi.test_get"
    assert (failure.file, failure.line) == ("api/client.py", 40)
    assert "JSONDecodeError" in failure.message
