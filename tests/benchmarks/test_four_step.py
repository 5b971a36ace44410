"""python -m benchmarks.four_step --quick as a user runs it: per case and batch one row, the
fewest-MACs grid first, the grid export picks (FOUR_STEP_N2) marked; then the inverse half's two
layouts (export's against the Transpose form) and the filter product's three forms, equal outputs
checked before timing; and the grid argument it relies on."""

from __future__ import annotations

import os

import pytest
import torch

from benchmarks.four_step import BlockFilter, SwappedFilter
from export.tactics import MatMulFFTConv
from tests.benchmarks.printed import assert_printed_ratio
from tests.benchmarks.scripts import run


@pytest.mark.slow
def test_quick_run_prints_each_grid_with_the_picked_one_marked():
    out = run("four_step", "--quick", "--batch", "1", "--repeats", "2", check=True,
              env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "grid" not in line]
    assert len(rows) == 6
    filters, layouts, rows = rows[4:], rows[2:4], rows[:2]
    # a global kernel on 150 samples: fewest MACs at N2 = 7, the multiple of 8 export picks 16
    assert "| 32 | 150 | 299 | 1 | 43x7: " in rows[0] and "*19x16: " in rows[0]
    assert "| 64 | 256 | 511 | 1 | 47x11: " in rows[1] and "*32x16: " in rows[1]
    assert all(row.count("*") == 1 and row.count("; ") == 1 for row in rows)  # --quick: 2 grids
    # channels, length, batch, the grid export picks, two timings and their ratio
    assert layouts[0].startswith("| 32 | 150 | 1 | 19x16 | ")
    assert layouts[1].startswith("| 64 | 256 | 1 | 32x16 | ")
    for row in layouts:
        by_part, transposed, ratio = (float(c) for c in row.strip("| ").split(" | ")[4:])
        assert_printed_ratio(ratio, by_part, transposed)
    # the filter's three forms: export's ms, then each other form's ms and its ratio to it
    assert filters[0].startswith("| 32 | 150 | 1 | 19x16 | ")
    assert filters[1].startswith("| 64 | 256 | 1 | 32x16 | ")
    for row in filters:
        cells = row.strip("| ").split(" | ")[4:]
        assert len(cells) == 3
        ours = float(cells[0])
        for cell in cells[1:]:
            ms, ratio = cell.split(" (")
            assert_printed_ratio(float(ratio.rstrip(")")), float(ms), ours)


def test_a_grid_too_small_for_the_kernel_is_refused():
    with pytest.raises(ValueError, match=r"factors \(8, 8\) do not reach the FFT length 224"):
        MatMulFFTConv(torch.randn(2, 149), (150,), factors=(8, 8))


def test_the_filter_forms_compute_the_same_convolution():
    kernel, x = torch.randn(4, 299), torch.randn(3, 4, 150)
    reference = MatMulFFTConv(kernel, (150,))(x)
    for form in (BlockFilter, SwappedFilter):
        torch.testing.assert_close(form(kernel, (150,))(x), reference, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_a_batch_below_one_is_one_error():
    proc = run("four_step", "--batch", "0", timeout=120)
    assert proc.returncode == 2 and "--batch and --repeats must be >= 1" in proc.stderr
