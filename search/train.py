"""The search loop: train a DNArch model under a compute budget and write its run directory.

One round = optimiser steps (config.Length: --steps, or --epochs passes) -> validation -> records
-> checkpoint; the records call a round an ``epoch``. The batches are a function of the step (one
seeded shuffle per pass over the training split) and everything else a resumed run needs is in the
checkpoint, so a run killed at any moment and resumed reaches the same weights and metrics as an
uninterrupted one.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from dnarch_deploy import (
    DNArch,
    ModelConfig,
    base_cost,
    compare_with_base,
    complexity_loss,
    describe,
    model_cost,
)
from dnarch_deploy import rundir as R
from dnarch_deploy.calibration import calibrate, task_batches
from dnarch_deploy.cost import architecture_cost, architecture_params, limit_loss, model_params
from dnarch_deploy.model import canonical_learn, kernel_energy

from . import checkpoint, distributed
from .augment import jitter, mixup, random_shift
from .config import (
    ENERGY_SHARE,
    MIN_OMEGA_0,
    SHORT_POSITIONS,
    SHORT_SMOOTHING,
    SMALL_SET_JITTER,
    SMALL_SET_SAMPLES,
    SMALL_SET_SHIFT,
    SearchConfig,
    training_length,
)
from .records import append_jsonl, write_json


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite (search.run says what is kept)."""


# A run is stalled when, after STALL_CHECK of its steps, its training objective is still above
# STALL_SHARE of the first round's (both counted above the objective's floor: 0, or with label
# smoothing the smoothed targets' entropy): an initialisation that never tells some classes apart
# (a loss stuck at ln 2 / 2). It restarts from a new initialisation (--restarts times at most). Runs
# shorter than STALL_MIN_STEPS are not judged: they may simply not have had the time, nor are runs
# with --mixup, whose blended targets keep the loss of a well-fitting network far above zero
# (the long sets' runs at --mixup 0.4 all read as stalled).
STALL_CHECK = 0.3
STALL_SHARE = 0.5
STALL_MIN_STEPS = 300
RESTART_SEED = 1_000_003  # initialisation seed of attempt k: seed + k x this
HELD_OUT_SEED = 7919  # the validation order of --mask-data val: not the training split's

# The result rule compares rounds by their validation metric averaged over the last RESULT_WINDOW
# rounds (fewer at the start). On a 7- to 40-sample validation split one round's metric jumps by a
# sample or two from round to round, and one lucky round set the bar no later round could reach
# (OSULeaf, seed 0: 0.90 at round 12 of 50 among 0.75-0.82; test 0.694, the last round 0.785).
RESULT_WINDOW = 5


def stalled(loss: float, first_loss: float, floor: float = 0.0) -> bool:
    """The stall test (STALL_CHECK): still above STALL_SHARE of the first round's loss, both
    counted above ``floor``, the least value the training objective can take."""
    return loss - floor > STALL_SHARE * (first_loss - floor)


class Stalled(RuntimeError):
    """The training objective stalled (see STALL_CHECK); ``record`` says where and how high."""

    def __init__(self, record: dict):
        floor = record.get("floor", 0.0)
        above = f" (counted above the smoothed targets' entropy {floor:.3f})" if floor else ""
        super().__init__(f"training loss {record['loss']:.3f} after {record['step']} steps is "
                         f"above {STALL_SHARE} x the first round's {record['first_loss']:.3f}"
                         f"{above}")
        self.record = record


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


def model_config(cfg: SearchConfig, task) -> ModelConfig:
    """The model's configuration: the fields that follow from the task, and every other field
    SearchConfig shares with ModelConfig (depth, width, learn, the temperatures...) as given."""
    dense = task.kind == "dense"
    from_task = dict(
        in_channels=cfg.embed_dim if task.tokens else task.in_channels,
        out_channels=task.out_channels,
        input_size=tuple(task.spatial),
        dense=dense,
        vocab_size=task.vocab_size if task.tokens else 0,
        input_norm=input_norm(cfg, task),  # --input-norm, 'auto' resolved
        omega_0=frequency_prior(cfg, task),  # --omega-0, 0 resolved
        input_mean=[] if task.tokens else [float(v) for v in task.x_mean],
        input_std=[] if task.tokens else [float(v) for v in task.x_std],
        output_mean=[float(v) for v in task.y_mean] if dense else [],
        output_std=[float(v) for v in task.y_std] if dense else [],
    )
    flags = {f.name for f in fields(SearchConfig)} - from_task.keys()
    shared = {f.name: getattr(cfg, f.name) for f in fields(ModelConfig) if f.name in flags}
    shared["learn"] = learned(cfg, task.spatial)
    return ModelConfig(**shared, **from_task)


