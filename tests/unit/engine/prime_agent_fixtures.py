"""Where the sessions Prime Agent's own SessionManager wrote are kept (tests/fixtures/prime_agent)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "prime_agent"
