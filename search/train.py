"""The search loop: train a DNArch model under a compute budget and write its run directory.

One round = optimiser steps (config.Length: --steps, or --epochs passes) -> validation -> records
-> checkpoint; the records call a round an ``epoch``. The batches are a function of the step (one
seeded shuffle per pass over the training split) and everything else a resumed run needs is in the
checkpoint, so a run killed at any moment and resumed reaches the same weights and metrics as an
uninterrupted one.
"""

from __future__ import annotations

import copy
import functools
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from dnarch_deploy import (
    DNArch,
    base_cost,
    compare_with_base,
    complexity_loss,
    describe,
    model_cost,
)
from dnarch_deploy import rundir as R
from dnarch_deploy.calibration import calibrate, task_batches
from dnarch_deploy.cost import architecture_cost
from dnarch_deploy.params import architecture_params, limit_loss, model_params
from dnarch_deploy.progress import Progress
from dnarch_deploy.records import Config, Summary

from . import checkpoint, distributed
from .augment import jitter, random_shift
from .budget import Budget, latency_check_steps, price, reprice_in_found_time, scheduled_target
from .config import SearchConfig, training_length
from .records import append_jsonl, write_json
from .resolve import in_effect, model_config, smoothed_entropy
from .result import (
    STALL_CHECK,
    STALL_MIN_STEPS,
    Stalled,
    is_result,
    result_fits,
    smoothed,
    stalled,
    within_budget,
)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite (search.run says what is kept)."""


RESTART_SEED = 1_000_003  # initialisation seed of attempt k: seed + k x this

@dataclass
class Batches:
    """Tensors of one split, on the training device."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return self.x.shape[0]


def split_tensors(task, split: str, device: torch.device | str = "cpu") -> Batches:
    """The task's ``split`` ("train", "val" or "test") as tensors of the dtypes the model reads."""
    y_dtype = torch.long if task.kind == "classification" else torch.float32
    x_dtype = torch.long if task.tokens else torch.float32
    return Batches(torch.as_tensor(getattr(task, f"x_{split}"), dtype=x_dtype, device=device),
                   torch.as_tensor(getattr(task, f"y_{split}"), dtype=y_dtype, device=device))


