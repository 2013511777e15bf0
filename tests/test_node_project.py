"""Issue 13 acceptance 4: a JavaScript package with a local `file:` devDependency and `node --test`, gate
`npm test` under the sandbox: REPO's installed node_modules reused, or `npm ci` as a setup command; failure
feedback names the failing test and its assertion in over 1 MB of TAP output."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import make_repo, run_prime
from prime_ci.testing import ScriptedServer, ipython, reply

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="node/npm not installed")

# long names make the output big with few tests: node spends its time per test, not per byte
MANY = ("const test = require('node:test');\nconst pad = ' (' + 'padding '.repeat(60) + ')';\n"
        "for (let i = 0; i < {n}; i++) test('passing case number ' + i + ' of the {name} group' + pad, () => {{}});\n")
FILES = {
    "package.json": json.dumps({"name": "jsdemo", "version": "1.0.0", "private": True,
                                "scripts": {"test": "node --test"},
                                "devDependencies": {"assert-helper": "file:vendor/assert-helper"}}, indent=2),
    "vendor/assert-helper/package.json": json.dumps({"name": "assert-helper", "version": "1.0.0",
                                                     "main": "index.js"}),
    "vendor/assert-helper/index.js": "const assert = require('node:assert');\n"
                                     "exports.expectEqual = (got, want) => assert.strictEqual(got, want);\n",
    "lib.js": "exports.add = (a, b) => a - b;\n",
    "test/lib.test.js": "const test = require('node:test');\nconst { expectEqual } = require('assert-helper');\n"
                        "const { add } = require('../lib');\n\n"
                        "test('add sums two numbers', () => {\n  expectEqual(add(2, 3), 5);\n});\n",
    "test/a_many.test.js": MANY.format(n=600, name="first"),
    "test/z_many.test.js": MANY.format(n=600, name="last"),
    ".gitignore": "node_modules/\n",
}
FIX = "from pathlib import Path\nPath('lib.js').write_text('exports.add = (a, b) => a + b;\\n')\n"


def node_repo(root: Path) -> Path:
    repo = make_repo(root, FILES)
    subprocess.run(["npm", "install", "--offline", "--no-audit", "--no-fund"], cwd=repo, check=True,
                   capture_output=True)
    return make_repo(repo, {}, message="lock file")


@pytest.mark.parametrize("how", ["reuse-node-modules", "setup-npm-ci"])
def test_npm_test_gate_in_the_sandbox(tmp_path: Path, server: ScriptedServer, how: str) -> None:
    repo = node_repo(tmp_path / "repo")
    extra: list[str] = []
    if how == "setup-npm-ci":
        shutil.rmtree(repo / "node_modules")
        extra = ["--setup", "npm ci --offline --no-audit --no-fund"]
    server.add(reply("I will let the gate tell me."), ipython(FIX), reply("fixed add()"))
    run = run_prime(tmp_path, repo, server, "--sandbox", "auto", "--gate", "npm test", *extra, timeout=300)
    assert run.code == 0, run.proc.stderr + (run.out / "gates" / "npm-test.log").read_text()[-3000:]
    assert run.result["sandbox"].startswith("on"), "bubblewrap is available here: the gate ran sandboxed"
    assert run.result["changed_files"] == ["lib.js"], "node_modules is not part of the patch"
    rounds = [e for e in (json.loads(x) for x in (run.out / "session.jsonl").read_text().splitlines())
              if e.get("customType") == "prime_ci.gate"]
    first = rounds[0]["data"]["results"][0]
    assert not first["passed"] and first["output_bytes"] > 1_000_000, "the failing round's output is over 1 MB"
    feedback = next(m["content"] for m in server.chat_requests[1].body["messages"]
                    if m["role"] == "user" and "gate" in str(m["content"]).lower())
    assert "add sums two numbers" in feedback, feedback
    assert "5" in feedback and ("strictly equal" in feedback or "!==" in feedback), feedback
