"""Issue 24 item 2, in process: a setup table cannot say where it came from (the runs with the real sandbox are in
tests/runs/engine/test_setup_offline.py)."""

from __future__ import annotations

import pytest

from prime_ci.engine.setup import from_tables
from prime_ci.errors import ConfigError


def test_a_table_cannot_say_where_it_came_from() -> None:
    with pytest.raises(ConfigError, match=r"setup\[0\]\.repository: unknown field"):
        from_tables([{"name": "deps", "command": "true", "repository": False}], "prime-ci.toml")
