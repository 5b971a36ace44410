"""The search loop: train a DNArch model under a compute budget and write its run directory.

One epoch = shuffle (seeded per epoch) -> steps -> validation -> records -> checkpoint. Everything
a resumed run needs is in the checkpoint, so a run killed at any moment and resumed reaches the same
weights and metrics as an uninterrupted one.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from dnarch_deploy import DNArch, ModelConfig, base_cost, complexity_loss, describe, model_cost
from dnarch_deploy import rundir as R
from dnarch_deploy.cost import architecture_cost, architecture_params

from . import checkpoint, distributed
from .config import SearchConfig
from .records import append_jsonl, write_json


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite (search.run says what is kept)."""


@dataclass
class Batches:
    """Tensors of one split, on the training device."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return self.x.shape[0]


def model_config(cfg: SearchConfig, task) -> ModelConfig:
    dense = task.kind == "dense"
    return ModelConfig(
        in_channels=cfg.embed_dim if task.tokens else task.in_channels,
        out_channels=task.out_channels,
        input_size=tuple(task.spatial),
        dense=dense,
        vocab_size=task.vocab_size if task.tokens else 0,
        depth=cfg.depth,
        width=cfg.width,
        learn=cfg.learn,
        dropout=cfg.dropout,
        omega_0=cfg.omega_0,
        tau_resolution=cfg.tau_resolution,
        tau_width=cfg.tau_width,
        tau_depth=cfg.tau_depth,
        input_mean=[] if task.tokens else [float(v) for v in task.x_mean],
        input_std=[] if task.tokens else [float(v) for v in task.x_std],
        output_mean=[float(v) for v in task.y_mean] if dense else [],
        output_std=[float(v) for v in task.y_std] if dense else [],
    )


def objective(model: DNArch, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy for classification; MSE in units of the target's std for dense tasks."""
    if model.config.dense:
        std = model.output_std.view(1, -1, *([1] * (y.dim() - 2)))
        return (((out.float() - y) / std) ** 2).mean()
    return F.cross_entropy(out.float(), y)


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


def make_scheduler(opt, cfg: SearchConfig, steps_per_epoch: int):
    """Linear warm-up then cosine to zero, stepped every optimiser step."""
    warmup = cfg.warmup_epochs * steps_per_epoch
    total = max(cfg.epochs * steps_per_epoch, 1)

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
def complexity_ratio(model: DNArch, target: float) -> float:
    return float(model_cost(model)["total"]) / target


def _is_better(value: float, fits: bool, best: float | None, best_fits: bool,
               higher: bool) -> bool:
    """Is this epoch the new result? An epoch whose network fits the budget beats one that does
    not; among equals the better validation metric wins (ties: the later epoch)."""
    if best is None or fits != best_fits:
        return best is None or fits
    return value >= best if higher else value <= best


