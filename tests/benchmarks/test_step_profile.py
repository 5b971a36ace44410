"""benchmarks.step_profile: per-step figures for both variants, and a device it lacks refused."""

from __future__ import annotations

import re

import pytest
import torch

from benchmarks.step_profile import main


@pytest.mark.slow
def test_both_variants_are_profiled_and_dnarch_runs_more_operators(capsys):
    assert main(["--device", "cpu", "--steps", "1", "--top", "3"]) == 0
    out = capsys.readouterr().out
    ops = [int(v) for v in re.findall(r"aten ops: (\d+)", out)]
    assert len(ops) == 2 and "base (cpu, 1 steps)" in out and "DNArch init (cpu" in out
    assert ops[1] > ops[0] > 0  # the masks and the cost model are operators of their own
    assert "kernel launches: 0" in out  # none on a CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_one_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--device", "cuda"])
    assert e.value.code == 2
    assert "no CUDA device here" in capsys.readouterr().err
