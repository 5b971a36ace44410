"""benchmarks.stream_layout: the sequence-first four-step computes today's convolution, the
report is printed, bad flags are refused."""

from __future__ import annotations

import re

import pytest
import torch

from benchmarks.stream_layout import SequenceFirstConv, both_forms, first, main
from dnarch_deploy.spectral import direct_conv
from export.emit import to_onnx
from export.tactics import MatMulFFTConv
from tests.benchmarks.printed import assert_printed_ratio


@pytest.mark.parametrize("length, taps", [(150, 149), (64, 9), (97, 97)])
def test_the_sequence_first_convolution_is_the_same_correlation(length, taps):
    torch.manual_seed(0)
    kernel = torch.randn(3, taps, dtype=torch.float64)
    x = torch.randn(2, 3, length, dtype=torch.float64)
    conv = MatMulFFTConv(kernel, (length,))
    y = SequenceFirstConv(conv)(first(x)).permute(1, 2, 0)
    torch.testing.assert_close(y, direct_conv(x, kernel), rtol=0, atol=1e-10)


def test_both_forms_of_the_blocks_agree_in_float64():
    today, sequence_first = both_forms(48, 4, depth=3, dtype=torch.float64)
    x = torch.randn(2, 4, 48, dtype=torch.float64)
    want = today(x)
    torch.testing.assert_close(sequence_first(first(x)).permute(1, 2, 0), want, rtol=0, atol=1e-10)
    assert not torch.allclose(want, x)  # the blocks do something


def test_the_two_pointwise_layers_differ_and_the_sequence_first_graph_moves_no_data():
    today, sequence_first = both_forms(48, 4, depth=1)
    assert not torch.equal(today.w1, today.w2) and not torch.equal(today.b1, today.b2)
    graph = to_onnx(sequence_first, (torch.randn(48, 2, 4),), dynamic_batch=False)
    kinds = {node.op_type for node in graph.graph.node}
    assert "MatMul" in kinds and "Transpose" not in kinds


@pytest.mark.slow
def test_a_small_run_prints_both_timings_and_profiles(capsys):
    assert main(["--length", "48", "--channels", "4", "--batch", "1,2", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "Command: `python -m benchmarks.stream_layout --length 48" in out
    gap = float(re.search(r"differ by ([\d.e+-]+) of the largest", out).group(1))
    assert gap < 1e-5
    rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert [r[0] for r in rows] == ["1", "2"]
    for _, today, seq, ratio in rows:
        assert_printed_ratio(float(ratio), float(today), float(seq))
    assert out.count("onnxruntime by op type") == 2 and out.count("| all |") == 2
    assert "load average" in out and "Load average" in out


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "expected comma-separated integers >= 1, got '0'"),
    (["--length", "16"], "--length 16: its FFT is one dense DFT"),
    (["--depth", "0"], "--depth must be >= 1, got 0"),
])
def test_bad_flags_are_one_error_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err
