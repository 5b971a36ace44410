"""The readers behind the dashboard, on copies of real runs changed the way a user's runs vary:
run states, export states, the export report and damaged records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dashboard import data, figures
from dnarch_deploy import rundir

from .dashboard_runs import DARCY, GUNPOINT, TRAINING


def copy(runs_dir: Path, name: str, tmp_path: Path) -> Path:
    target = tmp_path / "runs" / name
    shutil.copytree(runs_dir / name, target)
    return target


def report_of(run: Path) -> rundir.Report:
    """The report as export wrote it, read through its schema."""
    report = data.read_report(run)
    assert report.to_dict() == json.loads((run / data.REPORT).read_text())
    return report


def test_find_runs_under_nested_folders_not_export(runs_dir, tmp_path):
    copy(runs_dir, GUNPOINT, tmp_path)
    nested = tmp_path / "runs" / "sweep" / "seed1"
    shutil.copytree(runs_dir / DARCY, nested)
    (tmp_path / "runs" / "notes").mkdir()
    found = data.find_runs(tmp_path / "runs")
    assert [data.run_name(tmp_path / "runs", r) for r in found] == [GUNPOINT, "sweep/seed1"]
    assert data.find_runs(tmp_path / "missing") == []


def test_run_states(runs_dir):
    assert data.run_status(runs_dir / GUNPOINT) == "finished"
    training = runs_dir / TRAINING
    assert data.run_status(training) == "training"
    later = (training / rundir.METRICS).stat().st_mtime + data.LIVE_SECONDS + 1
    assert data.run_status(training, now=later) == "stopped"


def test_export_states(runs_dir, tmp_path):
    run = copy(runs_dir, DARCY, tmp_path)
    assert data.export_status(run) == "not exported"
    (run / "export").mkdir()
    assert data.export_status(run) == "exporting"
    (run / data.REPORT).write_text('{"ops": {}')
    assert data.export_status(run) == "damaged report"
    with pytest.raises(data.RunError, match=r"export/report.json: not valid JSON"):
        data.read_report(run)


def test_metrics_of_a_run_being_written(runs_dir, tmp_path):
    run = copy(runs_dir, TRAINING, tmp_path)
    path = run / rundir.METRICS
    rows = len(path.read_text().splitlines())
    with open(path, "a") as f:
        f.write('{"step": 99, "epoch": 9, "spl')  # a line still being written
    assert len(data.metrics_frame(run)) == rows
    assert data.metric_name(run) == "accuracy"  # from the rows' extra key: no summary yet


def test_damaged_metrics_name_line_and_field(runs_dir, tmp_path):
    run = copy(runs_dir, GUNPOINT, tmp_path)
    path = run / rundir.METRICS
    lines = path.read_text().splitlines()
    row = json.loads(lines[1])
    del row["split"]
    lines[1] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(data.RunError, match=r"metrics.jsonl: line 2: missing field 'split'"):
        data.metrics_frame(run)
    table = data.runs_frame(tmp_path / "runs").set_index("run")
    assert table.loc[GUNPOINT, "status"] == "damaged"
    assert "line 2: missing field 'split'" in table.loc[GUNPOINT, "problem"]


def test_test_row_sits_at_the_epoch_it_tests(runs_dir):
    frame = data.metrics_frame(runs_dir / GUNPOINT)
    summary = rundir.read_summary(runs_dir / GUNPOINT)
    test = frame[frame["split"] == "test"].iloc[0]
    val = frame[(frame["split"] == "val") & (frame["epoch"] == summary.best_epoch)].iloc[0]
    assert test["step"] == val["step"]


def test_latency_frame_reads_the_export_report(runs_dir):
    run = runs_dir / GUNPOINT
    report = report_of(run)
    frame = data.latency_frame(report)
    layers = report.latency["layers"]
    assert frame["layer"].tolist() == [*layers, "total"]
    assert frame["measured_ms"].tolist()[:-1] == pytest.approx(
        [e["measured_ms"] for e in layers.values()])
    total = frame.iloc[-1]
    assert total["measured_ms"] == pytest.approx(report.latency["total"]["measured_ms"])
    # theoretical_ms: each layer's share of the theoretical total, in measured milliseconds
    assert frame["theoretical_ms"].iloc[:-1].sum() == pytest.approx(
        total["measured_ms"] * frame["theoretical"].iloc[:-1].sum() / total["theoretical"])
    totals = data.totals_frame(report)
    assert set(totals["backend"]) >= {"onnxruntime", "PyTorch eager, static"}
    assert sorted(set(totals["batch"])) == sorted(str(b) for b in report.latency["batches"])


def test_latency_without_per_layer_timing(runs_dir, tmp_path):
    run = copy(runs_dir, GUNPOINT, tmp_path)
    report = report_of(run)
    latency = report.latency
    for entry in latency["layers"].values():  # export --no-per-layer
        entry.pop("measured_ms_by_batch", None)
        entry["measured_ms"] = None
    (run / data.REPORT).write_text(json.dumps(report.to_dict()))
    frame = data.latency_frame(report_of(run))
    assert frame["measured_ms"].iloc[:-1].isna().all()
    assert frame["measured_ms"].iloc[-1] == latency["total"]["measured_ms"]


def test_report_field_errors_name_the_field(runs_dir, tmp_path):
    """The report is checked once, as it is read: a damaged field is a RunError naming the file
    and the field (every field: tests/dnarch_deploy/test_report_schema.py)."""
    run = copy(runs_dir, GUNPOINT, tmp_path)
    report = report_of(run)
    first = next(iter(report.latency["layers"]))
    del report.latency["layers"][first]["theoretical"]
    (run / data.REPORT).write_text(json.dumps(report.to_dict()))
    with pytest.raises(data.RunError,
                       match=rf"report.json: field 'latency.layers.{first}.theoretical'"):
        data.read_report(run)
    assert data.export_status(run) == "damaged report"


def test_no_benchmark_no_latency(runs_dir, tmp_path):
    run = copy(runs_dir, GUNPOINT, tmp_path)
    report = report_of(run)
    report.latency = None  # export --no-bench
    (run / data.REPORT).write_text(json.dumps(report.to_dict()))
    assert data.latency_batches(report_of(run)) == []


def test_backend_compatibility(runs_dir):
    report = report_of(runs_dir / GUNPOINT)
    report.backends["tensorrt"] = {"compatible": False, "unsupported_ops": ["DFT"]}
    frame = data.backends_frame(report).set_index("backend")
    assert frame["compatible"].tolist() == [True, False]
    assert frame.loc["onnxruntime", "detail"] == "unsupported_ops: none"
    assert frame.loc["tensorrt", "detail"] == "unsupported_ops: DFT"


def test_evolution_frame_stacks_every_snapshot(runs_dir):
    snapshots = rundir.read_architectures(runs_dir / DARCY)
    frame = data.evolution_frame(snapshots)
    assert len(frame) == sum(a.depth for a in snapshots)
    assert sorted(set(frame["epoch"])) == [a.epoch for a in snapshots]
    last = frame[frame["epoch"] == snapshots[-1].epoch]
    assert last["kernel W"].tolist() == [b.kernel_size[1] for b in snapshots[-1].blocks]


def test_figures_are_pure_functions_of_the_records(runs_dir):
    arch = rundir.read_architecture(runs_dir / DARCY)
    extents = figures.kernel_extents(arch)
    assert len(extents.data) == 1 + arch.depth
    metrics = data.metrics_frame(runs_dir / DARCY)
    complexity = figures.complexity_figure(metrics)
    assert [t.name for t in complexity.data] == ["train complexity_ratio", "val complexity_ratio",
                                                 "test complexity_ratio"]
    runs = data.runs_frame(runs_dir)
    scatter = figures.runs_scatter(runs)
    metric_names = {t.name for t in scatter.data}
    assert metric_names == {"accuracy", rundir.read_summary(runs_dir / DARCY).metric_name}


def test_human_sizes():
    assert [data.human_size(n) for n in (512, 2048, 3 * 1024**2)] == ["512 B", "2.0 KB", "3.0 MB"]


def test_comparison_frame_formats_numbers(runs_dir):
    frame = data.comparison_frame({GUNPOINT: runs_dir / GUNPOINT})
    summary = rundir.read_summary(runs_dir / GUNPOINT)
    assert frame.loc["params", GUNPOINT] == f"{summary.params:,}"
    assert frame.loc["test_metric", GUNPOINT] == f"{summary.test_metric:.4g}"


def test_an_epoch_logged_twice_counts_once(runs_dir):
    snapshots = rundir.read_architectures(runs_dir / GUNPOINT)
    resumed = [*snapshots, snapshots[-1]]  # a resumed search re-logs the epoch it restarts at
    frame = data.evolution_frame(resumed)
    assert len(frame) == sum(a.depth for a in snapshots)
    assert list(data.snapshots_by_epoch(resumed)) == [a.epoch for a in snapshots]


def test_architecture_facts_name_the_decoder(runs_dir, tmp_path):
    """The real runs' decoders: a GunPoint search pools by the mean and the maximum (the default),
    Darcy's is dense; an architecture.json from before pooling was recorded reads as the mean."""
    gunpoint = rundir.read_architecture(runs_dir / GUNPOINT)
    assert data.architecture_facts(gunpoint)["decoder"] == "mean + max pool, linear"
    darcy = rundir.read_architecture(runs_dir / DARCY)
    assert data.architecture_facts(darcy)["decoder"] == "linear per position"
    old = copy(runs_dir, GUNPOINT, tmp_path)
    record = json.loads((old / rundir.ARCHITECTURE).read_text())
    del record["pooling"]
    (old / rundir.ARCHITECTURE).write_text(json.dumps(record))
    assert data.architecture_facts(rundir.read_architecture(old))["decoder"] == "mean pool, linear"


@pytest.mark.parametrize("shipped", [True, False], ids=["recorded-both", "older-run"])
def test_metric_legend_says_how_each_split_was_scored(shipped):
    """Validation rounds are scored with BatchNorm on each batch's statistics; the test point, in
    runs that record both figures, as export ships the network; in older runs, as validation."""
    test = {"step": 20, "epoch": 1, "split": "test", "loss": 0.3, "accuracy": 0.9}
    if shipped:
        test["metric_batch_statistics"] = 0.88
    metrics = pd.DataFrame([
        {"step": 10, "epoch": 0, "split": "train", "loss": 0.5, "accuracy": 0.8},
        {"step": 10, "epoch": 0, "split": "val", "loss": 0.4, "accuracy": 0.85}, test])
    names = [t.name for t in figures.metric_figure(metrics, "accuracy").data]
    assert names == ["train accuracy", "val accuracy (batch statistics)",
                     "test accuracy (as shipped)" if shipped else
                     "test accuracy (batch statistics)"]
    assert [t.name for t in figures.complexity_figure(metrics.assign(complexity_ratio=1.0)).data
            ] == ["train complexity_ratio", "val complexity_ratio", "test complexity_ratio"]
