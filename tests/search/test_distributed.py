"""torchrun with 2 CPU processes (gloo) trains the same network as 1 process with the same
global batch: batches are split across ranks, BatchNorm statistics are all-reduced over the
global batch and gradients averaged, so the runs differ only by floating-point summation order."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from dnarch_deploy import rundir as R

from .conftest import TINY, env, run_search

# float32 summation order differs between 1 and 2 processes; Adam rescales each update,
# so after 15 steps the weights agree to about 1e-4 relative
TOLERANCE = dict(rtol=2e-3, atol=2e-4)
# With one input channel, each row of the encoder's weight is a single number followed by
# BatchNorm, which undoes its scale: its gradient is zero up to rounding, and Adam turns that
# rounding noise into full-size steps. The function does not depend on it (only its sign, which
# such steps never flip), so it is compared through the outputs instead.
SCALE_FREE = {"enc_w"}


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    run_search(*TINY, "--out", str(one))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", "29517", "-m", "search.run", *TINY, "--out", str(two)],
        capture_output=True, text=True, env=env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert R.read_config(two).world_size == 2
    a, b = load_file(str(one / R.LAST_WEIGHTS)), load_file(str(two / R.LAST_WEIGHTS))
    assert a.keys() == b.keys()
    for k in a.keys() - SCALE_FREE:
        torch.testing.assert_close(b[k], a[k], **TOLERANCE, msg=lambda m, k=k: f"{k}: {m}")
    torch.testing.assert_close(b["enc_w"].sign(), a["enc_w"].sign())
    # the two trained networks compute the same function
    run_a, run_b = R.load_run(one, weights="last"), R.load_run(two, weights="last")
    x = torch.as_tensor(run_a.task.x_test)
    with torch.no_grad():
        torch.testing.assert_close(run_b.model(x), run_a.model(x), rtol=1e-3, atol=1e-3)
    va = [r["loss"] for r in R.read_jsonl(one / R.METRICS) if r["split"] == "train"]
    vb = [r["loss"] for r in R.read_jsonl(two / R.METRICS) if r["split"] == "train"]
    torch.testing.assert_close(torch.tensor(vb), torch.tensor(va), rtol=1e-3, atol=1e-4)
    # only rank 0 writes: one line per epoch and split, not two
    assert len(R.read_jsonl(two / R.METRICS)) == len(R.read_jsonl(one / R.METRICS))


@pytest.mark.slow
def test_a_rank_exits_with_its_code_flushed_and_without_finalisation():
    """Under torchrun a rank leaves without the interpreter's finalisation (where a gloo worker
    releasing the last collective's tensors can abort it), its printed output flushed."""
    script = ("import atexit; from search.distributed import exit_process; "
              "atexit.register(lambda: print('finalised')); print('done', end=''); "
              "exit_process(3)")
    for world_size, finalised in (("2", False), ("1", True)):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=dict(env(), WORLD_SIZE=world_size), timeout=60)
        assert proc.returncode == 3
        assert proc.stdout == ("donefinalised\n" if finalised else "done")
