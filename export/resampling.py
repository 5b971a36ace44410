"""Spectral resampling lowered to fixed-size operators, per axis (:data:`RESAMPLE_TACTICS`).

:func:`dnarch_deploy.spectral.resample` (resolution-mask values included) is a real linear map
per axis, lowered as ``dense``: one MatMul with its (n, size) matrix (:class:`AxisMatMul`; best on
short axes), ``factored``: a four-step FFT of four MatMuls, the crop and mask folded in
(:class:`FactoredResample`; O((n + size)(N2 + keep / N2)) instead of O(n size), long axes; N2 a
common factor of n and size), or ``split``: the same with a split of its own on each side, the
spectrum re-laid out in between (two Transposes; for lengths with no good common factor, such as
the fast lengths 540 or 1080 the model picks on a 1024- or 4096-sample axis).
Their multiply-accumulates and the by-cost choice are :mod:`dnarch_deploy.operators`'; which
one a block gets is :mod:`export.policy`'s choice.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dnarch_deploy.operators import (
    RESAMPLE_FORMS,
    factored_split,
    split_macs,
    split_pair,
)
from dnarch_deploy.spectral import resample_matrix

from .static import Resample

# --- resampling as MatMul -------------------------------------------------------------------------

# Along the second-to-last axis a MatMul multiplies from the left, M @ x with x (B, C, n, W):
# onnxruntime runs that as one small (size x n) @ (n x W) GEMM per image and channel, whose fixed
# cost dominates when the rows are short (W = 8: a 8 x 8 x 8 GEMM). Below this row length the
# axis is transposed to the end first, (x^T @ M)^T, which is one GEMM over all B C W rows; above
# it the two Transposes cost more than they save (benchmarks/axis_matmul.py).
TRANSPOSE_ROWS_BELOW = 16


class AxisMatMul(nn.Module):
    """A fixed linear map along one spatial axis (dim -1 or -2) as one MatMul."""

    def __init__(self, matrix: Tensor, dim: int, transposed: bool | None = None):
        super().__init__()
        self.dim = dim
        # along dim -2: (x^T @ M)^T instead of M^T @ x; None: on rows shorter than
        # TRANSPOSE_ROWS_BELOW (fixed here only for benchmarks/axis_matmul.py)
        self.transposed = transposed
        self.sizes = tuple(matrix.shape)  # (samples in, samples out) along the axis
        # stored the way it is applied: x @ M (last axis) or M^T @ x (second-to-last axis)
        weight = matrix if dim == -1 else matrix.T
        self.register_buffer("weight", weight.to(torch.float32).contiguous())

    def forward(self, x: Tensor) -> Tensor:
        if self.dim == -1:
            return torch.matmul(x, self.weight)
        transposed = self.transposed
        if transposed is None:
            transposed = x.shape[-1] < TRANSPOSE_ROWS_BELOW
        if transposed:  # (x^T @ M)^T: one GEMM over every row
            return torch.matmul(x.transpose(-1, -2), self.weight.T).transpose(-1, -2)
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
    if tactic == "split":
        a, b = split_pair(n, module.size)[:2]
        return FactoredResample(n, module.size, module.dim, mask, n2=a, n2_out=b)
    if tactic not in RESAMPLE_TACTICS:
        raise ValueError(f"unknown resampling tactic {tactic!r}; choose from "
                         f"{', '.join(RESAMPLE_TACTICS)}")
    matrix = resample_matrix(n, module.size, mask, dtype=torch.float64)
    return AxisMatMul(matrix, module.dim)

# --- resampling as a factored (four-step) MatMul FFT ---------------------------------------------

RESAMPLE_TACTICS = RESAMPLE_FORMS


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

    ``n2_out`` (N2', dividing ``size``; default N2): the output side (3), (4) split by N2' instead,
    k = N2' k1' + k2', s = s1 + M s2 with M = size / N2'; between (2) and (3) the kept spectrum is
    put in natural order (a Transpose), padded or cut to K1' N2' bins and laid out by k2' (a
    second Transpose). N2 and N2' need no common factor.
    """

    def __init__(self, n: int, size: int, dim: int, mask: Tensor | None = None,
                 n2: int | None = None, dtype: torch.dtype = torch.float32,
                 n2_out: int | None = None):
        super().__init__()
        self.dim, self.sizes = dim, (n, size)
        if n2 is None:
            n2 = factored_split(n, size)[0]
        b = n2 if n2_out is None else n2_out  # the output side's split
        if n % n2 or size % b:
            raise ValueError(f"N2={n2} must divide {n} and N2'={b} must divide {size}")
        n1, m = n // n2, size // b
        keep = min(n, size) // 2 + 1
        k1, k1_out = -(-keep // n2), -(-keep // b)
        self.n2, self.n2_out, self.n1, self.m, self.k1, self.k1_out = n2, b, n1, m, k1, k1_out
        c = np.zeros(k1_out * b)
        c[:keep] = resample_bin_weights(n, size, None if mask is None else mask.double().numpy())
        w1, w2 = forward_half_weights(n, n2, k1)
        w3, w4 = inverse_half_weights(size, b, c)
        for name, value in {"w1": w1, "w2": w2, "w3": w3, "w4": w4}.items():
            self.register_buffer(name, torch.from_numpy(np.ascontiguousarray(value)).to(dtype))

    def forward(self, x: Tensor) -> Tensor:
        if self.dim == -2:
            x = x.transpose(-1, -2)
        lead = x.shape[:-1]
        z = forward_half(x, self.w1, self.w2)  # (k2, lines, re | im k1)
        if self.n2_out != self.n2:  # the spectrum in natural order, then split by N2'
            z = from_natural_order(to_natural_order(z), self.k1_out * self.n2_out, self.n2_out)
        y = inverse_half(z, self.w3, self.w4).reshape(*lead, self.sizes[1])
        return y.transpose(-1, -2) if self.dim == -2 else y

    def macs(self) -> int:
        """Real multiply-accumulates per line along the axis."""
        return split_macs(*self.sizes, self.n2, self.n2_out)

    def extra_repr(self) -> str:
        return (f"{self.sizes[0]} -> {self.sizes[1]} along dim {self.dim}, "
                f"N2={self.n2}, N2'={self.n2_out}, N1={self.n1}, M={self.m}, K1={self.k1}")


# --- the two halves of the four-step form (shared with export.spectrum) --------------------------


def roots(k: np.ndarray, t: np.ndarray, n: int) -> np.ndarray:
    """W_n^(k t) = exp(-2 pi i k t / n) for broadcast integer arrays k and t, exact integer
    phases (k t reduced mod n before the division). Every DFT matrix and twiddle of export's
    MatMul lowerings is built from it."""
    return np.exp(-2j * np.pi * ((k * t) % n) / n)


def forward_half_weights(n: int, n2: int, k1: int, weights: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(w1, w2) of steps (1) and (2) of :class:`FactoredResample`: the DFT of n samples split by N2
    (t = t1 + N1 t2, k = N2 k1 + k2), bins k1 < ``k1``; ``weights`` (K1 N2 real values, by bin)
    scale the bins."""
    n1 = n // n2
    j2, t1, q1 = np.arange(n2), np.arange(n1), np.arange(k1)
    f = roots(j2[:, None], j2[None, :], n2)  # (k2, t2)
    # (2): (k2, t1, k1) = W_n^(t1 k2) W_N1^(t1 k1)
    g = (roots(j2[:, None, None], t1[None, :, None], n)
         * roots(t1[None, :, None], q1[None, None, :], n1))
    if weights is not None:
        g = g * np.asarray(weights).reshape(k1, n2).T[:, None, :]
    # (2 N2, N2): rows re | im; (N2, 2 N1, 2 K1)
    return np.concatenate([f.real, f.imag], axis=0), complex_block(g)


def inverse_half_weights(size: int, b: int, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w3, w4) of steps (3) and (4) of :class:`FactoredResample`: ``size`` samples from the bins
    k = b k1' + k2' (k1' < len(c) / b) weighted by ``c`` (the bin weights, by bin), split by b
    (s = s1 + M s2)."""
    k1_out, m = len(c) // b, size // b
    c = np.asarray(c).reshape(k1_out, b).T  # (k2', k1'): bin b k1' + k2'
    jb, qb, s1 = np.arange(b), np.arange(k1_out), np.arange(m)
    # (3): (k2', k1', s1) = c W_size^(-k2' s1) W_M^(-k1' s1)
    h = c[:, :, None] * np.conj(roots(jb[:, None, None], s1[None, None, :], size)
                                * roots(qb[None, :, None], s1[None, None, :], m))
    e = np.conj(roots(jb[:, None], jb[None, :], b))  # (s2, k2')
    # (2, N2', 2 K1', M); (N2', 2 N2'): Re of e @ (re + i im)
    return by_part(complex_block(h)), np.concatenate([e.real, -e.imag], axis=1)


def forward_half(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    """Steps (1), (2) on lines of n samples (..., n) -> (K2, lines, re | im K1), K2 = half w1's
    rows (N2 here; the kept first-stage bins of the MatMul FFT in export.tactics)."""
    n2, n1, k2 = w1.shape[1], w2.shape[1] // 2, w1.shape[0] // 2
    a = x.reshape(-1, n2, n1).transpose(0, 1).reshape(n2, -1)  # (t2, lines t1)
    a = torch.matmul(w1, a)  # (1): (2 k2, lines t1) = re | im
    a = a.reshape(2, k2, -1, n1).permute(1, 2, 0, 3).reshape(k2, -1, 2 * n1)
    return torch.matmul(a, w2)  # (2): (k2, lines, re | im k1)


def to_natural_order(z: Tensor) -> Tensor:
    """(N2, lines, re | im K1) -> (lines, 2, K1 N2): bin k = N2 k1 + k2 at position k."""
    n2, k1 = z.shape[0], z.shape[-1] // 2
    return z.reshape(n2, -1, 2, k1).permute(1, 2, 3, 0).reshape(-1, 2, k1 * n2)


def from_natural_order(z: Tensor, bins: int, b: int) -> Tensor:
    """(lines, 2, k) in natural order, padded with zeros or cut to ``bins`` (a multiple of b; the
    bins cut carry no weight) -> (b, lines, re | im bins / b), bin b k1' + k2' at [k2', :, k1']."""
    have = z.shape[-1]
    if bins > have:
        z = F.pad(z, (0, bins - have))
    elif bins < have:
        z = z[..., :bins]
    return z.reshape(-1, 2, bins // b, b).permute(3, 0, 1, 2).reshape(b, -1, 2 * (bins // b))


def inverse_half(z: Tensor, w3: Tensor, w4: Tensor) -> Tensor:
    """Steps (3), (4): (N2', lines, re | im K1') -> (lines, S2 M), S2 = w4's rows (N2' here; the
    rows of the MatMul FFT's grid in export.tactics). w3 (2, N2', 2 K1', M) (:func:`by_part`):
    step (3) writes real and imaginary parts as two leading blocks, the layout step (4) reads,
    with no Transpose between them: 0.83-0.90x the four-step convolution's time at 150-256
    samples, 0.72-1.03x at 512-4096 (global kernels, 32-64 channels, batch 1 and 32, 1 thread:
    ``benchmarks/four_step.py``, second table)."""
    b, m = w3.shape[1], w3.shape[3]
    z = torch.matmul(z, w3).reshape(2 * b, -1)  # (3): (re | im k2', lines s1)
    y = torch.matmul(w4, z)  # (4): (s2, lines s1)
    return y.reshape(w4.shape[0], -1, m).transpose(0, 1).reshape(-1, w4.shape[0] * m)


def by_part(w: np.ndarray) -> np.ndarray:
    """(..., p, 2q) with columns re | im -> (2, ..., p, q): the real parts' columns, then the
    imaginary parts'."""
    q = w.shape[-1] // 2
    return np.stack([w[..., :q], w[..., q:]])


def complex_block(w: np.ndarray) -> np.ndarray:
    """(..., p, q) complex -> (..., 2p, 2q) real with [re | im] @ it == [re | im] of the product."""
    return np.concatenate([np.concatenate([w.real, w.imag], axis=-1),
                           np.concatenate([-w.imag, w.real], axis=-1)], axis=-2)