def learned(cfg: SearchConfig, spatial: tuple[int, ...]) -> str:
    """--learn as the model learns it on an input of size ``spatial``: without R where
    ``no_resolution`` says why. A ValueError when nothing is left."""
    learn = canonical_learn(cfg.learn)
    why = no_resolution(cfg, spatial)
    if "R" not in learn or why is None:
        return learn
    if learn == "R":
        raise ValueError(f"--learn R: {why}, so the resolution is not learned and nothing is "
                         f"left to search")
    return learn.replace("R", "")


def no_resolution(cfg: SearchConfig, spatial: tuple[int, ...]) -> str | None:
    """Why the resolution is not learned on an input of size ``spatial`` at this budget; None
    where it is. With --lam 0 nothing holds the search to its budget, so it keeps R."""
    if max(spatial) < cfg.crop_min_length:
        return (f"every axis of the input ({'x'.join(map(str, spatial))}) is shorter than "
                f"--crop-min-length {cfg.crop_min_length}")
    if cfg.cost == "macs" and cfg.lam > 0 and cfg.budget < cfg.crop_min_budget:
        return (f"--budget {cfg.budget:g} is under --crop-min-budget {cfg.crop_min_budget:g}, "
                f"where MACs underprice a crop's resampling (--cost latency prices it)")
    return None


def learns_as_saved(cfg: SearchConfig, model: dict) -> bool:
    """Whether ``cfg`` learns what a saved run's model (config.json's "model") learned, on the
    input size that run recorded: then --learn, --crop-min-length and --crop-min-budget, which
    only choose what is learned, agree with the run whatever their values."""
    try:
        return learned(cfg, tuple(model["input_size"])) == model["learn"]
    except (ValueError, KeyError, TypeError):  # nothing learnable, or a damaged config.json
        return False


# --input-norm auto standardises each sample when, in some input channel, the 90th percentile of
# the training samples' standard deviations is over SCALE_SPREAD x the 10th: their scales then
# differ by orders of magnitude (PLAID: 1e5), and with the data set's statistics most samples
# reach the network as near-zero signals. Below it the scale carries information to keep
# (BasicMotions: 54, JapaneseVowels: 4, z-normalised UCR sets and images: 1-1.5).
SCALE_SPREAD = 100.0
FREQUENCY_SAMPLES = 2000  # training samples whose spectra set --omega-0 0 (the first ones)


def input_norm(cfg: SearchConfig, task) -> str:
    """--input-norm resolved for the task ('auto': see SCALE_SPREAD; classification only, since a
    dense target's scale follows its input's)."""
    if cfg.input_norm != "auto":
        return cfg.input_norm
    if task.kind != "classification" or task.tokens:
        return "dataset"
    x = task.x_train.reshape(*task.x_train.shape[:2], -1)
    low, high = np.percentile(x.std(axis=-1), [10, 90], axis=0)  # (C,) each
    return "sample" if np.any(high > SCALE_SPREAD * np.maximum(low, 1e-30)) else "dataset"


def energy_frequency(x: np.ndarray, share: float) -> int:
    """The frequency, in cycles over the axis, below which ``share`` of the energy of x (N, C, *S)
    lies, the highest over the spatial axes. Each sample's channel has its mean removed and its
    power spectrum normalised to sum 1 before they are averaged, so every sample counts alike.
    Constant signals carry no energy: 0 when every one is."""
    highest = 0
    for axis in range(2, x.ndim):
        signals = np.moveaxis(x, axis, -1).astype(np.float64)
        power = np.abs(np.fft.rfft(signals - signals.mean(-1, keepdims=True), axis=-1)) ** 2
        power = power / np.maximum(power.sum(-1, keepdims=True), 1e-30)
        cumulative = np.cumsum(power.reshape(-1, power.shape[-1]).mean(0))
        if cumulative[-1] > 0:
            found = np.searchsorted(cumulative / cumulative[-1], share)
            highest = max(highest, int(found))
    return highest


