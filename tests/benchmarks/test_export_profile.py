"""benchmarks/export_profile.py: both profiles printed, their times adding up, bad flags refused."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from export_profile import main, table  # noqa: E402


def test_table_lists_the_largest_kinds_and_folds_the_rest():
    lines = table({"MatMul": 3.0, "Conv": 1.0, "Add": 0.5, "Mul": 0.5}, top=2)
    assert lines[2:] == ["| MatMul | 3.000 | 60.0% |", "| Conv | 1.000 | 20.0% |",
                         "| (2 more kinds) | 1.000 | 20.0% |", "| all | 5.000 | 100.0% |"]


def test_a_small_network_is_profiled_in_both_runtimes(capsys):
    assert main(["--length", "32", "--batch", "2", "--calls", "2", "--top", "50",
                 "--tactic", "matmul"]) == 0
    out = capsys.readouterr().out
    assert "tactics matmul matmul" in out and "batch 2" in out
    ort, eager = out.split("PyTorch static module, by aten operator")
    # every block's FFT convolution is MatMuls in the graph, and rfft / irfft in PyTorch
    assert re.search(r"^\| MatMul \| [\d.]+ \|", ort, re.M)
    assert re.search(r"^\| aten::_fft_r2c \| [\d.]+ \|", eager, re.M)
    for part in (ort, eager):  # with every kind listed, the times add up to the "all" row
        times = [float(v) for v in re.findall(r"^\| (?!all)[^|]+ \| ([\d.]+) \|", part, re.M)]
        total = float(re.search(r"^\| all \| ([\d.]+) \|", part, re.M).group(1))
        assert times and sum(times) == pytest.approx(total, abs=1e-3 * len(times))


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "--batch must be >= 1, got 0"),
    (["--tactic", "fast"], "invalid choice: 'fast'"),
])
def test_bad_flags_are_one_error_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err
