"""Stage 4: lower the static module to fixed-size operators.

- Spectral down/up-sampling (:func:`dnarch_deploy.spectral.resample`, resolution-mask values
  included) is a real linear map per axis: :func:`lower_resample` builds its matrix by applying it
  to the identity, and :class:`AxisMatMul` applies it as one MatMul.
- Each depthwise convolution becomes one of three tactics (:data:`TACTICS`):

  ``direct``  ONNX ``Conv`` (groups = channels, 'same' zero padding): cost C * L * K.
  ``matmul``  an FFT written with MatMul / Mul / Add / Reshape only (:class:`MatMulFFTConv`,
              four-step / Monarch layout in 1-D, one dense DFT matrix per axis in 2-D), plus a
              Pad / Slice when the length does not fill the four-step grid.
  ``dft``     ``torch.fft`` in the graph, exported as the ONNX ``DFT`` op (:class:`DFTConv`).

All three compute the same cross-correlation as :func:`dnarch_deploy.spectral.direct_conv`. The FFT
forms use circular convolution of length N >= L + K // 2 per axis, which is enough for the 'same'
window: the wrapped-around part of the result lies outside it.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dnarch_deploy.cost import fourier_conv_cost
from dnarch_deploy.spectral import resample_matrix

from .static import Resample, StaticBlock, StaticNet

TACTICS = ("direct", "matmul", "dft")


# --- resampling as MatMul -------------------------------------------------------------------------


class AxisMatMul(nn.Module):
    """A fixed linear map along one spatial axis (dim -1 or -2) as one MatMul."""

    def __init__(self, matrix: Tensor, dim: int):
        super().__init__()
        self.dim = dim
        self.sizes = tuple(matrix.shape)  # (samples in, samples out) along the axis
        # stored the way it is applied: x @ M (last axis) or M^T @ x (second-to-last axis)
        weight = matrix if dim == -1 else matrix.T
        self.register_buffer("weight", weight.to(torch.float32).contiguous())

    def forward(self, x: Tensor) -> Tensor:
        if self.dim == -1:
            return torch.matmul(x, self.weight)
        return torch.matmul(self.weight, x)

    def extra_repr(self) -> str:
        return f"{self.sizes[0]} -> {self.sizes[1]} along dim {self.dim}"


def lower_resample(module: Resample, n: int) -> AxisMatMul:
    """The frozen resampler as one MatMul, its (n, size) matrix built in float64 by applying it to
    the identity (:func:`dnarch_deploy.spectral.resample_matrix`)."""
    mask = None if module.mask is None else module.mask.double()
    matrix = resample_matrix(n, module.size, mask, dtype=torch.float64)
    return AxisMatMul(matrix, module.dim)


# --- convolution tactics --------------------------------------------------------------------------


class DirectConv(nn.Module):
    """Depthwise 'same' cross-correlation as a grouped convolution (ONNX Conv)."""

    def __init__(self, kernel: Tensor):
        super().__init__()
        self.register_buffer("weight", kernel.detach().clone().unsqueeze(1))  # (C, 1, *taps)
        self.taps = tuple(kernel.shape[1:])
        self.padding = tuple(k // 2 for k in kernel.shape[1:])

    def forward(self, x: Tensor) -> Tensor:
        conv = F.conv1d if x.dim() == 3 else F.conv2d
        return conv(x, self.weight, padding=self.padding, groups=self.weight.shape[0])

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


def four_step_factors(length: int, half: int) -> tuple[int, int]:
    """(N1, N2) with N1 * N2 >= length + half minimising :func:`_four_step_macs` (N2 = 1: one
    dense DFT matrix)."""
    n = length + half
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

    def __init__(self, kernel: Tensor, size: tuple[int, ...]):
        super().__init__()
        k = kernel.detach().double().numpy()
        taps, channels = tuple(kernel.shape[1:]), kernel.shape[0]
        self.taps = taps
        self.length = size[0] if len(size) == 1 else None  # 1-D: pad/reshape/crop around it
        if len(size) == 1:
            n1, n2 = four_step_factors(size[0], taps[0] // 2)
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
            n1, n2 = h + th // 2, w + tw // 2
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


def fft_size(length: int, half: int) -> int:
    """The power of two >= length + half: onnxruntime's DFT is radix-2 only there (and exact)."""
    return 1 << (length + half - 1).bit_length()


