"""A run killed with SIGKILL and resumed reaches the same weights and metrics as one that wasn't."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from dnarch_deploy import rundir as R
from search.checkpoint import last_epoch

from .conftest import TINY, env, run_search

ARGS = [*TINY, "--epochs", "5", "--dropout", "0.1"]  # dropout: the RNG state must resume too


def _records(run):
    rows = R.read_jsonl(run / R.METRICS)
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("resume") / "straight"
    run_search(*ARGS, "--out", str(out))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kill_after_checkpoint", [1, 3])
def test_sigkill_then_resume_matches(uninterrupted, tmp_path, kill_after_checkpoint):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "search.run", *ARGS, "--out", str(out)],
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def reached() -> bool:  # only the newest epoch-NNNNN/ is kept: a busy poll can miss ours
        return (last_epoch(out) or 0) >= kill_after_checkpoint

    deadline = time.monotonic() + 300
    while not reached() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)  # mid-way through the next epoch, or while writing
    proc.wait()
    assert not (out / R.SUMMARY).exists(), "the run finished before it could be killed"

    run_search("--out", str(out), "--resume")
    for weights in (R.LAST_WEIGHTS, R.BEST_WEIGHTS):  # the last and the result's
        a = load_file(str(uninterrupted / weights))
        b = load_file(str(out / weights))
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=f"{weights}: {k}")
    assert _records(out) == _records(uninterrupted)
    sa, sb = R.read_summary(uninterrupted), R.read_summary(out)
    assert dataclasses.replace(sa, wall_seconds=0.0) == dataclasses.replace(sb, wall_seconds=0.0)
