"""The command line: click commands, exit codes, one-line errors (entry point ``prime_ci.cli:main``)."""

from __future__ import annotations

from prime_ci.cli import bench_cmd, harness_cmds, reference  # register `bench`, `harness`, `refine`, the reference
from prime_ci.cli.app import cli
from prime_ci.cli.commands import main

__all__ = ["bench_cmd", "cli", "harness_cmds", "main", "reference"]
