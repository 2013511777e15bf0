"""Issue 37: ``prime-ci export`` reads only what is in OUT (a symlink out of it is refused, whichever part of the path
it is) and a corrupt session is one line (exit 2), never a traceback; nothing is written either way."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import cli_inproc
from prime_ci.children.export import export_prime_agent
from prime_ci.errors import ConfigError
from unit.children.test_export_ids import crafted_run, files_under

SECRET = "root-only content\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file only its owner may read, outside OUT, that looks like a session."""
    path = tmp_path / "private" / "session.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"type": "session", "version": 3, "id": "stolen", "cwd": "/"}) + "\n" + SECRET)
    path.chmod(0o600)
    return path


def _link_child_session(out: Path, secret: Path) -> None:
    (out / "children" / "kid" / "session.jsonl").unlink()
    (out / "children" / "kid" / "session.jsonl").symlink_to(secret)


def _link_child_dir(out: Path, secret: Path) -> None:
    (out / "children" / "kid" / "session.jsonl").unlink()
    (out / "children" / "kid").rmdir()
    (out / "children" / "kid").symlink_to(secret.parent, target_is_directory=True)


def _link_children(out: Path, secret: Path) -> None:
    (out / "children" / "kid" / "session.jsonl").unlink()
    (out / "children" / "kid").rmdir()
    (out / "children").rmdir()
    (secret.parent / "kid").mkdir()
    os.link(secret, secret.parent / "kid" / "session.jsonl")
    (out / "children").symlink_to(secret.parent, target_is_directory=True)


def _link_root(out: Path, secret: Path) -> None:
    (out / "session.jsonl").unlink()
    (out / "session.jsonl").symlink_to(secret)


@pytest.mark.parametrize("plant", [_link_child_session, _link_child_dir, _link_children, _link_root])
def test_a_symlink_out_of_out_is_refused_and_nothing_is_written(tmp_path: Path, secret: Path, plant: object) -> None:
    out = crafted_run(tmp_path / "out")
    assert callable(plant)
    plant(out, secret)
    before = files_under(tmp_path)
    with pytest.raises(ConfigError, match=r"^export: .* leads out of .*: refused$"):
        export_prime_agent(out, tmp_path / "dest")
    assert files_under(tmp_path) == before


def test_a_symlink_that_stays_in_out_is_followed(tmp_path: Path) -> None:
    out = crafted_run(tmp_path / "out")
    (out / "children" / "kid" / "session.jsonl").rename(out / "kid.jsonl")
    (out / "children" / "kid" / "session.jsonl").symlink_to(out / "kid.jsonl")
    written = export_prime_agent(out, tmp_path / "dest")
    assert written[1].name == "kid-session.jsonl" and '"parentSession"' in written[1].read_text()


def test_a_fifo_in_place_of_a_session_is_refused_without_blocking(tmp_path: Path) -> None:
    out = crafted_run(tmp_path / "out")
    (out / "children" / "kid" / "session.jsonl").unlink()
    os.mkfifo(out / "children" / "kid" / "session.jsonl")
    with pytest.raises(ConfigError, match="is not a regular file: refused"):
        export_prime_agent(out, tmp_path / "dest")


@pytest.mark.parametrize("child, message", [
    (b"not json at all\n" + json.dumps({"type": "message", "id": "m"}).encode() + b"\n",
     "is corrupt: its first line is not a session header"),
    (b"\xff\xfe\n", "is corrupt: its first line is not a session header"),
    (json.dumps({"type": "session", "id": "kid-session"}).encode() + b"\n"
     + json.dumps({"type": "message", "id": "m", "message": "hello"}).encode() + b"\n",
     "is corrupt: line 2: a message entry whose message is a string, not an object"),
    (json.dumps({"type": "session", "id": "kid-session"}).encode() + b"\n"
     + json.dumps({"type": "message", "id": "m", "message": {"role": "user", "content": 5}}).encode() + b"\n",
     "is corrupt: line 2: a user message whose content is a number"),
])
def test_a_corrupt_child_session_is_one_line_and_nothing_is_written(
    tmp_path: Path, child: bytes, message: str
) -> None:
    out = crafted_run(tmp_path / "out")
    (out / "children" / "kid" / "session.jsonl").write_bytes(child)
    before = files_under(tmp_path)
    with pytest.raises(ConfigError, match=message):
        export_prime_agent(out, tmp_path / "dest")
    assert files_under(tmp_path) == before


def test_the_crafted_export_is_exit_2_in_one_line(tmp_path: Path, secret: Path) -> None:
    out = crafted_run(tmp_path / "out")
    _link_child_session(out, secret)
    proc = cli_inproc(["export", str(out), "--prime-agent", str(tmp_path / "dest")], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "leads out of" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "dest").exists()
