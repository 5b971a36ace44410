"""Fixtures for the dashboard tests: real run directories (see dashboard_runs.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

from .dashboard_runs import TRAINING, make_runs


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs directory holding gunpoint, darcy, damaged and training (see the module doc)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "dashboard-runs"
    with FileLock(str(shared / "dashboard-runs.lock")):
        done = shared / "dashboard-runs.done"
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            make_runs(root)
            done.touch()
    # "training" means recently written: keep it so however long the session has run
    os.utime(root / TRAINING / "metrics.jsonl")
    return root


@pytest.fixture
def empty_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path
