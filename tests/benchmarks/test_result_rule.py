"""benchmarks/result_rule.py: its evaluation of saved weights gives the run's own test metric."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from dnarch_deploy import rundir as R
from tests.search.conftest import TINY, run_search

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "result_rule.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

from result_rule import compare  # noqa: E402


def test_the_last_rounds_weights_score_what_the_run_reported(tmp_path):
    """A run whose 'last' weights are its best ones, said to have chosen an earlier round: the
    script must evaluate those weights and get the test metric the run itself wrote."""
    run = tmp_path / "run"
    run_search(*TINY, "--learn", "none", "--out", str(run))
    reported = R.read_summary(run)["test_metric"]
    shutil.copy(run / R.BEST_WEIGHTS, run / R.LAST_WEIGHTS)
    summary = json.loads((run / R.SUMMARY).read_text())
    (run / R.SUMMARY).write_text(json.dumps({**summary, "best_epoch": -1, "test_metric": 0.25}))
    row = compare(run)
    assert row["chosen"] == 0.25 and row["chosen_epoch"] == -1
    assert row["last"] == reported and row["group"] == "ucr:GunPoint none"


def test_a_missing_run_is_refused_before_any_work(tmp_path):
    results = tmp_path / "out.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nope"), "--results",
                           str(results)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"{tmp_path / 'nope'}" in proc.stderr
    assert "Traceback" not in proc.stderr and not results.exists()


def test_damaged_weights_are_one_message_and_no_report(tmp_path):
    run = tmp_path / "run"
    run_search(*TINY, "--learn", "none", "--out", str(run))
    summary = json.loads((run / R.SUMMARY).read_text())
    (run / R.SUMMARY).write_text(json.dumps({**summary, "best_epoch": -1}))  # last is evaluated
    (run / R.LAST_WEIGHTS).write_bytes(b"not a safetensors file")
    results = tmp_path / "out.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(run), "--results", str(results)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "damaged checkpoint" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not results.exists()
