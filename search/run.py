"""`python -m search.run`: learn an architecture under a compute budget, writing a run directory.

With no flags it runs a small DNArch(K,R,W,D) search on ucr:GunPoint (under a minute on 2 CPU
cores). ``torchrun --nproc-per-node N -m search.run ...`` trains data-parallel on N processes.
Errors a user can cause print one message and exit with status 2; nothing already written is lost.
Everything that can be checked is checked before RUN_DIR is made, and RUN_DIR appears whole
(config.json and checkpoints/) or not at all. A failure before the first checkpoint removes the
RUN_DIR it made; a run killed before then (SIGKILL) is started again by ``--resume``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dnarch_deploy import rundir as R
from dnarch_deploy.io import current_umask, process_alive

from . import checkpoint, distributed
from .config import LEARN_FLAGS, SearchConfig, parse_args
from .records import write_json

if TYPE_CHECKING:
    from dnarch_deploy import ModelConfig

# flags that may differ on --resume (they do not change what is computed, or extend it)
RESUMABLE = {"resume", "out", "device", "eval_batch_size", "epochs", "steps", "allow_data_change"}
LENGTH = ("steps", "epochs")  # the two ways to give a run's length: one replaces the other
RESUME_HINT = "python -m search.run --out {run_dir} --resume"


class UsageError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""


def default_out(cfg: SearchConfig) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{cfg.task}-{cfg.learn}-s{cfg.seed}").strip("-")
    return Path("runs") / name


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def prepare_run_dir(cfg: SearchConfig, given: set[str]) -> tuple[Path, SearchConfig]:
    """Check RUN_DIR against --resume; on resume, continue with the saved configuration. Every
    flag the user typed is compared with the saved one (or the value it resolved to), whatever
    its value."""
    run_dir = Path(cfg.out) if cfg.out else default_out(cfg)
    if cfg.resume:
        try:
            R.check_run_dir(run_dir)
            saved = R.read_config(run_dir)
            saved_cfg = SearchConfig(**saved.train)
            for name in (R.METRICS, R.ARCHITECTURES):  # a damaged line before the last one
                R.read_jsonl(run_dir / name, within=run_dir)
        except (R.RunError, TypeError) as e:
            raise UsageError(f"cannot resume: {e}") from None
        # a flag agrees when it equals the saved flag or the value the run trained with
        # ('--label-smoothing 0.1' where it was left out and resolved to 0.1)
        effect = saved.trained_with()
        conflicts = [k for k in sorted(given - RESUMABLE)
                     if getattr(cfg, k) not in (getattr(saved_cfg, k), effect[k])]
        if set(conflicts) & LEARN_FLAGS:
            from .resolve import learns_as_saved

            typed = dataclasses.replace(saved_cfg, **{k: getattr(cfg, k) for k in given})
            if learns_as_saved(typed, saved.model):
                conflicts = [k for k in conflicts if k not in LEARN_FLAGS]
        if conflicts:
            raise UsageError(f"--resume continues {run_dir} with its saved configuration; these "
                             f"flags contradict it: " + ", ".join(
                                 f"{_flag(k)} (saved {getattr(saved_cfg, k)!r}, given "
                                 f"{getattr(cfg, k)!r})" for k in conflicts))
        if given & set(LENGTH):
            saved_cfg.steps = saved_cfg.epochs = 0
        for k in RESUMABLE - {"resume"}:
            if k in given:
                setattr(saved_cfg, k, getattr(cfg, k))
        saved_cfg.resume, saved_cfg.out = True, str(run_dir)
        return run_dir, saved_cfg
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise UsageError(f"{run_dir} already exists; pass --resume to continue it or choose "
                         "another --out (nothing was changed)")
    cfg.out = str(run_dir)
    return run_dir, cfg


def check_task(cfg: SearchConfig, task) -> ModelConfig:
    """What the loaded data make impossible, before anything is written: an empty split, a
    network over the limits (classes from the data, width and depth from the flags). Returns
    the model's config."""
    from .resolve import learned, model_config

    for part, n in zip(("train", "val", "test"), task.sizes()):
        if n == 0:
            raise UsageError(f"task {task.name}: the {part} split has no samples")
    try:
        learned(cfg, task.spatial)
    except ValueError as e:
        raise UsageError(f"task {task.name}: {e}") from None
    try:
        mcfg = model_config(cfg, task)
    except ValueError as e:
        raise UsageError(f"task {task.name} with --width {cfg.width}, --depth {cfg.depth}: "
                         f"{e}") from None
    return mcfg


