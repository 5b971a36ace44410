"""`python -m search.run`: learn an architecture under a compute budget, writing a run directory.

With no flags it runs a small DNArch(K,R,W,D) search on ucr:GunPoint (under a minute on 2 CPU
cores). ``torchrun --nproc-per-node N -m search.run ...`` trains data-parallel on N processes.
Errors a user can cause print one message and exit with status 2; nothing already written is lost.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from dnarch_deploy import rundir as R

from . import distributed
from .config import SearchConfig, parse_args

# flags that may differ on --resume (they do not change what is computed)
RESUMABLE = {"resume", "out", "device", "eval_batch_size", "epochs", "steps"}


class UsageError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""


def default_out(cfg: SearchConfig) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{cfg.task}-{cfg.learn}-s{cfg.seed}").strip("-")
    return Path("runs") / name


def prepare_run_dir(cfg: SearchConfig, given: set[str]) -> tuple[Path, SearchConfig]:
    """Check RUN_DIR against --resume; on resume, continue with the saved configuration."""
    run_dir = Path(cfg.out) if cfg.out else default_out(cfg)
    if cfg.resume:
        try:
            R.check_run_dir(run_dir)
            saved = R.read_config(run_dir)
            saved_cfg = SearchConfig(**saved["train"])
        except (R.RunError, TypeError) as e:
            raise UsageError(f"cannot resume: {e}") from None
        conflicts = [f"--{k.replace('_', '-')} (saved {getattr(saved_cfg, k)!r}, "
                     f"given {getattr(cfg, k)!r})"
                     for k in sorted(given - RESUMABLE) if getattr(saved_cfg, k) != getattr(cfg, k)]
        if conflicts:
            raise UsageError(f"--resume continues {run_dir} with its saved configuration; these "
                             f"flags contradict it: {', '.join(conflicts)}")
        for k in RESUMABLE - {"resume"}:
            if k in given:
                setattr(saved_cfg, k, getattr(cfg, k))
        saved_cfg.resume, saved_cfg.out = True, str(run_dir)
        old = saved["train"]
        longer = (saved_cfg.steps > old.get("steps", 0)) or (saved_cfg.epochs > old["epochs"])
        if (run_dir / R.SUMMARY).exists() and not longer:
            raise UsageError(f"{run_dir} is already complete ({R.SUMMARY} exists); "
                             "pass a larger --steps or --epochs to continue it, or start a new "
                             "run")
        return run_dir, saved_cfg
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise UsageError(f"{run_dir} already exists; pass --resume to continue it or choose "
                         "another --out (nothing was changed)")
    cfg.out = str(run_dir)
    return run_dir, cfg


def create_run_dir(run_dir: Path) -> None:
    try:
        (run_dir / R.CHECKPOINTS).mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"cannot write the run directory {run_dir}: {e.strerror}") from None


def main(argv: list[str] | None = None) -> int:
    from search.tasks import TaskError, load_task

    from .train import TrainingDiverged, flush_denormals, train_with_restarts, write_config

    flush_denormals()  # before any parallel work, so that torch's threads inherit it
    try:
        cfg, given = parse_args(argv)
        cfg.validate()
        run_dir, cfg = prepare_run_dir(cfg, given)
        world = distributed.init("cuda" if cfg.device != "cpu" and _cuda() else "cpu")
        device = distributed.pick_device(cfg.device, world)
        task = load_task(cfg.task, seed=cfg.seed, **cfg.task_options())
        if world.rank == 0 and not cfg.resume:
            create_run_dir(run_dir)
            write_config(cfg, run_dir, task, device, world.size)
        distributed.barrier(world)
        summary = train_with_restarts(cfg, run_dir, task)
    except (UsageError, ValueError, TaskError, R.RunError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        print(f"error: training diverged: {e}", file=sys.stderr)
        return 3
    finally:
        distributed.shutdown()
    if summary is not None:
        print(f"{run_dir}: test {summary['metric_name']} {summary['test_metric']:.4f}, "
              f"complexity ratio {summary['complexity_ratio']:.3f}, "
              f"{summary['macs'] / 1e6:.2f} MMACs, {summary['params']:,} parameters "
              f"(best epoch {summary['best_epoch']}, {summary['wall_seconds']:.0f} s)")
    return 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
