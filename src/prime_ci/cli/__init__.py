"""The command line: click commands, exit codes, one-line errors (entry point ``prime_ci.cli:main``)."""

from __future__ import annotations

from prime_ci.cli import harness_cmds  # registers `harness` and `refine` on the group
from prime_ci.cli.app import cli
from prime_ci.cli.commands import main

__all__ = ["cli", "harness_cmds", "main"]
