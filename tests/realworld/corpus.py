"""The realworld tier's data: the cases of cases.toml and their sdists, downloaded once with pip by name, version
and sha256 into a cache (``PRIME_CI_REALWORLD_CACHE``, default ``~/.cache/prime-ci/realworld``) and checked
against the pinned sha256 before every use."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CASES_FILE = Path(__file__).with_name("cases.toml")
# What pip prints when the package index cannot be reached (DNS, refused or timed-out connections, no route):
# only these make a case skip; any other failure fails it.
_OFFLINE = re.compile(r"NewConnectionError|Failed to establish a new connection|Temporary failure in name "
                      r"resolution|Name or service not known|Network is unreachable|ConnectTimeoutError|"
                      r"Connection to \S+ timed out|ProxyError")


@dataclass(frozen=True)
class Case:
    id: str
    shape: str
    sdist: str
    version: str
    sha256: str
    job: tuple[str, ...]
    setup: tuple[str, ...]
    gate: str
    file: str
    old: str
    new: str
    wrong_old: str
    wrong_new: str
    failing: str
    ignore: tuple[str, ...]
    build: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    activate: bool = False
    toolchain: str | None = None


def load_cases() -> list[Case]:
    raw = tomllib.loads(CASES_FILE.read_text())["case"]
    return [Case(**{k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}) for entry in raw]


def cache_dir() -> Path:
    return Path(os.environ.get("PRIME_CI_REALWORLD_CACHE") or Path.home() / ".cache" / "prime-ci" / "realworld")


def skip_if_offline(what: str, output: str) -> None:
    """Skip the test when ``output`` (of a pip command) says the package index could not be reached."""
    hit = _OFFLINE.search(output)
    if hit:
        pytest.skip(f"the package index cannot be reached ({what}: {hit.group(0)})")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sdist(case: Case) -> Path:
    """The case's sdist from the cache, downloaded first when missing; never a file whose sha256 differs."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    cached = cache / f"{re.sub(r'[-_.]+', '_', case.sdist).lower()}-{case.version}.tar.gz"
    if cached.is_file():
        if _sha256(cached) == case.sha256:
            return cached
        cached.unlink()  # altered since: fetch it again
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        pins = Path(tmp) / "pins.txt"
        pins.write_text(f"{case.sdist}=={case.version} --hash=sha256:{case.sha256}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--require-hashes",
             "--timeout", "30", "--retries", "2", "-q", "-d", tmp, "-r", str(pins)],
            capture_output=True, text=True, stdin=subprocess.DEVNULL)
        skip_if_offline(f"pip download {case.sdist}=={case.version}", proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (got,) = Path(tmp).glob("*.tar.gz")
        assert _sha256(got) == case.sha256, f"{got.name}: sha256 differs from the pinned one"
        return got.replace(cached)  # atomic: a concurrent worker never sees half a file


def unpack(archive: Path, dest: Path) -> Path:
    """The sdist's single top directory, unpacked under ``dest``."""
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top
