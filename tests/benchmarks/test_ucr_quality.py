"""benchmarks/ucr_quality.py given bad input, through the command line as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "ucr_quality.py"


def test_an_unknown_task_is_refused_before_any_run_or_report(tmp_path):
    out, results = tmp_path / "runs", tmp_path / "results.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tasks", "ucr:GunPoint", "ucr:Nope",
                           "--no-peer", "--out", str(out), "--results", str(results)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "error: ucr:Nope: no bundled set named 'Nope'" in proc.stderr
    assert not out.exists() and not results.exists()
