"""Stage 4: lower the static module to fixed-size operators.

Each block's spectral down/up-sampling becomes per-axis MatMuls (:mod:`export.resampling`) and
its depthwise convolution one of the tactics (:mod:`export.tactics`); or, for 1-D networks whose
blocks all crop, the stream is carried as its spectrum (:mod:`export.spectrum`). Which ones is
:mod:`export.policy`'s choice, :func:`lower` applies it.
"""

from __future__ import annotations

import copy

from torch import nn

from dnarch_deploy.operators import (
    cheapest_conv,
    cheapest_resample,
    conv_tactics,
    resample_candidates,
    resample_macs,
)

from .resampling import lower_resample
from .spectrum import SPECTRUM, carry_spectrum, why_not
from .static import StaticBlock, StaticNet
from .tactics import conv_macs, make_conv


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
    :func:`resample_tactics_by_cost`)."""
    if len(tactics) != len(static.blocks):
        raise ValueError(f"{len(tactics)} tactics for {len(static.blocks)} blocks")
    if resample is None:
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


def padding_around_the_conv(lowered: StaticNet) -> StaticNet:
    """``lowered`` with each direct convolution padding and trimming its own channels (a Pad
    before it, a Slice after it) instead of reading them from the stream
    (:meth:`StaticBlock.read_wider`): the same function, the form the benchmark and the tests
    compare it with."""
    plain = copy.deepcopy(lowered)
    for block in plain.blocks:
        if block.tactic == "direct":
            block.conv.trim, block.read, block.w1 = True, block.n_in, block.w1[:, : block.n_in]
    return plain


def spectrum_resample(static: StaticNet) -> list[dict[str, list[str]]]:
    """The resampling tactics that carry the stream as its spectrum (:mod:`export.spectrum`)."""
    return [{"down": [SPECTRUM], "up": [SPECTRUM]} for _ in static.blocks]


# --- by cost --------------------------------------------------------------------------------------


def tactic_costs(static: StaticNet) -> list[dict[str, float]]:
    """Per block, the theoretical cost of its convolution under each tactic offered at its
    resolution (:func:`dnarch_deploy.operators.conv_tactics`)."""
    costs = []
    for block in static.blocks:
        size, taps = block_resolution(block), tuple(block.conv.kernel.shape[1:])
        costs.append({t: conv_macs(t, block.n_in, size, taps, block.conv.period)
                      for t in conv_tactics(size)})
    return costs


def cheapest(costs: list[dict[str, float]]) -> list[str]:
    """Per block, :func:`dnarch_deploy.operators.cheapest_conv`: the portable tactic with the
    lower theoretical cost times its measured cost weight. The DFT op is only ever chosen by
    measurement (--tune)."""
    return [cheapest_conv(c) for c in costs]


def resample_evidence_by_cost(static: StaticNet) -> list[dict[str, list[dict]]]:
    """Per block, ``down`` / ``up``, per resampled axis: the tactic by :func:`cheapest_resample`
    and the MACs per line of each candidate."""
    return [
        {k: [{"tactic": cheapest_resample(n, size), "by": "cost",
              "macs_per_line": {t: resample_macs(t, n, size) for t in resample_candidates(n, size)}}
             for n, size, _ in v] for k, v in axes.items()}
        for axes in resample_axes(static)
    ]


def resample_choice(evidence: list[dict[str, list[dict]]]) -> list[dict[str, list[str]]]:
    """The per-axis tactics out of resampling evidence, measured (:func:`export.tune
    .measure_resample`) or by cost (:func:`resample_evidence_by_cost`)."""
    return [{k: [e["tactic"] for e in v] for k, v in block.items()} for block in evidence]


def resample_tactics_by_cost(static: StaticNet) -> list[dict[str, list[str]]]:
    """Per block, per resampled axis (``down`` / ``up``): :func:`cheapest_resample`."""
    return resample_choice(resample_evidence_by_cost(static))
