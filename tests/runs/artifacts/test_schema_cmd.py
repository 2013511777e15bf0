"""`prime-ci schema`: the published JSON Schemas validate the artifacts a run writes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from conftest import cli_inproc, run_inproc
from prime_ci.testing import ScriptedServer, ipython, reply


def test_schemas_validate_a_real_run(tmp_path: Path, buggy_repo: Path, server: ScriptedServer) -> None:
    proc = cli_inproc(["schema"], cwd=tmp_path)
    assert proc.returncode == 0
    schemas = json.loads(proc.stdout)
    assert set(schemas) == {"result", "session", "gates", "refine", "bench", "suite"}
    server.add(ipython("x = 1"), reply("done"))
    run = run_inproc(tmp_path, buggy_repo, server, "--gate", "true")
    assert run.code == 0, run.proc.stderr
    jsonschema.validate(run.result, schemas["result"])
    lines = run.session()
    jsonschema.validate(lines[0], schemas["session"]["header"])
    for entry in lines[1:]:
        jsonschema.validate(entry, schemas["session"]["entry"])
    bad = dict(run.result, stop_reason="exploded")
    try:
        jsonschema.validate(bad, schemas["result"])
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("an unknown stop_reason should not validate")
