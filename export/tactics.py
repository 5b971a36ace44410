"""The convolution tactics: each depthwise 'same' convolution of a block becomes one of them.

A tactic is one module class: its constructor builds the lowered module from the kernel and the
block's resolution. Their multiply-accumulates, which of them every backend runs and the by-cost
choice are :mod:`dnarch_deploy.operators`' (the search's cost model prices the same figures).
:data:`REGISTRY` holds them by name; which one a block gets is :mod:`export.policy`'s choice.

  ``direct``  ONNX ``Conv`` (groups = channels padded to a multiple of 4, 'same' zero padding)
              (:class:`DirectConv`).
  ``dense``   one batched MatMul, per channel the convolution's (P x P) matrix on the P
              positions of the block (:class:`DenseConv`; up to
              :data:`~dnarch_deploy.operators.DENSE_MAX_POSITIONS` positions; chosen only by
              measurement: fast at large batches, slow at batch 1).
  ``matmul``  an FFT written with MatMul, elementwise Mul / Add and moves of data only
              (:class:`MatMulFFTConv`: four-step / Monarch layout in 1-D, its twiddle folded
              into batched MatMuls; one dense DFT matrix per axis in 2-D), plus a Pad / Slice
              when the length does not fill the four-step grid.
  ``multistep`` the same MatMul FFT with three factors (:class:`MultiStepFFTConv`): on long
              axes O(N (N1 + 2 (N2 + N3))) multiply-adds against the four-step's O(N^1.5),
              within 5.5x of a textbook radix-2 FFT convolution's (:func:`fft_reference_macs`)
              up to N = 8192 (the four-step: 6.7x at 1024, 11x at 4096); more, smaller MatMuls.
  ``dft``     ``torch.fft`` in the graph, exported as the ONNX ``DFT`` op (:class:`DFTConv`).

All five compute the same cross-correlation as :func:`dnarch_deploy.spectral.direct_conv`. The FFT
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

from dnarch_deploy import operators
from dnarch_deploy.operators import MAX_FACTORS, fft_factors, pow2_fft_length
from dnarch_deploy.spectral import conv_fft_length

from .resampling import by_part, complex_block, forward_half, inverse_half, roots


class DirectConv(nn.Module):
    """Depthwise 'same' cross-correlation as a grouped 2-D convolution (ONNX Conv): C' * L * K.

    Where onnxruntime's fast depthwise kernel runs (``benchmarks/direct_conv.py``): a 1-D
    input is a one-row image (Unsqueeze / Squeeze around the Conv), and the channels are padded
    with zero filters to C' = :func:`operators.depthwise_channels` (a Pad before the Conv for
    the inputs it is not given, a Slice after it; with ``trim`` off it returns all C', for a
    block whose next layer has zero weights for them: ``StaticBlock.read_wider``)."""

    name = "direct"

    def __init__(self, kernel: Tensor, size: tuple[int, ...] | None = None,
                 period: tuple[int, ...] | None = None):
        super().__init__()  # size: a grouped convolution runs at any length
        self.channels, self.taps = kernel.shape[0], tuple(kernel.shape[1:])
        self.period = None  # the kernel's every tap, linearly (a periodic one too)
        taps_2d = (1, *self.taps) if len(self.taps) == 1 else self.taps
        weight = kernel.new_zeros(operators.depthwise_channels(self.channels), 1, *taps_2d)
        weight[: self.channels, 0] = kernel.detach().reshape(self.channels, *taps_2d)
        self.register_buffer("weight", weight)  # (C', 1, *taps), a one-row kernel in 1-D
        self.padding = tuple(k // 2 for k in taps_2d)
        self.trim = True  # return the first ``channels`` outputs, not all C'

    def forward(self, x: Tensor) -> Tensor:
        given, padded = x.shape[1], self.weight.shape[0]
        if not self.channels <= given <= padded:
            raise ValueError(f"a direct convolution of {self.channels} channels (padded to "
                             f"{padded}) was given {given}")
        one_d = x.dim() == 3
        if one_d:
            x = x.unsqueeze(2)
        if given < padded:  # zero channels in for the zero filters
            x = F.pad(x, (0, 0, 0, 0, 0, padded - given))
        y = F.conv2d(x, self.weight, padding=self.padding, groups=padded)
        if self.trim and padded > self.channels:
            y = y[:, : self.channels]
        return y.squeeze(2) if one_d else y

    def extra_repr(self) -> str:
        return (f"channels={self.channels} (padded to {self.weight.shape[0]}), "
                f"taps={self.taps}")


def circular_kernel(kernel: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """(C, *N) filter g with circular_conv(x, g) == 'same' cross-correlation with ``kernel``:
    g[d mod N] = kernel[h - d] per axis (h = K // 2)."""
    g = np.zeros((kernel.shape[0], *sizes), dtype=np.float64)
    flipped = kernel[(slice(None), *[slice(None, None, -1)] * (kernel.ndim - 1))]
    index = np.ix_(*[np.arange(-(k // 2), k // 2 + 1) % n for k, n in zip(kernel.shape[1:], sizes)])
    g[(slice(None), *index)] = flipped
    return g


class DenseConv(nn.Module):
    """Depthwise 'same' cross-correlation as one batched MatMul over the channels: C P^2.

    The convolution is linear and, per channel, a (P x P) matrix on the block's P positions
    (flattened): the circular filter g of :func:`circular_kernel` at the FFT lengths N (the
    ``period`` of a kernel with a folded resolution mask, else any length a linear convolution
    fits in) gives T[m, n] = g[(n - m) mod N] per axis. The batch is moved next to the positions,
    (C, B, P) @ (C, P, P): onnxruntime runs one GEMM per channel with B rows, where the direct and
    FFT forms run many small products; at batch 1 it streams the C P^2 weights every call, and a
    whole network runs slower than with the other tactics (``benchmarks/dense_conv.py``)."""

    name = "dense"

    def __init__(self, kernel: Tensor, size: tuple[int, ...],
                 period: tuple[int, ...] | None = None):
        super().__init__()
        if "dense" not in operators.conv_tactics(tuple(size)):
            raise ValueError(f"the dense tactic runs convolutions on at most "
                             f"{operators.DENSE_MAX_POSITIONS} positions, not {math.prod(size)} "
                             f"({'x'.join(map(str, size))})")
        self.channels, self.taps, self.size = kernel.shape[0], tuple(kernel.shape[1:]), tuple(size)
        self.period = period
        lengths = period or tuple(conv_fft_length(s, t) for s, t in zip(size, self.taps))
        g = circular_kernel(kernel.detach().double().numpy(), lengths)  # (C, *N)
        dims = len(size)
        index = []  # per axis a, (n - m) mod N with m on axis a and n on axis dims + a
        for a, (s, n) in enumerate(zip(size, lengths)):
            shape = [1] * (2 * dims)
            shape[a] = shape[dims + a] = s
            index.append(((np.arange(s)[None, :] - np.arange(s)[:, None]) % n).reshape(shape))
        p = math.prod(size)
        matrix = g[(slice(None), *index)].reshape(self.channels, p, p)
        dtype = torch.float64 if kernel.dtype == torch.float64 else torch.float32
        self.register_buffer("matrix", torch.from_numpy(np.ascontiguousarray(matrix)).to(dtype))

    def forward(self, x: Tensor) -> Tensor:
        rows = x.flatten(2).transpose(0, 1)  # (C, B, P)
        y = torch.matmul(rows, self.matrix).transpose(0, 1)
        return y.unflatten(2, self.size) if len(self.size) > 1 else y

    def extra_repr(self) -> str:
        return f"channels={self.channels}, positions={self.matrix.shape[-1]}, taps={self.taps}"


def dft_matrix(n: int) -> np.ndarray:
    """W[j, k] = W_n^(j k)."""
    j = np.arange(n)
    return roots(j[:, None], j[None, :], n)


class MatMulFFTConv(nn.Module):
    """Depthwise 'same' cross-correlation as an FFT made of MatMul, Mul / Add and moves of data.

    1-D: the sequence, zero-padded to N = N1 N2 ... Nk (:func:`fft_factors`, at most
    ``max_factors``), is viewed as an array with axes t1, t2, ..., tk (row-major, t1 slowest) and
    transformed one axis at a time (multi-step Cooley-Tukey, the four-step / Monarch layout for
    k = 2, one dense DFT matrix for k = 1).

    Two factors (the four-step, :meth:`_forward_four_step`): the frequency k1 of the first stage
    is moved to the front, (P1, B C, 2 N2) with real and imaginary parts side by side, so that the
    twiddle W_N^(k1 t2) is folded into one (2 N2 x 2 N2) real matrix per k1 and the second stage
    is one batched MatMul: the forward transform is the spectral resampling's first half
    (:func:`export.resampling.forward_half`), the inverse its second (``inverse_half``). Against the
    general form below it leaves out the twiddles' Mul / Add passes and three of every four
    MatMul calls, for three Transposes (two forward, one back); its price is P1 such matrices per
    block (~0.8 MB at 1024 samples).

    More factors: stage j is a DFT along axis j followed by the twiddle
    W_Mj^(kj t') (Mj = Nj ... Nk, t' the index over the later axes). Stage 1 multiplies from the
    left; every later stage first moves t_j to the last axis (a Transpose) and
    multiplies from the right, one large MatMul over all other axes, which leaves k_j last. The
    spectrum comes out in digit-reversed order k = k1 + N1 k2 + N1 N2 k3 + ..., which is the
    order the filter's spectrum G is stored in, and the inverse runs the stages backwards with
    conjugate matrices and twiddles. x is real, so only k1 <= N1 / 2 is kept (Hermitian
    symmetry) and the last MatMul weights those rows 1 or 2 and takes the real part; the zero
    padding and the crop back to L are folded into the first and last DFT matrices.

    2-D: one dense DFT matrix per axis (the image itself is the matrix).
    """

    name = "matmul"

    def __init__(self, kernel: Tensor, size: tuple[int, ...],
                 period: tuple[int, ...] | None = None, factors: tuple[int, ...] | None = None):
        """``period`` (:func:`dnarch_deploy.operators.conv_period`): the FFT lengths of a
        circular convolution, for a kernel periodic in them (a resolution mask folded into it):
        the transforms run at exactly those lengths where that costs fewer MACs than the linear
        convolution's (in 1-D, :func:`fft_factors` picks; 2-D axes take the period as given). 1-D
        ``factors``: the grid N1 x N2 ... to use instead of :func:`fft_factors`' (for
        benchmarks; their product must reach conv_fft_length)."""
        super().__init__()
        k = kernel.detach().double().numpy()
        taps, channels = tuple(kernel.shape[1:]), kernel.shape[0]
        self.taps, self.channels, self.period = taps, channels, period
        self.length = size[0] if len(size) == 1 else None  # 1-D: pad/reshape/crop around it
        lengths = period or tuple(conv_fft_length(s, t) for s, t in zip(size, taps))
        buffers: dict[str, np.ndarray] = {}
        if len(size) == 1:  # the period, or any length a linear convolution fits in
            factors = factors or fft_factors(size[0], taps[0], MAX_FACTORS[self.name],
                                             period=lengths[0] if period else None)
            linear = conv_fft_length(size[0], taps[0])
            if math.prod(factors) < linear and math.prod(factors) != lengths[0]:
                also = f" nor make the period {lengths[0]}" if period else ""
                raise ValueError(f"factors {factors} do not reach the FFT length {linear}{also}")
            n1, n = factors[0], math.prod(factors)
            r1 = n // n1
            rows_in = -(-size[0] // r1)
            self.grid, self.pad = (rows_in, r1), rows_in * r1 - size[0]
            g = np.fft.fft(circular_kernel(k, (n,)), axis=-1)  # (C, N) in natural order
            # digit-reversed: (C, Nk, ..., N1) row-major is k = k1 + N1 k2 + ..., reversed axes
            spec = g.reshape(channels, *factors[::-1]).transpose(0, *range(len(factors), 0, -1))
            f_rows, scale = dft_matrix(n1)[:, :rows_in], n
            p = n1 // 2 + 1
            spec = spec[:, :p].reshape(channels, p, r1)  # (C, P1, R1): k_2 .. k_k row-major
            if len(factors) == 2:  # the four-step: twiddle folded into the second stage
                buffers.update(_four_step(f_rows[:p], spec, factors))
            else:
                for j in range(1, len(factors)):  # twiddle after stage j: (P1, R1), (Rj, 1, Nj)
                    m, nj = math.prod(factors[j - 1:]), factors[j - 1]
                    kj = np.arange(p if j == 1 else nj)[:, None]
                    tw = roots(kj, np.arange(m // nj)[None, :], m)
                    buffers.update(_complex(f"t{j}", tw if j == 1 else tw.T[:, None, :]))
                for j in range(2, len(factors) + 1):  # stage j's DFT (symmetric: left or right)
                    buffers.update(_complex(f"d{j}", dft_matrix(factors[j - 1])))
            self.factors = factors
        else:
            (h, w), (n1, n2) = size, lengths
            self.grid, self.pad, self.factors = (h, w), 0, (n1, n2)
            spec = np.fft.fft2(circular_kernel(k, (n1, n2)))  # (C, N1, N2)
            f_rows, scale = dft_matrix(n1)[:, :h], n1 * n2
            p = n1 // 2 + 1
            spec = spec[:, :p]
            # (W, N2) with the zero padding folded in, and its inverse (N2, W)
            buffers.update(_complex("c", dft_matrix(n2)[:w, :]))
            buffers.update(_complex("i", np.conj(dft_matrix(n2)).T[:, :w]))
        weight = np.where((np.arange(p) == 0) | (2 * np.arange(p) == n1), 1.0, 2.0)
        back = (np.conj(f_rows[:p]).T * weight) / scale  # (rows, P)
        self.bins, self.q = p, spec[0].size  # P1; complex values per channel after stage 1
        if self.length is not None and len(self.factors) == 2:  # in _four_step's layouts
            buffers["back"] = np.concatenate([back.real, -back.imag], 1)  # (rows, 2 P)
        else:
            buffers.update({
                "f_re": f_rows[:p].real, "f_im": f_rows[:p].imag,  # (P, rows)
                "b_re": back.real, "b_imn": -back.imag,  # (rows, P)
            })
            buffers.update(_complex("g", spec))
        dtype = torch.float64 if kernel.dtype == torch.float64 else torch.float32
        for name, value in buffers.items():  # float64 kernel: float64 operators (tests)
            self.register_buffer(name, torch.from_numpy(np.ascontiguousarray(value)).to(dtype))
        self.n = tuple(int(f) for f in self.factors)
        self.stages = len(self.factors) if self.length is not None else 1

    def _stage(self, j: int) -> tuple[int, int, int]:
        """1-D stage j >= 2: (Nj, Rj, Qj). Before it the spectrum is laid out (B, C, P1, t_j ..
        t_k, k_2 .. k_{j-1}): Rj = N_{j+1} ... Nk time indices after t_j, Qj = N2 ... N_{j-1}
        frequency indices done."""
        f = self.factors
        return f[j - 1], math.prod(f[j:]), math.prod(f[1:j - 1])

    def forward(self, x: Tensor) -> Tensor:
        if self.length is None:
            return self._forward_2d(x)
        if self.pad:
            x = F.pad(x, (0, self.pad))
        if len(self.factors) == 2:
            y = self._forward_four_step(x)
            return y[..., : self.length] if self.pad else y
        c, p = self.channels, self.f_re.shape[0]
        x = x.reshape(-1, c, *self.grid)  # (B, C, rows, R1)
        re, im = torch.matmul(self.f_re, x), torch.matmul(self.f_im, x)  # (B, C, P1, R1)
        k = len(self.factors)
        if k > 1:
            re, im = _cmul(re, im, *self._c("t1"))
        for j in range(2, k + 1):  # t_j to the last axis, its DFT from the right, twiddle j
            nj, rj, qj = self._stage(j)
            re, im = (_last(z.reshape(-1, c, p, nj, rj * qj)) for z in (re, im))
            re, im = _cmatmul(re, im, *self._c(f"d{j}"), right=True)  # (.., t_j+1.., k_2..k_j)
            if j < k:
                re, im = re.reshape(-1, c, p, rj, qj, nj), im.reshape(-1, c, p, rj, qj, nj)
                re, im = _cmul(re, im, *self._c(f"t{j}"))
        re, im = re.reshape(-1, c, p, self.grid[1]), im.reshape(-1, c, p, self.grid[1])
        re, im = _cmul(re, im, *self._c("g"))  # (B, C, P1, R1): the filter, k_2..k_k order
        for j in range(k, 1, -1):  # the forward stages undone, conjugate
            nj, rj, qj = self._stage(j)
            if j < k:
                re, im = re.reshape(-1, c, p, rj, qj, nj), im.reshape(-1, c, p, rj, qj, nj)
                re, im = _cmul(re, im, *self._c(f"t{j}", conj=True))
            re, im = re.reshape(-1, c, p, rj * qj, nj), im.reshape(-1, c, p, rj * qj, nj)
            re, im = _cmatmul(re, im, *self._c(f"d{j}", conj=True), right=True)
            re, im = _last(re), _last(im)  # (B, C, P1, t_j, t_j+1.., k_2..k_j-1)
        if k > 1:
            re, im = re.reshape(-1, c, p, self.grid[1]), im.reshape(-1, c, p, self.grid[1])
            re, im = _cmul(re, im, *self._c("t1", conj=True))
        y = torch.matmul(self.b_re, re) + torch.matmul(self.b_imn, im)  # (B, C, rows, R1)
        y = y.reshape(-1, c, self.grid[0] * self.grid[1])
        return y[..., : self.length] if self.pad else y

    def _forward_four_step(self, x: Tensor) -> Tensor:
        """(B, C, rows R1) -> (B, C, rows R1): the resampling's two halves (export.resampling:
        steps (1)-(2) and (3)-(4)) around the filter, in :func:`_four_step`'s layouts."""
        (rows, r1), c, p = self.grid, self.channels, self.bins
        z = forward_half(x, self.first, self.second).reshape(p, -1, c, 2 * r1)  # (P1, B, C, .)
        return self._inverse(self._filter(z).reshape(p, -1, 2 * r1)).reshape(-1, c, rows * r1)

    def _filter(self, z: Tensor) -> Tensor:
        """The product with the filter's spectrum, (P1, B, C, re | im N2) in and out (other forms
        of it measured slower: ``benchmarks/four_step.py``, third table)."""
        r1 = z.shape[-1] // 2
        re, im = z[..., :r1], z[..., r1:]
        return torch.cat([re * self.g_re - im * self.g_im, re * self.g_im + im * self.g_re], -1)

    def _inverse(self, z: Tensor) -> Tensor:
        """The four-step's inverse half: (P1, lines, re | im N2) -> (lines, rows R1)."""
        return inverse_half(z, self.second_inverse, self.back)

    def _forward_2d(self, x: Tensor) -> Tensor:
        re, im = torch.matmul(self.f_re, x), torch.matmul(self.f_im, x)  # (B, C, P, W)
        re, im = _cmatmul(re, im, *self._c("c"), right=True)  # (B, C, P, N2)
        re, im = _cmul(re, im, *self._c("g"))
        re, im = _cmatmul(re, im, *self._c("i"), right=True)  # (B, C, P, W)
        return torch.matmul(self.b_re, re) + torch.matmul(self.b_imn, im)

    def _c(self, name: str, conj: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """(re, im, -im) of complex buffer ``name``; conj: of its conjugate."""
        re, im, imn = (getattr(self, f"{name}_{s}") for s in ("re", "im", "imn"))
        return (re, imn, im) if conj else (re, im, imn)

    def macs(self) -> float:
        """Real multiply-accumulates per sample, counted from the operators' shapes."""
        (rows, cols), p, q = self.grid, self.bins, self.q
        macs = 2 * 2 * p * rows * cols  # first and last MatMuls (real in, real out)
        macs += 4 * q  # the filter
        if self.length is not None:
            twiddles = len(self.factors) > 2  # the four-step's is folded into its DFT 2
            for j in range(2, len(self.factors) + 1):
                macs += 2 * 4 * q * self.factors[j - 1] + 2 * 4 * q * twiddles  # DFT j, twiddle
        else:
            macs += 2 * 4 * q * cols  # the DFTs along the second axis, (W, N2) and (N2, W)
        return float(self.channels * macs)

    def extra_repr(self) -> str:
        kind = ("2-D dense" if self.length is None else
                {1: "dense", 2: "four-step"}.get(len(self.factors), f"{len(self.factors)}-step"))
        return f"channels={self.channels}, N={self.n}, {kind}, pad={self.pad}"


class MultiStepFFTConv(MatMulFFTConv):
    """:class:`MatMulFFTConv` with up to three factors (N1 N2 N3): fewer multiply-adds on long
    axes (O(N (N1 + 2 (N2 + N3) + 4)) against the four-step's O(N^1.5)), one more stage (a
    Transpose, a MatMul and a twiddle each way). 2-D as :class:`MatMulFFTConv`.

    Three, not more: in onnxruntime on CPU each stage's Transpose and twiddle are memory-bound
    passes that cost more than the multiply-adds a further factor saves (measured, L = 1024 and
    4096, 64 channels, 1 thread: four factors 1.8x slower than three at batch 1 and 16). A
    prime-factor (Good-Thomas) form, which has no twiddles, was slower still: its index Gathers and
    its Transposes with 2..7-wide inner axes ran at ~1 GB/s in onnxruntime.
    """

    name = "multistep"  # by cost only where its MACs are 3x fewer (operators.CONV_COST_WEIGHT)

    def same_as(self, other: nn.Module) -> bool:
        """Whether ``other`` (a :class:`MatMulFFTConv`) is the very same lowering."""
        return isinstance(other, MatMulFFTConv) and self.n == other.n


def _four_step(f: np.ndarray, spec: np.ndarray, factors: tuple[int, int]
               ) -> dict[str, np.ndarray]:
    """The four-step's buffers in :meth:`MatMulFFTConv._forward_four_step`'s layouts, complex
    values as real and imaginary parts side by side: ``first`` (2 P1, rows), the first stage's
    DFT rows stacked re over im; ``second`` (P1, 2 N2, 2 N2), per k1 the twiddle W_N^(k1 t2)
    times the DFT along t2, and ``second_inverse`` (2, P1, 2 N2, N2), its conjugate transpose's
    map, real and imaginary parts' columns apart (:func:`export.resampling.by_part`); ``g_re`` and
    ``g_im`` (P1, 1, C, N2), the filter's spectrum. f: (P1, rows) complex, spec: (C, P1, N2)."""
    n1, n2 = factors
    p = f.shape[0]
    tw = roots(np.arange(p)[:, None], np.arange(n2)[None, :], n1 * n2)  # (P1, N2): k1 t2
    d2 = dft_matrix(n2)
    spec = spec.transpose(1, 0, 2)[:, None]  # (P1, 1, C, N2)
    return {"first": np.concatenate([f.real, f.imag], 0),
            "second": complex_block(tw[:, :, None] * d2),
            "second_inverse": by_part(complex_block(np.conj(d2) * np.conj(tw)[:, None, :])),
            "g_re": spec.real, "g_im": spec.imag}


def _last(z: Tensor) -> Tensor:
    """Swap the last two axes (a Reshape, no Transpose in the graph, when either is 1)."""
    if 1 in z.shape[-2:]:
        return z.reshape(-1, *z.shape[1:-2], z.shape[-1], z.shape[-2])  # batch: any
    return z.transpose(-1, -2)


def _complex(name: str, value: np.ndarray) -> dict[str, np.ndarray]:
    return {f"{name}_re": value.real, f"{name}_im": value.imag, f"{name}_imn": -value.imag}


def _cmul(re: Tensor, im: Tensor, w_re: Tensor, w_im: Tensor, w_imn: Tensor
          ) -> tuple[Tensor, Tensor]:
    """(re + i im) * (w_re + i w_im), elementwise (broadcast)."""
    return re * w_re + im * w_imn, re * w_im + im * w_re


def _cmatmul(re: Tensor, im: Tensor, w_re: Tensor, w_im: Tensor, w_imn: Tensor,
             right: bool) -> tuple[Tensor, Tensor]:
    """(re + i im) @ W (right) or W @ (re + i im)."""
    if right:
        return re @ w_re + im @ w_imn, re @ w_im + im @ w_re
    return w_re @ re + w_imn @ im, w_im @ re + w_re @ im


class DFTConv(nn.Module):
    """Depthwise 'same' cross-correlation with torch.fft: exported as the ONNX DFT op (not on every
    backend: TensorRT has none); C * N * log2 N on power-of-two lengths (only ever chosen by
    measurement: see :data:`dnarch_deploy.operators.CONV_COST_WEIGHT`)."""

    name = "dft"

    def __init__(self, kernel: Tensor, size: tuple[int, ...],
                 period: tuple[int, ...] | None = None):
        super().__init__()
        self.sizes, self.taps = tuple(size), tuple(kernel.shape[1:])
        self.period = None  # linear, at power-of-two lengths (the DFT op's exact ones)
        self.n = tuple(pow2_fft_length(s, k) for s, k in zip(size, kernel.shape[1:]))
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


def distinct_tactics(kernel: Tensor, size: tuple[int, ...],
                     tactics: tuple[str, ...] | None = None,
                     period: tuple[int, ...] | None = None) -> dict[str, nn.Module]:
    """The lowered module under each tactic offered at this size
    (:func:`dnarch_deploy.operators.conv_tactics`), leaving out one that is the same lowering as
    an earlier tactic's (multistep where its best factorisation is the matmul tactic's)."""
    mods: dict[str, nn.Module] = {}
    offered = operators.conv_tactics(tuple(size))
    for name in tactics or TACTICS:
        if name not in offered:
            continue
        module = make_conv(name, kernel, size, period)
        same = getattr(module, "same_as", None)
        if same is None or not any(same(m) for m in mods.values()):
            mods[name] = module
    return mods


REGISTRY: dict[str, type[nn.Module]] = {
    t.name: t for t in (DirectConv, DenseConv, MatMulFFTConv, MultiStepFFTConv, DFTConv)
}
assert tuple(REGISTRY) == operators.CONV_TACTICS
TACTICS = operators.CONV_TACTICS  # in order of preference: ties go to the first
PORTABLE = operators.PORTABLE  # no DFT op


def tactic(name: str) -> type[nn.Module]:
    """The tactic called ``name``; a ValueError names the known ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown tactic {name!r}; choose from {', '.join(TACTICS)}")
    return REGISTRY[name]


def make_conv(name: str, kernel: Tensor, size: tuple[int, ...],
              period: tuple[int, ...] | None = None) -> nn.Module:
    """The lowered module of a (C, *taps) kernel at resolution ``size``, as tactic ``name``;
    ``period``: the kernel is periodic in these lengths (:class:`MatMulFFTConv`)."""
    return tactic(name)(kernel, size, period)


def conv_macs(name: str, channels: int, size: tuple[int, ...], taps: tuple[int, ...],
              period: tuple[int, ...] | None = None) -> float:
    """Theoretical cost of one depthwise convolution per sample under tactic ``name``
    (:func:`dnarch_deploy.operators.conv_macs`)."""
    tactic(name)  # an unknown name: the ValueError that lists the tactics
    return operators.conv_macs(name, channels, size, taps, period)
