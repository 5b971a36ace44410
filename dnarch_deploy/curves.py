"""Piecewise-linear curves in log MACs and log milliseconds through a latency table's measured
points: what :class:`dnarch_deploy.latency.LatencyTable` predicts an operator's time by, and
differentiates the search's cost through."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .latency import Point


def monotone(ys: list[float], counts: list[int]) -> list[float]:
    """The non-decreasing least-squares fit to ``ys`` (weights ``counts``): pool adjacent
    violators."""
    pools: list[list[float]] = []  # [weighted sum, weight, points]
    for y, c in zip(ys, counts):
        pools.append([y * c, c, 1])
        while len(pools) > 1 and pools[-2][0] / pools[-2][1] > pools[-1][0] / pools[-1][1]:
            s, w, n = pools.pop()
            pools[-1][0] += s
            pools[-1][1] += w
            pools[-1][2] += n
    return [s / w for s, w, n in pools for _ in range(int(n))]


def curve(points: list[Point]) -> tuple[Tensor, Tensor, Tensor]:
    """Knots (log MACs, log ms) of one kind at one batch and the slopes between them (float64):
    equal MACs averaged, log ms made non-decreasing, and one more knot each side: below, at the
    first point's time (flat), above, on the slope-1 line (ms proportional to MACs).
    :func:`interpolate` extends the end segments beyond their knots, so extrapolation is
    interpolation."""
    groups: dict[float, list[float]] = {}
    for p in points:
        groups.setdefault(math.log(p.macs), []).append(math.log(p.ms))
    xs = sorted(groups)
    ys = monotone([sum(groups[x]) / len(groups[x]) for x in xs], [len(groups[x]) for x in xs])
    kx = torch.tensor([xs[0] - 1, *xs, xs[-1] + 1], dtype=torch.float64)
    ky = torch.tensor([ys[0], *ys, ys[-1] + 1], dtype=torch.float64)
    return kx, ky, ky.diff() / kx.diff()


def shape_grid(points: list[Point]) -> dict[int, list[tuple]]:
    """{positions: [(taps / positions, MACs per unit of width, curve), ...] by that ratio}: one
    :func:`curve` per measured shape, through its widths."""
    grid: dict[int, dict[int, list[Point]]] = {}
    for p in points:
        grid.setdefault(p.positions, {}).setdefault(p.taps, []).append(p)
    return {n: [(t / n, sum(p.macs / p.width for p in pts) / len(pts), curve(pts))
                for t, pts in sorted(by_taps.items())]
            for n, by_taps in sorted(grid.items())}


def bracket(values: list[float], x: float) -> list[tuple[float, int]]:
    """(weight, index) of the one or two ``values`` (increasing) around ``x``, linear in log x;
    clamped to the nearest end outside them."""
    if x <= values[0]:
        return [(1.0, 0)]
    if x >= values[-1]:
        return [(1.0, len(values) - 1)]
    hi = next(i for i, v in enumerate(values) if v >= x)
    w = math.log(x / values[hi - 1]) / math.log(values[hi] / values[hi - 1])
    return [(1.0 - w, hi - 1), (w, hi)]


def log_ms_per_mac(grid: dict, width: float, positions: float, taps: float) -> float:
    """log(ms / MAC) of an operator of this shape: at each measured shape around it (bilinear
    in log positions and log taps per position) the time per MAC of ``width`` there."""
    lengths, total = list(grid), 0.0
    for wp, i in bracket(lengths, positions):
        kernels = grid[lengths[i]]
        for wt, j in bracket([k[0] for k in kernels], taps / positions):
            _, per_width, curve = kernels[j]
            x = torch.tensor(math.log(per_width * width), dtype=torch.float64)
            total += wp * wt * (float(interpolate(x, curve)) - float(x))
    return total


def interpolate(x: Tensor, curve: tuple[Tensor, Tensor, Tensor]) -> Tensor:
    """Piecewise-linear y(x) through the knots of :func:`curve`, the end segments extended; x a
    tensor (any shape), differentiable in x."""
    kx, ky, slope = (t.to(x) for t in curve)  # no copy for float64 on the CPU
    i = (torch.searchsorted(kx, x.detach().contiguous(), right=True) - 1).clamp(0, len(kx) - 2)
    return ky[i] + slope[i] * (x - kx[i])
