"""Builds: trusted commands that turn what the model edits (a C source) into what the tests load (the extension
module), run before every gate round.

Builds come from the same trusted sources as gates (``--build``, ``[[build]]`` tables in gate files, read at
``--gates-from`` when given) and run like gates, through the gate runner, in the sandbox without network but with
the run's environment writable (``pip install --no-build-isolation -e .`` works). Their logs are
``OUT/build/<name>.log``.

What a build writes is not the model's doing. Ignored files that can steer a test run (``protect.watched``) are
watched by content: the run vouches for those it started with and for what its builds and gates wrote, so only
what the model changed stays a hidden change (exit 7). A file the model changes after a build is its own again; when it
sits where a build writes (a module built by hand in a cell), it is moved aside for the build step, and the
build's output replaces it. If the build does not write that path, the model's file is put back (renamed both
ways: its mtime is kept to the nanosecond). Untracked paths a build creates (an extension module the project does
not ignore, a ``build/`` tree) are left out of the diff, as setup's are.

What a build writes is aged below the build's start (``trees.below``: the whole second before it), so every
source the model changes afterwards is newer than the outputs, even to a build tool that compares whole seconds
(the distutils of setuptools 65.5, which a Python 3.11 venv carries, skips an extension whose ``.so`` has the
second of its source, and gives its in-place copy an mtime cut to the second; so does make where the file system
keeps whole seconds): without it, a fix made in the second the build ended was never compiled. A source written
in the second before a build may look newer than its outputs once more: at worst one more rebuild, never a stale
one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from prime_ci.durations import format_duration
from prime_ci.gates.fingerprint import watched_ignored
from prime_ci.gates.junit import clip_middle
from prime_ci.gates.outside import Outside
from prime_ci.gates.protect import hidden_changes, steers_runner
from prime_ci.gates.runner import run_gate
from prime_ci.gates.specs import BuildSpec, SetupEntry
from prime_ci.isolation.limits import Limits
from prime_ci.isolation.trees import age_written, below, fs_now_ns
from prime_ci.isolation.untrusted import strip_ansi
from prime_ci.isolation.worktree import Worktree

BuildOutcome = SetupEntry  # the same shape as a setup command's outcome, in result.json and the session log
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Builder:
    """The run's builds, and the ignored files the run vouches for (``trusted``)."""

    specs: list[BuildSpec]
    worktree: Worktree
    env: dict[str, str]
    log_dir: Path
    limits: Limits
    launcher: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    baseline: dict[str, bytes] | None = None  # watched ignored files before the model's first cell (None: no cell)
    outputs: dict[str, bytes] = field(default_factory=dict)  # watched ignored files as the builds left them
    last: list[BuildOutcome] = field(default_factory=list)
    steps: int = 0
    outside: Outside | None = None  # the run's environment: compared after every build step


    async def start(self, say: Callable[[str], None] | None = None) -> None:
        """Before the model's first cell: build once (the model starts from a built project, as every gate round
        does), then take the watched ignored files as they are as the run's baseline."""
        await self.run(say)
        self.baseline = await asyncio.to_thread(watched_ignored, self.worktree, self.exclude)
        if self.outside is not None:
            await asyncio.to_thread(self.outside.start)

    def trusted(self) -> dict[str, bytes]:
        return {**(self.baseline or {}), **self.outputs}

    @asynccontextmanager
    async def gates_running(self) -> AsyncIterator[None]:
        """Around a gate run: the watched ignored files it creates, or changes from a state the run vouched for,
        are the run's from now on, as a build's outputs are (a test suite that builds its fixture projects in the
        worktree: pdm-backend's ``.pdm-build/``, which ended the run with exit 7 "hidden from the patch"). A file
        that steers the runner, or one the model changed before, stays the model's."""
        if self.baseline is None:
            yield
            return
        before = await asyncio.to_thread(watched_ignored, self.worktree, self.exclude)
        try:
            yield
        finally:
            after = await asyncio.to_thread(watched_ignored, self.worktree, self.exclude)
            trusted = self.trusted()
            self.outputs.update({p: d for p, d in after.items() if before.get(p) != d and not steers_runner(p)
                                 and (p not in before or trusted.get(p) == before[p])})

    def hidden(self) -> list[str]:
        """Watched ignored files as they are now that the run does not vouch for: the model's (exit 7); none when
        the model never ran (setup failed)."""
        if self.baseline is None:
            return []
        return hidden_changes(self.trusted(), watched_ignored(self.worktree, self.exclude))

    def outside_changes(self) -> list[str]:
        """What changed outside the worktree, unexplained, in any round so far (each described)."""
        return self.outside.findings() if self.outside is not None else []

    def failed(self) -> BuildOutcome | None:
        return next((o for o in self.last if not o.passed), None)

    async def run(self, say: Callable[[str], None] | None = None) -> list[BuildOutcome]:
        """Each build in order, stopping at the first failure; what they wrote is theirs from now on. Then what
        is outside the worktree is compared (with no builds too: a cell may have written there)."""
        if not self.specs:
            await self._compare_outside()
            return []
        self.steps += 1
        wt = self.worktree
        untracked = set(await asyncio.to_thread(wt.untracked))
        moved = await asyncio.to_thread(self._move_aside)
        try:
            before = await asyncio.to_thread(watched_ignored, wt, self.exclude)
            started = await asyncio.to_thread(fs_now_ns, wt.root)
            self.last = []
            for spec in self.specs:
                result = await run_gate(spec.as_gate(), cwd=wt.path, env=self.env, log_dir=self.log_dir,
                                        launcher=self.launcher, limits=self.limits, kind="build")
                outcome = BuildOutcome(name=spec.name, command=spec.command, passed=result.passed,
                                       exit_code=result.exit_code, timed_out=result.timed_out,
                                       duration_s=round(result.duration_s, 3),
                                       log=str(Path(self.log_dir.name) / result.log_path.name))
                self.last.append(outcome)
                if say is not None:
                    state = "ok" if outcome.passed else ("timed out" if outcome.timed_out else
                                                          f"FAILED (exit {outcome.exit_code})")
                    say(f"build {spec.name}: {state} in {format_duration(outcome.duration_s)} -> {outcome.log}")
                if not outcome.passed:
                    break
            await asyncio.to_thread(age_written, wt.path, started, below(started))
            if created := [p for p in await asyncio.to_thread(wt.untracked) if p not in untracked]:
                wt.ignore(created)  # build products the project does not ignore: never part of the patch
            after = await asyncio.to_thread(watched_ignored, wt, self.exclude)
            self.outputs.update({p: d for p, d in after.items() if before.get(p) != d and not steers_runner(p)})
        finally:
            await asyncio.to_thread(self._put_back, moved)
        await self._compare_outside()
        return self.last

    async def _compare_outside(self) -> None:
        if self.outside is not None:
            await asyncio.to_thread(self.outside.check)

    def log_text(self, outcome: BuildOutcome) -> str:
        return (self.log_dir / Path(outcome.log).name).read_text(encoding="utf-8", errors="replace")

    def feedback(self, outcome: BuildOutcome, *, limit: int = 6000) -> str:
        """A failed build as the model reads it: the command, the head and tail of its log, where the log is."""
        state = (f"timed out after {format_duration(outcome.duration_s)}" if outcome.timed_out
                 else f"exit {outcome.exit_code}")
        top = (f"The build failed, so the gates did not run.\n\n## build: {outcome.name} ({state})\n"
               f"$ {clip_middle(outcome.command, 300)}\noutput (head+tail):\n")
        footer = f"\nFull log: {outcome.log}\n"
        body = clip_middle(strip_ansi(self.log_text(outcome)), max(limit - len(top) - len(footer), 200))
        return top + body + footer

    def _move_aside(self) -> list[tuple[str, bytes]]:
        """The model's changes to watched ignored files, moved out of the worktree for the build step."""
        suspects = self.hidden()
        store = self._store()
        shutil.rmtree(store, ignore_errors=True)
        if not suspects:
            return []
        store.mkdir(parents=True)
        moved = []
        with _opened(store) as store_fd:
            for index, rel in enumerate(suspects):
                with _parent(self.worktree.path, rel) as (parent, name):
                    if parent is not None and _exists(name, parent):
                        os.rename(name, b"%d" % index, src_dir_fd=parent, dst_dir_fd=store_fd)
                        moved.append((rel, b"%d" % index))
        return moved

    def _put_back(self, moved: list[tuple[str, bytes]]) -> None:
        """What the build did not write again is the model's file: back where it was, unchanged."""
        if not moved:
            return
        with _opened(self._store()) as store_fd:
            for rel, kept in moved:
                with _parent(self.worktree.path, rel) as (parent, name):
                    if parent is not None and not _exists(name, parent):
                        os.rename(kept, name, src_dir_fd=store_fd, dst_dir_fd=parent)
        shutil.rmtree(self._store(), ignore_errors=True)

    def _store(self) -> Path:
        return self.worktree.root / "build-aside"  # the host's, beside the worktree: renames stay on one filesystem


