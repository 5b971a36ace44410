"""Is training on CUDA reproducible, and does a SIGKILL + --resume reach the same weights?

Two uninterrupted runs, then one killed with SIGKILL after its third epoch checkpoint and resumed;
prints the largest weight difference and whether the metrics logs agree (test_resume.py's check,
on the device the machine has). Run by benchmarks/cuda_check.sh:

    python -m benchmarks.cuda_resume GunPoint.npz        # DEV=cpu to run it on the CPU
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safetensors.torch import load_file

from benchmarks import harness
from dnarch_deploy import rundir as R


def arguments(task_file: str) -> list[str]:
    return ["--task", f"npz:{task_file}", "--depth", "1", "--width", "4", "--batch-size", "8",
            "--epochs", "5", "--eval-batch-size", "64", "--dropout", "0.1",
            "--device", os.environ.get("DEV", "cuda")]


def search(args: list[str], out: Path, *extra: str) -> None:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "search.run", *args, "--out", str(out), *extra],
                   env=dict(os.environ, CI="1"), check=True, stdout=subprocess.DEVNULL)
    print(f"{out.name}: {time.perf_counter() - t:.1f} s", flush=True)


def compare(a: Path, b: Path) -> str:
    wa, wb = load_file(str(a / R.LAST_WEIGHTS)), load_file(str(b / R.LAST_WEIGHTS))
    worst = max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)

    def rows(run: Path) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"}
                for line in (run / R.METRICS).read_text().splitlines()]

    return f"largest weight difference {worst:.3g}, metrics equal {rows(a) == rows(b)}"


def main(argv: list[str] | None = None) -> None:
    p = harness.parser(__doc__)
    p.add_argument("task_file", help="an npz task file (cuda_check.sh prepare writes them)")
    args = arguments(p.parse_args(argv).task_file)
    root = Path(tempfile.mkdtemp(prefix="cuda-resume-"))
    search(args, root / "straight1")
    search(args, root / "straight2")
    print("two uninterrupted runs:", compare(root / "straight1", root / "straight2"))
    out = root / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "search.run", *args, "--out", str(out)],
                            env=dict(os.environ, CI="1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while not (out / R.CHECKPOINTS / "epoch-00003").exists() and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    print("killed after its epoch-3 checkpoint; finished anyway:", (out / R.SUMMARY).exists())
    search(args, out, "--resume")
    print("uninterrupted vs killed and resumed:", compare(root / "straight1", out))


if __name__ == "__main__":
    main()
