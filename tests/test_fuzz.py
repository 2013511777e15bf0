"""Issue 17, nightly tier: the parsers of untrusted input never fail with anything but their own errors.

Each target reads what an attacker controls: a session file (resume, show, replay), gate files and settings
from the repository, a provider's response body, a request on the kernel bridge. Hypothesis generates the
input; the property is that the parser returns, or raises the project's error for bad input (exit 2, 4, 6),
never an arbitrary exception (which would end a run with exit 70).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from prime_ci.engine.config import build_config, file_settings
from prime_ci.errors import PrimeCIError
from prime_ci.gates.runner import load_gate_files
from prime_ci.kernel.bridge import Bridge
from prime_ci.model.providers import OpenAICompatModel, ProviderError
from prime_ci.session.log import read_session

pytest.importorskip("hypothesis", reason="hypothesis: the nightly tier installs requirements-fuzz.lock")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.nightly
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30)
ENTRY_KEYS = st.sampled_from(["type", "id", "parentId", "timestamp", "message", "role", "content", "crc",
                              "customType", "data", "summary", "firstKeptEntryId", "version", "cwd"])
entries = st.dictionaries(ENTRY_KEYS, json_values, max_size=8)
IDS = st.sampled_from(["a", "b", "c", "d"])  # few ids: entries that name each other, as a tree or not
linked = st.fixed_dictionaries({"type": st.sampled_from(["message", "custom", "compaction"]), "id": IDS | json_values,
                                "parentId": st.none() | IDS | json_values}, optional={"message": json_values})


def _write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


@FUZZ
@given(lines=st.lists(st.one_of(entries.map(lambda e: json.dumps(e).encode()),
                                linked.map(lambda e: json.dumps(e).encode()), st.binary(max_size=60)), max_size=12))
def test_the_session_reader_raises_only_its_own_errors(lines: list[bytes]) -> None:
    header = json.dumps({"type": "session", "version": 3, "id": "x", "timestamp": "t", "cwd": "/"}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), "session.jsonl", b"\n".join([header, *lines]) + b"\n")
        try:
            session = read_session(path)
        except PrimeCIError:
            return
        tree = session.branches()
        assert sorted(tree.path + tree.off_branch) == list(range(len(session.entries)))
        path = session.active_path()
        assert [session.entries[i] for i in tree.path] == path
        assert len(list(session.messages())) <= len(path)


@FUZZ
@given(text=st.text(max_size=400))
def test_gate_files_raise_only_config_errors(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), "gates.toml", text.encode("utf-8", "surrogatepass"))
        with contextlib.suppress(PrimeCIError):
            load_gate_files([path])


settings_tables = st.dictionaries(
    st.sampled_from(["gate", "gates", "max-turns", "max_tokens", "max-wall", "model", "python", "sandbox",
                     "setup", "cache", "reasoning-effort", "task", "unknown", "context-window", "max-cost"]),
    json_values.filter(lambda v: v is not None), max_size=5)


@FUZZ
@given(table=settings_tables)
def test_repository_settings_never_stop_a_run(table: dict[str, Any]) -> None:
    """Whatever the repository writes, the operator's valid flags make a valid configuration (DESIGN §13)."""
    lines = [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in table.items()]
    with tempfile.TemporaryDirectory() as tmp:
        _write(Path(tmp), "prime-ci.toml", "\n".join(lines).encode())
        warnings: list[str] = []
        build_config({"task": "t", "model": "openai/x"}, file_settings(Path(tmp), warnings.append), warnings.append)


@FUZZ
@given(body=st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200),
                      st.integers(1, 100_000).map(lambda n: b"[" * n + b"]" * n)))
def test_a_provider_response_body_is_a_reply_or_a_provider_error(body: bytes) -> None:
    import httpx

    async def main() -> None:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
        model = OpenAICompatModel("openai/m", "http://provider.invalid/v1")
        model._client = httpx.AsyncClient(transport=transport)
        with contextlib.suppress(ProviderError):
            await model.attempt([{"role": "user", "content": "x"}], [], 16, 5.0)

    asyncio.run(main())


@FUZZ
@given(line=st.one_of(entries.map(lambda e: json.dumps({"op": "echo", **e}).encode()), st.binary(max_size=200),
                      json_values.map(lambda v: json.dumps(v).encode()),
                      st.integers(1, 100_000).map(lambda n: b'{"op": ' + b"[" * n + b"]" * n + b"}")))
def test_the_bridge_answers_every_line(line: bytes) -> None:
    async def echo(request: dict[str, Any]) -> Any:
        return sorted(request)

    async def main() -> dict[str, Any]:
        bridge = Bridge()
        bridge.register("echo", echo)
        try:
            return await bridge._dispatch(line + b"\n")
        finally:
            await bridge.close()

    reply = asyncio.run(main())
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool)