@contextmanager
def _opened(directory: Path) -> Iterator[int]:
    fd = os.open(directory, _DIR)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _parent(root: Path, rel: str) -> Iterator[tuple[int | None, bytes]]:
    """The directory holding ``rel`` beneath ``root``, opened without following symlinks, and the file's name;
    None when a component is gone or is no directory (a cell may have swapped it for a symlink)."""
    parts = os.fsencode(rel).split(b"/")
    fds: list[int] = []
    try:
        try:
            fds.append(os.open(root, _DIR))
            for part in parts[:-1]:
                fds.append(os.open(part, _DIR, dir_fd=fds[-1]))
        except OSError:
            yield None, parts[-1]
            return
        yield fds[-1], parts[-1]
    finally:
        for fd in fds:
            os.close(fd)


def _exists(name: bytes, parent: int) -> bool:
    with suppress(FileNotFoundError):
        os.stat(name, dir_fd=parent, follow_symlinks=False)
        return True
    return False


def prompt_note(specs: list[BuildSpec], outcomes: list[BuildOutcome]) -> list[str]:
    """What the model is told about builds (system prompt)."""
    if not specs:
        return []
    ran = {o.name: ("ok" if o.passed else f"failed, log {o.log}") for o in outcomes}
    lines = ["Build commands run before every gate round, in this order, so the gates test what your sources "
             "build to: you need not run them yourself. A build that fails fails the round (you get its log). "
             "Files a build writes are its own; an ignored file you write yourself where tests would import it "
             "(a module hidden by .gitignore) fails the run."]
    lines += [f"- `{s.command.strip()}`" + (f" (ran before your first turn: {ran[s.name]})" if s.name in ran else "")
              for s in specs]
    return lines
