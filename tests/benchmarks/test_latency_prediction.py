"""python -m benchmarks.latency_prediction as a user runs it: the header, one row per shape and
batch with positive figures whose medians lie in their ranges, and bad arguments refused with one
message."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.benchmarks import scripts
from tests.benchmarks.printed import assert_printed_ratio


def run(*args: str) -> subprocess.CompletedProcess:
    return scripts.run("latency_prediction", *args, env={**os.environ, "CI": "1"})


@pytest.mark.slow
def test_one_row_per_shape_and_batch():
    """Also --compare: the bundled table beside itself has the same ratio errors."""
    from dnarch_deploy.latency import BUNDLED

    done = run("--networks", "2", "--shapes", "32", "8x8", "--batch", "1", "2", "--repeats", "2",
               "--table", str(BUNDLED), "--compare", str(BUNDLED))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("Command: `python -m benchmarks.latency_prediction --networks 2")
    # the bundled table is in the repository: the command names it relative to it
    assert "--table dnarch_deploy/data/latency_default.json" in out.splitlines()[0]
    assert "onnxruntime 1." in out and "table: " in out
    assert f"| ratio error with {BUNDLED} |" in out
    num = r"([\d.]+)"
    ranged = rf"{num} \({num}-{num}\)"
    rows = re.findall(rf"^\| (\w+) \| (\d+) \| {num} \| {num} \| {ranged} \| "
                      rf"{ranged} \| {num}-{num} \| {ranged} \|$", out, re.M)
    assert [r[:2] for r in rows] == [("32", "1"), ("32", "2"), ("8x8", "1"), ("8x8", "2")]
    for row in rows:
        values = [float(v) for v in row[2:]]
        assert all(v > 0 for v in values)
        _, _, error, lo, hi, ratio, r_lo, r_hi, m_lo, m_hi, *compared = values
        assert lo <= error <= hi and r_lo <= ratio <= r_hi and m_lo <= m_hi
        assert compared == [ratio, r_lo, r_hi]
    # the folded kernel alone, per sequence length and batch: 2 x 32 - 1 taps, circular at 48
    folded = re.findall(rf"^\| 32 \| 48 \| (\w+) \| (\d+) \| {num} \| {num} \| {num} \|$",
                        out, re.M)
    assert [(t, b) for t, b, *_ in folded] == [("matmul", "1"), ("matmul", "2")]
    for *_, meas, pred, ratio in folded:
        assert_printed_ratio(float(ratio), float(pred), float(meas), ms_decimals=4)
    # the direct convolution by channel count: each batch's 32-channel row is 1 by definition,
    # and the bundled table (block 16) prices 20-32 channels alike, 36 as 48
    by_channels = re.findall(rf"^\| (\d+) \| (\d+) \| {num} \| {num} \| {num} \|$", out, re.M)
    assert [(c, b) for c, b, *_ in by_channels] == [
        (str(c), b) for b in ("1", "2") for c in (16, 20, 24, 28, 32, 36)]
    predicted = {(c, b): float(p) for c, b, _, _, p in by_channels}
    for b in ("1", "2"):
        assert [predicted[c, b] for c in ("20", "24", "28", "32")] == [1.0] * 4
        assert predicted["36", b] > 1.2 and predicted["16", b] < 0.8


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (["--networks", "0"], "--networks, --batch and --threads must be >= 1"),
    (["--shapes", "3x3x3"], "a shape is 1-D or 2-D"),
    (["--shapes", "long"], "a shape is LENGTH or HxW"),
    (["--table", "/nonexistent/table.json"], "--table /nonexistent/table.json: "),
    (["--compare", "/nonexistent/b.json"], "--compare /nonexistent/b.json: "),
])
def test_bad_arguments_are_one_message(args, says):
    done = run(*args)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
