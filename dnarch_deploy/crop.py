"""A block's geometry at a resolution, and where cropping to it pays.

The widest kernel a block computing at a resolution can have, the FFT lengths of a convolution
whose spectrum the resolution mask filters, and (ModelConfig.crop "pays") the largest resolution
at which a cropped block costs fewer deployed MACs than at full resolution. Pure functions of
sizes: the model's config and the cost model both read them.
"""

from __future__ import annotations

import functools

from . import masks as M
from .block_ops import block_operators
from .spectral import conv_fft_sizes, folded_taps, resolution_for_bins


def max_kernel(input_size: tuple[int, ...]) -> tuple[int, ...]:
    """Largest odd kernel that fits the input, per axis (centred, "up to the input size")."""
    return tuple(s if s % 2 else s - 1 for s in input_size)


def widest_half_taps(input_size: tuple[int, ...], resolution: tuple[int, ...]
                     ) -> tuple[int, ...]:
    """Per axis, the half-width of the global kernel at ``resolution``: the widest kernel a
    block computing there can have."""
    return tuple(min(M.gaussian_half_taps(1.0, k, r / s), (r - 1) // 2)
                 for k, r, s in zip(max_kernel(input_size), resolution, input_size))


def filtered_fft(input_size: tuple[int, ...], resolution: tuple[int, ...],
                 cropped: tuple[bool, ...]) -> tuple[int, ...] | None:
    """With R learned, the FFT lengths per axis of a block's convolution whose spectrum the
    resolution mask filters (on the axes it does not crop): those of the widest kernel at
    ``resolution``, whatever the kernel mask keeps; None when every axis is cropped."""
    if all(cropped):
        return None
    return tuple(conv_fft_sizes(resolution, [2 * h + 1 for h in widest_half_taps(
        input_size, resolution)]))


def block_macs(input_size: tuple[int, ...], resolution: tuple[int, ...], width: int) -> float:
    """The deployed MACs per sample (:func:`~dnarch_deploy.block_ops.block_operators`) of a block
    of ``width`` channels with R learned and a global kernel, at ``resolution``: cropped on the
    axes where it is below ``input_size``, elsewhere running the resolution mask folded into its
    kernel."""
    cropped = tuple(r < s for r, s in zip(resolution, input_size))
    taps = folded_taps(resolution, [2 * h + 1 for h in widest_half_taps(input_size, resolution)],
                       cropped, learned=True)
    ops = block_operators(input_size, resolution, width, width, width, taps, cropped,
                          stream=width, conv_fft=filtered_fft(input_size, resolution, cropped))
    return sum(op.macs for op in ops.values())


@functools.cache
def crop_limit(input_size: tuple[int, ...], axis: int, width: int) -> int:
    """The largest resolution of ``axis`` at which a block cropped there (the other axes at full
    size) costs fewer deployed MACs than at full resolution (:func:`block_macs`); 0 where no crop
    pays. Only the resolutions a mask can give are tried
    (:func:`~dnarch_deploy.spectral.resolution_for_bins`). In 1-D a crop adds two dense (n x R)
    resamplings per channel, and pays only from about a quarter to two fifths of the input down
    (``benchmarks/init_cost.py``)."""
    full, n = block_macs(input_size, input_size, width), input_size[axis]
    for bins in range(n // 2, 0, -1):  # resolutions from the largest crop down
        r = resolution_for_bins(bins, n)
        if r < n and block_macs(input_size, input_size[:axis] + (r,) + input_size[axis + 1:],
                                width) < full:
            return r
    return 0
