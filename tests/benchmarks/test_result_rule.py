"""benchmarks.result_rule: its evaluation of saved weights gives the run's own test metric."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks.result_rule import compare
from dnarch_deploy import rundir as R
from tests.benchmarks.scripts import run
from tests.search.conftest import TINY, run_search


@pytest.mark.slow
def test_the_last_rounds_weights_score_what_the_run_reported(tmp_path):
    """A run whose 'last' weights are its best ones, said to have chosen an earlier round: the
    script must evaluate those weights and get the test metric the run itself wrote."""
    run_dir = tmp_path / "run"
    run_search(*TINY, "--learn", "none", "--out", str(run_dir))
    reported = R.read_summary(run_dir)["test_metric"]
    shutil.copy(run_dir / R.BEST_WEIGHTS, run_dir / R.LAST_WEIGHTS)
    summary = json.loads((run_dir / R.SUMMARY).read_text())
    (run_dir / R.SUMMARY).write_text(json.dumps({**summary, "best_epoch": -1,
                                                 "test_metric": 0.25}))
    row = compare(run_dir)
    assert row["chosen"] == 0.25 and row["chosen_epoch"] == -1
    assert row["last"] == reported and row["group"] == "ucr:GunPoint none"


@pytest.mark.slow
def test_a_missing_run_is_refused_before_any_work(tmp_path):
    results = tmp_path / "out.md"
    proc = run("result_rule", tmp_path / "nope", "--results", results, timeout=120)
    assert proc.returncode == 2 and f"{tmp_path / 'nope'}" in proc.stderr
    assert "Traceback" not in proc.stderr and not results.exists()


@pytest.mark.slow
def test_damaged_weights_are_one_message_and_no_report(tmp_path):
    run_dir = tmp_path / "run"
    run_search(*TINY, "--learn", "none", "--out", str(run_dir))
    summary = json.loads((run_dir / R.SUMMARY).read_text())
    (run_dir / R.SUMMARY).write_text(json.dumps({**summary, "best_epoch": -1}))  # last is scored
    (run_dir / R.LAST_WEIGHTS).write_bytes(b"not a safetensors file")
    results = tmp_path / "out.md"
    proc = run("result_rule", run_dir, "--results", results, timeout=120)
    assert proc.returncode == 2 and "damaged checkpoint" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not results.exists()
