"""The settings the search resolves per task: what is learned on this input, the input
normalisation, the frequency prior, label smoothing and augmentation left to 'auto', and the
model's configuration that follows (docs/search.md gives each rule's reason)."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from dnarch_deploy import ModelConfig
from dnarch_deploy.model import canonical_learn

from .config import (
    EMBED_DIM,
    ENERGY_SHARE,
    MIN_OMEGA_0,
    SHORT_POSITIONS,
    SHORT_SMOOTHING,
    SMALL_SET_JITTER,
    SMALL_SET_SAMPLES,
    SMALL_SET_SHIFT,
    SearchConfig,
)


def model_config(cfg: SearchConfig, task) -> ModelConfig:
    """The model's configuration: the fields that follow from the task, and every other field
    SearchConfig shares with ModelConfig (depth, width, learn, the temperatures...) as given."""
    dense = task.kind == "dense"
    from_task = dict(
        in_channels=EMBED_DIM if task.tokens else task.in_channels,
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
    flags resolved, and zero where the task's kind takes none (shifts and jitter touch
    classification signals and images only)."""
    signals = task.kind == "classification" and not task.tokens
    return {"shift": small_set_share(cfg.shift, SMALL_SET_SHIFT, task) if signals else 0.0,
            "jitter": small_set_share(cfg.jitter, SMALL_SET_JITTER, task) if signals else 0.0,
            "label_smoothing": label_smoothing(cfg, task)}


def smoothed_entropy(smoothing: float, classes: int) -> float:
    """The least cross-entropy against targets smoothed by ``smoothing`` over ``classes``: their
    entropy, with 1 - e + e / K on the label and e / K on each other class (0 without smoothing)."""
    if smoothing == 0:
        return 0.0
    high, low = 1 - smoothing + smoothing / classes, smoothing / classes
    return -(high * math.log(high) + (classes - 1) * low * math.log(low))
