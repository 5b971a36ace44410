"""python -m benchmarks.channel_padding as a user runs it: per run and batch one row, the two forms'
nodes, MACs and times and their ratio; a path that is not a run directory is one error."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from tests.benchmarks.printed import assert_printed_ratio
from tests.benchmarks.scripts import run
from tests.search.conftest import TINY, env, run_search


@pytest.mark.slow
def test_each_run_gets_a_row_per_batch_with_both_forms(tmp_path):
    run_dir = tmp_path / "six"  # 6 channels: a direct convolution runs them at 8
    run_search(*[("6" if a == "4" else a) for a in TINY], "--out", str(run_dir))
    out = run("channel_padding", run_dir, "--batch", "1,3", "--repeats", "3", env=env(),
              check=True, timeout=600).stdout
    # the command with the run directory written OUT/..., not this machine's temporary directory
    where = run_dir.resolve().relative_to(Path(tempfile.gettempdir()).resolve())
    assert out.startswith(f"Command: `python -m benchmarks.channel_padding OUT/{where} ")
    assert "onnxruntime" in out and "the two forms of a row in turns" in out
    rows = re.findall(r"^\| (\S+) \| (\d+) of (\d+) \| (\d+)/(\d+) \| ([\d.]+)/([\d.]+) \| "
                      r"(\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert [(r[0], r[7]) for r in rows] == [(str(run_dir), "1"), (str(run_dir), "3")]
    for _, padded, blocks, nodes, plain_nodes, macs, plain_macs, _, ms, plain_ms, ratio in rows:
        assert int(padded) <= int(blocks) == 1
        # the stream form: fewer nodes where a block is padded, a few more MACs, never fewer
        assert (int(nodes) < int(plain_nodes)) == (padded == "1")
        assert float(macs) >= float(plain_macs)
        assert_printed_ratio(float(ratio), float(ms), float(plain_ms), ms_decimals=4,
                             ratio_decimals=3)


@pytest.mark.slow
def test_a_path_that_is_not_a_run_is_one_error(tmp_path):
    proc = run("channel_padding", tmp_path / "nowhere", env=env(), timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "nowhere" in proc.stderr
