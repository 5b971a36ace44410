"""benchmarks/block_output.py on two tiny trained runs, through the command line: it exports
them, times them side by side and reports their summary.json figures and the ratios."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dnarch_deploy import rundir as R

from ..search.conftest import TINY, env, run_search

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "block_output.py"


def test_two_variants_side_by_side(tmp_path):
    runs, against = tmp_path / "gelu", tmp_path / "default"
    name = "ucr-GunPoint-KRWD-s0"  # ucr_quality.py's naming: pairs match by name
    run_search(*TINY, "--block-norm", "mix", "--block-output", "gelu",
               "--out", str(runs / name))
    run_search(*TINY, "--out", str(against / name))
    (against / "ucr-ArrowHead-KRWD-s0").mkdir()  # unfinished, and without a pair: left out
    results = tmp_path / "table.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(runs), "--against",
                           str(against), "--repeats", "2", "--results", str(results)],
                          capture_output=True, text=True, env=env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (runs / name / R.EXPORT / "model.onnx").is_file()  # exported on the way
    text = results.read_text()
    assert text == proc.stdout.rstrip("\n") + "\n"
    gelu, default = R.read_summary(runs / name), R.read_summary(against / name)
    (set_row,) = [line for line in text.splitlines() if line.startswith("| ucr:GunPoint |")]
    cells = [c.strip() for c in set_row.strip("|").split("|")]
    assert cells[:7] == ["ucr:GunPoint", "1", f"{gelu['test_metric']:.3f}",
                         f"{default['test_metric']:.3f}", f"{gelu['macs']:.0f}",
                         f"{default['macs']:.0f}", f"{gelu['macs'] / default['macs']:.2f}"]
    (pair,) = [line for line in text.splitlines() if line.startswith(f"| {name} |")]
    ms = [float(v) for v in pair.strip("|").split("|")[5:]]  # B=1, against, B=32, against
    assert len(ms) == 4 and all(v > 0 for v in ms)
    # the ratios of the printed times (4 digits) up to the last printed digit
    assert [float(c) for c in cells[7:]] == pytest.approx([ms[0] / ms[1], ms[2] / ms[3]],
                                                          abs=0.006)
    assert "ArrowHead" not in text
    (mean,) = [line for line in text.splitlines() if line.startswith("| mean over the sets |")]
    assert mean.strip("|").split("|")[6:] == set_row.strip("|").split("|")[6:9]  # one set


def test_a_damaged_run_is_one_line_before_anything_is_exported(tmp_path):
    for side in ("a", "b"):
        run = tmp_path / side / "ucr-GunPoint-KRWD-s0"
        run.mkdir(parents=True)
        (run / R.SUMMARY).write_text("{not json")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(tmp_path / "a"),
                           "--against", str(tmp_path / "b")], capture_output=True, text=True,
                          env=env(), timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ")
    assert len(proc.stderr.strip().splitlines()) == 1 and "summary.json" in proc.stderr
    assert not (tmp_path / "a" / "ucr-GunPoint-KRWD-s0" / R.EXPORT).exists()


def test_runs_without_counterparts_are_one_error(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(tmp_path / "a"),
                           "--against", str(tmp_path / "b")], capture_output=True, text=True,
                          env=env(), timeout=120)
    assert proc.returncode == 1
    assert re.fullmatch(r"error: no finished run of \S+ has a counterpart in \S+\n", proc.stderr)
