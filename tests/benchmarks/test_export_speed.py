"""benchmarks.export_speed: a report path that cannot be written is refused before any work."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import run as run_script


@pytest.mark.slow
@pytest.mark.parametrize(("out", "why"), [
    ("/proc/export_speed.md", "No such file or directory"),  # /proc takes no new files
    ("{tmp}", "{tmp} is a directory"),
    ("{tmp}/missing/export_speed.md", "directory {tmp}/missing does not exist"),
])
def test_an_unwritable_report_path_is_refused_before_any_work(tmp_path, out, why):
    out, why = out.format(tmp=tmp_path), why.format(tmp=tmp_path)
    run = run_script("export_speed", "--out", out, timeout=60)
    assert run.returncode == 2
    assert f"error: --out {out}: cannot write a report there ({why})" in run.stderr
    assert "tune" not in run.stderr  # nothing was tuned or timed
    assert list(tmp_path.iterdir()) == []  # and nothing left behind


@pytest.mark.slow
def test_a_missing_run_directory_is_refused_before_any_work(tmp_path):
    run = run_script("export_speed", "--run-dir", tmp_path / "nope", "--out", tmp_path / "r.md",
                     timeout=60)
    assert run.returncode == 2
    assert f"error: {tmp_path / 'nope'}: run directory not found" in run.stderr
    assert "Traceback" not in run.stderr and "tune" not in run.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_an_unknown_mask_state_is_refused_before_any_work(tmp_path):
    run = run_script("export_speed", "--states", "found,middle", "--out", tmp_path / "r.md",
                     timeout=60)
    assert run.returncode == 2
    assert "error: --states takes found and/or max, got middle" in run.stderr
    assert "Traceback" not in run.stderr and "tune" not in run.stderr
    assert list(tmp_path.iterdir()) == []
