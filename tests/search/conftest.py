"""Helpers for the search tests: run the CLI in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# a tiny search: one block of 4 channels on GunPoint, a few seconds per run
TINY = ["--task", "ucr:GunPoint", "--depth", "1", "--width", "4", "--batch-size", "8",
        "--epochs", "3", "--eval-batch-size", "64"]


def env() -> dict[str, str]:
    e = dict(os.environ, CI="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    e.pop("WORLD_SIZE", None)
    return e


def run_search(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "search.run", *args], capture_output=True,
                          text=True, env=env(), timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"search.run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def tiny_search(tmp_path_factory) -> tuple[Path, str]:
    """One complete tiny run directory and what its search wrote on stderr (a pipe, not a
    terminal), shared by tests that only read them."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    proc = run_search(*TINY, "--out", str(out))
    return out, proc.stderr


@pytest.fixture(scope="session")
def tiny_run(tiny_search) -> Path:
    """One complete tiny run directory, shared by tests that only read it."""
    return tiny_search[0]


@pytest.fixture
def local_latency_table(tmp_path) -> Path:
    """The bundled latency table, its header made this machine's (CPU, versions, 1 thread):
    --cost latency then prices with it and times the base here, on any machine."""
    import json

    from dnarch_deploy.latency import BUNDLED, machine, versions

    data = json.loads(Path(BUNDLED).read_text())
    data["header"].update(machine(), threads=1, versions=versions())
    path = tmp_path / "latency_here.json"
    path.write_text(json.dumps(data))
    return path
