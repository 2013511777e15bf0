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
