"""Issue 36: the realmodel tier does not depend on the CPU. On a CPU with AMX the stock llama-server segfaults
while repacking weights at load; the tier starts it so that it never repacks (``llama_server.serving``).

A stand-in ``llama-server`` that behaves as the stock one does there: it dies with SIGSEGV at load unless given
``--no-repack``, else listens on loopback and answers ``/health`` and ``/v1/models`` like llama.cpp. PR tier.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from llama_server import CONTEXT, MODEL_ALIAS, serving

STAND_IN = '''#!{python}
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
argv = sys.argv[1:]
if "--no-repack" not in argv:
    print("load_tensors: repacking weights for AMX", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
window = int(argv[argv.index("--ctx-size") + 1])
alias = argv[argv.index("--alias") + 1]
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = {{"/health": {{"status": "ok"}},
                "/v1/models": {{"data": [{{"id": alias, "meta": {{"n_ctx": window}}}}]}}}}.get(self.path)
        data = json.dumps(body or {{}}).encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"main: server is listening on http://127.0.0.1:{{server.server_address[1]}}", flush=True)
server.serve_forever()
'''


def test_the_server_is_started_so_that_it_never_repacks(tmp_path: Path) -> None:
    binary = tmp_path / "build" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text(STAND_IN.format(python=sys.executable))
    binary.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    with serving(binary, model, tmp_path / "template.jinja", tmp_path) as server:
        with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as response:
            models = json.loads(response.read())
        assert models["data"][0]["id"] == MODEL_ALIAS
        assert server.window == CONTEXT
    assert "repacking" not in server.log.read_text()
