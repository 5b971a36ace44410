"""Stage 4: lower the static module to fixed-size operators.

Each block's spectral down/up-sampling becomes per-axis MatMuls (:mod:`export.resampling`) and
its depthwise convolution one of the tactics (:mod:`export.tactics`); or, for 1-D networks whose
blocks all crop, the stream is carried as its spectrum (:mod:`export.spectrum`). Which ones is
:mod:`export.policy`'s choice, :func:`lower` applies it.
"""

from __future__ import annotations

import copy

from torch import nn

from .resampling import lower_resample
from .spectrum import SPECTRUM, carry_spectrum, why_not
from .static import StaticBlock, StaticNet
from .tactics import make_conv


def block_resolution(block: StaticBlock) -> tuple[int, ...]:
    """The resolution at which a block convolves, per axis."""
    return tuple(block.bias1.shape[1:])


def resample_axes(static: StaticNet) -> list[dict[str, list[tuple[int, int, int]]]]:
    """Per block: ``down`` and ``up``, per resampled axis (n, size, dim)."""
    input_size = tuple(static.spec["spatial"])
    axes = []
    for block in static.blocks:
        resolution = block_resolution(block)
        axes.append({
            "down": [(input_size[m.dim], m.size, m.dim) for m in block.down],
            "up": [(resolution[m.dim], m.size, m.dim) for m in block.up],
        })
    return axes


def lower(static: StaticNet, tactics: list[str],
          resample: list[dict[str, list[str]]] | None = None) -> StaticNet:
    """A copy of ``static`` with each convolution as its tactic and every resampling as its
    resampling tactic (per block ``{"down": [...], "up": [...]}``, one per axis; None: by cost,
    :func:`export.policy.resample_tactics_by_cost`)."""
    if len(tactics) != len(static.blocks):
        raise ValueError(f"{len(tactics)} tactics for {len(static.blocks)} blocks")
    if resample is None:
        from .policy import resample_tactics_by_cost  # the policy builds on this module

        resample = resample_tactics_by_cost(static)
    if len(resample) != len(static.blocks):
        raise ValueError(f"{len(resample)} resampling tactics for {len(static.blocks)} blocks")
    spectral = [SPECTRUM in t for rs in resample for t in rs.values()]
    reason = why_not(static) if any(spectral) else None
    if reason is not None:
        raise ValueError(f"the stream cannot be carried as its spectrum: {reason}")
    if any(spectral) and not all(spectral):
        raise ValueError(f"{SPECTRUM!r} resampling is for every axis of every block or none")
    lowered = copy.deepcopy(static)
    input_size = tuple(static.spec["spatial"])
    for block, tactic, rs in zip(lowered.blocks, tactics, resample):
        resolution = block_resolution(block)
        if not any(spectral):
            down = zip(block.down, rs["down"], strict=True)
            up = zip(block.up, rs["up"], strict=True)
            block.down = nn.Sequential(*(lower_resample(m, input_size[m.dim], t) for m, t in down))
            block.up = nn.Sequential(*(lower_resample(m, resolution[m.dim], t) for m, t in up))
        block.conv = make_conv(tactic, block.conv.kernel, resolution, block.conv.period)
        if tactic == "direct" and block.conv.weight.shape[0] > block.n_in:
            block.conv.trim = False  # its zero filters fed from the stream, read by zero weights
            block.read_wider(block.conv.weight.shape[0])
        block.tactic = tactic
        block.resample_tactics = {k: list(v) for k, v in rs.items()}
    if any(spectral):
        lowered = carry_spectrum(lowered, dtype=static.decoder.weight.dtype)
    return lowered.eval()


def spectrum_resample(static: StaticNet) -> list[dict[str, list[str]]]:
    """The resampling tactics that carry the stream as its spectrum (:mod:`export.spectrum`)."""
    return [{"down": [SPECTRUM], "up": [SPECTRUM]} for _ in static.blocks]
