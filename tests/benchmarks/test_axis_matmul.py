"""python -m benchmarks.axis_matmul --quick as a user runs it: both forms checked against the
resampling, one row per case and batch, and the shipped form named by the row-length rule."""

from __future__ import annotations

import os
import re

import pytest

from export.resampling import TRANSPOSE_ROWS_BELOW
from tests.benchmarks.printed import assert_printed_ratio
from tests.benchmarks.scripts import run


@pytest.mark.slow
def test_quick_run_prints_one_row_per_case_with_the_shipped_form():
    out = run("axis_matmul", "--quick", "--batches", "1,2", "--repeats", "3", check=True,
              env={**os.environ, "CI": "1"}).stdout
    assert out.startswith("Command: `python -m benchmarks.axis_matmul --quick")
    assert "onnxruntime" in out
    rows = re.findall(r"^\| (\d+) -> (\d+) \| (\d+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| "
                      r"([\d.]+) \| (\w+) \|$", out, re.M)
    assert [r[:4] for r in rows] == [("8", "5", "8", "1"), ("8", "5", "8", "2"),
                                     ("28", "15", "28", "1"), ("28", "15", "28", "2")]
    for *_, w, _, left, transposed, ratio, shipped in rows:
        assert_printed_ratio(float(ratio), float(left), float(transposed), ms_decimals=4)
        assert shipped == ("transposed" if int(w) < TRANSPOSE_ROWS_BELOW else "left")
