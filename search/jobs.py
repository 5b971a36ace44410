"""One search as a job: a real ``python -m search.run`` process into its own run directory, run,
resumed or reused; the benchmarks and ``python -m search.sweep`` drive searches through it.

A finished run directory (summary.json) is reused, an interrupted one resumed from its last
checkpoint, one stopped before its first checkpoint started again; a run directory made with
other settings is an error, never silently reused. Each process runs with one thread (several
run side by side) and CI=1 (no progress bars in its output).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dnarch_deploy import rundir as R

from .config import LEARN_FLAGS, parse_args

ROOT = Path(__file__).resolve().parent.parent  # the code the processes load
# flags that may differ between a saved run and the job without changing what it computed
IGNORED = {"out", "resume", "device", "eval_batch_size", "amp"}


class JobError(RuntimeError):
    """A job's process failed, or its run directory was made with other settings."""


@dataclass
class Run:
    key: str  # what the caller groups runs by (a task, a task key of a benchmark)
    variant: str  # what the caller compares (a model family, a budget)
    seed: int
    run_dir: Path
    flags: list[str]  # every search.run flag but --out / --resume


def set_flag(flags: list[str], flag: str, value: str) -> list[str]:
    """``flags`` with ``flag`` given ``value`` (replaced where present, else appended)."""
    flags = list(flags)
    if flag in flags:
        flags[flags.index(flag) + 1] = value
    else:
        flags += [flag, value]
    return flags


def saved_differences(run: Run) -> list[str]:
    """The settings in which ``run.run_dir``'s config.json differs from ``run.flags`` (none when
    there is no config.json yet), as "name: saved X, wanted Y". A flag resolved per task agrees
    when the run trained with the value wanted, given or resolved: ``--shift 0.1`` with a run that
    left it out and got 0.1, or ``--shift`` left out with a run that gave what it resolves to."""
    if not (run.run_dir / R.CONFIG).exists():
        return []
    config = R.read_config(run.run_dir)
    saved = config["train"]  # flags added since read as those runs trained
    effect = R.trained_with(config)
    cfg = parse_args(run.flags)[0]
    wanted = cfg.to_dict()
    differ = [k for k in wanted
              if k not in IGNORED and wanted[k] not in (saved.get(k), effect.get(k))]
    if any(wanted[k] is None for k in differ):
        resolved = _resolved(cfg)
        differ = [k for k in differ if wanted[k] is not None or resolved.get(k) != effect.get(k)]
    if set(differ) & LEARN_FLAGS:
        from .train import learns_as_saved  # torch: only when one of them differs

        if learns_as_saved(cfg, config["model"]):
            differ = [k for k in differ if k not in LEARN_FLAGS]
    return [f"{k}: saved {saved.get(k)!r}, wanted {wanted[k]!r}" for k in differ]


def _resolved(cfg) -> dict[str, float]:
    """``search.train.in_effect`` of a job's settings on its task."""
    from .tasks import load_task
    from .train import in_effect

    return in_effect(cfg, load_task(cfg.task, seed=cfg.seed, **cfg.task_options()))


def check_saved(run: Run) -> None:
    """A run directory left by another configuration is an error, never silently reused."""
    diff = saved_differences(run)
    if diff:
        raise JobError(f"{run.run_dir} was made with other settings ({'; '.join(diff)}); "
                       "remove it or pass another --out")


def environment() -> dict[str, str]:
    """A job process's environment: one thread, no progress bars, not a distributed rank."""
    env = dict(os.environ, CI="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    return env


def run_module(module: str, *args: str) -> float:
    """``python -m module args`` in a process of its own; its seconds. Raises JobError with the
    end of its output when it fails."""
    cmd = [sys.executable, "-m", module, *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environment(), cwd=ROOT)
    if proc.returncode != 0:
        raise JobError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def base_milliseconds(mcfg, batches: list[int], table: str = "",
                      found: Path | None = None) -> list[float]:
    """The base network's onnxruntime milliseconds at ``batches`` (``--cost latency``) in the
    time of the latency table ``table`` (``--latency-table``; empty: this machine's), by ``python
    -m export.base_latency`` in a process of its own: search and export meet only through
    processes and files. ``found``: a weights file of the model of ``mcfg``, whose network (the
    architecture its masks describe) is timed beside the base as the probe; none: the table's
    fixed points. Says them in a note, with the time measured and the probe's speed against the
    table; raises JobError (its message for the user) when it fails."""
    probe = ["--probe=found", f"--weights={found}"] if found else []
    cmd = [sys.executable, "-m", "export.base_latency", "--model", json.dumps(mcfg.to_dict()),
           *(f"--batch={b}" for b in batches), f"--latency-table={table}", *probe]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environment(), cwd=ROOT)
    if proc.returncode != 0:
        raise JobError(f"timing the base network for --cost latency: python -m "
                       f"export.base_latency failed ({proc.returncode}): "
                       f"{proc.stderr.strip()[-2000:]} (--base-ms gives its times instead)")
    timed = json.loads(proc.stdout)
    at = ", ".join(f"{ms:.4g} ms at batch {b}" for b, ms in zip(batches, timed["measured_ms"]))
    speed = ", ".join(f"{v:.2f}x" for v in timed["speed"])
    shares = ", ".join(f"{ms:.4g}" for ms in timed["base_ms"])
    if found:
        probe = f"the network the masks describe ran at {speed} its predicted time"
        reference = "the found network's"
    else:
        probe = f"the latency table's probe points ran at {speed} their tabled time"
        reference = "the table's (--base-ms with --latency-checks 0 pins it)"
    print(f"note: the base network runs in {at} here (onnxruntime, 1 thread), while {probe}: "
          f"the budget is a share of {shares} ms, the base's time in {reference}",
          file=sys.stderr)
    return timed["base_ms"]


def execute(run: Run, timings: dict) -> dict:
    """Run (or resume, or reuse) one search; returns its summary. ``timings[run dir name]``
    adds the seconds of the process, if one ran."""
    summary = run.run_dir / "summary.json"
    check_saved(run)
    if not summary.exists():
        args = [*run.flags, "--out", str(run.run_dir)]
        checkpoints = run.run_dir / "checkpoints"
        if checkpoints.is_dir() and any(checkpoints.glob("epoch-*")):
            args.append("--resume")
        elif run.run_dir.exists():  # stopped before its first checkpoint: nothing to keep
            shutil.rmtree(run.run_dir)
        seconds = run_module("search.run", *args)
        timings[run.run_dir.name] = timings.get(run.run_dir.name, 0.0) + seconds
    elif not R.scored_as_shipped(json.loads(summary.read_text())):  # reused, from before
        run_module("search.rescore", str(run.run_dir))
    return json.loads(summary.read_text())