def frequency_prior(cfg: SearchConfig, task) -> float:
    """--omega-0 resolved for the task (0: see config.ENERGY_SHARE; token inputs have no
    spectrum and get MIN_OMEGA_0)."""
    if cfg.omega_0:
        return cfg.omega_0
    if task.tokens:
        return MIN_OMEGA_0
    cycles = energy_frequency(task.x_train[:FREQUENCY_SAMPLES], ENERGY_SHARE)
    return max(MIN_OMEGA_0, cycles / 4)  # 2 std of omega_0 per unit, over the 2 units of [-1, 1]


def label_smoothing(cfg: SearchConfig, task) -> float:
    """--label-smoothing resolved for the task (left out: see config.SHORT_POSITIONS)."""
    if cfg.label_smoothing is not None:
        return cfg.label_smoothing
    if task.kind != "classification" or task.tokens:
        return 0.0
    return SHORT_SMOOTHING if math.prod(task.spatial) <= SHORT_POSITIONS else 0.0


def small_set_share(given: float | None, default: float, task) -> float:
    """A per-task augmentation flag resolved: as given, else ``default`` on training splits a
    network memorises (fewer than config.SMALL_SET_SAMPLES samples) and 0 on larger ones."""
    if given is not None:
        return given
    return default if len(task.x_train) < SMALL_SET_SAMPLES else 0.0


def in_effect(cfg: SearchConfig, task) -> dict[str, float]:
    """The augmentation and smoothing this task trains with (config.json's ``in_effect``): the
    flags resolved, and zero where the task's kind takes none (shifts, jitter and mixing touch
    classification signals and images only)."""
    signals = task.kind == "classification" and not task.tokens
    return {"shift": small_set_share(cfg.shift, SMALL_SET_SHIFT, task) if signals else 0.0,
            "jitter": small_set_share(cfg.jitter, SMALL_SET_JITTER, task) if signals else 0.0,
            "mixup": cfg.mixup if signals else 0.0,
            "label_smoothing": label_smoothing(cfg, task)}


def smoothed_entropy(smoothing: float, classes: int) -> float:
    """The least cross-entropy against targets smoothed by ``smoothing`` over ``classes``: their
    entropy, with 1 - e + e / K on the label and e / K on each other class (0 without smoothing)."""
    if smoothing == 0:
        return 0.0
    high, low = 1 - smoothing + smoothing / classes, smoothing / classes
    return -(high * math.log(high) + (classes - 1) * low * math.log(low))


