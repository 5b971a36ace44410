"""python -m benchmarks.circular_conv as a user runs it, on a short input: one row per batch, the
circular lowering on the training's FFT length (a shorter four-step grid, fewer MACs) computing
what the linear one computes; the report written where --out says."""

from __future__ import annotations

import os

import pytest

from tests.benchmarks.scripts import run


@pytest.mark.slow
def test_short_run_writes_one_row_per_batch_with_fewer_macs_and_the_same_output(tmp_path):
    out = tmp_path / "circular.md"
    run("circular_conv", "--lengths", "64", "--batch", "1,4", "--repeats", "2", "--out", out,
        check=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600)
    text = out.read_text()
    assert "`python -m benchmarks.circular_conv --lengths 64" in text
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| 64 |")]
    assert [r[1] for r in rows] == ["1", "4"]
    for r in rows:
        circular, linear = (float(v) for v in r[3].split(" / "))
        assert circular < linear  # N = 96 (16 x 6) against 127 -> 128 (8 x 16)
        assert "(16, 6) / (8, 16)" in r[2]
        assert float(r[7].rstrip(" |")) < 1e-5
