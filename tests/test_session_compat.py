"""Session files that Prime Agent and prime-ci both read right (issue 16, the reader side).

The fixtures under fixtures/prime_agent were written by Prime Agent's own SessionManager (README.md there):
a compaction, a /tree branch with a branch summary and a label, a /fork and a --fork, a sub-agent session, and
two prime-ci logs Prime Agent continued (entries appended without checksums) and forked (every prime-ci line
re-serialised by JSON.stringify).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import cli_inproc, run_cli
from prime_ci.artifacts.schemas import SessionEntry, SessionHeader
from prime_ci.errors import LogCorruptError, PersistenceError
from prime_ci.harness.refine import condense
from prime_ci.model.providers import ReplayModel
from prime_ci.session.log import ForeignSuffixError, SessionLog, read_session

FIXTURES = Path(__file__).parent / "fixtures" / "prime_agent"
ACTIVE = ["FIXTURE-ROOT-USER", "FIXTURE-ROOT-ASSISTANT", "FIXTURE-BRANCH-SUMMARY", "FIXTURE-ON-B1", "FIXTURE-ON-B2",
          "FIXTURE-ON-C1", "FIXTURE-ON-C2"]
OFF = ["FIXTURE-OFF-A1", "FIXTURE-OFF-A2", "FIXTURE-OFF-B3", "FIXTURE-OFF-B4"]
NODE = shutil.which("node")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _show(path: Path) -> str:
    proc = run_cli(["show", str(path)], cwd=path.parent, env={"COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _in_order(text: str, needles: list[str]) -> bool:
    positions = [text.find(n) for n in needles]
    return -1 not in positions and positions == sorted(positions)


def test_schema_accepts_every_prime_agent_entry_and_unknown_types(tmp_path: Path) -> None:
    proc = run_cli(["schema", "session"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    # one validator per schema, checked once (jsonschema.validate checks the schema again on every call)
    for part in ("header", "entry"):
        jsonschema.validators.validator_for(schema[part]).check_schema(schema[part])
    header_schema, entry_schema = (jsonschema.validators.validator_for(schema[part])(schema[part])
                                   for part in ("header", "entry"))
    seen: set[str] = set()
    fixtures = sorted(FIXTURES.glob("*.jsonl"))
    assert len(fixtures) == 7
    for path in fixtures:
        header, *entries = _lines(path)
        header_schema.validate(header)
        SessionHeader.model_validate(header)
        for entry in entries:
            entry_schema.validate(entry)
            SessionEntry.model_validate(entry)
            seen.add(entry["type"])
    assert seen >= {"message", "model_change", "thinking_level_change", "service_tier_change", "compaction",
                    "branch_summary", "custom", "custom_message", "label", "session_info", "child_usage_attributed"}
    future = {"type": "goal_update", "id": "0123abcd", "parentId": None, "timestamp": "2026-01-01T00:00:00Z",
              "anything": [1, 2]}
    jsonschema.validate(future, schema["entry"])
    jsonschema.validate({"type": "session", "id": "x", "timestamp": "t", "cwd": "/"}, schema["header"])  # v1
    label_without_target = {"type": "label", "id": "0123abcd", "parentId": None, "timestamp": "t"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(label_without_target, schema["entry"])
    with pytest.raises(ValueError, match="targetId"):
        SessionEntry.model_validate(label_without_target)


def test_show_renders_the_active_branch_in_order_and_marks_the_rest() -> None:
    out = _show(FIXTURES / "branched.jsonl")
    assert _in_order(out, ACTIVE), out
    assert not any(text in out for text in OFF), "off-branch content is listed, not shown"
    off_ids = [e["id"] for e in _lines(FIXTURES / "branched.jsonl")[1:] if e["type"] == "label"
               or any(t in json.dumps(e) for t in OFF)]
    assert len(off_ids) == 5
    for eid in off_ids:
        assert f"off-branch {eid}" in out
    assert "7 on the active branch, 5 off it" in out
    assert "[label: before-approaches]" in out and "summary of an abandoned branch" in out
    assert "⑂ 3 off-branch entries" in out and "⑂ 2 off-branch entries" in out
    cli_fork = _show(FIXTURES / "fork_cli.jsonl")  # --fork copies the whole tree: the same active branch
    assert _in_order(cli_fork, ACTIVE) and not any(text in cli_fork for text in OFF)
    fork = _show(FIXTURES / "fork.jsonl")  # /fork at FIXTURE-ON-C1: the path up to its parent, nothing else
    assert _in_order(fork, ACTIVE[:5]) and "FIXTURE-ON-C1" not in fork and "off-branch" not in fork
    assert "[label: before-approaches]" in fork


def test_condenser_and_replay_use_only_the_active_branch() -> None:
    session = read_session(FIXTURES / "branched.jsonl")
    text = condense(session)
    assert _in_order(text, ACTIVE) and not any(t in text for t in OFF)
    model = ReplayModel(FIXTURES / "branched.jsonl")

    async def replies() -> list[str]:
        return [(await model.complete([], [], max_tokens=10, timeout=1)).text for _ in range(4)]

    said = asyncio.run(replies())
    assert [s.split()[0] for s in said] == ["FIXTURE-ROOT-ASSISTANT", "FIXTURE-ON-B2", "FIXTURE-ON-C2",
                                            "(replay"]


def test_show_renders_prime_agent_entry_kinds_literally(tmp_path: Path) -> None:
    out = _show(FIXTURES / "compaction.jsonl")
    assert _in_order(out, ["thinking level: high", "FIXTURE-MAIN-1", "FIXTURE-THINKING", "$ git status --short",
                           "$ cat secret.txt", "not sent to the model", "FIXTURE-COMPACTION", "48213 tokens before",
                           "FIXTURE-MAIN-4", "my-extension: count: 42, ratio: 0.5", "FIXTURE-CUSTOM-MESSAGE",
                           "session name: Fix the add function", "child usage attributed to",
                           "service tier: priority"]), out
    child = _show(FIXTURES / "child.jsonl")
    assert "rlm depth 1" in child and _in_order(child, ["claude-haiku-4-5", "FIXTURE-CHILD-TASK",
                                                        "FIXTURE-CHILD-ANSWER"])
    path = tmp_path / "odd.jsonl"
    header, first = _lines(FIXTURES / "child.jsonl")[:2]
    odd = [header, first,
           {"type": "label", "id": "1111aaaa", "parentId": first["id"], "timestamp": "t",
            "targetId": first["id"], "label": "[bold]lit[/bold]"},
           {"type": "future_kind", "id": "2222bbbb", "parentId": "1111aaaa", "timestamp": "t", "x": "[red]y"},
           {"type": "message", "id": "3333cccc", "parentId": "2222bbbb", "timestamp": "t",
            "message": {"role": "bashExecution", "command": "echo [/tmp]", "output": "[/tmp]\n", "exitCode": 1,
                        "cancelled": False, "truncated": True, "fullOutputPath": "/tmp/[x]"}}]
    path.write_text("".join(json.dumps(e) + "\n" for e in odd))
    out = _show(path)
    assert 'label "[bold]lit[/bold]" on' in out and "· future_kind 2222bbbb" in out
    assert "$ echo [/tmp]" in out and "exit 1" in out and "full output: /tmp/[x]" in out


def _prime_ci_log(path: Path) -> None:
    log = SessionLog.create(path, cwd="/work")
    log.custom("prime_ci.run", {"wall_s": 1.0, "price": 4.5e-05, "big": 1e21, "neg": -0.0, "keys": {"10": 1, "2": 2},
                                "text": "café ☕ \U0001f600 \udc80 </script> \u2028"})
    log.message("assistant", [{"type": "text", "text": "hi"}], usage={"cost": {"total": 0.0, "input": 1.5e-07}})
    log.custom("prime_ci.usage", {"cost_usd": float("nan"), "total": 100.0})
    log.close()


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_prime_ci_log_reserialised_by_javascript_keeps_its_checksums(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    _prime_ci_log(path)
    original = path.read_bytes()
    assert b'"cost_usd":null' in original, "NaN is written as JSON.stringify writes it"
    script = ("const fs = require('fs'); const lines = fs.readFileSync(process.argv[1], 'utf8').split('\\n');"
              "fs.writeFileSync(process.argv[1], lines.map(l => l && JSON.stringify(JSON.parse(l))).join('\\n'));")
    subprocess.run([NODE, "-e", script, str(path)], check=True, timeout=60)
    rewritten = path.read_bytes()
    assert rewritten != original and b'"wall_s":1,' in rewritten and b"0.000045" in rewritten
    session = read_session(path, strict=True)
    assert not session.bad_lines and not session.foreign_suffix and len(session.entries) == 3
    assert session.entries[0]["data"]["text"] == "café ☕ \U0001f600 \udc80 </script> \u2028"
    log = SessionLog.open_for_append(path)
    log.custom("prime_ci.resumed", {})
    log.close()
    assert read_session(path, strict=True).entries[-1]["seq"] == 4
    # another writer changed a line and kept its crc32 (as Prime Agent's fork does): read, and said to be rewritten
    path.write_bytes(rewritten.replace(b'"total":100', b'"total":101'))
    changed = read_session(path, strict=True)
    assert not changed.bad_lines and len(changed.entries) == 3 and len(changed.rewritten) == 1


def test_prime_agent_fork_of_a_prime_ci_log_verifies_and_old_raw_crcs_still_read(tmp_path: Path) -> None:
    forked = FIXTURES / "prime_ci_forked.jsonl"
    text = forked.read_text()
    assert '"wall_s":1,' in text and "0.000045" in text and '"cost_usd":0,' in text, "JSON.stringify's spelling"
    session = read_session(forked)
    assert not session.bad_lines and len(session.entries) == 4 and all("crc32" in e for e in session.entries)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(text.replace('"tokens":1280', '"tokens":1281'))
    session = read_session(tampered)
    assert not session.bad_lines and len(session.entries) == 4 and len(session.rewritten) == 1
    shown = cli_inproc(["show", str(tampered)], cwd=tmp_path)
    assert shown.returncode == 0 and "1 line rewritten by another writer" in shown.stdout + shown.stderr
    assert "unreadable line" not in shown.stdout + shown.stderr and "1281" in shown.stdout

    legacy = tmp_path / "legacy.jsonl"  # as prime-ci wrote before the canonical crc: over the raw bytes
    records = [{"type": "session", "version": 3, "id": "x", "timestamp": "t", "cwd": "/", "seq": 0},
               {"type": "custom", "id": "0000aaaa", "parentId": None, "timestamp": "t", "customType": "c",
                "data": {"cost": 0.0, "é": "☕"}, "seq": 1}]
    raw = [json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode() for r in records]
    legacy.write_bytes(b"".join(b[:-1] + b',"crc32":"%08x"}\n' % zlib.crc32(b) for b in raw))
    assert read_session(legacy, strict=True).entries[0]["data"]["cost"] == 0.0
    legacy.write_bytes(legacy.read_bytes().replace(b'"c"', b'"d"'))
    assert read_session(legacy, strict=True).rewritten == [2]
    legacy.write_bytes(legacy.read_bytes().replace(b'"d"', b'"d'))  # not JSON any more: damage, as before
    with pytest.raises(LogCorruptError, match="invalid JSON"):
        read_session(legacy, strict=True)


def test_a_suffix_prime_agent_appended_is_read_shown_and_refused_for_resume(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    shutil.copy(FIXTURES / "prime_ci_continued.jsonl", path)
    data = path.read_bytes()
    session = read_session(path, strict=True)
    assert not session.bad_lines and len(session.entries) == 6 and len(session.foreign_suffix) == 2
    assert session.entries[4:] == session.foreign_suffix and session.foreign_start == 4
    assert session.foreign_offset == data.index(b'{"type":"message","id":"' + session.foreign_suffix[0]["id"].encode())
    assert [e["id"] for e in session.active_path()][-2:] == [e["id"] for e in session.foreign_suffix]
    with pytest.raises(ForeignSuffixError) as info:
        session.check_no_foreign_suffix()
    assert info.value.exit_code == 2 and not isinstance(info.value, PersistenceError)
    assert "another program appended 2 entries" in str(info.value) and "corrupt" not in str(info.value)
    assert (info.value.path, info.value.count, info.value.offset, info.value.first_id) == (
        str(path), 2, session.foreign_offset, session.foreign_suffix[0]["id"])
    for salvage in (False, True):
        with pytest.raises(ForeignSuffixError) as appending:
            SessionLog.open_for_append(path, salvage=salvage)
        assert str(appending.value) == str(info.value)  # resume and the appender refuse in the same words
    assert path.read_bytes() == data, "a refused resume must not touch the log"
    out = _show(path)
    assert _in_order(out, ["FIXTURE-PRIME-CI-CONTINUED-REPLY", "appended by another program",
                           "FIXTURE-FOREIGN-USER", "FIXTURE-FOREIGN-ASSISTANT"]), out

    path.write_bytes(data.rstrip(b"\n"))  # Prime Agent's last line complete, its newline not yet written
    unterminated = read_session(path, strict=True)
    assert len(unterminated.foreign_suffix) == 2 and unterminated.unterminated and not unterminated.torn_tail


def test_crc_less_records_that_are_not_a_continuation_are_damage(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    log = SessionLog.create(path, cwd="/")
    first = log.custom("a", {})
    log.close()
    own = path.read_bytes()
    foreign = {"type": "message", "id": "f0f0f0f0", "parentId": first, "timestamp": "t",
               "message": {"role": "user", "content": "hi"}}
    line = json.dumps(foreign).encode() + b"\n"
    path.write_bytes(own + line)
    assert len(read_session(path, strict=True).foreign_suffix) == 1
    path.write_bytes(own + line + own.splitlines(keepends=True)[-1])  # a checksummed record after it
    with pytest.raises(LogCorruptError, match="crc32 missing"):
        read_session(path, strict=True)
    orphan = json.dumps({**foreign, "parentId": "99999999"}).encode() + b"\n"
    path.write_bytes(own + orphan)
    with pytest.raises(LogCorruptError, match="names no earlier entry"):
        read_session(path, strict=True)
    stripped = json.dumps({**foreign, "seq": 2}).encode() + b"\n"  # prime-ci's shape, its checksum gone
    path.write_bytes(own + stripped)
    assert read_session(path).bad_lines == [(len(own), "crc32 missing")]


def test_branches_keep_a_damaged_or_linear_log_whole(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    log = SessionLog.create(path, cwd="/")
    for n in range(5):
        log.custom("step", {"n": n})
    log.close()
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3] + lines[4:]))  # step 2 lost: step 3 names a parent not in the file
    session = read_session(path)
    tree = session.branches()
    assert [e["data"]["n"] for e in session.active_path()] == [0, 1, 3, 4] and not tree.off_branch
    assert tree.relinked == [2]
    bare = tmp_path / "bare.jsonl"  # no header, no ids (hand-written or version 1): the file order
    bare.write_text('{"type":"custom","customType":"a"}\n{"type":"custom","customType":"b"}\n')
    assert [e["customType"] for e in read_session(bare).active_path()] == ["a", "b"]
    loop = tmp_path / "loop.jsonl"
    loop.write_text('{"type":"custom","id":"a","parentId":"b"}\n{"type":"custom","id":"b","parentId":"a"}\n')
    assert [e["id"] for e in read_session(loop).active_path()] == ["a", "b"]


def test_resume_refuses_a_log_prime_agent_continued_with_its_own_reason(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copyfile(FIXTURES / "prime_ci_continued.jsonl", out / "session.jsonl")
    before = (out / "session.jsonl").read_bytes()
    proc = run_cli(["resume", str(out)], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "another program appended 2 entries" in last and "corrupt" not in last, last
    assert (out / "session.jsonl").read_bytes() == before
