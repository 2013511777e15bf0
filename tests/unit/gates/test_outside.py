"""Issue 37: what changes outside the worktree is explained by the patch or named (``gates/outside.py``)."""

from __future__ import annotations

from pathlib import Path

from prime_ci.gates.outside import Outside


def layout(tmp_path: Path) -> tuple[Outside, Path, Path]:
    wt = tmp_path / "wt"
    (wt / "src" / "pkg").mkdir(parents=True)
    (wt / "src" / "pkg" / "mod.py").write_text("VALUE = 1\n")
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "_layer.pth").write_text("import _layer; _layer.hook()\n")
    (env / "bin").mkdir()
    (env / "bin" / "pytest").write_text("#!/env/bin/python\nfrom pytest import console_main\n")
    watch = Outside(wt, [env])
    watch.start()
    return watch, wt, site


def test_what_an_editable_or_plain_install_of_the_project_writes_is_explained(tmp_path: Path) -> None:
    watch, wt, site = layout(tmp_path)
    (site / "__editable__.pkg-1.0.pth").write_text(f"{wt / 'src'}\n")
    (site / "pkg-1.0.dist-info").mkdir()
    (site / "pkg-1.0.dist-info" / "RECORD").write_text("pkg/mod.py,,\n")
    (site / "pkg").mkdir()
    (site / "pkg" / "mod.py").write_text("VALUE = 1\n")  # pip install . copies the project's file
    (site / "pkg" / "__pycache__").mkdir()
    (site / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (site / "_layer.pth").write_text("import _layer; _layer.hook()\n")  # rewritten, same bytes
    assert watch.check() == []


def test_hooks_shadows_edited_scripts_entry_points_and_removals_are_named(tmp_path: Path) -> None:
    watch, _, site = layout(tmp_path)
    (site / "zz.pth").write_text("import zz\n")
    (site / "paths.pth").write_text(f"{tmp_path}\n")  # a directory outside the worktree
    (site / "sitecustomize.py").write_text("print('hi')\n")
    (site / "pkg").mkdir()
    (site / "pkg" / "mod.py").write_text("VALUE = 2\n")  # not the worktree's bytes
    (site / "pkg-1.0.dist-info").mkdir()
    (site / "pkg-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\nx = x\n")
    (site.parents[2] / "bin" / "pytest").write_text("#!/bin/sh\nexit 0\n")
    (site / "_layer.pth").unlink()
    found = "\n".join(watch.check())
    for name in ("zz.pth", "paths.pth", "sitecustomize.py", "pkg/mod.py", "entry_points.txt", "bin/pytest",
                 "_layer.pth (removed"):
        assert name in found, (name, found)
    assert "runs at every interpreter start" in found


def test_a_finding_is_kept_when_the_model_takes_it_back(tmp_path: Path) -> None:
    watch, _, site = layout(tmp_path)
    (site / "zz.pth").write_text("import zz\n")
    assert len(watch.check()) == 1
    (site / "zz.pth").unlink()
    assert len(watch.check()) == 1 and "zz.pth" in watch.findings()[0]


def test_without_the_sandbox_the_interpreters_startup_files_are_watched_too(tmp_path: Path) -> None:
    wt, job_site = tmp_path / "wt", tmp_path / "job" / "site-packages"
    wt.mkdir()
    job_site.mkdir(parents=True)
    (job_site / "big_module.py").write_text("x = 1\n")
    watch = Outside(wt, [], [job_site])
    watch.start()
    (job_site / "big_module.py").write_text("x = 2\n")  # only startup files are compared there
    assert watch.check() == []
    (job_site / "usercustomize.py").write_text("x = 3\n")
    assert ["usercustomize.py" in f for f in watch.check()] == [True]


def editable(site: Path, wt: Path, version: str, extra: str = "") -> None:
    """What setuptools' editable install writes for ``pkg`` at ``version`` (its finder named after it)."""
    safe = version.replace(".", "_").replace("+", "_")
    (site / f"__editable__.pkg-{version}.pth").write_text(
        f"import __editable___pkg_{safe}_finder; __editable___pkg_{safe}_finder.install()")
    (site / f"__editable___pkg_{safe}_finder.py").write_text(
        f"MAPPING = {{'pkg': '{wt / 'src' / 'pkg'}'}}\nPATH_PLACEHOLDER = '__editable__.pkg-{version}.finder'\n{extra}")
    (site / f"pkg-{version}.dist-info").mkdir()
    (site / f"pkg-{version}.dist-info" / "entry_points.txt").write_text("[console_scripts]\npkg = pkg:main\n")
    (site / f"pkg-{version}.dist-info" / "METADATA").write_text(f"Name: pkg\nVersion: {version}\n")


def remove_editable(site: Path, version: str) -> None:
    safe = version.replace(".", "_").replace("+", "_")
    (site / f"__editable__.pkg-{version}.pth").unlink()
    (site / f"__editable___pkg_{safe}_finder.py").unlink()
    for path in (site / f"pkg-{version}.dist-info").iterdir():
        path.unlink()
    (site / f"pkg-{version}.dist-info").rmdir()


def test_the_project_reinstalled_at_its_dirty_version_is_explained(tmp_path: Path) -> None:
    """setuptools-scm versions a changed tree `+dirty`: a --build `pip install --no-build-isolation -e .` after
    the model's edit renames the editable install's .pth, finder and dist-info (the realworld tier's cbor2 case
    ended exit 7 on its right fix). The same files under the new version, and nothing else, are explained."""
    watch, wt, site = layout(tmp_path)
    editable(site, wt, "0.1.dev2")
    watch.start()
    remove_editable(site, "0.1.dev2")
    editable(site, wt, "0.1.dev2+dirty")
    assert watch.check() == []


def test_a_reinstall_at_another_version_that_adds_code_is_named(tmp_path: Path) -> None:
    watch, wt, site = layout(tmp_path)
    editable(site, wt, "0.1.dev2")
    watch.start()
    remove_editable(site, "0.1.dev2")
    editable(site, wt, "0.1.dev2+dirty", extra="import os; os.environ['X'] = '1'\n")
    assert ["__editable___pkg_0_1_dev2_dirty_finder.py (created" in f for f in watch.check()] == [True]


def test_an_editable_install_gone_without_a_successor_is_named(tmp_path: Path) -> None:
    watch, wt, site = layout(tmp_path)
    editable(site, wt, "0.1.dev2")
    watch.start()
    remove_editable(site, "0.1.dev2")
    found = "\n".join(watch.check())
    assert "__editable__.pkg-0.1.dev2.pth (removed" in found and "entry_points.txt (removed" in found
