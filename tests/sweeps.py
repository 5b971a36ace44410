"""A tiny real sweep (``python -m search.sweep``), made once per test session and shared by the
sweep tests and the dashboard's Pareto tests: two budgets and one base point on GunPoint, a few
training steps each, exported quickly, measured at batches 1 and 8. Under pytest-xdist the first
worker makes it and the others wait on a file lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

BUDGETS = (0.25, 0.5)
GRID = (4, 1)  # the one base point: width 4, depth 1
BATCH = 8
SWEEP = ["--task", "ucr:GunPoint", "--budgets", ",".join(map(str, BUDGETS)), "--seeds", "1",
         "--base-grid", f"{GRID[0]}x{GRID[1]}", "--batch", str(BATCH), "--repeats", "5",
         "--jobs", "2",
         "--export-flags=--no-tune --no-torchscript --test-samples 64 --calibration-samples 128",
         # search flags, passed to every search.run
         "--depth", "2", "--width", "4", "--batch-size", "16", "--epochs", "2",
         "--eval-batch-size", "64"]


def env() -> dict[str, str]:
    e = dict(os.environ, CI="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    e.pop("WORLD_SIZE", None)
    return e


def run_sweep(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "search.sweep", *map(str, args)],
                          capture_output=True, text=True, env=env(), timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"search.sweep failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = shared / "sweeps" / "sweep"  # its parent holds nothing else: a dashboard's root
    with FileLock(str(shared / "sweep.lock")):
        if not (out / "pareto.json").exists():
            run_sweep(*SWEEP, "--out", out, "--resume")  # --resume: a crashed maker's leftovers
    return out
