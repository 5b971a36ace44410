"""torchrun with 2 CPU processes (gloo) trains the same network as 1 process with the same
global batch: batches are split across ranks, BatchNorm statistics are all-reduced over the
global batch and gradients averaged, so the runs differ only by floating-point summation order."""

from __future__ import annotations

import subprocess
import sys

import torch
from safetensors.torch import load_file

from dnarch_deploy import rundir as R

from .conftest import TINY, env, run_search

# float32 summation order differs between 1 and 2 processes; Adam rescales each update,
# so after 15 steps the weights agree to about 1e-4 relative
TOLERANCE = dict(rtol=2e-3, atol=2e-4)


def test_two_processes_match_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    run_search(*TINY, "--out", str(one))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", "29517", "-m", "search.run", *TINY, "--out", str(two)],
        capture_output=True, text=True, env=env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert R.read_config(two)["world_size"] == 2
    a, b = load_file(str(one / R.LAST_WEIGHTS)), load_file(str(two / R.LAST_WEIGHTS))
    for k in a:
        torch.testing.assert_close(b[k], a[k], **TOLERANCE, msg=k)
    va = [r["loss"] for r in R.read_jsonl(one / R.METRICS) if r["split"] == "train"]
    vb = [r["loss"] for r in R.read_jsonl(two / R.METRICS) if r["split"] == "train"]
    torch.testing.assert_close(torch.tensor(vb), torch.tensor(va), rtol=1e-3, atol=1e-4)
    # only rank 0 writes: one line per epoch and split, not two
    assert len(R.read_jsonl(two / R.METRICS)) == len(R.read_jsonl(one / R.METRICS))
