"""The search's writers build typed records (dnarch_deploy.records): config.json and summary.json
read back equal to the record written, and a read record writes back byte for byte."""

from __future__ import annotations

import json

from dnarch_deploy import rundir as R
from search.config import parse_args
from search.records import write_json
from search.run import create_run_dir
from search.tasks import load_task
from search.train import train, write_config

from .conftest import TINY


def test_the_records_a_search_writes_read_back_equal(tmp_path):
    """write_config and train (its summary: search.train.finish), in this process: each record
    read back equals the one the writer built and wrote."""
    cfg, _ = parse_args([*TINY, "--epochs", "1"])
    task = load_task(cfg.task, seed=cfg.seed, **cfg.task_options())
    run_dir = tmp_path / "run"
    create_run_dir(run_dir, lambda d: write_config(cfg, d, task, "cpu", 1))
    written = json.loads((run_dir / R.CONFIG).read_text())
    config = R.read_config(run_dir)
    assert config.to_dict() == written and list(config.to_dict()) == list(written)
    assert config.task == cfg.task and config.train == json.loads(json.dumps(cfg.to_dict()))
    summary = train(cfg, run_dir, task)
    assert isinstance(summary, R.Summary) and summary.scored_as_shipped
    assert R.read_summary(run_dir) == summary


def test_a_runs_records_write_back_byte_for_byte(tiny_run, tmp_path):
    for name, read in ((R.CONFIG, R.read_config), (R.SUMMARY, R.read_summary)):
        write_json(tmp_path / name, read(tiny_run).to_dict())
        assert (tmp_path / name).read_text() == (tiny_run / name).read_text(), name
