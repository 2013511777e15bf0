"""Issue 23 item 5: network settings are picked and their credentials registered for redaction (registering
them takes a third of a second to a second: too slow for tests/unit), and setup reaches a real HTTPS index on
loopback with the job's CA in a whole run."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUGGY, make_repo, run_inproc
from prime_ci.isolation import redact
from prime_ci.isolation.sandbox import network_env, network_files
from prime_ci.testing import ScriptedServer, reply

PROXY = "http://ci-user:proxy-pass-4711@127.0.0.1:9"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(the URL of a loopback HTTPS server, its CA's certificate file under /tmp)."""
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=prime-ci test CA", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1",
             cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
             "srv.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"index reached over TLS\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(d / "srv.pem", d / "srv.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/", d / "ca.pem"
    finally:
        server.shutdown()
        server.server_close()


def test_network_settings_are_picked_and_their_credentials_registered(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    environ = {"OPENAI_API_KEY": "sk-not-for-setup", "https_proxy": PROXY, "HTTP_PROXY": PROXY,
               "SSL_CERT_FILE": str(ca), "NODE_EXTRA_CA_CERTS": str(tmp_path / "missing.pem"),
               "PIP_INDEX_URL": "https://tok-123456789@pypi.example/simple", "HOME": "/root"}
    picked = network_env(environ)
    assert set(picked) == {"https_proxy", "HTTP_PROXY", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "PIP_INDEX_URL"}
    assert network_files(picked) == [str(ca)], "existing CA files only, to be bound read-only"
    redact.register_environment(environ)
    text = redact.redact(f"proxy {PROXY} index tok-123456789 pass proxy-pass-4711")
    assert "proxy-pass-4711" not in text and "tok-123456789" not in text and "ci-user:" not in text


def test_setup_reaches_a_tls_index_with_the_jobs_ca(
    tmp_path: Path, server: ScriptedServer, https: tuple[str, Path]
) -> None:
    url, ca = https
    repo = make_repo(tmp_path / "repo", BUGGY)
    fetch = f"python -c \"import urllib.request; print(urllib.request.urlopen('{url}').read().decode())\""
    dump = "env > .prime-ci/setup-env.txt; echo proxy=$https_proxy; echo extras: .[testing]"
    server.add(reply("nothing to do"))
    ok = run_inproc(tmp_path, repo, server, "--setup", fetch, "--setup", dump, "--keep-worktree",
                   env={"SSL_CERT_FILE": str(ca), "https_proxy": PROXY, "no_proxy": "127.0.0.1"})
    assert ok.code == 0, ok.proc.stderr
    logs = {p.name: p.read_text() for p in (ok.out / "setup").glob("*.log")}
    assert any("index reached over TLS" in text for text in logs.values()), logs
    env_dump = (Path(ok.result["worktree"]) / ".prime-ci" / "setup-env.txt").read_text()
    assert f"SSL_CERT_FILE={ca}" in env_dump and "no_proxy=127.0.0.1" in env_dump
    assert "sk-test-canary" not in env_dump and "OPENAI_API_KEY" not in env_dump
    assert "builtin_skills" not in env_dump, "prime-ci's skill directories are the kernel's only"
    everything = "".join(p.read_text(errors="replace") for p in ok.out.rglob("*") if p.is_file())
    assert "proxy-pass-4711" not in everything and "[REDACTED]" in everything
    assert "echo extras: .[testing]" in ok.proc.stderr, "bracketed text is printed as written"
    assert not (ok.out / "session.jsonl.lock").exists(), "a finished run leaves no lock file"
    subprocess.run(["rm", "-rf", str(Path(ok.result["worktree"]).parent)], check=False)

    failed = run_inproc(tmp_path, repo, server, "--setup", fetch)
    assert failed.code == 9, failed.proc.stderr
    lines = failed.proc.stderr.strip().splitlines()
    assert "CERTIFICATE_VERIFY_FAILED" in failed.proc.stderr, "the last lines of its output are said"
    assert "--pass-env" in lines[-1] and lines[-1].startswith("prime-ci: setup_failed:"), lines[-3:]
    assert "--pass-env" in failed.result["detail"]
