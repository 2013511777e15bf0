"""The one durable file writer: every artifact, report and harness file is replaced through ``write``, and
every append-only record file (harness ``history.jsonl``/``rejected.jsonl``, the session log's side files)
grows through ``append``.

A write goes to a uniquely named temp file in the target's directory, is fsynced, renamed over the target
and the directory is fsynced, so a reader (or a crash) sees the old file or the new one, never a part. An
append is one ``O_APPEND`` write of whole records, fsynced (and the directory too when it created the file).
Text is redacted (registered secrets masked) unless the caller says the data is already redacted or must be
kept byte for byte. Every ``OSError`` becomes a ``PersistenceError`` whose one-line message names the file.
``session.jsonl`` itself is appended by ``session/log.py``, which keeps its descriptor open between records.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prime_ci.errors import PersistenceError
from prime_ci.isolation.redact import active, redact

_HINT = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file size limit reached"}


def describe(exc: OSError) -> str:
    """``strerror`` (or the message) plus a hint for the disk-full family of errors."""
    text = exc.strerror or str(exc) or type(exc).__name__
    hint = _HINT.get(exc.errno or 0)
    return f"{text} ({hint})" if hint else text


def encode(text: str) -> bytes:
    """UTF-8; bytes decoded with ``surrogateescape`` come back unchanged, other lone surrogates are escaped."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


def masked(data: str | bytes) -> bytes:
    """DATA with registered secrets masked, as bytes (non-UTF-8 bytes pass through unchanged)."""
    text = data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")
    return encode(redact(text))


def write(path: Path, data: str | bytes, *, redacted: bool = False, sync: bool = True, mode: int = 0o644) -> None:
    """Atomically replace PATH with DATA: temp file -> fsync -> rename -> fsync the directory.

    ``redacted=True``: DATA is already redacted or must be stored verbatim (str is still UTF-8 encoded).
    ``sync=False`` skips both fsyncs, for derived files rewritten often; still atomic against a process crash.
    """
    raw = (encode(data) if isinstance(data, str) else data) if redacted else masked(data)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp = None
        if sync:
            fsync_dir(path.parent)
    except OSError as exc:
        raise PersistenceError(f"cannot write {path}: {describe(exc)}") from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def append(path: Path, data: str | bytes, *, redacted: bool = False) -> None:
    """Append DATA (whole records, e.g. JSON lines) to PATH, creating it, in one ``O_APPEND`` write; fsync.

    Concurrent appenders never interleave inside one record. A short write (the disk filled up) is retried
    for the rest, whose error then names the cause. ``redacted`` as for ``write``.
    """
    raw = (encode(data) if isinstance(data, str) else data) if redacted else masked(data)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            created = os.fstat(fd).st_size == 0
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(path.parent)
    except OSError as exc:
        raise PersistenceError(f"cannot append to {path}: {describe(exc)}") from exc


def append_json(path: Path, record: Any) -> None:
    """One JSON line (compact, UTF-8, registered secrets masked) appended to PATH."""
    append(path, json.dumps(record, ensure_ascii=False) + "\n")


def write_json(path: Path, obj: Any, *, sync: bool = True) -> None:
    write(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n", sync=sync)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a new or renamed file) durable; raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def redact_tree(root: Path, *, max_bytes: int = 256 * 1024 * 1024) -> list[Path]:
    """Rewrite every regular file under ROOT that contains a registered secret; symlinks are never followed.

    Returns the files that were changed. Children's logs need this: their processes never hold the
    secrets, so only the root can mask them. A file that cannot be rewritten does not stop the sweep: the
    first such ``PersistenceError`` is raised once every other file was done.
    """
    changed: list[Path] = []
    failed: PersistenceError | None = None
    if not active():
        return changed
    for path in _files(root):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                info = os.fstat(fh.fileno())
                data = fh.read(max_bytes + 1) if stat.S_ISREG(info.st_mode) else b""
        except OSError:
            continue  # gone, or a symlink planted in place of the file
        if len(data) > max_bytes or (clean := masked(data)) == data:
            continue
        try:
            write(path, clean, redacted=True, mode=info.st_mode & 0o777)
        except PersistenceError as exc:
            failed = failed or exc
            continue
        changed.append(path)
    if failed is not None:
        raise failed
    return changed


def _files(root: Path) -> Iterator[Path]:
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        yield from (Path(dirpath, name) for name in files)
