"""Issue 38 with the real runners: a fast rerun has coverage thresholds off (jest, vitest, pytest-cov), and Django
gates behind ``coverage run`` or ``django-admin`` are narrowed. Nightly: the runners come from npm and PyPI, pinned;
the tests skip only when the registry cannot be reached (the PR tier checks the same commands on real logs)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from prime_ci.gates.fast_rerun import FastRerun, plan_rerun
from prime_ci.gates.runner import GateResult, run_gate
from prime_ci.gates.specs import GateSpec
from prime_ci.isolation.limits import Limits

pytestmark = [pytest.mark.nightly, pytest.mark.timeout(900)]

JS_PACKAGES = ["jest@30.5.2", "vitest@4.1.12", "@vitest/coverage-v8@4.1.12"]
PY_PACKAGES = ["pytest==9.2.0", "pytest-cov==7.1.0", "coverage==7.18.0", "Django==5.2.19"]
OFFLINE = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|Temporary failure in name resolution|"
                     r"Failed to establish a new connection|No matching distribution found")

# one module that only a passing test covers: the failing tests alone fall short of a 100% threshold
JEST = {
    "package.json": '{"name": "cov", "private": true, "jest": {"collectCoverage": true, "collectCoverageFrom": '
                    '["src/**/*.js", "!src/**/*.test.js"], "coverageThreshold": {"global": {"lines": 100}}}}\n',
    "src/sum.js": "function sum(a, b) { return a - b; }\nmodule.exports = { sum };\n",
    "src/sum.test.js": "const { sum } = require('./sum');\n\n"
                       "describe('sum', () => {\n  test('adds two', () => { expect(sum(1, 2)).toBe(3); });\n});\n",
    "src/extra.js": "function double(x) {\n  const y = x * 2;\n  return y;\n}\nmodule.exports = { double };\n",
    "src/extra.test.js": "const { double } = require('./extra');\n\ntest('doubles', () => { "
                         "expect(double(2)).toBe(4); });\n",
}
VITEST = {
    "package.json": '{"name": "cov", "private": true, "type": "module"}\n',
    "vitest.config.js": "export default { test: { coverage: { enabled: true, provider: 'v8', include: ['src/**/*.js'], "
                        "exclude: ['src/**/*.test.js'], thresholds: { lines: 100 } } } };\n",
    "src/sum.js": "export function sum(a, b) { return a - b; }\n",
    "src/sum.test.js": "import { describe, expect, test } from 'vitest';\nimport { sum } from './sum.js';\n\n"
                       "describe('sum', () => {\n  test('adds two', () => { expect(sum(1, 2)).toBe(3); });\n});\n",
    "src/extra.js": "export function double(x) {\n  const y = x * 2;\n  return y;\n}\n",
    "src/extra.test.js": "import { expect, test } from 'vitest';\nimport { double } from './extra.js';\n\n"
                         "test('doubles', () => { expect(double(2)).toBe(4); });\n",
}
PYTEST = {
    "pytest.ini": "[pytest]\naddopts = --cov=calc --cov-fail-under=100 -p no:cacheprovider\n",
    "calc/__init__.py": "",
    "calc/sums.py": "def add(a, b):\n    return a - b\n",
    "calc/extra.py": "def double(x):\n    y = x * 2\n    return y\n",
    "tests/test_sums.py": "from calc.sums import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "tests/test_extra.py": "from calc.extra import double\n\n\ndef test_double():\n    assert double(2) == 4\n",
}
DJANGO = {
    "site_cfg/__init__.py": "",
    "site_cfg/settings.py": "SECRET_KEY = 'x'\nINSTALLED_APPS = ['shop']\nUSE_TZ = True\n"
                            "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}}\n",
    "manage.py": "import os\nimport sys\n\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'site_cfg.settings')\n"
                 "from django.core.management import execute_from_command_line\n\n"
                 "execute_from_command_line(sys.argv)\n",
    "shop/__init__.py": "",
    "shop/prices.py": "def total(prices):\n    return sum(prices) - 1\n",
    "shop/tests.py": "from django.test import SimpleTestCase\n\nfrom shop.prices import total\n\n\n"
                     "class TotalTests(SimpleTestCase):\n"
                     "    def test_empty(self):\n        self.assertEqual(total([]), 0)\n\n"
                     "    def test_two(self):\n        self.assertEqual(total([1, 2]), 3)\n\n"
                     "    def test_unrelated(self):\n        self.assertEqual(len('ab'), 2)\n",
}


def _installed(command: list[str], cwd: Path, what: str) -> None:
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    if proc.returncode and (offline := OFFLINE.search(proc.stdout + proc.stderr)):
        pytest.skip(f"the registry cannot be reached ({what}: {offline.group(0)})")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("npm") is None:
        pytest.fail("npm is not installed: the nightly tier runs where node is")
    root = tmp_path_factory.mktemp("js")
    (root / "package.json").write_text('{"name": "runners", "private": true}\n')
    _installed(["npm", "install", "--no-audit", "--no-fund", "--cache", str(root / ".npm"), *JS_PACKAGES], root,
               "npm install")
    return root / "node_modules"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("py") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, capture_output=True)
    _installed([str(root / "bin" / "python"), "-m", "pip", "install", "-q", *PY_PACKAGES], root, "pip install")
    return root


def _env(tmp_path: Path, venv: Path | None = None) -> dict[str, str]:
    node = Path(shutil.which("node") or "/usr/bin/node").parent
    path = [*([str(venv / "bin")] if venv else []), str(node), "/usr/bin", "/bin"]
    return {"PATH": ":".join(path), "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8", "NO_COLOR": "1", "CI": "true",
            "PYTHONDONTWRITEBYTECODE": "1", "npm_config_cache": str(tmp_path / "npm-cache"),
            "DJANGO_SETTINGS_MODULE": "site_cfg.settings"}


def _project(tmp_path: Path, files: dict[str, str], node_modules: Path | None = None) -> Path:
    root = tmp_path / "project"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    if node_modules:
        (root / "node_modules").symlink_to(node_modules)
    return root


def _rounds(command: str, project: Path, env: dict[str, str], tmp_path: Path,
            fix: Callable[[Path], None]) -> tuple[GateResult, FastRerun, GateResult]:
    """A failing full run, its fast rerun planned, the fix, the fast rerun."""
    spec = GateSpec(name="tests", command=command)
    full = asyncio.run(run_gate(spec, cwd=project, env=env, log_dir=tmp_path / "logs", limits=Limits()))
    assert not full.passed and full.failures, full.output
    plan = plan_rerun(spec, full, project)
    assert plan is not None, [f.test for f in full.failures]
    fix(project)
    fast = asyncio.run(plan.run(plan.current_tests(project), cwd=project, env=env, log_dir=tmp_path / "logs",
                                launcher=(), limits=Limits()))
    return full, plan, fast


def _replace(name: str, old: str, new: str) -> Callable[[Path], None]:
    def fix(project: Path) -> None:
        path = project / name
        path.write_text(path.read_text().replace(old, new))
    return fix


@pytest.mark.parametrize(
    ("runner", "command", "files", "off", "threshold"),
    [
        ("jest", "npx jest", JEST, "--coverage=false", "threshold"),
        ("vitest", "npx vitest run", VITEST, "--coverage.enabled=false", "threshold"),
    ],
)
def test_js_threshold_is_off_in_the_fast_rerun(tmp_path: Path, node_modules: Path, runner: str, command: str,
                                               files: dict[str, str], off: str, threshold: str) -> None:
    project = _project(tmp_path, files, node_modules)
    env = _env(tmp_path)
    _, plan, fast = _rounds(command, project, env, tmp_path, _replace("src/sum.js", "a - b", "a + b"))
    narrowed = plan.command(plan.current_tests(project)) or ""
    assert narrowed.endswith(f" {off}") and f"({off})" in plan.note()
    assert fast.passed, fast.output
    # the case this is about: the same narrowed run with coverage on fails on the threshold alone
    on = subprocess.run(["bash", "-c", narrowed.removesuffix(f" {off}")], cwd=project, env=env, capture_output=True,
                        text=True)
    assert on.returncode == 1 and threshold in on.stdout + on.stderr and "passed" in on.stdout + on.stderr


def test_pytest_cov_threshold_from_addopts_is_off_in_the_fast_rerun(tmp_path: Path, venv: Path) -> None:
    project = _project(tmp_path, PYTEST)
    env = _env(tmp_path, venv)
    full, plan, fast = _rounds("python -m pytest -q", project, env, tmp_path,
                               _replace("calc/sums.py", "a - b", "a + b"))
    assert "Required test coverage of 100%" in full.output
    narrowed = plan.command(plan.current_tests(project)) or ""
    assert narrowed == "python -m pytest -q --cov-fail-under=0 tests/test_sums.py::test_add"
    assert "(--cov-fail-under=0)" in plan.note()
    assert fast.passed and "Required test coverage" not in fast.output, fast.output
    on = subprocess.run(["bash", "-c", "python -m pytest -q tests/test_sums.py::test_add"], cwd=project, env=env,
                        capture_output=True, text=True)
    assert on.returncode == 1 and "FAIL Required test coverage of 100% not reached" in on.stdout


@pytest.mark.parametrize("command", ["coverage run -m django test", "python -m coverage run --branch manage.py test",
                                     "django-admin test --pythonpath .", "python -Wa -m django test"])
def test_django_gates_rerun_only_the_failing_tests(tmp_path: Path, venv: Path, command: str) -> None:
    project = _project(tmp_path, DJANGO)
    env = _env(tmp_path, venv)
    full, plan, fast = _rounds(command, project, env, tmp_path, _replace("shop/prices.py", "- 1", "- 0"))
    assert "Ran 3 tests" in full.output and sorted(f.test for f in full.failures) == [
        "shop.tests.TotalTests.test_empty", "shop.tests.TotalTests.test_two"]
    assert plan.command(plan.current_tests(project)) == (
        f"{command} shop.tests.TotalTests.test_empty shop.tests.TotalTests.test_two")
    assert fast.passed and "Ran 2 tests" in fast.output, fast.output