# --- issue 24: ids that become paths (export), suite files, --include-dirty snapshots ------------------------------
# These draw from a fixed seed (derandomize): a nightly failure is the same example on every machine.
SEEDED = settings(FUZZ, derandomize=True, database=None)
CLIMBING = st.sampled_from(["../x", "../../../../y", "/abs", "x/../../z", "", ".", "..", "a/b", "ok\n", "sub-0123abcd",
                            "a", "b", "b.jsonl", "a.jsonl", "root", "-rf", "x" * 64, "x" * 65, "\u202e", "c:\\d"])
PLAIN_OR_NOT = CLIMBING | st.text(max_size=12) | json_values
FEW = ["a", "b", "a.jsonl", "b.jsonl"]  # ids that name each other's files and directories


def _files_outside(top: Path, dest: Path) -> set[Path]:
    return {p for p in top.rglob("*") if not p.is_relative_to(dest)}


@st.composite
def families(draw: st.DrawFn) -> list[tuple[Any, str, str, Any]]:
    """Spawn records (rlm_child_id, session folder, parent, the child's session id): half of them a tree of a few
    plain names that collide (a child ``a`` whose session is ``b`` and a grandchild ``b.jsonl`` under it), half of
    them anything at all."""
    spawned, out = ["root"], []
    for n in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            child = (draw(st.sampled_from(FEW)), f"C{n}", draw(st.sampled_from(spawned)), draw(st.sampled_from(FEW)))
        else:
            child = (draw(PLAIN_OR_NOT), draw(st.sampled_from(["A", "B", "../A"])),
                     draw(st.sampled_from(["root", *FEW])), draw(PLAIN_OR_NOT))
        spawned += [child[0]] if isinstance(child[0], str) else []
        out.append(child)
    return out


@settings(SEEDED, max_examples=1000)
@given(root_id=st.just("r") | PLAIN_OR_NOT, children=families())
def test_export_writes_only_under_dest(root_id: Any, children: list[tuple[Any, str, str, Any]]) -> None:
    """Ids from the session files become file and directory names: whatever they are, export writes under DEST
    or refuses (exit 2), never elsewhere, and never fails with another error."""
    from prime_ci.children.export import export_prime_agent

    def header(session_id: Any) -> bytes:
        return json.dumps({"type": "session", "version": 3, "id": session_id, "timestamp": "t", "cwd": "/"}).encode()

    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        out, dest = top / "out", top / "dest"
        out.mkdir()
        lines = [header(root_id)]
        for n, (rlm_id, folder, parent, child_id) in enumerate(children):
            lines.append(json.dumps({"type": "custom", "id": f"{n:08x}", "parentId": None, "timestamp": "t",
                                     "customType": "prime_ci.child", "data": {
                                         "event": "spawned", "rlm_child_id": rlm_id, "parent": parent,
                                         "session_dir": f"/elsewhere/children/{folder}"}}).encode())
            (out / "children" / folder).mkdir(parents=True, exist_ok=True)
            (out / "children" / folder / "session.jsonl").write_bytes(header(child_id) + b"\n")
        (out / "session.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        before = _files_outside(top, dest)
        try:
            written = export_prime_agent(out, dest)
        except PrimeCIError:
            written = []
        assert _files_outside(top, dest) == before
        assert all(p.resolve().is_relative_to(dest.resolve()) for p in written)


suite_rows = st.dictionaries(
    st.sampled_from(["id", "repo", "ref", "task", "task_file", "setup", "gates", "gates_file", "python", "test_patch",
                     "fail_to_pass", "max_turns", "max_wall", "max_cost", "replay", "model", "instance_id", "unknown"]),
    CLIMBING | json_values.filter(lambda v: v is not None), max_size=6)


@SEEDED
@given(rows=st.lists(suite_rows, max_size=3), form=st.sampled_from(["toml", "jsonl", "json"]),
       raw=st.none() | st.binary(max_size=80) | st.integers(1, 100_000))
def test_suite_files_load_or_raise_config_errors(rows: list[dict[str, Any]], form: str,
                                                 raw: bytes | int | None) -> None:
    """A suite file loads or is refused with one line (exit 2); a task file it loads lies in its directory (the
    text goes to the model), whatever ``..``, absolute path or symlink names it."""
    from prime_ci.bench.suite import load_suite

    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        (top / "suite").mkdir()
        (top / "outside.md").write_text("the operator's private notes\n")
        (top / "suite" / "x").symlink_to(top / "outside.md")
        (top / "suite" / "inside.md").write_text("fix it\n")
        if isinstance(raw, int):  # nested ``raw`` deep
            data = (b"x = " if form == "toml" else b"") + b"[" * raw + b"]" * raw
        elif raw is not None:
            data = raw
        elif form == "toml":
            data = "\n".join("[[task]]\n" + "\n".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in row.items()
                                                      if v is not None) for row in rows).encode()
        else:
            data = (json.dumps(rows) if form == "json" else "\n".join(json.dumps(r) for r in rows)).encode()
        path = _write(top / "suite", f"suite.{form}", data)
        try:
            suite = load_suite(path)
        except PrimeCIError:
            return
        for task in suite.tasks:
            assert task.task_file is None or Path(task.task_file).resolve().is_relative_to((top / "suite").resolve())


