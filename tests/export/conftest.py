"""Fixtures for the export tests: a real tiny run directory written by search.run, and its
export written by python -m export.onnx. Both are made once per test session, shared by the xdist
workers (the first to need them builds them under a file lock); tests copy them before changing
anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

# a tiny search: two blocks of 4 channels on GunPoint, a few seconds
TINY_SEARCH = ["--task", "ucr:GunPoint", "--depth", "2", "--width", "4", "--batch-size", "16",
               "--epochs", "2", "--eval-batch-size", "64"]
# export with tuned tactics and a short benchmark
FAST_EXPORT = ["--repeats", "3", "--batch", "1", "--batch", "4", "--test-samples", "64"]


def quiet_env() -> dict[str, str]:
    env = dict(os.environ, CI="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    return env


def run_module(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          env=quiet_env(), timeout=600)


@pytest.fixture(scope="session")
def exported_run(tmp_path_factory) -> Path:
    """A tiny search run directory with its export (RUN_DIR/export), built by the CLIs."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    run = shared / "export-tests" / "gunpoint"
    with FileLock(str(shared / "export-tests.lock")):
        done = shared / "export-tests.done"
        if not done.exists():
            shutil.rmtree(run.parent, ignore_errors=True)
            run.parent.mkdir(parents=True)
            proc = run_module("search.run", *TINY_SEARCH, "--out", str(run))
            assert proc.returncode == 0, proc.stderr[-3000:]
            proc = run_module("export.onnx", str(run), *FAST_EXPORT)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert "equivalence with the trained model" in proc.stdout
            done.touch()
    return run


@pytest.fixture
def run_copy(exported_run, tmp_path) -> Path:
    """A private copy of the exported run, free to damage."""
    dst = tmp_path / "run"
    shutil.copytree(exported_run, dst)
    return dst
