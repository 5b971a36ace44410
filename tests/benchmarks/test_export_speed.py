"""benchmarks/export_speed.py: a report path that cannot be written is refused before any work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("out", ["/proc/export_speed.md", "{tmp}"])
def test_an_unwritable_report_path_is_refused_before_any_work(tmp_path, out):
    out = out.format(tmp=tmp_path)  # /proc takes no new files; a folder is not a file path
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "export_speed.py"), "--out",
                          out], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert f"error: --out {out}: not a writable file path" in run.stderr
    assert "tune" not in run.stderr  # nothing was tuned or timed
    assert list(tmp_path.iterdir()) == []  # and nothing left behind
