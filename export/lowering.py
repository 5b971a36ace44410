"""Stage 4: lower the static module to fixed-size operators.

- Spectral down/up-sampling (:func:`dnarch_deploy.spectral.resample`, resolution-mask values
  included) is a real linear map per axis, lowered per axis (:data:`RESAMPLE_TACTICS`) as
  ``dense``: one MatMul with its (n, size) matrix (:class:`AxisMatMul`; best on short axes), or
  ``factored``: a four-step FFT of four MatMuls, the crop and mask folded in
  (:class:`FactoredResample`; O((n + size)(N2 + keep / N2)) instead of O(n size), long axes).
- Each depthwise convolution becomes one of three tactics (:data:`TACTICS`):

  ``direct``  ONNX ``Conv`` (groups = channels, 'same' zero padding): cost C * L * K.
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

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dnarch_deploy.cost import fourier_conv_cost
from dnarch_deploy.spectral import conv_fft_length, resample_matrix

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

    def macs(self) -> int:
        """Real multiply-accumulates per line along the axis: every output reads every input."""
        return self.sizes[0] * self.sizes[1]

    def extra_repr(self) -> str:
        return f"{self.sizes[0]} -> {self.sizes[1]} along dim {self.dim}"


def lower_resample(module: Resample, n: int, tactic: str = "dense") -> nn.Module:
    """The frozen resampler of a length-n axis as ``tactic`` (:data:`RESAMPLE_TACTICS`): ``dense``
    one MatMul, its (n, size) matrix built in float64 by applying it to the identity
    (:func:`dnarch_deploy.spectral.resample_matrix`); ``factored`` a four-step FFT of MatMuls
    (:class:`FactoredResample`)."""
    mask = None if module.mask is None else module.mask.double()
    if tactic == "factored":
        return FactoredResample(n, module.size, module.dim, mask)
    if tactic != "dense":
        raise ValueError(f"unknown resampling tactic {tactic!r}; choose from dense, factored")
    matrix = resample_matrix(n, module.size, mask, dtype=torch.float64)
    return AxisMatMul(matrix, module.dim)

# --- resampling as a factored (four-step) MatMul FFT ---------------------------------------------

RESAMPLE_TACTICS = ("dense", "factored")


def resample_bin_weights(n: int, size: int, mask: np.ndarray | None = None) -> np.ndarray:
    """c_k, k < min(n, size) // 2 + 1, with :func:`dnarch_deploy.spectral.resample` from n to
    ``size`` samples == ``y_s = Re sum_k c_k X_k exp(2 pi i k s / size)``, X = the unnormalised DFT
    of x. Mirrors ``_resample_fft``: the mask, the folded Nyquist bin of an even target (x2), the
    split Nyquist bin of an even source (x1/2), irfft's weight (1 for DC and the Nyquist bin of
    ``size``, else 2) and rfft's 1 / n (norm="forward")."""
    keep = min(n, size) // 2 + 1
    c = np.ones(keep) if mask is None else np.asarray(mask, dtype=np.float64)[:keep].copy()
    if size < n and size % 2 == 0:
        c[-1] *= 2
    if size > n and n % 2 == 0:
        c[-1] *= 0.5
    k = np.arange(keep)
    return c * np.where((k == 0) | (2 * k == size), 1.0, 2.0) / n


