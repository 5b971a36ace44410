"""The export report's schema (rundir.read_report): what export writes is read back; anything
else is a RunError naming the file and the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from dnarch_deploy import rundir
from dnarch_deploy.rundir import RunError, read_report


def entry(theoretical: float, paper: float, ms: float | None, tactic: str | None = None) -> dict:
    by_batch = {} if ms is None else {"1": ms, "4": 3 * ms}
    return {"tactic": tactic, "theoretical": theoretical, "paper": paper, "measured_ms": ms,
            "measured_ms_by_batch": by_batch}


REPORT = {
    "schema": "dnarch-export",
    "version": 2,
    "tactics": ["direct"],
    "tuning": {"by": "measured", "batches": [1, 4], "threads": 1},
    "equivalence": {"static": {"max_abs": 1e-7, "max_rel": 2e-7}},
    "tolerance": 1e-4,
    "ops": {"Conv": 1, "MatMul": 4},
    "backends": {"onnxruntime": {"compatible": True, "unsupported_ops": []},
                 "tensorrt": {"compatible": True, "unsupported_ops": []}},
    "latency": {
        "batches": [1, 4],
        "layers": {"encoder": entry(10, 12, 0.1), "blocks.0": entry(20, 25, 0.2, "direct"),
                   "decoder": entry(5, 5, None)},
        "total": {**entry(35, 42, 0.4), "achieved_gflops_by_batch": {"1": 0.2, "4": 0.6}},
        "eager": {"trained_ms": {"1": 1.0, "4": 2.0}},
        "ceiling": {"gflops": 40.0, "shape": [512, 512, 512], "threads": 1,
                    "fraction_by_batch": {"1": 0.005, "4": 0.015}},
    },
    "options": {},
}


def write(tmp_path: Path, report: dict) -> Path:
    (tmp_path / rundir.EXPORT).mkdir(exist_ok=True)
    (tmp_path / rundir.REPORT).write_text(json.dumps(report))
    return tmp_path


def test_a_report_as_export_writes_it_reads_back(tmp_path):
    report = read_report(write(tmp_path, REPORT))
    assert isinstance(report, rundir.Report) and report.to_dict() == REPORT
    assert report.tactics == ["direct"] and report.run is None  # a field the file lacks: None
    assert rundir.REPORT == "export/report.json"
    unbenchmarked = {**REPORT, "latency": None}  # export --no-bench
    report = read_report(write(tmp_path, unbenchmarked))
    assert report.latency is None and report.to_dict() == unbenchmarked  # null, still written


def test_a_version_1_report_still_reads(tmp_path):
    """Version 1 (before tuning batches and the ceiling) reads back without those fields."""
    old = copy.deepcopy(REPORT)
    old["version"] = 1
    del old["tuning"], old["latency"]["ceiling"]
    del old["latency"]["total"]["achieved_gflops_by_batch"]
    report = read_report(write(tmp_path, old))
    assert report.tuning is None and report.version == 1 and report.to_dict() == old


def damaged(change) -> dict:
    report = copy.deepcopy(REPORT)
    change(report)
    return report


CASES = {
    "schema": (lambda r: r.update(schema="other"), r"field 'schema' must be 'dnarch-export'"),
    "version": (lambda r: r.update(version=4), r"field 'version' is 4; .* export version 3"),
    "tuning": (lambda r: r.pop("tuning"), r"field 'tuning' must be an object \(missing\)"),
    "tuning-batches": (lambda r: r["tuning"].update(batches="32"),
                       r"field 'tuning.batches' must be a list of batch sizes or null"),
    "ceiling": (lambda r: r["latency"].pop("ceiling"),
                r"field 'latency.ceiling' must be an object \(missing\)"),
    "gflops": (lambda r: r["latency"]["total"]["achieved_gflops_by_batch"].pop("4"),
               r"field 'latency.total.achieved_gflops_by_batch.4' must be a number"),
    "missing": (lambda r: r.pop("ops"), r"missing field 'ops'"),
    "equivalence": (lambda r: r["equivalence"]["static"].update(max_rel="small"),
                    r"field 'equivalence.static.max_rel' must be a number"),
    "ops": (lambda r: r.update(ops=["Conv"]), r"field 'ops' must be an object"),
    "count": (lambda r: r["ops"].update(Conv=1.5), r"field 'ops.Conv' must be a count"),
    "backend": (lambda r: r["backends"].update(tensorrt="ok"),
                r"field 'backends.tensorrt' must be an object"),
    "layer": (lambda r: r["latency"]["layers"]["blocks.0"].pop("theoretical"),
              r"field 'latency.layers.blocks.0.theoretical' must be a number \(missing\)"),
    "layers-list": (lambda r: r["latency"].update(layers=[]),
                    r"field 'latency.layers' must be an object"),
    "total": (lambda r: r["latency"].pop("total"), r"field 'latency.total' must be an object"),
    "total-batch": (lambda r: r["latency"]["total"]["measured_ms_by_batch"].pop("4"),
                    r"field 'latency.total.measured_ms_by_batch.4' must be a number"),
    "eager": (lambda r: r["latency"]["eager"]["trained_ms"].update({"4": None}),
              r"field 'latency.eager.trained_ms.4' must be a number"),
}


@pytest.mark.parametrize("case", CASES)
def test_damaged_report_names_file_and_field(case, tmp_path):
    change, message = CASES[case]
    run = write(tmp_path, damaged(change))
    with pytest.raises(RunError, match=message) as error:
        read_report(run)
    assert str(error.value).startswith(f"{run / 'export' / 'report.json'}: ")
