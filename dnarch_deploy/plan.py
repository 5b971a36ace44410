"""What the model materialises each step: its masks turned into discrete sizes and mask values.

Each kind of mask is evaluated for all blocks at once (one tensor op, one host sync for its
supports), so the training step's graph does not grow with the number of masks. The plan is what
the forward pass slices weights, kernels and activations to, and what export freezes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from . import masks as M
from .spectral import (
    frequency_positions,
    masked_taps,
    resolution_for_bins,
    spectrum_positions,
)

if TYPE_CHECKING:
    from .model import DNArch


@dataclass
class BlockPlan:
    """What one block materialises this step: discrete sizes and the mask values on the support."""

    index: int
    n_in: int
    n_mid: int
    n_out: int
    resolution: tuple[int, ...]  # samples per axis at which the block computes
    half_taps: tuple[int, ...]  # kernel half-width per axis, at that resolution
    kernel_size: tuple[int, ...]  # kernel extent per axis in input samples (full resolution)
    depth_weight: Tensor | None  # scalar, None when depth is fixed
    # (3, max width): the n_in, n_mid and n_out width masks' values on every channel (zero past
    # each support; the block uses the first n_in, n_mid, n_out); None when width is fixed
    width_masks: Tensor | None = None
    # per axis, the resolution mask on the kept frequency bins; None on an axis it does not crop,
    # and None for the block when it crops no axis
    m_res: tuple[Tensor | None, ...] | None = None
    # the resolution mask on the axes it does not crop, evaluated on the convolution's own
    # spectrum (a product over those axes, broadcastable to the kernel's rfftn spectrum); None
    # when R is fixed or every axis is cropped (paper eq. 9: the mask is always in the loss)
    conv_mask: Tensor | None = None
    # with conv_mask: the convolution's FFT length per axis, that of the largest kernel the block
    # can have at its resolution, so the masked function does not change with the kernel's taps
    conv_fft: tuple[int, ...] | None = None
    sigma: Tensor | None = None  # (axes,) Gaussian kernel-mask widths, None when K is fixed

    @property
    def cropped(self) -> tuple[bool, ...]:
        """Per axis, whether the resolution mask crops it (the block downsamples there)."""
        if self.m_res is None:
            return (False,) * len(self.resolution)
        return tuple(m is not None for m in self.m_res)

    @property
    def conv_taps(self) -> tuple[int, ...]:
        """Per axis, the taps of the convolution export deploys: the kernel's, or with the
        resolution mask folded in (``conv_mask``), 2 R - 1 on the axes it filters."""
        taps = tuple(2 * h + 1 for h in self.half_taps)
        if self.conv_mask is None:
            return taps
        return masked_taps(self.resolution, taps, self.conv_mask)


@dataclass
class Plan:
    stream: int  # channels of the stream in use (widest channel any block reads or writes)
    blocks: list[BlockPlan]
    stream_mask: Tensor | None = None  # only in the full (reference) computation


def make_plan(model: DNArch, full: bool = False) -> Plan:
    """Discrete sizes and mask values for this step.

    ``full=True`` is the reference computation: every channel, block and kernel tap at its
    maximum, with the mask values (zero outside the support) multiplied in. The resolution is
    the same as in the sliced computation: there, cropping *is* the model.

    Each kind of mask is evaluated for all blocks at once (one tensor op, one host sync for
    its supports), so the training step's graph does not grow with the number of masks.
    """
    c = model.config
    H, D, T = c.max_width, c.max_depth, c.threshold
    depth, depth_weights = D, [None] * D
    if c.learns("D"):
        mu = model.mask_depth
        x_t = M.sigmoid_inverse(mu, c.tau_depth, T).item()
        depth = M.sigmoid_count(x_t, D)
        positions = M.grid(D, mu.device, mu.dtype)
        depth_weights = M.sigmoid_mask(positions, mu, c.tau_depth, T).unbind(0)
    widths, width_masks = [(H, H, H)] * D, [None] * D
    if c.learns("W"):  # columns: n_in, n_mid, n_out
        mu = model.mask_width
        x_t = M.sigmoid_inverse(mu, c.tau_width, T).detach().tolist()
        widths = [tuple(M.sigmoid_count(x, H) for x in row) for row in x_t]
        positions = M.grid(H, mu.device, mu.dtype)
        width_masks = M.sigmoid_mask(positions, mu[..., None], c.tau_width, T).unbind(0)
    resolutions, res_masks = _resolutions(model)
    spectra = {}  # _conv_mask's (axis, FFT length): every block's mask on that spectrum
    x_k, sigmas = [[1.0] * len(c.input_size)] * D, [None] * D
    if c.learns("K"):
        x_k = M.gaussian_inverse(model.mask_sigma, T).detach().tolist()
        sigmas = model.mask_sigma.unbind(0)
    # the stream is as wide as the widest channel read or written by a block in use
    stream = max(max(w[0], w[2]) for w in widths[:depth]) if c.learns("W") else H
    blocks = []
    for b in range(D if full else depth):
        sizes = (H, H, H) if full else widths[b]
        resolution = resolutions[b]
        scales = [r / s for r, s in zip(resolution, c.input_size)]
        widest = c.widest_half_taps(resolution)
        half = widest if full else tuple(
            min(M.gaussian_half_taps(x, k, sc), h)
            for x, k, sc, h in zip(x_k[b], c.max_kernel, scales, widest)
        )
        conv_mask, conv_fft = _conv_mask(model, b, resolution, res_masks[b], spectra)
        kernel_size = tuple(
            2 * M.gaussian_half_taps(x, k) + 1 for x, k in zip(x_k[b], c.max_kernel)
        )
        blocks.append(
            BlockPlan(
                index=b,
                n_in=sizes[0],
                n_mid=sizes[1],
                n_out=sizes[2],
                resolution=resolution,
                half_taps=half,
                kernel_size=kernel_size,
                depth_weight=depth_weights[b],
                width_masks=width_masks[b],
                m_res=res_masks[b],
                conv_mask=conv_mask,
                conv_fft=conv_fft,
                sigma=sigmas[b],
            )
        )
    if full and c.learns("W"):
        stream_mask = (torch.arange(H, device=model.enc_w.device) < stream).to(model.enc_w)
        return Plan(stream=H, blocks=blocks, stream_mask=stream_mask)
    return Plan(stream=stream, blocks=blocks)


def _resolutions(model: DNArch
                 ) -> tuple[list[tuple[int, ...]], list[tuple[Tensor | None, ...] | None]]:
    """Per block: the resolution R (per axis) and the resolution mask's values on the
    R // 2 + 1 bins of each axis it crops (zero past its support).

    An axis whose mask support holds every bin is neither filtered nor resampled: the block
    computes there at full resolution, exactly like the base network (a block at full
    resolution costs no extra FFTs, and exports without a spectral filter). The resolution
    mask acts, and the task loss sees it, from the first cropped bin on.
    """
    c = model.config
    D, axes = c.max_depth, len(c.input_size)
    if not c.learns("R"):
        return [c.input_size] * D, [None] * D
    mu = model.mask_res  # (D, axes)
    x_t = M.sigmoid_inverse(mu, c.tau_resolution, c.threshold).detach().tolist()
    sizes = [list(c.input_size) for _ in range(D)]
    masks = [[None] * axes for _ in range(D)]
    limits = c.crop_limits()
    for axis, n in enumerate(c.input_size):
        positions = frequency_positions(n, device=mu.device, dtype=mu.dtype)
        values = None
        for b in range(D):
            bins = M.sigmoid_count(x_t[b][axis], positions.numel())
            r = resolution_for_bins(bins, n)
            if bins == positions.numel() or r > limits[axis]:
                continue
            if values is None:  # (D, n // 2 + 1), once per axis
                values = M.sigmoid_mask(positions, mu[:, axis, None], c.tau_resolution,
                                        c.threshold)
            sizes[b][axis] = r
            masks[b][axis] = values[b, : r // 2 + 1]  # bins past the support (to r // 2): 0
    return (
        [tuple(r) for r in sizes],
        [None if all(m is None for m in row) else tuple(row) for row in masks],
    )

def _conv_mask(model: DNArch, b: int, resolution: tuple[int, ...],
               m_res: tuple[Tensor | None, ...] | None, spectra: dict
               ) -> tuple[Tensor | None, tuple[int, ...] | None]:
    """Block b's resolution mask on the spectrum of its FFT convolution over the axes where
    it crops nothing, and that FFT's lengths (:meth:`ModelConfig.conv_fft`): what puts the
    mask in the task loss before its first bin is cropped (an element-wise product on the
    kernel's spectrum, no extra FFT). Cropped axes get 1: their mask acts in the
    downsampling. ``spectra`` caches, per (axis, FFT length), every block's mask values on
    that spectrum, (max_depth, bins), evaluated once for all blocks that share it."""
    c = model.config
    axes = len(c.input_size)
    cropped = (False,) * axes if m_res is None else tuple(m is not None for m in m_res)
    fft_sizes = c.conv_fft(resolution, cropped)
    if fft_sizes is None:
        return None, None
    mask = None
    for axis, (n, n_fft) in enumerate(zip(c.input_size, fft_sizes)):
        if m_res is not None and m_res[axis] is not None:
            continue
        if (axis, n_fft) not in spectra:
            mu = model.mask_res[:, axis, None]
            positions = spectrum_positions(n_fft, n, onesided=axis == axes - 1,
                                           device=mu.device, dtype=mu.dtype)
            spectra[axis, n_fft] = M.sigmoid_mask(positions, mu, c.tau_resolution,
                                                  c.threshold)
        values = spectra[axis, n_fft][b].view(*[-1 if a == axis else 1 for a in range(axes)])
        mask = values if mask is None else mask * values
    return mask, fft_sizes
