"""requirements.lock is exactly the resolved set of prime-ci with its dev extra: the test command installs it
with ``--no-deps``, so a requirement missing from it would go uninstalled and an entry nothing requires would be
installed for nothing (GitPython stayed in it long after prime-ci dropped it). requirements-fuzz.lock is what the
fuzz extra adds to it, installed for the nightly tier only."""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# the venv's own installers: pip is never locked; setuptools and wheel are, as the dev extra asks for them
INSTALLER = {"pip"}
SUPPORTED = ["3.11", "3.12", "3.13", "3.14"]
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"


def locked(file: str = "requirements.lock") -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / file).read_text().splitlines():
        name, sep, version = line.partition("==")
        assert sep and name and version and line == line.strip(), f"not a plain pin: {line!r}"
        pins[canonicalize_name(name)] = version
    return pins


def needed(requirements: list[str], extras: set[str], pythons: list[str]) -> list[Requirement]:
    """The requirements that apply here with these extras, on any of these Python versions."""
    base = {key: str(value) for key, value in default_environment().items()}
    envs = [{**base, "python_version": v, "python_full_version": f"{v}.0", "extra": e}
            for v in pythons for e in extras or {""}]
    reqs = [Requirement(text) for text in requirements]
    return [req for req in reqs if req.marker is None or any(req.marker.evaluate(env) for env in envs)]


def closure(pythons: list[str], extra: str = "dev") -> dict[str, list[Requirement]]:
    """Every distribution prime-ci[extra] needs, with the requirements naming it, walking the installed metadata
    (a distribution needed only on another Python is not installed here: what it needs is not walked)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = needed([*project["dependencies"], *project["optional-dependencies"][extra]], set(), pythons)
    seen: dict[str, set[str]] = {}
    named: dict[str, list[Requirement]] = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        named.setdefault(name, []).append(req)
        if name in seen and req.extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | req.extras
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend(needed(requires, set(req.extras), pythons))
    return named


def outside(pins: dict[str, str], wanted: dict[str, list[Requirement]]) -> list[str]:
    """The pins that a requirement naming them does not accept."""
    return [f"{req} (locked {pins[name]})" for name, reqs in wanted.items() if name in pins
            for req in reqs if not req.specifier.contains(pins[name], prereleases=True)]


def installed_otherwise(pins: dict[str, str]) -> list[str]:
    return [f"{name}: installed {installed(name)}, locked {version}" for name, version in pins.items()
            if installed(name) != version]


def test_the_lock_is_the_resolved_set_and_every_pin_is_satisfied() -> None:
    pins = locked()
    wanted = closure([HERE])
    assert sorted(set(wanted) - set(pins) - INSTALLER) == [], "needed but not locked"
    assert sorted(set(pins) - set(closure(SUPPORTED))) == [], "locked but nothing needs it"
    assert outside(pins, wanted) == [], "pins outside what requires them"
    assert installed_otherwise(pins) == []


def test_the_fuzz_lock_is_what_the_fuzz_extra_adds() -> None:
    pins, fuzz = locked(), locked("requirements-fuzz.lock")
    assert sorted(set(fuzz) & set(pins)) == [], "in both locks"
    wanted = closure([HERE], "fuzz")
    assert sorted(set(wanted) - set(pins) - set(fuzz) - INSTALLER) == [], "needed but not locked"
    assert outside(fuzz, wanted) == [], "pins outside what requires them"
    if installed("hypothesis") is None:  # the PR tier's environment: what hypothesis needs cannot be walked here
        return
    assert sorted(set(fuzz) - set(closure(SUPPORTED, "fuzz"))) == [], "locked but nothing needs it"
    assert installed_otherwise(fuzz) == []


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_the_lock_keeps_the_dropped_and_compromised_releases_out() -> None:
    pins = locked()
    assert "gitpython" not in pins, "host git goes through isolation/gitcall.py (README: Why the git CLI)"
    # the house rule, spelt out: the compromised releases are below 1.108 today, and stay excluded if that moves
    allowed = SpecifierSet(">=1.108,<2,!=1.107.*,!=1.82.7,!=1.82.8")
    assert allowed.contains(pins["litellm"], prereleases=True), f"litellm {pins['litellm']} is not allowed"