def train(cfg: SearchConfig, run_dir: Path, task, resume: bool = False) -> dict:
    """Run (or continue) the search; returns the summary. Only rank 0 writes files."""
    flush_denormals()
    world = distributed.World.from_env()
    device = torch.device(distributed.pick_device(cfg.device, world))
    is_writer = world.rank == 0

    torch.manual_seed(cfg.seed)
    mcfg = model_config(cfg, task)
    model = DNArch(mcfg).to(device)
    if world.size > 1:
        distributed.sync_batchnorm(model)
    target = cfg.budget * base_cost(mcfg)

    def tensors(x, y) -> Batches:
        y_dtype = torch.long if task.kind == "classification" else torch.float32
        x_dtype = torch.long if task.tokens else torch.float32
        return Batches(torch.as_tensor(x, dtype=x_dtype, device=device),
                       torch.as_tensor(y, dtype=y_dtype, device=device))

    train_set = tensors(task.x_train, task.y_train)
    val_set = tensors(task.x_val, task.y_val)
    test_set = tensors(task.x_test, task.y_test)
    if cfg.batch_size % world.size:
        raise ValueError(f"--batch-size {cfg.batch_size} must be divisible by the number of "
                         f"processes ({world.size})")
    # full batches only, so every step of every rank sees the same number of samples
    steps_per_epoch = max(len(train_set) // cfg.batch_size, 1)
    batch = min(cfg.batch_size, len(train_set))
    local = batch // world.size

    opt = make_optimizer(model, cfg)
    sched = make_scheduler(opt, cfg, steps_per_epoch)
    start_epoch, step, best, best_epoch, best_fits, wall = 0, 0, None, -1, False, 0.0
    if resume:
        state = checkpoint.load_last(run_dir, model, opt, sched)
        start_epoch, step = state["epoch"] + 1, state["step"]
        best, best_epoch, wall = state["best"], state["best_epoch"], state["wall_seconds"]
        best_fits = state["best_fits"]
        if is_writer:
            checkpoint.truncate_records(run_dir, state["epoch"])
    higher = task.higher_is_better
    amp = device.type == "cuda" and cfg.amp

    bar = tqdm(total=cfg.epochs * steps_per_epoch, initial=start_epoch * steps_per_epoch,
               disable=not is_writer or bool(os.environ.get("CI")), desc="search", unit="step",
               dynamic_ncols=True)
    for epoch in range(start_epoch, cfg.epochs):
        t0 = time.perf_counter()
        model.train()
        g = torch.Generator().manual_seed(cfg.seed * 100003 + epoch)
        order = torch.randperm(len(train_set), generator=g).to(device)
        sums = {"loss": 0.0, "loss_obj": 0.0, "loss_comp": 0.0, "complexity_ratio": 0.0}
        for i in range(steps_per_epoch):
            idx = order[i * batch : (i + 1) * batch][world.rank * local : (world.rank + 1) * local]
            x, y = train_set.x[idx], train_set.y[idx]
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                plan = model.plan()
                out = model.run(x, plan)
            loss_obj = objective(model, out, y)
            cost = model_cost(model, plan)["total"]
            ratio, loss_comp = cost / target, complexity_loss(cost, target)
            loss = loss_obj + cfg.lam * loss_comp
            if not torch.isfinite(loss):
                raise TrainingDiverged(
                    f"loss became {float(loss)} at epoch {epoch}, step {step} "
                    f"(objective {float(loss_obj)}, complexity {float(loss_comp)}): try a lower "
                    f"--lr than {cfg.lr:g}")
            opt.zero_grad()
            loss.backward()
            distributed.average_gradients(model, world)
            opt.step()
            sched.step()
            model.clamp_masks_()
            step += 1
            logged = distributed.mean(torch.stack([loss, loss_obj, loss_comp, ratio]).detach(),
                                      world)  # the global batch's figures, not this rank's
            for k, v in zip(sums, logged.tolist()):
                sums[k] += v
            bar.update(1)
            bar.set_postfix(loss=f"{logged[0]:.3f}", ratio=f"{logged[3]:.3f}")
        train_row = {k: v / steps_per_epoch for k, v in sums.items()}
        wall += time.perf_counter() - t0

        metric = None
        if is_writer:
            val_loss, metric = evaluate(model, val_set, task, cfg.eval_batch_size)
            arch = describe(model, epoch=epoch)
            ratio_now = complexity_ratio(model, target)
            rows = [
                {"step": step, "epoch": epoch, "split": "train", **train_row,
                 "lr": sched.get_last_lr()[0], "seconds": wall},
                {"step": step, "epoch": epoch, "split": "val", "loss": val_loss,
                 "loss_obj": val_loss, "complexity_ratio": ratio_now, task.metric_name: metric,
                 "metric": metric, "seconds": wall},
            ]
            fits = ratio_now <= 1.0 + cfg.budget_tolerance
            if _is_better(metric, fits, best, best_fits, higher):
                best, best_epoch, best_fits = metric, epoch, fits
                checkpoint.save_weights(model, run_dir / R.BEST_WEIGHTS)
            for row in rows:
                append_jsonl(run_dir / R.METRICS, row)
            append_jsonl(run_dir / R.ARCHITECTURES, arch.to_dict())
            checkpoint.save_last(run_dir, model, opt, sched, {
                "epoch": epoch, "step": step, "best": best, "best_epoch": best_epoch,
                "best_fits": best_fits, "wall_seconds": wall})
            bar.set_postfix(loss=f"{train_row['loss']:.3f}", val=f"{metric:.3f}",
                            ratio=f"{ratio_now:.3f}")
        distributed.barrier(world)
    bar.close()

    summary = None
    if is_writer:
        summary = finish(cfg, run_dir, task, model, test_set, target, best_epoch, best_fits, wall)
    distributed.barrier(world)
    return summary


def finish(cfg, run_dir: Path, task, model: DNArch, test_set: Batches, target: float,
           best_epoch: int, within_budget: bool, wall: float) -> dict:
    """Evaluate the best validation epoch on the test split; write architecture.json and
    summary.json (the run's result: weights, architecture and metrics of that epoch)."""
    checkpoint.load_weights_into(model, run_dir / R.BEST_WEIGHTS)
    arch = describe(model, epoch=best_epoch)
    test_loss, test_metric = evaluate(model, test_set, task, cfg.eval_batch_size)
    ratio = complexity_ratio(model, target)
    arch.save(run_dir / R.ARCHITECTURE)
    summary = {
        "task": cfg.task, "learn": model.config.learn, "metric_name": task.metric_name,
        "test_metric": test_metric, "test_loss": test_loss, "best_epoch": best_epoch,
        "complexity_ratio": ratio, "budget": cfg.budget, "target_macs": target,
        "within_budget": within_budget,
        "params": architecture_params(arch), "search_params": sum(
            p.numel() for p in model.parameters()),
        "macs": architecture_cost(arch), "wall_seconds": wall, "epochs": cfg.epochs,
        "higher_is_better": task.higher_is_better,
    }
    append_jsonl(run_dir / R.METRICS, {"step": None, "epoch": best_epoch, "split": "test",
                                       "loss": test_loss, task.metric_name: test_metric,
                                       "metric": test_metric, "complexity_ratio": ratio,
                                       "seconds": wall})
    write_json(run_dir / R.SUMMARY, summary)
    return summary


def write_config(cfg: SearchConfig, run_dir: Path, task, device: str, world_size: int) -> None:
    mcfg = model_config(cfg, task)
    write_json(run_dir / R.CONFIG, {
        "schema": R.RUN_SCHEMA, "version": R.RUN_VERSION, "task": cfg.task,
        "task_options": cfg.task_options(), "seed": cfg.seed, "model": mcfg.to_dict(),
        "train": cfg.to_dict(), "device": device, "world_size": world_size,
        "base_macs": base_cost(mcfg), "target_macs": cfg.budget * base_cost(mcfg),
        "data": R.data_fingerprint(task), "versions": versions(), "command": sys.argv,
    })
