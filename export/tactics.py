"""The convolution tactics: each depthwise 'same' convolution of a block becomes one of them.

A tactic is one module class: its constructor builds the lowered module from the kernel and the
block's resolution, ``theoretical_macs`` counts its multiply-accumulates, ``portable`` says whether
every backend runs it. :data:`REGISTRY` holds them by name; which one a block gets is
:mod:`export.policy`'s choice.

  ``direct``  ONNX ``Conv`` (groups = channels, 'same' zero padding) (:class:`DirectConv`).
  ``matmul``  an FFT written with MatMul / Mul / Add / Reshape only (:class:`MatMulFFTConv`,
              four-step / Monarch layout in 1-D, one dense DFT matrix per axis in 2-D), plus a
              Pad / Slice when the length does not fill the four-step grid.
  ``dft``     ``torch.fft`` in the graph, exported as the ONNX ``DFT`` op (:class:`DFTConv`).

All three compute the same cross-correlation as :func:`dnarch_deploy.spectral.direct_conv`. The FFT
forms use circular convolution of length N >= L + K // 2 per axis
(:func:`dnarch_deploy.spectral.conv_fft_length`, the rule training's FFT convolution uses too),
which is enough for the 'same' window: the wrapped-around part of the result lies outside it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dnarch_deploy.cost import fourier_conv_cost
from dnarch_deploy.spectral import conv_fft_length


class DirectConv(nn.Module):
    """Depthwise 'same' cross-correlation as a grouped convolution (ONNX Conv): C * L * K."""

    name = "direct"
    portable = True

    def __init__(self, kernel: Tensor, size: tuple[int, ...] | None = None):
        super().__init__()  # size: a grouped convolution runs at any length
        self.register_buffer("weight", kernel.detach().clone().unsqueeze(1))  # (C, 1, *taps)
        self.taps = tuple(kernel.shape[1:])
        self.padding = tuple(k // 2 for k in kernel.shape[1:])

    def forward(self, x: Tensor) -> Tensor:
        conv = F.conv1d if x.dim() == 3 else F.conv2d
        return conv(x, self.weight, padding=self.padding, groups=self.weight.shape[0])

    @staticmethod
    def theoretical_macs(channels: int, size: tuple[int, ...], taps: tuple[int, ...]) -> float:
        return float(channels * math.prod(size) * math.prod(taps))

    def extra_repr(self) -> str:
        return f"channels={self.weight.shape[0]}, taps={tuple(self.weight.shape[2:])}"


def circular_kernel(kernel: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """(C, *N) filter g with circular_conv(x, g) == 'same' cross-correlation with ``kernel``:
    g[d mod N] = kernel[h - d] per axis (h = K // 2)."""
    g = np.zeros((kernel.shape[0], *sizes), dtype=np.float64)
    flipped = kernel[(slice(None), *[slice(None, None, -1)] * (kernel.ndim - 1))]
    index = np.ix_(*[np.arange(-(k // 2), k // 2 + 1) % n for k, n in zip(kernel.shape[1:], sizes)])
    g[(slice(None), *index)] = flipped
    return g


def dft_matrix(n: int) -> np.ndarray:
    """W[j, k] = exp(-2 pi i j k / n), exact integer phases."""
    j = np.arange(n)
    return np.exp(-2j * np.pi * (np.outer(j, j) % n) / n)


def four_step_factors(length: int, taps: int) -> tuple[int, int]:
    """(N1, N2) with N1 * N2 >= conv_fft_length(length, taps) minimising :func:`_four_step_macs`
    (N2 = 1: one dense DFT matrix)."""
    n = conv_fft_length(length, taps)
    best = None
    for n2 in range(1, max(2, math.isqrt(n)) + 1):
        n1 = -(-n // n2)
        cost = _four_step_macs(length, n1, n2)
        if best is None or cost < best[0]:
            best = (cost, n1, n2)
    return best[1], best[2]


def _four_step_macs(length: int, n1: int, n2: int) -> int:
    """Real multiply-accumulates per channel of :class:`MatMulFFTConv` in 1-D."""
    p, rows = n1 // 2 + 1, -(-length // n2)
    macs = 2 * p * rows * n2 * 2  # first and last DFT (left MatMuls, real in / real out)
    macs += 4 * p * n2  # spectrum product
    if n2 > 1:
        macs += 2 * 4 * p * n2 * n2 + 2 * 4 * p * n2  # second-axis DFTs and twiddles
    return macs


class MatMulFFTConv(nn.Module):
    """Depthwise 'same' cross-correlation as an FFT made of MatMul / Mul / Add / Reshape.

    The input is viewed as a matrix A (rows x cols): 1-D, the padded sequence reshaped to
    (ceil(L / N2), N2) (four-step: n = N2 n1 + n2); 2-D, the image itself. Then
        spectrum = (F_rows @ A) * twiddle @ F_cols      (complex, as separate re / im tensors)
        result   = Re(F_rows' @ ((spectrum * G) @ F_cols') * twiddle')
    with G the filter's spectrum. x is real, so only the rows k1 <= N1 / 2 of the first DFT are
    kept (Hermitian symmetry) and the last MatMul weights them 1 or 2. Padding is folded into the
    DFT matrices, and so is the crop back to L.
    """

    name = "matmul"
    portable = True

    def __init__(self, kernel: Tensor, size: tuple[int, ...]):
        super().__init__()
        k = kernel.detach().double().numpy()
        taps, channels = tuple(kernel.shape[1:]), kernel.shape[0]
        self.taps = taps
        self.length = size[0] if len(size) == 1 else None  # 1-D: pad/reshape/crop around it
        if len(size) == 1:
            n1, n2 = four_step_factors(size[0], taps[0])
            rows_in = -(-size[0] // n2)
            self.grid = (rows_in, n2)
            self.pad = rows_in * n2 - size[0]
            g = np.fft.fft(circular_kernel(k, (n1 * n2,)), axis=-1)  # (C, N), k = k1 + N1 k2
            spec = g.reshape(channels, n2, n1).transpose(0, 2, 1)  # (C, N1, N2)
            f_rows = dft_matrix(n1)[:, :rows_in]  # (N1, rows): over n1
            f_cols = dft_matrix(n2)  # over n2
            j1, j2 = np.arange(n1)[:, None], np.arange(n2)[None, :]
            twiddle = np.exp(-2j * np.pi * ((j1 * j2) % (n1 * n2)) / (n1 * n2)) if n2 > 1 else None
            scale = n1 * n2
        else:
            (h, w), (th, tw) = size, taps
            n1, n2 = conv_fft_length(h, th), conv_fft_length(w, tw)
            self.grid, self.pad = (h, w), 0
            spec = np.fft.fft2(circular_kernel(k, (n1, n2)))  # (C, N1, N2)
            f_rows = dft_matrix(n1)[:, :h]
            f_cols = dft_matrix(n2)[:w, :]  # (W, N2): zero padding folded in
            twiddle, scale = None, n1 * n2
        p = n1 // 2 + 1  # kept rows of the first DFT
        weight = np.where((np.arange(p) == 0) | (2 * np.arange(p) == n1), 1.0, 2.0)
        rows_out = f_rows.shape[1]
        back = (np.conj(f_rows[:p, :rows_out]).T * weight) / scale  # (rows, P)
        self.has_cols = n2 > 1 or len(size) == 2
        buffers = {
            "f_re": f_rows[:p].real, "f_im": f_rows[:p].imag,  # (P, rows)
            "g_re": spec[:, :p].real, "g_im": spec[:, :p].imag, "g_imn": -spec[:, :p].imag,
            "b_re": back.real, "b_imn": -back.imag,  # (rows, P)
        }
        if self.has_cols:
            inv = np.conj(f_cols).T  # (N2, cols)
            buffers.update({
                "c_re": f_cols.real, "c_im": f_cols.imag, "c_imn": -f_cols.imag,
                "i_re": inv.real, "i_im": inv.imag, "i_imn": -inv.imag,
            })
        if twiddle is not None:
            buffers.update({"t_re": twiddle[:p].real, "t_im": twiddle[:p].imag,
                            "t_imn": -twiddle[:p].imag})
        self.has_twiddle = twiddle is not None
        for name, value in buffers.items():
            self.register_buffer(name, torch.from_numpy(np.ascontiguousarray(value)).float())
        self.n = (n1, n2)
        self.channels = channels

    def forward(self, x: Tensor) -> Tensor:
        if self.length is not None:  # 1-D: (B, C, L) -> (B, C, rows, N2)
            if self.pad:
                x = F.pad(x, (0, self.pad))
            x = x.reshape(-1, self.channels, *self.grid)
        re, im = torch.matmul(self.f_re, x), torch.matmul(self.f_im, x)  # (B, C, P, cols)
        if self.has_twiddle:
            re, im = re * self.t_re + im * self.t_imn, re * self.t_im + im * self.t_re
        if self.has_cols:
            re, im = re @ self.c_re + im @ self.c_imn, re @ self.c_im + im @ self.c_re
        re, im = re * self.g_re + im * self.g_imn, re * self.g_im + im * self.g_re
        if self.has_cols:
            re, im = re @ self.i_re + im @ self.i_imn, re @ self.i_im + im @ self.i_re
        if self.has_twiddle:  # conjugate twiddle
            re, im = re * self.t_re + im * self.t_im, im * self.t_re + re * self.t_imn
        y = torch.matmul(self.b_re, re) + torch.matmul(self.b_imn, im)  # (B, C, rows, cols)
        if self.length is not None:
            y = y.reshape(-1, self.channels, self.grid[0] * self.grid[1])
            if self.pad:
                y = y[..., : self.length]
        return y

    @classmethod
    def theoretical_macs(cls, channels: int, size: tuple[int, ...],
                         taps: tuple[int, ...]) -> float:
        """:meth:`macs` of the module a kernel of these sizes gets."""
        return cls(torch.zeros(channels, *taps), size).macs()

    def macs(self) -> float:
        """Real multiply-accumulates per sample, counted from the operators' shapes."""
        p, rows = self.f_re.shape
        cols = self.grid[1]
        macs = 2 * p * rows * cols + 2 * p * rows * cols  # first and last MatMuls
        q = self.g_re.shape[-1]
        macs += 4 * p * q
        if self.has_cols:
            macs += 4 * p * cols * q * 2
        if self.has_twiddle:
            macs += 2 * 4 * p * q
        return float(self.channels * macs)

    def extra_repr(self) -> str:
        kind = "four-step" if self.has_twiddle else ("dense" if self.length else "2-D dense")
        return f"channels={self.channels}, N={self.n}, {kind}, pad={self.pad}"


def fft_size(length: int, taps: int) -> int:
    """The power of two >= conv_fft_length(length, taps): onnxruntime's DFT is radix-2 only
    there (and exact)."""
    return 1 << (conv_fft_length(length, taps) - 1).bit_length()


class DFTConv(nn.Module):
    """Depthwise 'same' cross-correlation with torch.fft: exported as the ONNX DFT op (not on every
    backend: TensorRT has none); C * N * log2 N (:func:`dnarch_deploy.cost.fourier_conv_cost`)."""

    name = "dft"
    portable = False

    def __init__(self, kernel: Tensor, size: tuple[int, ...]):
        super().__init__()
        self.sizes, self.taps = tuple(size), tuple(kernel.shape[1:])
        self.n = tuple(fft_size(s, k) for s, k in zip(size, kernel.shape[1:]))
        g = circular_kernel(kernel.detach().double().numpy(), self.n)
        self.register_buffer("g", torch.from_numpy(g).float())  # (C, *N)

    def forward(self, x: Tensor) -> Tensor:
        dims = tuple(range(-len(self.n), 0))
        spec = torch.fft.rfftn(x, s=self.n, dim=dims) * torch.fft.rfftn(self.g, dim=dims)
        y = torch.fft.irfftn(spec, s=self.n, dim=dims)
        for d, s in zip(dims, self.sizes):
            y = y.narrow(d, 0, s)
        return y

    @staticmethod
    def theoretical_macs(channels: int, size: tuple[int, ...], taps: tuple[int, ...]) -> float:
        n = math.prod(fft_size(s, k) for s, k in zip(size, taps))
        return float(fourier_conv_cost(float(n), channels))

    def extra_repr(self) -> str:
        return f"channels={self.g.shape[0]}, N={self.n}"


REGISTRY: dict[str, type[nn.Module]] = {
    t.name: t for t in (DirectConv, MatMulFFTConv, DFTConv)
}
TACTICS = tuple(REGISTRY)  # in order of preference: ties go to the first
PORTABLE = tuple(name for name, t in REGISTRY.items() if t.portable)  # no DFT op


def tactic(name: str) -> type[nn.Module]:
    """The tactic called ``name``; a ValueError names the known ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown tactic {name!r}; choose from {', '.join(TACTICS)}")
    return REGISTRY[name]


def make_conv(name: str, kernel: Tensor, size: tuple[int, ...]) -> nn.Module:
    """The lowered module of a (C, *taps) kernel at resolution ``size``, as tactic ``name``."""
    return tactic(name)(kernel, size)


def conv_macs(name: str, channels: int, size: tuple[int, ...], taps: tuple[int, ...]) -> float:
    """Theoretical cost of one depthwise convolution per sample under tactic ``name``."""
    return tactic(name).theoretical_macs(channels, size, taps)
