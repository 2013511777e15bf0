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
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prime_ci.engine.config import build_config, file_settings
from prime_ci.errors import PrimeCIError
from prime_ci.gates.runner import load_gate_files
from prime_ci.kernel.bridge import Bridge
from prime_ci.model.providers import OpenAICompatModel, ProviderError
from prime_ci.session.log import read_session

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
