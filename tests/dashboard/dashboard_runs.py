"""Run directories for the dashboard tests, made by the real tools: a tiny search on a 1-D
classification task (exported by ``python -m export.onnx``) and on a 2-D dense task,
plus copies of the first: one damaged, one cut back to look like a search still training.

They are made once per test session; under pytest-xdist the first worker makes them and the
others wait on a file lock and reuse them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# tiny searches: a few seconds each on 2 cores
SEARCH_1D = ["--task", "ucr:GunPoint", "--depth", "2", "--width", "4", "--batch-size", "16",
             "--epochs", "3", "--eval-batch-size", "64"]
SEARCH_2D = ["--task", "darcy", "--task-option", "size=17", "--task-option", "n_train=32",
             "--task-option", "n_val=16", "--task-option", "n_test=16", "--depth", "2",
             "--width", "4", "--batch-size", "8", "--epochs", "2",
             "--eval-batch-size", "16"]
# a quick export: tactics by the cost model, few timing repeats, small calibration/test sets
EXPORT = ["--no-tune", "--no-torchscript", "--repeats", "3", "--batch", "1", "--batch", "4",
          "--test-samples", "64", "--calibration-samples", "128"]

GUNPOINT, DARCY, DAMAGED, TRAINING = "gunpoint", "darcy", "damaged", "training"


def _env() -> dict[str, str]:
    env = dict(os.environ, CI="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    return env


def start_module(log: Path, module: str, *args: str | Path) -> subprocess.Popen:
    """Start ``python -m module args`` as a user would run it, its output going to ``log``."""
    with open(log, "w") as out:  # the child keeps its own copy of the file descriptor
        return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], env=_env(),
                                stdout=out, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, log: Path) -> None:
    """Wait for ``proc``; fail with the end of its output."""
    if proc.wait(timeout=600) != 0:
        raise AssertionError(f"{' '.join(proc.args)} failed ({proc.returncode}):\n"
                             f"{log.read_text()[-3000:]}")


def damage(run: Path) -> None:
    """Break one field of architecture.json and drop 'latency' from the export report."""
    path = run / "architecture.json"
    arch = json.loads(path.read_text())
    arch["blocks"][0]["n_mid"] = "wide"
    path.write_text(json.dumps(arch))
    report = run / "export" / "report.json"
    data = json.loads(report.read_text())
    del data["latency"]
    report.write_text(json.dumps(data))


def cut_back_to_training(run: Path) -> None:
    """What a run looks like mid-search: no summary, final architecture, test row or export."""
    for name in ("summary.json", "architecture.json"):
        (run / name).unlink()
    shutil.rmtree(run / "export", ignore_errors=True)
    metrics = run / "metrics.jsonl"
    rows = [line for line in metrics.read_text().splitlines() if '"split": "test"' not in line]
    metrics.write_text("\n".join(rows) + "\n")  # written now: recent, so "training"


def make_runs(root: Path) -> None:
    """The four runs; the 2-D search runs while the 1-D run is exported (one core each)."""
    root.mkdir(parents=True, exist_ok=True)
    logs = {name: root.parent / f"{root.name}-{name}.log" for name in ("1d", "2d", "export")}
    finish(start_module(logs["1d"], "search.run", *SEARCH_1D, "--out", root / GUNPOINT),
           logs["1d"])
    darcy = start_module(logs["2d"], "search.run", *SEARCH_2D, "--out", root / DARCY)
    export = start_module(logs["export"], "export.onnx", root / GUNPOINT, *EXPORT)
    finish(export, logs["export"])
    finish(darcy, logs["2d"])
    shutil.copytree(root / GUNPOINT, root / DAMAGED)
    damage(root / DAMAGED)
    shutil.copytree(root / GUNPOINT, root / TRAINING)
    cut_back_to_training(root / TRAINING)
