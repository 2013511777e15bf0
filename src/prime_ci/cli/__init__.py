"""The command line: click commands, exit codes, one-line errors (entry point ``prime_ci.cli:main``)."""

from __future__ import annotations

from prime_ci.cli.commands import cli, main

__all__ = ["cli", "main"]