def objective(model: DNArch, out: torch.Tensor, y: torch.Tensor,
              smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy for classification (against targets smoothed by ``smoothing``; ``y``
    labels or, mixed, target probabilities); MSE in units of the target's std for dense tasks."""
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


def drop_gradients(params: list[torch.nn.Parameter]) -> None:
    """Leave ``params`` out of the next optimiser step (AdamW skips a parameter without a
    gradient: a zero one would still move it by its moments and decay it)."""
    for p in params:
        p.grad = None


def held_out_batch(val_set: Batches, batch: int, step: int, seed: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The validation batch on which ``--mask-data val`` steps the masks at ``step``: the whole
    split when it is no larger than a batch, else the step's batch of a reshuffle per pass (a
    function of the step alone, so a resumed run sees the same ones)."""
    n = len(val_set)
    if n <= batch:
        return val_set.x, val_set.y
    per_pass = n // batch
    data_epoch, i = divmod(step, per_pass)
    g = torch.Generator().manual_seed(seed * 100003 + HELD_OUT_SEED + data_epoch)
    idx = torch.randperm(n, generator=g)[i * batch : (i + 1) * batch].to(val_set.x.device)
    return val_set.x[idx], val_set.y[idx]


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
    """The parameters the search trains, masks included: a block's first-mixing bias is not one
    when the block's norm follows that mixing (``block_norm`` "mix" freezes it)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def within_params(arch, cfg: SearchConfig) -> bool:
    """--max-params met by a round's network (always, without a limit)."""
    return not cfg.max_params or architecture_params(arch) <= cfg.max_params


def within_budget(cfg: SearchConfig, ratio: float, arch) -> bool:
    """A round's network costs at most (1 + --budget-tolerance) x C_target and meets
    --max-params."""
    return ratio <= 1.0 + cfg.budget_tolerance and within_params(arch, cfg)


def result_fits(cfg: SearchConfig, ratio: float, arch) -> bool:
    """Does a round count as fitting for the result rule (:func:`is_result`)? Within the budget;
    with --lam 0 nothing holds the search to a budget (the paper's DNArch(K,R) without one), so
    any round within --max-params: held to the initial network's cost, the rule would pick an
    early round from before the first crop (OSULeaf, seed 0: epoch 7 of 50)."""
    return within_budget(cfg, ratio, arch) or (cfg.lam == 0 and within_params(arch, cfg))


def smoothed(history: list[float], window: int = RESULT_WINDOW) -> float:
    """The mean of the last ``window`` validation metrics of a run (all of them when fewer)."""
    recent = history[-window:]
    return sum(recent) / len(recent)


def is_result(metric: float, fits: bool, best: tuple | None, higher: bool,
              standard_error) -> tuple[bool, tuple | None]:
    """Is this round the new result, and the new ``best`` (top metric, fits)? A round whose
    network fits the budget beats one that does not. Among rounds alike in that, the result is
    the latest whose ``metric`` (the validation metric, :func:`smoothed` over the last rounds) is
    within one standard error of the top one (a one-standard-error rule, as in CART's pruning,
    preferring the longer-trained round). On a 7- or 10-sample validation split one sample is
    10-15 % of accuracy, so "the best round" is often an early round that won by chance.
    ``standard_error(value)`` is the metric's standard error on the validation split; with 0 the
    latest of the tied top rounds wins."""
    if best is None or fits != best[1]:
        return (True, (metric, fits)) if best is None or fits else (False, best)
    top = max(best[0], metric) if higher else min(best[0], metric)
    slack = standard_error(top)
    close = metric >= top - slack if higher else metric <= top + slack
    return close, (top, fits)


def complexity_weight(cfg: SearchConfig, step: int, steps: int) -> float:
    """lambda at this step: --lam, reached linearly over the first --lam-ramp share of the
    steps (paper §5: start low, increase)."""
    ramp = cfg.lam_ramp * steps
    return cfg.lam if step >= ramp else cfg.lam * step / ramp


def scheduled_target(cfg: SearchConfig, start: float, target: float, step: int,
                     steps: int) -> float:
    """C_target at this step: from ``start`` (the initial network's cost) to ``target`` (the
    budget's) geometrically over the first --budget-ramp share of the steps, then ``target``. A
    budget far below the initial cost otherwise makes L_comp's first gradients so large that
    every mask is slammed to its minimum before the task loss shapes any of them."""
    ramp = cfg.budget_ramp * steps
    if step >= ramp:
        return target
    return target * (start / target) ** (1.0 - step / ramp)


def latency_check_steps(cfg: SearchConfig, learn: str, steps: int) -> list[int]:
    """The steps after whose round a ``--cost latency`` search times the network its masks
    describe beside the base and re-prices the base in that network's time
    (:func:`base_in_found_time`): --latency-checks of them, evenly from the end of the budget's
    ramp (before it the target still moves) to the last step. None where no budget is held to a
    measured base: --cost macs, --lam 0, the base itself (--learn none), or a base priced by
    another machine's table (no --base-ms)."""
    if (cfg.cost != "latency" or cfg.lam == 0 or not cfg.base_ms or not cfg.latency_checks
            or canonical_learn(learn) == "none"):
        return []
    ramp = round(cfg.budget_ramp * steps)
    return [max(1, ramp + round(i * (steps - ramp) / cfg.latency_checks))
            for i in range(cfg.latency_checks)]


def base_in_found_time(cfg: SearchConfig, mcfg, model: DNArch, world) -> list[float]:
    """The base's milliseconds in the time of the network ``model``'s masks describe now, at
    every --latency-batch: rank 0 writes its weights to a temporary file and runs ``python -m
    export.base_latency --probe found`` on them (:func:`search.jobs.base_milliseconds`), and
    sends the result to the other ranks. A probe of the table's points puts the base in the
    table's time as those points drifted, and the found network's smaller operators drift
    otherwise (README "Budget honesty"); its own time over its predicted is the drift its budget
    meets. When the timing fails, a warning, and the base's time stays ``cfg.base_ms``."""
    import tempfile

    from .jobs import JobError, base_milliseconds

    timed = None
    if world.rank == 0:
        with tempfile.TemporaryDirectory(prefix="dnarch-probe-") as tmp:
            weights = Path(tmp) / "found.safetensors"
            checkpoint.save_weights(model, weights)
            try:
                timed = base_milliseconds(mcfg, cfg.latency_batch, cfg.latency_table, weights)
            except JobError as e:
                print(f"warning: {e}; the budget stays a share of the base's time as timed "
                      f"before ({', '.join(f'{ms:.4g}' for ms in cfg.base_ms)} ms)",
                      file=sys.stderr)
    return distributed.broadcast(timed, world) or list(cfg.base_ms)


def train(cfg: SearchConfig, run_dir: Path, task, resume: bool = False,
          restarts: list[dict] | None = None) -> dict:
    """Run (or continue) the search; returns the summary. Only rank 0 writes files. ``restarts``
    lists the stalled attempts before this one (raises Stalled when this one stalls too and
    --restarts allows another)."""
    flush_denormals()
    keep_freed_memory()
    world = distributed.World.from_env()
    device = torch.device(distributed.pick_device(cfg.device, world))
    is_writer = world.rank == 0
    restarts = list(restarts or [])

    torch.manual_seed(cfg.seed + RESTART_SEED * len(restarts))
    mcfg = model_config(cfg, task)
    model = DNArch(mcfg).to(device)
    if world.size > 1:
        distributed.sync_batchnorm(model)
    units = cfg.cost_units(mcfg)
    target = cfg.budget * base_cost(mcfg, units)
    with torch.no_grad():  # the masks' initial values are fixed: so is this, on resume too
        start = float(model_cost(model, units=units)["total"])

    train_set = split_tensors(task, "train", device)
    val_set = split_tensors(task, "val", device)
    test_set = split_tensors(task, "test", device)
    if cfg.batch_size % world.size:
        raise ValueError(f"--batch-size {cfg.batch_size} must be divisible by the number of "
                         f"processes ({world.size})")
    # full batches only, so every step of every rank sees the same number of samples
    length = training_length(cfg, len(train_set))
    batch = min(cfg.batch_size, len(train_set))
    local = batch // world.size

    opt = make_optimizer(model, cfg)
    held_out = cfg.mask_data == "val" and bool(model.mask_parameters())
    masks = model.mask_parameters()
    weights = [p for p in model.parameters() if all(p is not m for m in masks)]
    sched = make_scheduler(opt, cfg, length.steps)
    start_epoch, step, best, best_epoch, wall, first_loss = 0, 0, None, -1, 0.0, None
    history = []  # validation metrics of the rounds so far, for the result rule
    checks = latency_check_steps(cfg, mcfg.learn, length.steps)
    rechecked = []  # each latency check's step and the base's milliseconds it set
    if resume:
        state = checkpoint.load_last(run_dir, model, opt, sched)
        start_epoch, step = state["epoch"] + 1, state["step"]
        best_epoch, wall = state["best_epoch"], state["wall_seconds"]
        first_loss, restarts = state["first_loss"], state["restarts"]
        if state["best"] is not None:
            best = (state["best"], state["best_fits"])
        rechecked = state["latency_checks"]
        if rechecked:
            cfg = dataclasses.replace(cfg, base_ms=rechecked[-1]["base_ms"])
            units = cfg.cost_units(mcfg)
            target = cfg.budget * base_cost(mcfg, units)
        if is_writer:
            checkpoint.truncate_records(run_dir, state["epoch"])
            history = [r["metric"] for r in R.read_jsonl(run_dir / R.METRICS)
                       if r["split"] == "val"]
    higher = task.higher_is_better
    standard_error = functools.partial(task.standard_error, n=len(val_set))
    amp = device.type == "cuda" and cfg.amp
    effect = in_effect(cfg, task)
    shift, noise, mix = effect["shift"], effect["jitter"], effect["mixup"]
    smoothing = effect["label_smoothing"]
    floor = smoothed_entropy(smoothing, mcfg.out_channels)  # the least training objective

    def losses(x, y, smoothing, kernel_decay):
        """(loss, objective, complexity loss, cost / target) of one batch."""
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            plan = model.plan()
            kernels = model.kernels(plan)
            out = model.run(x, plan, kernels)
        loss_obj = objective(model, out, y, smoothing)
        cost = model_cost(model, plan, units)["total"]
        now = scheduled_target(cfg, start, target, step, length.steps)
        ratio, loss_comp = cost / target, complexity_loss(cost, now)
        if cfg.max_params:  # the second constraint, its own term beside the budget's
            loss_comp = loss_comp + limit_loss(model_params(model, plan), cfg.max_params)
        loss = loss_obj + complexity_weight(cfg, step, length.steps) * loss_comp
        if kernel_decay:
            loss = loss + kernel_decay * kernel_energy(kernels).to(loss.device)
        if not torch.isfinite(loss):
            raise TrainingDiverged(
                f"loss became {float(loss)} at epoch {epoch}, step {step} (objective "
                f"{float(loss_obj)}, complexity {float(loss_comp)}): try a lower "
                f"--lr than {cfg.lr:g}")
        return loss, loss_obj, loss_comp, ratio

    bar = tqdm(total=length.steps, initial=step,
               disable=not is_writer or bool(os.environ.get("CI")), desc="search", unit="step",
               dynamic_ncols=True)
    order, order_epoch = None, -1
    epoch = start_epoch - 1
    while step < length.steps:  # a round: up to per_round steps, then one validation
        epoch += 1
        t0 = time.perf_counter()
        model.train()
        sums = {"loss": 0.0, "loss_obj": 0.0, "loss_comp": 0.0, "complexity_ratio": 0.0}
        steps = range(step, min(step + length.per_round, length.steps))
        for _ in steps:
            # the batches are a function of the step alone (a reshuffle per pass), so a resumed
            # run sees the same ones
            data_epoch, i = divmod(step, length.steps_per_epoch)
            if data_epoch != order_epoch:
                g = torch.Generator().manual_seed(cfg.seed * 100003 + data_epoch)
                order = torch.randperm(len(train_set), generator=g).to(device)
                order_epoch = data_epoch
            idx = order[i * batch : (i + 1) * batch]
            x, y = train_set.x[idx], train_set.y[idx]
            if shift:  # drawn for the global batch on every rank, so N ranks shift as one does
                x = random_shift(x, shift)
            if noise:  # the same: one draw for the global batch
                x = jitter(x, noise)
            if mix:  # the same: one draw for the global batch
                x, y = mixup(x, y, mcfg.out_channels, mix)
            mine = slice(world.rank * local, (world.rank + 1) * local)
            x, y = x[mine], y[mine]
            loss, loss_obj, loss_comp, ratio = losses(x, y, smoothing, cfg.kernel_decay)
            opt.zero_grad()
            loss.backward()
            if held_out:  # the masks step on the validation batch below
                drop_gradients(masks)
            distributed.average_gradients(model, world)
            opt.step()
            if held_out:  # every rank takes the same batch: the average is its gradient
                opt.zero_grad()
                losses(*held_out_batch(val_set, batch, step, cfg.seed), 0.0, 0.0)[0].backward()
                drop_gradients(weights)
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
        train_row = {k: v / len(steps) for k, v in sums.items()}
        wall += time.perf_counter() - t0
        if epoch == 0:
            first_loss = train_row["loss_obj"]
        at_check = (epoch > 0 and length.steps >= STALL_MIN_STEPS and not mix
                    and steps.start < STALL_CHECK * length.steps <= steps.stop)
        if (at_check and len(restarts) < cfg.restarts
                and stalled(train_row["loss_obj"], first_loss, floor)):
            raise Stalled({"step": step, "loss": train_row["loss_obj"], "first_loss": first_loss,
                           "floor": floor, "seconds": wall})

        if any(steps.start < s <= steps.stop for s in checks):
            cfg = dataclasses.replace(cfg, base_ms=base_in_found_time(cfg, mcfg, model, world))
            units = cfg.cost_units(mcfg)
            target = cfg.budget * base_cost(mcfg, units)
            rechecked.append({"step": step, "base_ms": list(cfg.base_ms)})
            best = None  # the rounds before were judged against a base priced otherwise
        metric = None
        if is_writer:
            val_loss, metric = evaluate(model, val_set, task, cfg.eval_batch_size)
            arch = describe(model, epoch=epoch)
            ratio_now = complexity_ratio(model, target, units)
            rows = [
                {"step": step, "epoch": epoch, "split": "train", **train_row,
                 "lr": sched.get_last_lr()[0], "seconds": wall},
                {"step": step, "epoch": epoch, "split": "val", "loss": val_loss,
                 "loss_obj": val_loss, "complexity_ratio": ratio_now, task.metric_name: metric,
                 "metric": metric, "seconds": wall},
            ]
            history.append(metric)
            chosen, best = is_result(smoothed(history), result_fits(cfg, ratio_now, arch), best,
                                     higher, standard_error)
            if chosen:
                best_epoch = epoch
                checkpoint.save_weights(model, run_dir / R.BEST_WEIGHTS)
            for row in rows:
                append_jsonl(run_dir / R.METRICS, row)
            append_jsonl(run_dir / R.ARCHITECTURES, arch.to_dict())
            checkpoint.save_last(run_dir, model, opt, sched, {
                "epoch": epoch, "step": step, "best": best[0], "best_fits": best[1],
                "best_epoch": best_epoch, "wall_seconds": wall, "first_loss": first_loss,
                "restarts": restarts, "latency_checks": rechecked})
            bar.set_postfix(loss=f"{train_row['loss']:.3f}", val=f"{metric:.3f}",
                            ratio=f"{ratio_now:.3f}")
        distributed.barrier(world)
    bar.close()

    summary = None
    if is_writer:
        summary = finish(cfg, run_dir, task, model, test_set, target, best_epoch, wall, length,
                         restarts, rechecked)
    distributed.barrier(world)
    return summary


def train_with_restarts(cfg: SearchConfig, run_dir: Path, task) -> dict:
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


def finish(cfg, run_dir: Path, task, model: DNArch, test_set: Batches, target: float,
           best_epoch: int, wall: float, length, restarts, rechecked=()) -> dict:
    """Score the best validation epoch's network on the test split as export ships it; write
    architecture.json and summary.json (the run's result: weights, architecture and metrics of
    that epoch)."""
    checkpoint.load_weights_into(model, run_dir / R.BEST_WEIGHTS)
    arch = describe(model, epoch=best_epoch)
    # the test metric is the shipped network's; beside it, the one the search's own evaluation
    # gives (BatchNorm on each test batch's statistics, as validation is scored)
    test_loss, test_metric = evaluate_shipped(model, test_set, task, cfg.eval_batch_size)
    batch_loss, batch_metric = evaluate(model, test_set, task, cfg.eval_batch_size)
    units = cfg.cost_units(model.config)
    ratio = complexity_ratio(model, target, units)
    arch.save(run_dir / R.ARCHITECTURE)
    summary = {
        "task": cfg.task, "learn": model.config.learn, "metric_name": task.metric_name,
        "test_metric": test_metric, "test_loss": test_loss,
        "test_metric_batch_statistics": batch_metric, "test_loss_batch_statistics": batch_loss,
        "best_epoch": best_epoch,
        "complexity_ratio": ratio, "budget": cfg.budget, "cost_unit": units.name,
        "target": target, "target_macs": cfg.budget * base_cost(model.config),
        "within_budget": within_budget(cfg, ratio, arch), "max_params": cfg.max_params,
        "params": architecture_params(arch), "search_params": trained_params(model),
        "macs": architecture_cost(arch), "wall_seconds": wall, "steps": length.steps,
        "restarts": restarts, "base_ms": list(cfg.base_ms), "latency_checks": list(rechecked),
        "higher_is_better": task.higher_is_better,
        "vs_base": compare_with_base(arch, model.config.depth, model.config.width),
    }
    append_jsonl(run_dir / R.METRICS, {"step": None, "epoch": best_epoch, "split": "test",
                                       "loss": test_loss, task.metric_name: test_metric,
                                       "metric": test_metric, "complexity_ratio": ratio,
                                       "metric_batch_statistics": batch_metric,
                                       "seconds": wall})
    write_json(run_dir / R.SUMMARY, summary)
    return summary


def write_config(cfg: SearchConfig, run_dir: Path, task, device: str, world_size: int) -> None:
    mcfg = model_config(cfg, task)
    units = cfg.cost_units(mcfg)
    write_json(run_dir / R.CONFIG, {
        "schema": R.RUN_SCHEMA, "version": R.RUN_VERSION, "task": cfg.task,
        "task_options": cfg.task_options(), "seed": cfg.seed, "model": mcfg.to_dict(),
        "train": cfg.to_dict(), "in_effect": in_effect(cfg, task),
        "device": device, "world_size": world_size,
        "base_macs": base_cost(mcfg), "target_macs": cfg.budget * base_cost(mcfg),
        "cost_unit": units.name, "base_cost": base_cost(mcfg, units),
        "data": R.data_fingerprint(task), "versions": versions(), "command": sys.argv,
    })