def objective(model: DNArch, out: torch.Tensor, y: torch.Tensor,
              smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy for classification (against targets smoothed by ``smoothing``); MSE in
    units of the target's std for dense tasks."""
    if model.config.dense:
        std = model.output_std.view(1, -1, *([1] * (y.dim() - 2)))
        return (((out.float() - y) / std) ** 2).mean()
    return F.cross_entropy(out.float(), y, label_smoothing=smoothing)


def make_optimizer(model: DNArch, cfg: SearchConfig) -> torch.optim.Optimizer:
    """AdamW; mask parameters in their own group (own learning rate, no weight decay). The fused
    kernel updates every parameter in one call: on these small networks the per-parameter loop of
    the default implementation was ~8% of a CPU training step."""
    masks = set(id(p) for p in model.mask_parameters())
    weights = [p for p in model.parameters() if id(p) not in masks]
    groups = [{"params": weights, "lr": cfg.lr, "weight_decay": cfg.weight_decay}]
    if masks:
        groups.append({"params": model.mask_parameters(), "lr": cfg.mask_lr, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, fused=True)


def make_scheduler(opt, cfg: SearchConfig, total: int):
    """Linear warm-up then cosine to zero over ``total`` steps, stepped every optimiser step."""
    warmup = round(cfg.warmup * total)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(total - warmup, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def flush_denormals() -> None:
    """Flush denormal floats to zero in CPU arithmetic. Late in training, near-zero gradients
    and activations fall below 1e-38, where x86 arithmetic is ~10x slower: flushing made training
    steps of trained GunPoint networks 3-17% faster (base CCNN and DNArch; a whole 60-epoch run
    0-3%), with the same results. It is a per-thread setting that threads inherit when created:
    call it before torch's first parallel operation, so that its intra-op threads flush too."""
    torch.set_flush_denormal(True)


# glibc mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep freed memory for the next allocation instead of returning it to
    the OS. torch's CPU tensors come from malloc; by default a large one is mapped fresh and
    unmapped when freed, so each training step and evaluation batch pays page faults to map and
    zero its activations again (benchmarks/allocator.py). Allocations under 256 MiB come from the
    heap (under 32 MiB where glibc refuses more, its documented cap), and up to 1 GiB free at its
    top is kept, so a step reuses the last one's pages; the process keeps its peak memory.
    Returns whether it applied (glibc only; under a preloaded jemalloc or tcmalloc it tunes
    nothing that is used)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl, Windows)
        return False
    mapped = mallopt(_M_MMAP_THRESHOLD, 256 << 20) or mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    kept = mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    return bool(mapped and kept)


def versions() -> dict[str, str]:
    import dnarch_deploy

    return {"python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "dnarch_deploy": dnarch_deploy.__version__}


@torch.no_grad()
def evaluate(model: DNArch, data: Batches, task, batch_size: int) -> tuple[float, float]:
    """(objective loss, task metric) over a split. BatchNorm uses batch statistics, as in search."""
    model.eval()
    outs = [model(data.x[i : i + batch_size]) for i in range(0, len(data), batch_size)]
    out = torch.cat(outs)
    loss = float(objective(model, out, data.y))
    metric = task.metric(out.float().cpu().numpy(), data.y.cpu().numpy())
    return loss, float(metric)


@torch.no_grad()
def evaluate_shipped(model: DNArch, data: Batches, task, batch_size: int) -> tuple[float, float]:
    """(objective loss, task metric) of the network export ships: a copy of ``model`` with its
    BatchNorm set to population statistics of the training inputs, as export's first stage
    sets them (dnarch_deploy.calibration). Each sample is then scored on its own, not by the
    statistics of the evaluation batch it came in (:func:`evaluate`). On a GPU the statistics
    come from a GPU forward pass, export's from a CPU one: equal to float32 rounding."""
    device = next(model.parameters()).device
    x = split_tensors(task, "train").x  # on the CPU: only the first calibration.SAMPLES move
    shipped = calibrate(copy.deepcopy(model), [b.to(device) for b in task_batches(x)],
                        show_progress=False)
    return evaluate(shipped, data, task, batch_size)


@torch.no_grad()
def complexity_ratio(model: DNArch, target: float, units) -> float:
    return float(model_cost(model, units=units)["total"]) / target


def trained_params(model: DNArch) -> int:
    """The parameters the search trains, masks included."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class BatchOrder:
    """The training batches as a function of the step alone (one seeded reshuffle per pass over
    the split), so that a resumed run sees the same ones."""

    def __init__(self, cfg: SearchConfig, n: int, length, batch: int, device):
        self.seed, self.n, self.per_epoch, self.batch = cfg.seed, n, length.steps_per_epoch, batch
        self.device, self.order, self.epoch = device, None, -1

    def indices(self, step: int) -> torch.Tensor:
        data_epoch, i = divmod(step, self.per_epoch)
        if data_epoch != self.epoch:
            g = torch.Generator().manual_seed(self.seed * 100003 + data_epoch)
            self.order = torch.randperm(self.n, generator=g).to(self.device)
            self.epoch = data_epoch
        return self.order[i * self.batch : (i + 1) * self.batch]


@dataclass
class Attempt:
    """What one attempt trains with, fixed once it starts."""

    cfg: SearchConfig
    task: object
    run_dir: Path
    world: distributed.World
    model: DNArch
    opt: torch.optim.Optimizer
    sched: object
    data: dict[str, Batches]  # "train", "val", "test"
    length: object  # config.Length
    batches: BatchOrder
    local: int  # samples of the global batch on this rank
    start: float  # the initial network's cost: where C_target's ramp starts
    amp: bool
    effect: dict[str, float]  # in_effect: shift, jitter, label smoothing

    @property
    def writer(self) -> bool:
        return self.world.rank == 0


@dataclass
class State:
    """What a checkpoint keeps of an attempt; ``epoch`` is the last round finished."""

    epoch: int = -1
    step: int = 0
    best: tuple | None = None  # (top smoothed metric, whether its round fits): is_result's
    best_epoch: int = -1
    wall: float = 0.0
    first_loss: float | None = None
    restarts: list = field(default_factory=list)
    rechecked: list = field(default_factory=list)  # each latency check's step and base_ms
    history: list = field(default_factory=list)  # validation metrics, for the result rule

    def saved(self) -> dict:
        return {"epoch": self.epoch, "step": self.step, "best": self.best[0],
                "best_fits": self.best[1], "best_epoch": self.best_epoch,
                "wall_seconds": self.wall, "first_loss": self.first_loss,
                "restarts": self.restarts, "latency_checks": self.rechecked}


def start_attempt(cfg: SearchConfig, run_dir: Path, task, restarts: list) -> Attempt:
    """A new model (initialised by the attempt's seed), its optimiser and the task's splits on
    the training device."""
    world = distributed.World.from_env()
    device = torch.device(distributed.pick_device(cfg.device, world))
    torch.manual_seed(cfg.seed + RESTART_SEED * len(restarts))
    model = DNArch(model_config(cfg, task)).to(device)
    if world.size > 1:
        distributed.sync_batchnorm(model)
    with torch.no_grad():  # the masks' initial values are fixed: so is this, on resume too
        start = float(model_cost(model, units=cfg.cost_units(model.config))["total"])
    data = {split: split_tensors(task, split, device) for split in ("train", "val", "test")}
    if cfg.batch_size % world.size:
        raise ValueError(f"--batch-size {cfg.batch_size} must be divisible by the number of "
                         f"processes ({world.size})")
    # full batches only, so every step of every rank sees the same number of samples
    length = training_length(cfg, len(data["train"]))
    batch = min(cfg.batch_size, len(data["train"]))
    opt = make_optimizer(model, cfg)
    return Attempt(cfg, task, run_dir, world, model, opt, make_scheduler(opt, cfg, length.steps),
                   data, length, BatchOrder(cfg, len(data["train"]), length, batch, device),
                   batch // world.size, start, device.type == "cuda" and cfg.amp,
                   in_effect(cfg, task))


def resume_state(run: Attempt, budget: Budget, restarts: list) -> tuple[State, Budget]:
    """The state the last checkpoint saved (the model, optimiser and scheduler loaded from it),
    and the budget as its latency checks last priced it; records past it are cut."""
    saved = checkpoint.load_last(run.run_dir, run.model, run.opt, run.sched)
    state = State(epoch=saved["epoch"], step=saved["step"], best_epoch=saved["best_epoch"],
                  wall=saved["wall_seconds"], first_loss=saved["first_loss"],
                  restarts=saved["restarts"], rechecked=saved["latency_checks"])
    if saved["best"] is not None:
        state.best = (saved["best"], saved["best_fits"])
    if state.rechecked:
        budget = price(run.cfg, run.model.config, state.rechecked[-1]["base_ms"])
    if run.writer:
        checkpoint.truncate_records(run.run_dir, saved["epoch"])
        state.history = [r["metric"] for r in R.read_jsonl(run.run_dir / R.METRICS)
                         if r["split"] == "val"]
    return state, budget


def losses(run: Attempt, budget: Budget, x, y, state: State) -> tuple[torch.Tensor, ...]:
    """(loss, objective, complexity loss, cost / target) of one batch at ``state.step``."""
    cfg, model = run.cfg, run.model
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=run.amp):
        plan = model.plan()
        out = model.run(x, plan)
    loss_obj = objective(model, out, y, run.effect["label_smoothing"])
    cost = model_cost(model, plan, budget.units)["total"]
    now = scheduled_target(cfg, run.start, budget.target, state.step, run.length.steps)
    ratio, loss_comp = cost / budget.target, complexity_loss(cost, now)
    if cfg.max_params:  # the second constraint, its own term beside the budget's
        loss_comp = loss_comp + limit_loss(model_params(model, plan), cfg.max_params)
    loss = loss_obj + cfg.lam * loss_comp
    if not torch.isfinite(loss):
        raise TrainingDiverged(
            f"loss became {float(loss)} at epoch {state.epoch}, step {state.step} (objective "
            f"{float(loss_obj)}, complexity {float(loss_comp)}): try a lower "
            f"--lr than {cfg.lr:g}")
    return loss, loss_obj, loss_comp, ratio


def train_round(run: Attempt, budget: Budget, state: State, steps: range,
                progress: Progress) -> dict[str, float]:
    """The optimiser steps of one round; their mean loss, objective, complexity loss and ratio,
    over the global batch."""
    t0 = time.perf_counter()
    run.model.train()
    sums = {"loss": 0.0, "loss_obj": 0.0, "loss_comp": 0.0, "complexity_ratio": 0.0}
    shift, noise = run.effect["shift"], run.effect["jitter"]
    for _ in steps:
        idx = run.batches.indices(state.step)
        x, y = run.data["train"].x[idx], run.data["train"].y[idx]
        if shift:  # drawn for the global batch on every rank, so N ranks shift as one does
            x = random_shift(x, shift)
        if noise:  # the same: one draw for the global batch
            x = jitter(x, noise)
        mine = slice(run.world.rank * run.local, (run.world.rank + 1) * run.local)
        loss, loss_obj, loss_comp, ratio = losses(run, budget, x[mine], y[mine], state)
        run.opt.zero_grad()
        loss.backward()
        distributed.average_gradients(run.model, run.world)
        run.opt.step()
        run.sched.step()
        run.model.clamp_masks_()
        state.step += 1
        logged = distributed.mean(torch.stack([loss, loss_obj, loss_comp, ratio]).detach(),
                                  run.world)  # the global batch's figures, not this rank's
        for k, v in zip(sums, logged.tolist()):
            sums[k] += v
        progress.update(1, loss=f"{logged[0]:.3f}", ratio=f"{logged[3]:.3f}")
    state.wall += time.perf_counter() - t0
    return {k: v / len(steps) for k, v in sums.items()}


def check_stall(run: Attempt, state: State, steps: range, train_row: dict) -> None:
    """Raise Stalled at the round that crosses STALL_CHECK of the steps when the objective has
    stalled and --restarts allows another attempt."""
    if state.epoch == 0:
        state.first_loss = train_row["loss_obj"]
    total = run.length.steps
    at_check = (state.epoch > 0 and total >= STALL_MIN_STEPS
                and steps.start < STALL_CHECK * total <= steps.stop)
    floor = smoothed_entropy(run.effect["label_smoothing"], run.model.config.out_channels)
    if (at_check and len(state.restarts) < run.cfg.restarts
            and stalled(train_row["loss_obj"], state.first_loss, floor)):
        raise Stalled({"step": state.step, "loss": train_row["loss_obj"],
                       "first_loss": state.first_loss, "floor": floor, "seconds": state.wall})


def validate_round(run: Attempt, budget: Budget, state: State, train_row: dict,
                   progress: Progress) -> None:
    """Rank 0: score the round on the validation split, apply the result rule, and write the
    records, the architecture snapshot and the checkpoint."""
    cfg, model, task, epoch = run.cfg, run.model, run.task, state.epoch
    val_loss, metric = evaluate(model, run.data["val"], task, cfg.eval_batch_size)
    arch = describe(model, epoch=epoch)
    ratio = complexity_ratio(model, budget.target, budget.units)
    rows = [
        {"step": state.step, "epoch": epoch, "split": "train", **train_row,
         "lr": run.sched.get_last_lr()[0], "seconds": state.wall},
        {"step": state.step, "epoch": epoch, "split": "val", "loss": val_loss,
         "loss_obj": val_loss, "complexity_ratio": ratio, task.metric_name: metric,
         "metric": metric, "seconds": state.wall},
    ]
    state.history.append(metric)
    standard_error = functools.partial(task.standard_error, n=len(run.data["val"]))
    chosen, state.best = is_result(smoothed(state.history), result_fits(cfg, ratio, arch),
                                   state.best, task.higher_is_better, standard_error)
    if chosen:
        state.best_epoch = epoch
        checkpoint.save_weights(model, run.run_dir / R.BEST_WEIGHTS)
    for row in rows:
        append_jsonl(run.run_dir / R.METRICS, row)
    append_jsonl(run.run_dir / R.ARCHITECTURES, arch.to_dict())
    checkpoint.save_last(run.run_dir, model, run.opt, run.sched, state.saved())
    progress.note(loss=train_row["loss"], **{task.metric_name: metric}, ratio=ratio)


def train(cfg: SearchConfig, run_dir: Path, task, resume: bool = False,
          restarts: list[dict] | None = None) -> Summary | None:
    """Run (or continue) the search; returns the summary (rank 0; None on the others). Only
    rank 0 writes files. ``restarts``
    lists the stalled attempts before this one (raises Stalled when this one stalls too and
    --restarts allows another)."""
    flush_denormals()
    keep_freed_memory()
    run = start_attempt(cfg, run_dir, task, list(restarts or []))
    budget = price(cfg, run.model.config)
    state = State(restarts=list(restarts or []))
    if resume:
        state, budget = resume_state(run, budget, state.restarts)
    checks = latency_check_steps(cfg, run.model.config.learn, run.length.steps)
    progress = Progress(run.length.steps, "search", "step", initial=state.step,
                        enabled=run.writer)
    while state.step < run.length.steps:  # a round: up to per_round steps, then a validation
        state.epoch += 1
        steps = range(state.step, min(state.step + run.length.per_round, run.length.steps))
        train_row = train_round(run, budget, state, steps, progress)
        check_stall(run, state, steps, train_row)
        if any(steps.start < s <= steps.stop for s in checks):
            budget = reprice_in_found_time(cfg, budget, run.model.config, run.model, run.world)
            state.rechecked.append({"step": state.step, "base_ms": list(budget.base_ms)})
            state.best = None  # the rounds before were judged against a base priced otherwise
        if run.writer:
            validate_round(run, budget, state, train_row, progress)
        distributed.barrier(run.world)
    progress.close()
    summary = finish(run, budget, state) if run.writer else None
    distributed.barrier(run.world)
    return summary


def train_with_restarts(cfg: SearchConfig, run_dir: Path, task) -> Summary | None:
    """Train; when an attempt stalls, say so, clear what it wrote and start a new one from
    another initialisation (its record goes into summary.json's ``restarts``)."""
    world = distributed.World.from_env()
    restarts, resume = [], cfg.resume
    while True:
        try:
            return train(cfg, run_dir, task, resume=resume, restarts=restarts)
        except Stalled as e:
            restarts.append(e.record)
            if world.rank == 0:
                print(f"warning: {e}; restarting from a new initialisation "
                      f"({len(restarts)} of --restarts {cfg.restarts})", file=sys.stderr)
                checkpoint.clear_attempt(run_dir)
            distributed.barrier(world)
            resume = False


def finish(run: Attempt, budget: Budget, state: State) -> Summary:
    """Score the best validation epoch's network on the test split as export ships it; write
    architecture.json and summary.json (the run's result: weights, architecture and metrics of
    that epoch)."""
    cfg, model, task, best_epoch = run.cfg, run.model, run.task, state.best_epoch
    checkpoint.load_weights_into(model, run.run_dir / R.BEST_WEIGHTS)
    arch = describe(model, epoch=best_epoch)
    # the test metric is the shipped network's; beside it, the one the search's own evaluation
    # gives (BatchNorm on each test batch's statistics, as validation is scored)
    test_loss, test_metric = evaluate_shipped(model, run.data["test"], task, cfg.eval_batch_size)
    batch_loss, batch_metric = evaluate(model, run.data["test"], task, cfg.eval_batch_size)
    ratio = complexity_ratio(model, budget.target, budget.units)
    arch.save(run.run_dir / R.ARCHITECTURE)
    summary = Summary(
        task=cfg.task, learn=model.config.learn, metric_name=task.metric_name,
        test_metric=test_metric, test_loss=test_loss,
        test_metric_batch_statistics=batch_metric, test_loss_batch_statistics=batch_loss,
        best_epoch=best_epoch,
        complexity_ratio=ratio, budget=cfg.budget, cost_unit=budget.units.name,
        target=budget.target, target_macs=cfg.budget * base_cost(model.config),
        within_budget=within_budget(cfg, ratio, arch), max_params=cfg.max_params,
        params=architecture_params(arch), search_params=trained_params(model),
        macs=architecture_cost(arch), wall_seconds=state.wall,
        steps=run.length.steps, restarts=state.restarts,
        base_ms=list(budget.base_ms), latency_checks=list(state.rechecked),
        higher_is_better=task.higher_is_better,
        vs_base=compare_with_base(arch, model.config.depth, model.config.width),
    )
    append_jsonl(run.run_dir / R.METRICS, {"step": None, "epoch": best_epoch, "split": "test",
                                           "loss": test_loss, task.metric_name: test_metric,
                                           "metric": test_metric, "complexity_ratio": ratio,
                                           "metric_batch_statistics": batch_metric,
                                           "seconds": state.wall})
    write_json(run.run_dir / R.SUMMARY, summary.to_dict())
    return summary


def write_config(cfg: SearchConfig, run_dir: Path, task, device: str, world_size: int) -> None:
    mcfg = model_config(cfg, task)
    units = cfg.cost_units(mcfg)
    write_json(run_dir / R.CONFIG, Config(
        schema=R.RUN_SCHEMA, version=R.RUN_VERSION, task=cfg.task,
        task_options=cfg.task_options(), seed=cfg.seed, model=mcfg.to_dict(),
        train=cfg.to_dict(), in_effect=in_effect(cfg, task),
        device=device, world_size=world_size,
        base_macs=base_cost(mcfg), target_macs=cfg.budget * base_cost(mcfg),
        cost_unit=units.name, base_cost=base_cost(mcfg, units),
        data=R.data_fingerprint(task), versions=versions(), command=sys.argv,
    ).to_dict())
