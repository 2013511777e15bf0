"""Callers of the containment rule keep to it: a worktree's symlink out, a ``..`` and a prefix sibling are refused
where the host reads, names or trusts a path from the worktree (each caller once, in process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_ci.engine import prepare, repo_values
from prime_ci.engine.config import file_settings
from prime_ci.errors import ConfigError
from prime_ci.gates import fast_rerun, junit, runner
from prime_ci.gates.specs import GateSpec
from prime_ci.isolation import cgroups


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    (wt / "tests").mkdir(parents=True)
    (wt / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "wt-x").mkdir()
    (tmp_path / "wt-x" / "test_b.py").write_text("def test_b():\n    pass\n")
    (tmp_path / "gates.toml").write_text('[[gate]]\nname = "x"\ncommand = "true"\n')
    (wt / "gates.toml").symlink_to(tmp_path / "gates.toml")
    (wt / "tests" / "test_out.py").symlink_to(tmp_path / "wt-x" / "test_b.py")
    return wt


def test_gates_file_through_a_symlink_out_is_refused(worktree: Path) -> None:
    with pytest.raises(ConfigError, match="points outside"):
        prepare._inside(worktree, "gates.toml")
    with pytest.raises(ConfigError, match="points outside"):
        prepare._inside(worktree, "../wt-x/test_b.py")
    assert prepare._inside(worktree, "tests/test_a.py") == (worktree / "tests" / "test_a.py").resolve()


def test_a_repository_gate_file_that_leads_out_is_ignored(worktree: Path) -> None:
    assert repo_values._outside(worktree, "gates.toml") == "it leads outside the worktree"
    assert repo_values._outside(worktree, "tests/test_a.py") is None


def test_fast_rerun_names_only_test_files_in_the_worktree(worktree: Path) -> None:
    ids = ["tests/test_a.py::test_a", "tests/test_out.py::test_b", "../wt-x/test_b.py::test_b"]
    assert fast_rerun.pytest_node_ids(ids, worktree) == ["tests/test_a.py::test_a"]


def test_a_junit_report_through_a_symlink_out_is_not_read(worktree: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text('<testsuite><testcase classname="t" name="x"><failure message="boom"/></testcase>'
                      "</testsuite>")
    (worktree / "junit.xml").symlink_to(report)
    spec = GateSpec(name="g", command="true", junit="junit.xml")
    assert runner._read_junit(spec, worktree, None) == []
    (worktree / "junit.xml").unlink()
    (worktree / "junit.xml").write_bytes(report.read_bytes())
    assert [f.message for f in runner._read_junit(spec, worktree, None)] == ["boom"]


@pytest.mark.parametrize(("value", "ok"), [("ro", True), ("../ro", False), ("/etc", False), ("~/x", False),
                                           ("a/../../b", False)])
def test_repository_read_paths_must_be_names_inside(tmp_path: Path, value: str, ok: bool) -> None:
    (tmp_path / "prime-ci.toml").write_text(f"[sandbox]\nread = [{value!r}]\n")
    warnings: list[str] = []
    settings = file_settings(tmp_path, warnings.append)
    assert ("sandbox_ro" in settings) is ok
    assert bool(warnings) is not ok


@pytest.mark.parametrize("value", ["../r.xml", "/tmp/r.xml", ""])
def test_a_gate_junit_path_must_be_a_name_inside(value: str) -> None:
    with pytest.raises(ValueError, match="inside the worktree"):
        GateSpec(name="g", command="true", junit=value)


def test_annotation_paths_are_relative_to_the_root_never_a_sibling() -> None:
    root = Path("/work/repo")
    assert junit.repository_path("/work/repo/pkg/test_a.py", root) == "pkg/test_a.py"
    assert junit.repository_path("/work/repo-x/pkg/test_a.py", root) is None
    assert junit.repository_path("/work/repo/../etc/passwd", root) is None
    assert junit.relative("/work/repo/pkg/test_a.py", (root,)) == "pkg/test_a.py"
    assert junit.relative("/work/repo-x/test_a.py", (root,)) == "/work/repo-x/test_a.py"


def test_own_cgroup_lies_under_the_mount_root_only() -> None:
    mount = Path("/sys/fs/cgroup")
    assert cgroups._own_path("/", mount, "/user.slice/run-1") == mount / "user.slice/run-1"
    assert cgroups._own_path("/job", mount, "/job/run-1") == mount / "run-1"
    assert cgroups._own_path("/job", mount, "/job") == mount
    assert cgroups._own_path("/job", mount, "/job-x/run-1") is None