def _factored_macs(n: int, size: int, n2: int) -> int:
    """Real multiply-accumulates per channel of :class:`FactoredResample` with split ``n2``."""
    n1, m = n // n2, size // n2
    k1 = -(-(min(n, size) // 2 + 1) // n2)
    return 2 * n2 * n2 * n1 + 4 * n2 * n1 * k1 + 4 * n2 * k1 * m + 2 * n2 * n2 * m


def factored_split(n: int, size: int) -> tuple[int, int]:
    """(N2, MACs per channel): the common divisor N2 of n and ``size`` minimising
    :func:`_factored_macs`."""
    g = math.gcd(n, size)
    return min(((d, _factored_macs(n, size, d)) for d in range(1, g + 1) if g % d == 0),
               key=lambda t: t[1])


class FactoredResample(nn.Module):
    """Spectral resampling from n to ``size`` samples along one axis, as a four-step FFT of four
    large MatMuls (plus Reshape / Transpose). Exact: the same linear map as
    :func:`dnarch_deploy.spectral.resample`, about (n + size) (2 N2 + 4 keep / N2) multiply-adds
    per line instead of n size.

    With N2 dividing n and size (N1 = n / N2, M = size / N2), t = t1 + N1 t2, the bin
    k = N2 k1 + k2 and the output sample s = s1 + M s2; the kept bins k < keep are k1 < K1 =
    ceil(keep / N2) (the crop), and with c the bin weights (:func:`resample_bin_weights`: mask,
    Nyquist handling, zero for k >= keep):
        A[k2, t1]  = sum_t2 W_N2^(t2 k2) x[t1 + N1 t2]                    (1) one MatMul, re | im
        X[k2, k1]  = sum_t1 W_n^(t1 k2) W_N1^(t1 k1) A[k2, t1]           (2) per k2 (batched)
        U[k2, s1]  = sum_k1 W_size^(-k2 s1) W_M^(-k1 s1) c[k] X[k2, k1]  (3) per k2 (batched)
        y[s1 + M s2] = Re sum_k2 W_N2^(-k2 s2) U[k2, s1]                  (4) one MatMul
    The twiddles and the bin weights are folded into the per-k2 matrices of (2) and (3), complex
    products into real block matrices [[re, im], [-im, re]]; every MatMul runs over all lines
    (batch x channels) at once.
    """

    def __init__(self, n: int, size: int, dim: int, mask: Tensor | None = None,
                 n2: int | None = None, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.dim, self.sizes = dim, (n, size)
        if n2 is None:
            n2 = factored_split(n, size)[0]
        if n % n2 or size % n2:
            raise ValueError(f"N2={n2} must divide both {n} and {size}")
        n1, m = n // n2, size // n2
        keep = min(n, size) // 2 + 1
        k1 = -(-keep // n2)
        self.n2, self.n1, self.m, self.k1 = n2, n1, m, k1
        c = np.zeros(k1 * n2)
        c[:keep] = resample_bin_weights(n, size, None if mask is None else mask.double().numpy())
        c = c.reshape(k1, n2).T  # (k2, k1)
        j2, t1, q1, s1 = np.arange(n2), np.arange(n1), np.arange(k1), np.arange(m)
        f = np.exp(-2j * np.pi * (np.outer(j2, j2) % n2) / n2)  # (k2, t2)
        # (2): (k2, t1, k1) = W_n^(t1 k2) W_N1^(t1 k1)
        g = np.exp(-2j * np.pi * ((j2[:, None, None] * t1[None, :, None]) % n) / n) * np.exp(
            -2j * np.pi * ((t1[None, :, None] * q1[None, None, :]) % n1) / n1)
        # (3): (k2, k1, s1) = c W_size^(-k2 s1) W_M^(-k1 s1)
        h = c[:, :, None] * np.exp(
            2j * np.pi * ((j2[:, None, None] * s1[None, None, :]) % size) / size) * np.exp(
            2j * np.pi * ((q1[None, :, None] * s1[None, None, :]) % m) / m)
        e = np.exp(2j * np.pi * (np.outer(j2, j2) % n2) / n2)  # (s2, k2)
        buffers = {
            "w1": np.concatenate([f.real, f.imag], axis=0),  # (2 N2, N2): rows re | im
            "w2": _complex_block(g),  # (N2, 2 N1, 2 K1)
            "w3": _complex_block(h),  # (N2, 2 K1, 2 M)
            "w4": np.concatenate([e.real, -e.imag], axis=1),  # (N2, 2 N2): Re of e @ (re + i im)
        }
        for name, value in buffers.items():
            self.register_buffer(name, torch.from_numpy(np.ascontiguousarray(value)).to(dtype))

    def forward(self, x: Tensor) -> Tensor:
        if self.dim == -2:
            x = x.transpose(-1, -2)
        lead = x.shape[:-1]
        n1, n2, m = self.n1, self.n2, self.m
        a = x.reshape(-1, n2, n1).transpose(0, 1).reshape(n2, -1)  # (t2, lines t1)
        a = torch.matmul(self.w1, a)  # (1): (2 k2, lines t1) = re | im
        a = a.reshape(2, n2, -1, n1).permute(1, 2, 0, 3).reshape(n2, -1, 2 * n1)
        z = torch.matmul(torch.matmul(a, self.w2), self.w3)  # (2), (3): (k2, lines, re | im s1)
        z = z.reshape(n2, -1, 2, m).permute(2, 0, 1, 3).reshape(2 * n2, -1)  # (re | im k2, ...)
        y = torch.matmul(self.w4, z)  # (4): (s2, lines s1)
        y = y.reshape(n2, -1, m).transpose(0, 1).reshape(*lead, self.sizes[1])
        return y.transpose(-1, -2) if self.dim == -2 else y

    def macs(self) -> int:
        """Real multiply-accumulates per line along the axis."""
        return _factored_macs(*self.sizes, self.n2)

    def extra_repr(self) -> str:
        return (f"{self.sizes[0]} -> {self.sizes[1]} along dim {self.dim}, "
                f"N2={self.n2}, N1={self.n1}, M={self.m}, K1={self.k1}")


def _complex_block(w: np.ndarray) -> np.ndarray:
    """(..., p, q) complex -> (..., 2p, 2q) real with [re | im] @ it == [re | im] of the product."""
    return np.concatenate([np.concatenate([w.real, w.imag], axis=-1),
                           np.concatenate([-w.imag, w.real], axis=-1)], axis=-2)


# The factored form runs four MatMuls (two of them batched over N2 small matrices) and three
# Transposes where the dense form runs one large GEMM: in onnxruntime on CPU it does about a third
# as many multiply-adds per second (measured, 1-D, 32 channels: break-even at a MAC ratio of ~3).
# Without timing (--no-tune) it is chosen only when it needs fewer than 1 / 3 of the dense MACs.
FACTORED_MAC_PENALTY = 3.0


def resample_macs(tactic: str, n: int, size: int) -> int:
    """Real multiply-accumulates per line of one resampling of a length-n axis to ``size``."""
    if tactic == "dense":
        return n * size
    if tactic == "factored":
        return factored_split(n, size)[1]
    raise ValueError(f"unknown resampling tactic {tactic!r}; choose from dense, factored")


def resample_candidates(n: int, size: int) -> tuple[str, ...]:
    """The tactics worth trying: ``factored`` needs a common factor N2 > 1 of n and ``size``."""
    return RESAMPLE_TACTICS if factored_split(n, size)[0] > 1 else ("dense",)


def cheapest_resample(n: int, size: int) -> str:
    """By theoretical cost: ``factored`` when its MACs times FACTORED_MAC_PENALTY are fewer."""
    if "factored" not in resample_candidates(n, size):
        return "dense"
    factored = resample_macs("factored", n, size) * FACTORED_MAC_PENALTY
    return "factored" if factored < resample_macs("dense", n, size) else "dense"


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
    """Depthwise 'same' cross-correlation with torch.fft: exported as the ONNX DFT op."""

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
    n = math.prod(fft_size(s, k) for s, k in zip(size, taps))
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
    count says (benchmarks/export_speed.py times it beside the other tactics)."""
    return [min(PORTABLE, key=c.get) for c in costs]


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


def resample_evidence_by_cost(static: StaticNet) -> list[dict[str, list[dict]]]:
    """Per block, ``down`` / ``up``, per resampled axis: the tactic by :func:`cheapest_resample`
    and the MACs per line of each candidate."""
    return [
        {k: [{"tactic": cheapest_resample(n, size), "by": "cost",
              "macs_per_line": {t: resample_macs(t, n, size) for t in resample_candidates(n, size)}}
             for n, size, _ in v] for k, v in axes.items()}
        for axes in resample_axes(static)
    ]


def resample_tactics_by_cost(static: StaticNet) -> list[dict[str, list[str]]]:
    """Per block, per resampled axis (``down`` / ``up``): :func:`cheapest_resample`."""
    return [{k: [e["tactic"] for e in v] for k, v in block.items()}
            for block in resample_evidence_by_cost(static)]


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
    lowered = copy.deepcopy(static)
    input_size = tuple(static.spec["spatial"])
    for block, tactic, rs in zip(lowered.blocks, tactics, resample):
        resolution = block_resolution(block)
        down, up = zip(block.down, rs["down"], strict=True), zip(block.up, rs["up"], strict=True)
        block.down = nn.Sequential(*(lower_resample(m, input_size[m.dim], t) for m, t in down))
        block.up = nn.Sequential(*(lower_resample(m, resolution[m.dim], t) for m, t in up))
        block.conv = make_conv(tactic, block.conv.kernel, resolution)
        block.tactic = tactic
        block.resample_tactics = {k: list(v) for k, v in rs.items()}
    return lowered.eval()
