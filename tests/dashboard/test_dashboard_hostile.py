"""The dashboard over hostile run directories (issue #17): it reads only regular files inside the
run, under the runs root, with a size limit, and says calmly what it did not read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dashboard import data
from dnarch_deploy import rundir

from .dashboard_runs import GUNPOINT
from .test_dashboard_app import open_app


@pytest.fixture
def runs(runs_dir: Path, tmp_path: Path) -> Path:
    """A runs root holding a copy of the exported GunPoint run."""
    root = tmp_path / "runs"
    shutil.copytree(runs_dir / GUNPOINT, root / GUNPOINT)
    return root


def test_metrics_linked_to_a_device_is_not_read(runs, monkeypatch):
    run = runs / GUNPOINT
    (run / rundir.METRICS).unlink()
    (run / rundir.METRICS).symlink_to("/dev/zero")
    with pytest.raises(data.RefusedFile, match="metrics.jsonl: a link to /dev/zero, outside"):
        data.metrics_frame(run)
    row = data.runs_frame(runs).iloc[0]
    assert row["status"] == "not read" and "metrics.jsonl" in row["problem"]
    at = open_app(monkeypatch, runs, "Training", [GUNPOINT])
    assert not at.error and "metrics.jsonl: a link to /dev/zero" in at.warning[0].value
    at = open_app(monkeypatch, runs)
    assert not at.error and "a file was not read" in at.warning[0].value


def test_a_fifo_is_not_read(runs):
    """Not even opened for long: reading a FIFO would wait for a writer forever."""
    run = runs / GUNPOINT
    (run / rundir.SUMMARY).unlink()
    os.mkfifo(run / rundir.SUMMARY)
    with pytest.raises(data.RefusedFile, match="summary.json: not a regular file"):
        rundir.read_summary(run)
    assert data.runs_frame(runs).iloc[0]["status"] == "not read"


def test_records_over_the_size_limit_are_not_read(runs, monkeypatch):
    monkeypatch.setattr(rundir, "MAX_RECORD_BYTES", 100)
    with pytest.raises(data.RefusedFile, match="larger than"):
        data.metrics_frame(runs / GUNPOINT)


def test_export_linked_out_of_the_runs_root_is_not_listed(runs, tmp_path, monkeypatch):
    run = runs / GUNPOINT
    secret = tmp_path / "elsewhere"
    (secret / "deep").mkdir(parents=True)
    (secret / "deep" / "private-key.pem").write_text("x" * 10)
    shutil.rmtree(run / "export", ignore_errors=True)
    (run / "export").symlink_to(secret)
    assert data.export_status(run) == "not read"
    with pytest.raises(data.RefusedFile, match="outside the run directory"):
        data.artifacts_frame(run)
    at = open_app(monkeypatch, runs, "Deployment", [GUNPOINT])
    shown = " ".join(str(e.value) for e in [*at.warning, *at.info, *at.error, *at.dataframe])
    assert not at.error and "outside the run directory" in at.warning[0].value
    assert "private-key" not in shown


def test_links_inside_export_are_not_followed(runs, tmp_path):
    run = runs / GUNPOINT
    (run / "export").mkdir(exist_ok=True)
    (tmp_path / "big.bin").write_bytes(b"x" * 1000)
    (run / "export" / "link.bin").symlink_to(tmp_path / "big.bin")
    (run / "export" / "outside").symlink_to(tmp_path)
    files = data.artifacts_frame(run)["file"].tolist()
    assert not any(f.startswith(("link.bin", "outside")) for f in files)


def test_runs_linked_from_outside_the_root_or_hidden_are_not_listed(runs, tmp_path):
    outside = tmp_path / "outside-run"
    shutil.copytree(runs / GUNPOINT, outside)
    (runs / "linked").symlink_to(outside)
    shutil.copytree(runs / GUNPOINT, runs / ".gunpoint2.creating-x")  # search.run making one
    assert [r.name for r in data.find_runs(runs)] == [GUNPOINT]


def test_export_without_benchmark_is_a_friendly_state(runs, monkeypatch):
    report = runs / GUNPOINT / data.REPORT
    content = json.loads(report.read_text())
    content["latency"] = None  # what export --no-bench writes
    report.write_text(json.dumps(content))
    at = open_app(monkeypatch, runs, "Deployment", [GUNPOINT])
    assert not at.error
    assert any("--no-bench" in i.value for i in at.info)
