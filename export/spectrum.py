"""The residual stream carried as its spectrum: a lowering for 1-D networks whose every block
computes below the input's resolution.

Lowered block by block (:mod:`export.resampling`), each block resamples the L-sample stream down
to its resolution R and its output back up: two transforms over L samples per block, which
dominate a found network at long lengths. Both are spectral, and touch only the low bins:
``down(h)`` reads the first R//2+1 DFT bins of h, ``up(z)`` adds to h only bins below R//2+1.
So the stream can be carried as its first K = max_b R_b//2+1 DFT bins instead:

    S = S_enc = DFT_L(h0)[:K], h0 = encoder(x)           once, L samples      (ToSpectrum)
    block b:  z = f_b(IDFT_R(c S[:keep]))              R samples            (FromSpectrum)
              S[:n_out] += d DFT_R(z)[:keep]           R samples            (ToSpectrum)
    decoder:  mean over positions of h = S_0 / L                             (SpectrumToPool)
              h itself, for a maximum: h0 + IDFT_L(S - S_enc)   L samples    (SpectrumToPool)

with c the down-resampling's bin weights (resolution mask, Nyquist handling, rfft's 1/L:
:func:`export.resampling.resample_bin_weights`) and d = L c'_0 on DC and L c'_k / 2 above it,
c' the up-resampling's weights: the DFT of the real signal ``up(z)`` at a bin 0 < k < L/2 gets
half of that bin's weight, and its mirror image lands at L - k, beyond K. The same linear maps,
reordered: exact up to rounding. Each block's transforms now cost its own R samples instead of L;
the stream pays one forward transform of L samples (and one inverse where the decoder pools by
the maximum). Each transform is one dense MatMul or a
four-step half (:func:`dnarch_deploy.operators.spectrum_form`).

Applies (:func:`why_not`) to 1-D inputs with a pooling decoder when every block crops; which
lowering an export ships is measured (:mod:`export.policy`).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dnarch_deploy.operators import spectrum_form, spectrum_macs

from .resampling import (
    forward_half,
    forward_half_weights,
    from_natural_order,
    inverse_half,
    inverse_half_weights,
    resample_bin_weights,
    roots,
    to_natural_order,
)
from .static import Resample, StaticNet

SPECTRUM = "spectrum"  # the resampling tactic of every axis of a network lowered this way


def _fit(z: Tensor, bins: int) -> Tensor:
    """The last axis padded with zeros or cut to ``bins``."""
    have = z.shape[-1]
    if bins > have:
        return F.pad(z, (0, bins - have))
    return z[..., :bins] if bins < have else z


def _buffer(value: np.ndarray, dtype: torch.dtype) -> Tensor:
    return torch.from_numpy(np.ascontiguousarray(value)).to(dtype)


class ToSpectrum(nn.Module):
    """The first ``bins`` DFT bins (unnormalised) of lines of ``length`` samples, each scaled by
    ``weights``, padded with zero bins to ``out_bins``: (..., length) -> (..., 2, out_bins), real
    parts then imaginary."""

    def __init__(self, length: int, bins: int, weights: np.ndarray | None = None,
                 out_bins: int | None = None, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.dim, self.bins = -1, bins
        self.out_bins = bins if out_bins is None else out_bins
        self.sizes = (length, 2 * self.out_bins)
        w = np.ones(bins) if weights is None else np.asarray(weights, dtype=np.float64)
        self.form, d = spectrum_form(length, bins)
        if self.form == "dense":
            e = roots(np.arange(length)[:, None], np.arange(bins)[None, :], length) * w
            self.register_buffer("matrix", _buffer(np.concatenate([e.real, e.imag], axis=1), dtype))
        else:
            k1 = -(-bins // d)
            padded = np.zeros(k1 * d)
            padded[:bins] = w  # bins from ``bins`` on are cut: no weight
            w1, w2 = forward_half_weights(length, d, k1, padded)
            self.register_buffer("w1", _buffer(w1, dtype))
            self.register_buffer("w2", _buffer(w2, dtype))

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        if self.form == "dense":
            z = torch.matmul(x, self.matrix).reshape(*lead, 2, self.bins)
        else:
            z = to_natural_order(forward_half(x, self.w1, self.w2))
            z = _fit(z, self.bins).reshape(*lead, 2, self.bins)
        return _fit(z, self.out_bins)

    def macs(self) -> int:
        """Real multiply-accumulates per line."""
        return spectrum_macs(self.sizes[0], self.bins)

    def extra_repr(self) -> str:
        return f"{self.sizes[0]} samples -> {self.bins} of {self.out_bins} bins, {self.form}"


class FromSpectrum(nn.Module):
    """``length`` samples from the first ``len(c)`` bins of a spectrum (..., 2, K) weighted by c:
    y_s = Re sum_k c_k X_k exp(2 pi i k s / length)."""

    def __init__(self, length: int, c: np.ndarray, dtype: torch.dtype = torch.float32):
        super().__init__()
        c = np.asarray(c, dtype=np.float64)
        self.dim, self.length, self.bins = -1, length, len(c)
        self.sizes = (2 * self.bins, length)
        self.form, d = spectrum_form(length, self.bins)
        if self.form == "dense":
            k, t = np.arange(self.bins), np.arange(length)
            angle = 2 * np.pi * (np.outer(k, t) % length) / length
            rows = np.concatenate([c[:, None] * np.cos(angle), -c[:, None] * np.sin(angle)])
            self.register_buffer("matrix", _buffer(rows, dtype))
        else:
            self.padded = -(-self.bins // d) * d
            padded = np.zeros(self.padded)
            padded[: self.bins] = c
            w3, w4 = inverse_half_weights(length, d, padded)
            self.register_buffer("w3", _buffer(w3, dtype))
            self.register_buffer("w4", _buffer(w4, dtype))

    def forward(self, s: Tensor) -> Tensor:
        lead = s.shape[:-2]
        z = s[..., : self.bins]
        if self.form == "dense":
            return torch.matmul(z.reshape(*lead, 2 * self.bins), self.matrix)
        z = from_natural_order(z.reshape(-1, 2, self.bins), self.padded, self.w3.shape[1])
        return inverse_half(z, self.w3, self.w4).reshape(*lead, self.length)

    def macs(self) -> int:
        """Real multiply-accumulates per line."""
        return spectrum_macs(self.length, self.bins)

    def extra_repr(self) -> str:
        return f"{self.bins} bins -> {self.length} samples, {self.form}"


class SpectrumToPool(nn.Module):
    """What the decoder pools, from the stream's K bins at the end (``s``) and after the encoder
    (``start``) and the encoder's output h0 (``positions``).

    For a mean, one value per line, DC / L, whose mean is the stream's mean. For a maximum too,
    the stream itself: h0 plus the blocks' sum, the inverse DFT of what they added to the bins,
    s - start. That sum is real and its spectrum lies in bins below K (< L / 2: every block
    crops) and their mirror images: weights 1 / L on DC and 2 / L on the others
    (:class:`FromSpectrum`), one transform of L samples."""

    def __init__(self, length: int, bins: int, positions: bool, dtype: torch.dtype):
        super().__init__()
        self.length = length
        c = np.where(np.arange(bins) == 0, 1.0, 2.0) / length
        self.back = FromSpectrum(length, c, dtype) if positions else None

    def forward(self, s: Tensor, start: Tensor, positions: Tensor) -> Tensor:
        if self.back is None:
            return s[..., 0, :1] / self.length
        return positions + self.back(s - start)


def why_not(static: StaticNet) -> str | None:
    """None if the stream can be carried as its spectrum; else the reason it cannot."""
    if len(static.spec["spatial"]) != 1:
        return "the input is not 1-D"
    if static.decoder.dense:
        return "the decoder is dense (an output per position)"
    if not static.blocks:
        return "the network has no blocks"
    length = static.spec["spatial"][0]
    if any(len(b.down) != 1 or len(b.up) != 1 for b in static.blocks):
        return "a block computes at the input's full resolution"
    if not all(isinstance(m, Resample) for b in static.blocks for m in (*b.down, *b.up)):
        return "its resampling is already lowered per axis"
    if any(b.down[0].size != b.bias1.shape[-1] or b.up[0].size != length for b in static.blocks):
        return "a block's resampling does not go from the input to its resolution and back"
    return None


def carry_spectrum(lowered: StaticNet, dtype: torch.dtype = torch.float32) -> StaticNet:
    """A copy of ``lowered`` (convolutions lowered or not, resampling not) carrying the stream as
    its spectrum: every block's down/up-sampling replaced by its spectral half, weights in
    ``dtype``."""
    reason = why_not(lowered)
    if reason is not None:
        raise ValueError(f"the stream cannot be carried as its spectrum: {reason}")
    net = copy.deepcopy(lowered)
    length = int(net.spec["spatial"][0])
    keeps = [int(b.bias1.shape[-1]) // 2 + 1 for b in net.blocks]
    bins = max(keeps)
    net.encoder.spectrum = ToSpectrum(length, bins, dtype=dtype)
    for block, keep in zip(net.blocks, keeps):
        down, resolution = block.down[0], int(block.bias1.shape[-1])
        mask = None if down.mask is None else down.mask.double().numpy()
        c = resample_bin_weights(length, resolution, mask)
        up = resample_bin_weights(resolution, length)
        d = up * length / 2
        d[0] = up[0] * length
        block.down = nn.Sequential(FromSpectrum(resolution, c, dtype))
        block.up = nn.Sequential(ToSpectrum(resolution, keep, d, bins, dtype))
        # what architecture.json records per axis: the resampling each half stands for
        block.down[0].sizes, block.up[0].sizes = (length, resolution), (resolution, length)
        block.resample_tactics = {"down": [SPECTRUM], "up": [SPECTRUM]}
    net.decoder.spectrum = SpectrumToPool(length, bins, "max" in net.decoder.pooling, dtype)
    return net.eval()
