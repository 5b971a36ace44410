"""benchmarks.export_profile: both profiles printed, their times adding up, bad flags refused."""

from __future__ import annotations

import re

import pytest

from benchmarks.export_profile import kinds_per_call, main, table


def test_table_lists_the_largest_kinds_and_folds_the_rest():
    lines = table({"MatMul": 3.0, "Conv": 1.0, "Add": 0.5, "Mul": 0.5}, top=2)
    assert lines[2:] == ["| MatMul | 3.000 | 60.0% |", "| Conv | 1.000 | 20.0% |",
                         "| (2 more kinds) | 1.000 | 20.0% |", "| all | 5.000 | 100.0% |"]


def _run(ts: int, dur: int) -> dict:
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}


def _node(op: str, ts: int, dur: int) -> dict:
    return {"cat": "Node", "name": f"n_{ts}_kernel_time", "ts": ts, "dur": dur,
            "args": {"op_name": op}}


def test_kinds_per_call_drops_the_warm_up_and_takes_each_kinds_median():
    # times in microseconds; calls at 0 (warm-up), 1000, 2000 and 3000, listed out of order
    events = [_run(2000, 500), _run(0, 900), _run(3000, 700), _run(1000, 600),
              _node("MatMul", 10, 800),  # in the warm-up call: left out
              _node("MatMul", 1100, 200), _node("MatMul", 1300, 100),  # call 1: 0.3 ms
              _node("MatMul", 2100, 400), _node("Add", 2200, 50),  # call 2: 0.4 ms, Add 0.05
              _node("MatMul", 3100, 500),  # call 3: 0.5 ms, no Add (0)
              _node("Conv", 5000, 100),  # in no call
              {"cat": "Node", "name": "n_fence_before", "ts": 1100, "dur": 9,
               "args": {"op_name": "MatMul"}}]  # not a kernel time
    kinds, wall = kinds_per_call(events, warm_up=1)
    assert kinds == pytest.approx({"MatMul": 0.4, "Add": 0.0})
    assert wall == pytest.approx(0.6)  # the median of 0.6, 0.5 and 0.7 ms


@pytest.mark.slow
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
    # onnxruntime's kernel times lie inside its profiled calls
    profiled = float(re.search(r"a profiled call took ([\d.]+) ms", ort).group(1))
    ort_total = float(re.search(r"^\| all \| ([\d.]+) \|", ort, re.M).group(1))
    assert 0 < ort_total <= 1.25 * profiled


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "--batch must be >= 1, got 0"),
    (["--tactic", "fast"], "invalid choice: 'fast'"),
])
def test_bad_flags_are_one_error_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err
