"""The run directory's typed records (dnarch_deploy.records): what a writer builds reads back
equal, in the file's key order; a damaged file is one line naming the file and the field; files
of earlier versions read through their migration (dnarch_deploy.migrate)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from dnarch_deploy import migrate
from dnarch_deploy import rundir as R
from dnarch_deploy.records import Config, Report, Summary

CONFIG = Config(
    schema=R.RUN_SCHEMA, version=R.RUN_VERSION, task="ucr:GunPoint", task_options={}, seed=3,
    model={"in_channels": 1, "out_channels": 2, "input_size": [150], "depth": 1, "width": 4,
           "sample_floor": 1e-6, "pool": "avgmax"},
    train={"task": "ucr:GunPoint", "pool": "avgmax", "label_smoothing": None, "jitter": None,
           "crop_min_length": 16, "crop_min_budget": 1.0, "base_ms": [], "lr": 0.01},
    in_effect={"shift": 0.1, "jitter": 0.1, "label_smoothing": 0.1}, device="cpu",
    world_size=1, base_macs=98416.0, target_macs=98416.0, cost_unit="macs", base_cost=98416.0,
    data={"task": "ucr:GunPoint", "seed": 3, "options": {}, "arrays_sha256": "ab" * 32},
    versions={"python": "3.11"}, command=["search/run.py", "--task", "ucr:GunPoint"])

SUMMARY = Summary(
    task="ucr:GunPoint", learn="KRWD", metric_name="accuracy", test_metric=0.9, test_loss=0.3,
    test_metric_batch_statistics=0.88, test_loss_batch_statistics=0.31, best_epoch=2,
    complexity_ratio=0.97, budget=1.0, cost_unit="macs", target=98416.0, target_macs=98416.0,
    within_budget=True, max_params=0, params=1266, search_params=68373, macs=76408.0,
    wall_seconds=1.5, steps=15, restarts=[], base_ms=[], latency_checks=[],
    higher_is_better=True, vs_base={"distance": 0.02})


def write(run_dir: Path, name: str, data: dict) -> Path:
    path = run_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def test_config_and_summary_round_trip_in_the_writers_key_order(tmp_path):
    for record, name, read in ((CONFIG, R.CONFIG, R.read_config),
                               (SUMMARY, R.SUMMARY, R.read_summary)):
        write(tmp_path, name, record.to_dict())
        back = read(tmp_path)
        assert back == record and type(back) is type(record)
        assert list(back.to_dict()) == list(record.to_dict())
        assert json.loads((tmp_path / name).read_text()) == back.to_dict()
    assert list(SUMMARY.to_dict())[:4] == ["task", "learn", "metric_name", "test_metric"]
    assert "scored_as_shipped" not in SUMMARY.to_dict()  # derived on read, not written


def test_a_report_round_trips(tmp_path):
    from .test_report_schema import REPORT

    report = Report(**copy.deepcopy(REPORT), run={"task": "t"}, whole_network=None,
                    artifacts=["model.onnx", "report.json"], seconds={"emit": 0.1},
                    environment={"python": "3.11"})
    data = report.to_dict()
    assert "whole_network" not in data and list(data)[:4] == ["schema", "version", "run",
                                                              "tactics"]
    write(tmp_path, R.REPORT, data)
    assert R.read_report(tmp_path) == report
    assert R.read_export_report(tmp_path / R.EXPORT) == report  # an export directory alone


def test_dict_style_access_reads_the_fields():
    """For callers written when readers returned dicts (the benchmarks)."""
    assert SUMMARY["test_metric"] == SUMMARY.test_metric == 0.9
    assert CONFIG["train"]["lr"] == 0.01
    assert SUMMARY.get("base_ms", ["x"]) == [] and SUMMARY.get("nothing", 5) == 5
    old = Summary.from_dict({k: v for k, v in SUMMARY.to_dict().items() if k != "steps"}, "s")
    assert old.steps is None and old.get("steps", 0) == 0
    assert "test_metric" in SUMMARY and "nothing" not in SUMMARY and "steps" not in old
    assert {**old, "x": 1} == {**old.to_dict(), "x": 1} and dict(SUMMARY) == SUMMARY.to_dict()
    with pytest.raises(KeyError):
        SUMMARY["nothing"]


def test_unknown_fields_are_left_out_and_absent_ones_read_as_none(tmp_path):
    data = {**SUMMARY.to_dict(), "a_field_from_elsewhere": 1}
    del data["vs_base"], data["restarts"]
    summary = Summary.from_dict(data, "summary.json")
    assert summary.vs_base is None and summary.restarts is None
    assert summary.to_dict() == {k: v for k, v in data.items() if k != "a_field_from_elsewhere"}


def one_line(error: pytest.ExceptionInfo, path: Path, field: str) -> None:
    message = str(error.value)
    assert message.startswith(f"{path}: ") and field in message, message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("change, field", [
    (lambda s: s.pop("task"), "missing field 'task'"),
    (lambda s: s.pop("wall_seconds"), "missing field 'wall_seconds'"),
    (lambda s: s.update(test_metric="high"), "field 'test_metric' must be a number"),
    (lambda s: s.update(params=12.5), "field 'params' must be an integer"),
    (lambda s: s.update(complexity_ratio=None), "field 'complexity_ratio' must be a number"),
    (lambda s: s.update(metric_name=3), "field 'metric_name' must be a string"),
])
def test_a_damaged_summary_names_file_and_field(tmp_path, change, field):
    data = SUMMARY.to_dict()
    change(data)
    path = write(tmp_path, R.SUMMARY, data)
    with pytest.raises(R.RunError) as error:
        R.read_summary(tmp_path)
    one_line(error, path, field)


def test_a_summary_with_a_test_metric_that_was_not_finite_reads():
    """A NaN metric is written as null (search.records.write_json): it still reads."""
    assert Summary.from_dict({**SUMMARY.to_dict(), "test_metric": None}, "s").test_metric is None


@pytest.mark.parametrize("change, field", [
    (lambda c: c.pop("seed"), "missing field 'seed'"),
    (lambda c: c.update(schema="other"), "field 'schema' must be 'dnarch-run'"),
    (lambda c: c.update(version=2), "field 'version' is 2; this dnarch-deploy reads run version 1"),
    (lambda c: c.update(version=[1]), "field 'version' is [1]"),
    (lambda c: c.update(model=["width", 4]), "field 'model' must be an object"),
    (lambda c: c.update(train=None), "field 'train' must be an object (missing)"),
    (lambda c: c.update(seed="0"), "field 'seed' must be an integer"),
])
def test_a_damaged_config_names_file_and_field(tmp_path, change, field):
    data = CONFIG.to_dict()
    change(data)
    path = write(tmp_path, R.CONFIG, data)
    with pytest.raises(R.RunError) as error:
        R.read_config(tmp_path)
    one_line(error, path, field)


def test_a_config_from_before_reads_through_its_versions_migration(tmp_path):
    """Run version 1 as first written: no top-level fields after ``train``, none of the model
    and train fields added since, a removed option at its old default. The migration does not
    change the file's dict; the record has what those runs trained with."""
    data = {"schema": R.RUN_SCHEMA, "version": 1, "task": "t", "seed": 0,
            "model": {"width": 4, "block_norm": "input"}, "train": {"lr": 0.01}}
    before = copy.deepcopy(data)
    config = Config.from_dict(data, "config.json")
    assert data == before  # migrations return a new dict
    assert config.model == {"sample_floor": 1e-3, "pool": "avg", "width": 4}
    assert config.train["jitter"] == 0.0 and config.train["lr"] == 0.01
    assert config.in_effect is None and config.trained_with() == config.train
    assert list(config.to_dict()) == ["schema", "version", "task", "seed", "model", "train"]
    assert migrate.CONFIG_MIGRATIONS == {1: migrate.config_v1}


def test_a_summary_from_before_the_shipped_metric_is_marked_so():
    """Before test_metric_batch_statistics, test_metric was the batch-statistics figure:
    summary_v1 marks it, and python -m search.rescore (weights and data) rescores it."""
    old = {k: v for k, v in SUMMARY.to_dict().items()
           if k not in ("test_metric_batch_statistics", "test_loss_batch_statistics")}
    summary = Summary.from_dict(old, "summary.json")
    assert not summary.scored_as_shipped and not R.scored_as_shipped(summary)
    assert summary.test_metric == 0.9 and summary.to_dict() == old
    assert Summary.from_dict(SUMMARY.to_dict(), "summary.json").scored_as_shipped
