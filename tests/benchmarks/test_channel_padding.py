"""benchmarks/channel_padding.py as a user runs it: per run and batch one row, the two forms'
nodes, MACs and times and their ratio; a path that is not a run directory is one error."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.benchmarks.printed import assert_printed_ratio
from tests.search.conftest import TINY, env, run_search

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "benchmarks" / "channel_padding.py")


def test_each_run_gets_a_row_per_batch_with_both_forms(tmp_path):
    run = tmp_path / "six"  # 6 channels: a direct convolution runs them at 8
    run_search(*[("6" if a == "4" else a) for a in TINY], "--out", str(run))
    out = subprocess.run([sys.executable, SCRIPT, str(run), "--batch", "1,3", "--repeats", "3"],
                         capture_output=True, text=True, env=env(), check=True,
                         timeout=600).stdout
    assert out.startswith(f"$ python benchmarks/channel_padding.py {run}")
    assert "onnxruntime" in out and "the two forms of a row in turns" in out
    rows = re.findall(r"^\| (\S+) \| (\d+) of (\d+) \| (\d+)/(\d+) \| ([\d.]+)/([\d.]+) \| "
                      r"(\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert [(r[0], r[7]) for r in rows] == [(str(run), "1"), (str(run), "3")]
    for _, padded, blocks, nodes, plain_nodes, macs, plain_macs, _, ms, plain_ms, ratio in rows:
        assert int(padded) <= int(blocks) == 1
        # the stream form: fewer nodes where a block is padded, a few more MACs, never fewer
        assert (int(nodes) < int(plain_nodes)) == (padded == "1")
        assert float(macs) >= float(plain_macs)
        assert_printed_ratio(float(ratio), float(ms), float(plain_ms), ms_decimals=4,
                             ratio_decimals=3)


def test_a_path_that_is_not_a_run_is_one_error(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "nowhere")],
                          capture_output=True, text=True, env=env(), timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "nowhere" in proc.stderr
