"""prime-ci: a headless autonomous coding-agent runner for CI."""

from __future__ import annotations

__version__ = "0.1.0"
