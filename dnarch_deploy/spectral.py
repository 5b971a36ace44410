"""Spectral operators: resampling by cropping/padding the spectrum, and FFT convolution.

Both are exact, pure functions; the DNArch block composes them (paper §2.4.2, eq. 9):
downsample (with the resolution mask on the spectrum) -> convolve at the lower resolution ->
upsample back. Resampling is done one axis at a time with real FFTs, which is also how export
lowers it (one MatMul per axis).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from scipy.fft import next_fast_len
from torch import Tensor


def frequency_positions(n: int, device=None, dtype=None) -> Tensor:
    """Mask coordinates of the n // 2 + 1 real-FFT bins of a length-n axis: DC at -1, Nyquist
    (or the highest bin) at +1."""
    bins = n // 2 + 1
    if bins == 1:
        return torch.full((1,), -1.0, device=device, dtype=dtype)
    return torch.linspace(-1.0, 1.0, bins, device=device, dtype=dtype)


def kept_bins(size: int) -> int:
    """Real-FFT bins a length-``size`` signal holds."""
    return size // 2 + 1


def resolution_for_bins(bins: int, n: int) -> int:
    """The length at which ``bins`` low-frequency bins of a length-n axis are represented exactly:
    n itself when every bin is kept, else the odd length 2 bins - 1 (odd, so no Nyquist bin)."""
    return n if bins >= n // 2 + 1 else 2 * bins - 1


def resample(x: Tensor, size: int, dim: int = -1, mask: Tensor | None = None) -> Tensor:
    """Resample ``x`` along ``dim`` to ``size`` samples by cropping or zero-padding its spectrum.

    Exact on band-limited signals: down(up(x)) == x for any x, and up(down(x)) == x when x has no
    energy above the new Nyquist frequency. An even target (down) or even source (up) splits the
    Nyquist bin between +/- frequencies so that a cosine at that frequency keeps its amplitude.
    ``mask`` (optional, one value per kept bin) multiplies the spectrum: the resolution mask.
    """
    n = x.shape[dim]
    if size == n and mask is None:
        return x
    spec = torch.fft.rfft(x, dim=dim, norm="forward")  # (..., n // 2 + 1, ...)
    spec = spec.movedim(dim, -1)
    keep = min(n, size) // 2 + 1
    spec = spec[..., :keep]
    if mask is not None:
        spec = spec * mask[:keep]
    if size < n and size % 2 == 0:  # new Nyquist bin: fold in the conjugate (negative) frequency
        spec = torch.cat([spec[..., :-1], 2 * spec[..., -1:]], dim=-1)
    if size > n:
        if n % 2 == 0:  # old Nyquist bin becomes two bins (+/-): halve it
            spec = torch.cat([spec[..., :-1], 0.5 * spec[..., -1:]], dim=-1)
        spec = F.pad(spec, (0, size // 2 + 1 - keep))
    out = torch.fft.irfft(spec, n=size, dim=-1, norm="forward")
    return out.movedim(-1, dim)


def fft_conv(x: Tensor, kernel: Tensor) -> Tensor:
    """Depthwise cross-correlation with zero padding and 'same' output size, via real FFTs.

    ``x`` (B, C, *S), ``kernel`` (C, *K) with odd K per axis: the same as
    ``F.conv{d}d(x, kernel[:, None], padding=K // 2, groups=C)`` without wrap-around, because the
    FFT length per axis is at least S + K - 1.
    """
    dims = tuple(range(-kernel.dim() + 1, 0))
    sizes = x.shape[2:]
    ksizes = kernel.shape[1:]
    n = [next_fast_len(s + k - 1, real=True) for s, k in zip(sizes, ksizes)]
    x_f = torch.fft.rfftn(x, s=n, dim=dims)
    k_f = torch.fft.rfftn(kernel.flip(dims), s=n, dim=dims)  # flip: convolution -> correlation
    y = torch.fft.irfftn(x_f * k_f, s=n, dim=dims)
    for d, s, k in zip(dims, sizes, ksizes):  # full convolution -> the 'same' window
        y = y.narrow(d, k // 2, s)
    return y


def direct_conv(x: Tensor, kernel: Tensor) -> Tensor:
    """The reference for :func:`fft_conv`: ``F.conv{d}d`` with groups=C and 'same' padding."""
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[kernel.dim() - 1]
    padding = tuple(k // 2 for k in kernel.shape[1:])
    return conv(x, kernel.unsqueeze(1), padding=padding, groups=kernel.shape[0])
