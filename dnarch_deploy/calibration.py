"""BatchNorm population statistics for the final architecture (export's stage 1; the search
scores its result with them too, so the test metric it reports is the shipped network's).

The search normalises with batch statistics (paper appendix E), so the running buffers mean nothing
for the network the masks describe at the end. Calibration sets, for every Norm in use, the exact
mean and biased variance (float64, over all calibration samples and positions) of the input that
Norm sees in the deployed network: the encoder norm first, then each block's norm with everything
before it already calibrated, one pass over the batches per norm (the forward pass stops at the
norm being calibrated). The encoder norm sees the stream ``[:, :plan.stream]``; block b's norm sees
``[:, :n_in]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from .model import DNArch
from .norm import Norm
from .progress import bar

SAMPLES = 1024  # training inputs the statistics are taken over (the first ones)
BATCH = 64  # calibration batch size (moments merge in float64: it changes memory, not results)


class _Stop(Exception):
    """Raised by the hook once the norm being calibrated has seen its input."""


class RunningMoments:
    """Per-channel count, mean and sum of squared deviations in float64 (Chan et al. merging)."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0, None, None

    def update(self, x: Tensor) -> None:
        x = x.detach().double().transpose(0, 1).reshape(x.shape[1], -1)  # (C, N * positions)
        n, mean = x.shape[1], x.mean(dim=1)
        m2 = ((x - mean[:, None]) ** 2).sum(dim=1)
        if self.mean is None:
            self.count, self.mean, self.m2 = n, mean, m2
            return
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * n / total)
        self.count = total

    @property
    def variance(self) -> Tensor:
        """Biased (population) variance, as BatchNorm uses to normalise."""
        return self.m2 / self.count


def norms_in_use(model: DNArch) -> list[Norm]:
    """The encoder norm, then the norm of every block the plan keeps, in forward order."""
    with torch.no_grad():
        plan = model.plan()
    return [model.enc_norm] + [model.blocks[p.index].norm for p in plan.blocks]


@torch.no_grad()
def input_moments(model: DNArch, norm: Norm, batches: Sequence[Tensor]) -> RunningMoments:
    """Moments of the input ``norm`` receives in ``model.eval()`` over ``batches``."""
    moments = RunningMoments()

    def hook(module, args):
        moments.update(args[0])
        raise _Stop

    handle = norm.register_forward_pre_hook(hook)
    try:
        for x in batches:
            try:
                model(x)
            except _Stop:
                pass
    finally:
        handle.remove()
    return moments


@torch.no_grad()
def calibrate(model: DNArch, batches: Iterable[Tensor], show_progress: bool = True) -> DNArch:
    """Set every Norm in use to the population statistics of ``batches``; returns the model in
    eval mode with ``calibrated`` True on those norms."""
    batches = list(batches)
    if not batches:
        raise ValueError("calibration needs at least one batch")
    model.eval()
    norms = norms_in_use(model)
    for norm in norms:  # statistics of uncalibrated norms must not leak into later ones
        norm.calibrated.fill_(False)
    for norm in bar(norms, desc="calibrate BatchNorm") if show_progress else norms:
        moments = input_moments(model, norm, batches)
        n = moments.mean.numel()
        norm.running_mean[:n] = moments.mean.to(norm.running_mean.dtype)
        norm.running_var[:n] = moments.variance.to(norm.running_var.dtype)
        norm.calibrated.fill_(True)
    return model


def task_batches(x, batch_size: int = BATCH, limit: int | None = SAMPLES) -> list[Tensor]:
    """Calibration batches from an array of raw inputs (a task's x_train)."""
    x = torch.as_tensor(x[:limit] if limit else x)
    return list(torch.split(x, batch_size))
