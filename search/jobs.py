"""One search as a job: a real ``python -m search.run`` process into its own run directory, run,
resumed or reused; the benchmarks and ``python -m search.sweep`` drive searches through it. Its
export (:func:`export`) runs in the caller's process, by export's pipeline: search starts no
process of export's.

A finished run directory (summary.json) is reused, an interrupted one resumed from its last
checkpoint, one stopped before its first checkpoint started again; a run directory made with
other settings is an error, never silently reused. Each process runs with one thread (several
run side by side) and CI=1 (no progress bars in its output).
"""

from __future__ import annotations

import os
import shlex
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
    saved = config.train  # flags added since read as those runs trained
    effect = config.trained_with()
    cfg = parse_args(run.flags)[0]
    wanted = cfg.to_dict()
    differ = [k for k in wanted
              if k not in IGNORED and wanted[k] not in (saved.get(k), effect.get(k))]
    if any(wanted[k] is None for k in differ):
        resolved = _resolved(cfg)
        differ = [k for k in differ if wanted[k] is not None or resolved.get(k) != effect.get(k)]
    if set(differ) & LEARN_FLAGS:
        from .resolve import learns_as_saved  # torch: only when one of them differs

        if learns_as_saved(cfg, config.model):
            differ = [k for k in differ if k not in LEARN_FLAGS]
    return [f"{k}: saved {saved.get(k)!r}, wanted {wanted[k]!r}" for k in differ]


def _resolved(cfg) -> dict[str, float]:
    """``search.resolve.in_effect`` of a job's settings on its task."""
    from .resolve import in_effect
    from .tasks import load_task

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


def execute(run: Run, timings: dict) -> R.Summary:
    """Run (or resume, or reuse) one search; returns its summary (a damaged one: a RunError
    naming the file and the field). ``timings[run dir name]`` adds the seconds of the process,
    if one ran."""
    check_saved(run)
    if not (run.run_dir / R.SUMMARY).exists():
        args = [*run.flags, "--out", str(run.run_dir)]
        checkpoints = run.run_dir / "checkpoints"
        if checkpoints.is_dir() and any(checkpoints.glob("epoch-*")):
            args.append("--resume")
        elif run.run_dir.exists():  # stopped before its first checkpoint: nothing to keep
            shutil.rmtree(run.run_dir)
        seconds = run_module("search.run", *args)
        timings[run.run_dir.name] = timings.get(run.run_dir.name, 0.0) + seconds
    elif not R.read_summary(run.run_dir).scored_as_shipped:  # reused, from before
        run_module("search.rescore", str(run.run_dir))
    return R.read_summary(run.run_dir)


def export_options(flags: list[str]):
    """export.pipeline.ExportOptions from ``python -m export.onnx`` flags, read by export.onnx's
    own parser in this process. Flags it rejects, or values ExportOptions refuses: ValueError,
    "python -m export.onnx says: WHY"."""
    import contextlib
    import dataclasses
    import io

    from export.onnx import parser
    from export.pipeline import ExportOptions

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            args = parser().parse_args(["RUN_DIR", *flags])
        return ExportOptions(**{f.name: getattr(args, f.name)
                                for f in dataclasses.fields(ExportOptions)})
    except (SystemExit, ValueError) as e:
        why = str(e) if isinstance(e, ValueError) else (
            said.getvalue().strip().splitlines() or ["rejected"])[-1]
        raise ValueError(f"python -m export.onnx says: {why}") from None


def export(run: Run, flags: list[str], timings: dict) -> None:
    """Export ``run.run_dir`` as ``python -m export.onnx RUN_DIR --no-bench FLAGS`` would, in
    this process (export.pipeline.export_run), with one torch thread; ``timings[run dir name]``
    adds its seconds. Raises JobError when it fails (nothing written)."""
    import torch

    from export.onnx import USER_ERRORS
    from export.pipeline import export_run

    t0, threads = time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(1)  # as the job processes run (environment)
    try:
        options = export_options(flags)
        options.bench = False
        export_run(run.run_dir, options)
    except USER_ERRORS as e:
        raise JobError(f"exporting {run.run_dir}: {e}") from None
    finally:
        torch.set_num_threads(threads)
    timings[run.run_dir.name] = timings.get(run.run_dir.name, 0.0) + time.perf_counter() - t0


def write_array(jobs: Path, slurm: Path, lines: list[str], then: str) -> tuple[Path, Path]:
    """A job array: ``jobs``, one command a line, and ``slurm``, a SLURM array script running
    line i+1 as task i, one CPU each; ``then``: the command to run when all have finished."""
    from dnarch_deploy.io import atomic_write_text

    atomic_write_text(jobs, "\n".join(lines) + "\n")
    atomic_write_text(slurm, "\n".join([
        "#!/bin/bash",
        f"# One array task per model: sbatch {slurm.name} (run where dnarch-deploy is",
        "# installed; the directory must be on a file system every node sees).",
        "# When all have finished, on the deployment machine:",
        f"#   {then}",
        "#SBATCH --job-name=dnarch-sweep",
        f"#SBATCH --array=0-{len(lines) - 1}",
        "#SBATCH --cpus-per-task=1",
        f"#SBATCH --output={shlex.quote(str(jobs.parent))}/jobs-%a.log",
        "set -euo pipefail",
        f'line=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {shlex.quote(str(jobs))})',
        'exec bash -c "$line"',
        "",
    ]))
    return jobs, slurm