HOSTILE_NAMES = st.sampled_from([b"-rf", b"--output=x", b"a\nb", b"\n", b"..x", b"x..", b"\xff\xfe", b"x" * 255,
                                 b" lead", b"trail ", b"*", b"[ab]", b":(glob)x", b":!x", b"\\", b"\t", b'"q"', b"#c",
                                 b"!n", b"\x1b[2J", b"\xe2\x80\xae", b"-"]) | st.binary(min_size=1, max_size=12)
ENTRY_KINDS = st.sampled_from(["file", "file", "link-out", "link-in", "link-up", "dir"])
SKIPPED = {b".", b"..", b".git", *(n.encode() for n in ("node_modules", "__pycache__", ".pytest_cache", ".mypy_cache",
                                                         ".ruff_cache", ".hypothesis", ".tox", ".nox", ".venv",
                                                         ".eggs", "build", "dist", ".cache", ".next", ".nuxt",
                                                         ".turbo", ".parcel-cache", ".gradle", "htmlcov",
                                                         ".pnpm-store", ".gitignore", ".gitattributes"))}


def _component(name: bytes) -> bool:
    return b"/" not in name and b"\0" not in name and name not in SKIPPED and not name.endswith(b".egg-info")


@settings(SEEDED, max_examples=60)
@given(entries=st.lists(st.tuples(st.lists(HOSTILE_NAMES.filter(_component), max_size=2),
                                  HOSTILE_NAMES.filter(_component), ENTRY_KINDS), min_size=1, max_size=6))
def test_dirty_snapshots_hold_hostile_names_as_they_are(entries: list[tuple[list[bytes], bytes, str]]) -> None:
    """``--include-dirty`` with names a working tree can hold (newlines, leading dashes, pathspec magic, non-UTF-8
    bytes, 255-byte names) and symlinks out of the tree or up it: the snapshot holds each file's bytes and each
    symlink as a link (never its target's content), REPO is left as it was, nothing is written outside the clone."""
    import subprocess

    from prime_ci.isolation.worktree import create_worktree

    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        (top / "secret.txt").write_text("outside the tree\n")
        repo = top / "repo"
        repo.mkdir()
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
        subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
        (repo / "kept.txt").write_text("committed\n")
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
        expected: dict[bytes, tuple[str, bytes]] = {b"kept.txt": ("100644", b"committed\n")}
        root = os.fsencode(repo)
        for dirs, name, kind in entries:
            rel = b"/".join([*dirs, name])
            if any(k == rel or k.startswith(rel + b"/") or rel.startswith(k + b"/") for k in expected):
                continue  # a name already taken, as a file or a directory
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if kind == "file":
                body = b"bytes of " + rel
                with open(path, "wb") as handle:
                    handle.write(body)
                expected[rel] = ("100644", body)
            elif kind == "dir":
                os.makedirs(path)  # empty: not in a commit
                expected[rel] = ("dir", b"")
            else:
                target = {"link-out": os.fsencode(top / "secret.txt"), "link-in": b"kept.txt",
                          "link-up": b"../" * (len(dirs) + 1) + b"secret.txt"}[kind]
                os.symlink(target, path)
                expected[rel] = ("120000", target)
        state = _repo_state(repo)
        before = set(top.iterdir())
        wt = create_worktree(str(repo), None, include_dirty=True)
        try:
            assert _repo_state(repo) == state
            assert set(top.iterdir()) == before  # the clone is in the system's temp directory
            listing = subprocess.run(["git", f"--git-dir={wt.git_dir}", "ls-tree", "-r", "-z", wt.base_commit],
                                     capture_output=True, check=True).stdout
            found = {}
            for record in filter(None, listing.split(b"\0")):
                meta, _, rel = record.partition(b"\t")
                mode, _, sha = meta.split()
                found[rel] = (mode.decode(), subprocess.run(["git", f"--git-dir={wt.git_dir}", "cat-file", "blob",
                                                             sha.decode()], capture_output=True, check=True).stdout)
            assert found == {k: v for k, v in expected.items() if v[0] != "dir"}
            for rel, (mode, body) in found.items():
                path = os.path.join(os.fsencode(wt.path), rel)
                assert (os.readlink(path) if mode == "120000" else Path(os.fsdecode(path)).read_bytes()) == body
        finally:
            wt.remove()


def _repo_state(repo: Path) -> tuple[bytes, ...]:
    import subprocess

    def out(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True).stdout

    return (out("rev-parse", "HEAD"), out("status", "--porcelain=v1", "-z", "--ignored"),
            (repo / ".git" / "config").read_bytes(), out("stash", "list"))