def with_base_time(cfg: SearchConfig, mcfg, world) -> SearchConfig:
    """--cost latency without --base-ms: the base network's measured milliseconds at every
    --latency-batch, timed once (rank 0, sent to the others) and kept in config.json, so that a
    resumed run keeps its budget (:mod:`export.base_latency`). A run saved without them resumes
    with its base predicted, as it trained; the base itself (--learn none) has nothing to
    measure against; with another machine's latency table the base is priced by it too
    (:meth:`SearchConfig.latency_table_here`)."""
    if (cfg.cost != "latency" or cfg.base_ms or cfg.resume or mcfg.learn == "none"
            or not cfg.latency_table_here()):
        return cfg
    timed = None  # (times, None) or (None, why it failed): every rank must leave the broadcast
    if world.rank == 0:
        from export.base_latency import MeasurementError, base_milliseconds

        try:
            timed = (base_milliseconds(mcfg, cfg.latency_batch, cfg.latency_table), None)
        except MeasurementError as e:
            timed = (None, str(e))
    times, failure = distributed.broadcast(timed, world)
    if failure:
        raise UsageError(failure)
    return dataclasses.replace(cfg, base_ms=times)


def note_learned(cfg: SearchConfig, task) -> None:
    """Say so when the model learns less than --learn asks (search.resolve.learned)."""
    from dnarch_deploy.model import canonical_learn

    from .resolve import learned, no_resolution

    why = no_resolution(cfg, task.spatial)
    if why and "R" in canonical_learn(cfg.learn):
        print(f"note: the resolution is not learned (--learn {learned(cfg, task.spatial)}): "
              f"{why}", file=sys.stderr)


def unreachable_budget(cfg: SearchConfig, mcfg, budget: float) -> str | None:
    """Why no network of the search space can meet ``budget`` (a multiple of the base cost, in
    --cost units), stating the range that can be met; None where one can."""
    from dnarch_deploy.cost import base_cost, cost_range

    if mcfg.learn == "none":  # nothing is searched: the budget only labels the base
        return None
    units = cfg.cost_units(mcfg)
    base = base_cost(mcfg, units)
    low, high = (c / base for c in cost_range(mcfg, units))
    if low * (1 - 1e-9) <= budget <= high * (1 + 1e-9):
        return None
    against = (f" of the base's time ({cfg.base_ms[0]:.4g} ms at batch "
               f"{cfg.latency_batch[0]} in the latency table's time, --base-ms)"
               if cfg.cost == "latency" and cfg.base_ms else "")
    return (f"no network the search can reach costs that much; with --learn {mcfg.learn} on "
            f"this task (CCNN_{{{mcfg.depth},{mcfg.width}}}, input "
            f"{'x'.join(map(str, mcfg.input_size))}) budgets from {low:.3g} to {high:.3g}"
            f"{against} are reachable")


def check_budget(cfg: SearchConfig, mcfg) -> None:
    """A budget no network of the search space can meet: an error that states the range. With
    --lam 0 nothing holds the search to its budget (:func:`search.result.result_fits`), which
    then only scales the reported ratio: any budget will do."""
    if cfg.lam == 0:
        return
    why = unreachable_budget(cfg, mcfg, cfg.budget)
    if why:
        raise UsageError(f"--budget {cfg.budget:g}: {why}")


def check_length(run_dir: Path, cfg: SearchConfig, task) -> None:
    """On resume: the length asked for (--steps or --epochs, else the saved one) covers the steps
    already trained, and goes past them when the run is complete."""
    from .config import training_length

    steps = training_length(cfg, len(task.y_train)).steps
    done = checkpoint.last_step(run_dir)
    asked = f"--epochs {cfg.epochs}" if cfg.epochs else f"--steps {cfg.steps or steps}"
    if steps < done:
        raise UsageError(f"{asked}: {run_dir} has already trained {done} steps; give a length "
                         f"of {done} steps or more")
    if (run_dir / R.SUMMARY).exists() and steps <= done:
        raise UsageError(f"{run_dir} is already complete ({R.SUMMARY} exists, {done} steps); "
                         f"pass a longer --steps or --epochs to continue it, or start a new run")


def check_checkpoint(run_dir: Path, cfg: SearchConfig, task) -> None:
    """On resume: the newest checkpoint fits the model config.json describes (a config copied
    from another run, or an edited width, is one message naming both files)."""
    from dnarch_deploy import DNArch

    from .resolve import model_config

    path = checkpoint.last_weights(run_dir)
    if path is not None:
        R.load_weights(DNArch(model_config(cfg, task)), path)


