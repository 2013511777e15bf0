"""Gates named after the test tool a command runs, not the wrappers and launchers around it (issue 23)."""

from __future__ import annotations

import pytest

from prime_ci.gates.specs import gates_from_commands

NAMED = [
    ("env -u NO_COLOR npm test", "npm-test"),
    ("env -u NO_COLOR -u FORCE_COLOR FOO=1 npm test", "npm-test"),
    ("PYTHONWARNINGS=all coverage run -m django test --settings=tests.settings", "django"),
    ("coverage run --source=taggit -m unittest discover", "unittest"),
    ("python -W error -m pytest -q", "pytest"),
    ("python -m coverage run -m pytest", "pytest"),
    ("poetry run python -m pytest", "pytest"),
    ("uv run --frozen pytest", "pytest"),
    ("timeout 60 pytest -x", "pytest"),
    ("xvfb-run -a npm test", "npm-test"),
    ("corepack pnpm test", "pnpm-test"),
    ("pnpm exec vitest run", "vitest"),
    ("npm exec -- vitest", "vitest"),
    ("npx --yes jest", "jest"),
    ("yarn run test:unit", "yarn-test-unit"),
    ("tox -e py311", "tox-py311"),
    ("hatch run test:cov", "test-cov"),
    ("FOO=1 ./run.sh", "run.sh"),
    ("python -c 'import mypkg'", "python"),
]


@pytest.mark.parametrize(("command", "name"), NAMED)
def test_a_gate_is_named_after_its_test_tool(command: str, name: str) -> None:
    assert [s.name for s in gates_from_commands([command])] == [name]


def test_names_stay_unique() -> None:
    specs = gates_from_commands(["coverage run -m unittest", "python -m unittest discover -s tests", "env pytest"])
    assert [s.name for s in specs] == ["unittest", "unittest-2", "pytest"]