class DFTConv(nn.Module):
    """Depthwise 'same' cross-correlation with torch.fft: exported as the ONNX DFT op."""

    def __init__(self, kernel: Tensor, size: tuple[int, ...]):
        super().__init__()
        self.sizes, self.taps = tuple(size), tuple(kernel.shape[1:])
        self.n = tuple(fft_size(s, k // 2) for s, k in zip(size, kernel.shape[1:]))
        g = circular_kernel(kernel.detach().double().numpy(), self.n)
        self.register_buffer("g", torch.from_numpy(g).float())  # (C, *N)

    def forward(self, x: Tensor) -> Tensor:
        dims = tuple(range(-len(self.n), 0))
        spec = torch.fft.rfftn(x, s=self.n, dim=dims) * torch.fft.rfftn(self.g, dim=dims)
        y = torch.fft.irfftn(spec, s=self.n, dim=dims)
        for d, s in zip(dims, self.sizes):
            y = y.narrow(d, 0, s)
        return y

    def extra_repr(self) -> str:
        return f"channels={self.g.shape[0]}, N={self.n}"


def make_conv(tactic: str, kernel: Tensor, size: tuple[int, ...]) -> nn.Module:
    if tactic == "direct":
        return DirectConv(kernel)
    if tactic == "matmul":
        return MatMulFFTConv(kernel, size)
    if tactic == "dft":
        return DFTConv(kernel, size)
    raise ValueError(f"unknown tactic {tactic!r}; choose from {', '.join(TACTICS)}")


def conv_macs(tactic: str, channels: int, size: tuple[int, ...], taps: tuple[int, ...]) -> float:
    """Theoretical cost of one depthwise convolution per sample, by tactic: direct C * L * K;
    matmul the MatMul form's multiply-accumulates; dft C * N log2 N (cost.fourier_conv_cost)."""
    if tactic == "direct":
        return float(channels * math.prod(size) * math.prod(taps))
    if tactic == "matmul":
        kernel = torch.zeros(channels, *taps)
        return MatMulFFTConv(kernel, size).macs()
    n = math.prod(fft_size(s, k // 2) for s, k in zip(size, taps))
    return float(fourier_conv_cost(float(n), channels))


# --- lower ----------------------------------------------------------------------------------------


def block_resolution(block: StaticBlock) -> tuple[int, ...]:
    return tuple(block.bias1.shape[1:])


PORTABLE = ("direct", "matmul")  # tactics every backend runs (no DFT op)


def tactic_costs(static: StaticNet) -> list[dict[str, float]]:
    """Per block, the theoretical cost of its convolution under each tactic."""
    costs = []
    for block in static.blocks:
        size, taps = block_resolution(block), tuple(block.conv.kernel.shape[1:])
        costs.append({t: conv_macs(t, block.n_in, size, taps) for t in TACTICS})
    return costs


def cheapest(costs: list[dict[str, float]]) -> list[str]:
    """Per block, the portable tactic with the lower theoretical cost. The DFT op is only ever
    chosen by measurement (--tune): onnxruntime's DFT kernel is far slower than its operation
    count says (research/feasibility.md §3)."""
    return [min(PORTABLE, key=c.get) for c in costs]


def lower(static: StaticNet, tactics: list[str]) -> StaticNet:
    """A copy of ``static`` with every resampling as MatMuls and each convolution as its tactic."""
    if len(tactics) != len(static.blocks):
        raise ValueError(f"{len(tactics)} tactics for {len(static.blocks)} blocks")
    lowered = copy.deepcopy(static)
    input_size = tuple(static.spec["spatial"])
    for block, tactic in zip(lowered.blocks, tactics):
        resolution = block_resolution(block)
        block.down = nn.Sequential(
            *(lower_resample(m, input_size[m.dim]) for m in block.down)
        )
        block.up = nn.Sequential(*(lower_resample(m, resolution[m.dim]) for m in block.up))
        block.conv = make_conv(tactic, block.conv.kernel, resolution)
        block.tactic = tactic
    return lowered.eval()