def create_run_dir(run_dir: Path, write: Callable[[Path], None]) -> None:
    """Make RUN_DIR whole or not at all: built as a hidden sibling (``checkpoints/`` and what
    ``write`` puts there), then renamed into place."""
    where = f"cannot write the run directory {run_dir}"
    prefix = f".{run_dir.name}.creating-"
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        for stale in run_dir.parent.glob(prefix + "*"):  # left by a process killed right here
            pid = stale.name[len(prefix):].split("-")[0]
            if pid.isdigit() and not process_alive(int(pid)) and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=run_dir.parent))
    except OSError as e:
        raise UsageError(f"{where}: {e.strerror}") from None
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp's 0700 would outlive the rename
        (tmp / R.CHECKPOINTS).mkdir()
        write(tmp)
        os.replace(tmp, run_dir)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        name = f" ({Path(e.filename).name})" if e.filename else ""
        raise UsageError(f"{where}{name}: {e.strerror} (nothing was left behind)") from None


def update_config(run_dir: Path, cfg: SearchConfig) -> None:
    """On resume: config.json's length becomes the run's new one (summary.json agrees)."""
    config = R.read_config(run_dir)
    if any(config.train.get(k) != getattr(cfg, k) for k in LENGTH):
        config.train.update({k: getattr(cfg, k) for k in LENGTH})
        write_json(run_dir / R.CONFIG, config.to_dict())


def after_failure(run_dir: Path | None, created: bool) -> str:
    """What a failure during the run leaves, as the end of its message. A run directory this
    process made and that holds no checkpoint yet is removed (nothing in it can be resumed)."""
    if run_dir is None or not run_dir.is_dir():
        return ""
    last = checkpoint.last_epoch(run_dir)
    if last is not None:
        return (f"; the checkpoint of epoch {last} is kept: continue with "
                f"`{RESUME_HINT.format(run_dir=run_dir)}`")
    if created:
        shutil.rmtree(run_dir, ignore_errors=True)
        return f"; no checkpoint had been written, so {run_dir} was removed"
    return (f"; no checkpoint was written: `{RESUME_HINT.format(run_dir=run_dir)}` starts it "
            f"again from epoch 0, `rm -r {run_dir}` removes it")


def main(argv: list[str] | None = None) -> int:
    from search.tasks import TaskError, load_task

    from .train import TrainingDiverged, flush_denormals, train_with_restarts, write_config

    flush_denormals()  # before any parallel work, so that torch's threads inherit it
    # a warning for the user (a latency table that cannot be used) is one line, like the errors
    warnings.formatwarning = lambda message, *_: f"warning: {message}\n"
    run_dir, created, summary = None, False, None
    working = None  # RUN_DIR once work on it began: failures then say what they leave
    try:
        cfg, given = parse_args(argv)
        cfg.validate()
        run_dir, cfg = prepare_run_dir(cfg, given)
        world = distributed.init("cuda" if cfg.device != "cpu" and _cuda() else "cpu")
        device = distributed.pick_device(cfg.device, world)
        task = load_task(cfg.task, seed=cfg.seed, **cfg.task_options())
        mcfg = check_task(cfg, task)
        cfg = with_base_time(cfg, mcfg, world)
        check_budget(cfg, mcfg)
        if world.rank == 0 and not cfg.resume:
            note_learned(cfg, task)
        if cfg.resume and not cfg.allow_data_change:
            R.check_data(run_dir, R.read_config(run_dir), task, "--allow-data-change")
        if cfg.resume:
            check_length(run_dir, cfg, task)
            check_checkpoint(run_dir, cfg, task)
        if world.rank == 0 and not cfg.resume:
            create_run_dir(run_dir, lambda d: write_config(cfg, d, task, device, world.size))
            created = True
        elif world.rank == 0:
            update_config(run_dir, cfg)
        working = run_dir
        distributed.barrier(world)
        summary = train_with_restarts(cfg, run_dir, task)
    except (UsageError, ValueError, TaskError, R.RunError) as e:
        print(f"error: {e}{after_failure(working, created)}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        print(f"error: training diverged: {e}{after_failure(working, created)}", file=sys.stderr)
        return 3
    except OSError as e:  # a full disk, a folder made read-only while training
        what = e.filename or run_dir
        print(f"error: cannot write {what}: {e.strerror}{after_failure(working, created)}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted{after_failure(working, created)}", file=sys.stderr)
        return 130
    finally:
        distributed.shutdown()
    if summary is not None:
        print(f"{run_dir}: test {summary.metric_name} {summary.test_metric:.4f}, "
              f"complexity ratio {summary.complexity_ratio:.3f}, "
              f"{summary.macs / 1e6:.2f} MMACs, {summary.params:,} parameters "
              f"(best epoch {summary.best_epoch}, {summary.wall_seconds:.0f} s)")
    return 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    distributed.exit_process(main())
