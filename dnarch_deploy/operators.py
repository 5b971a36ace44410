"""The operators export lowers a block to, their multiply-accumulates, and the by-cost choice
among the forms of each: the one place both the search's cost model (:mod:`dnarch_deploy.cost`)
and export (:mod:`export.tactics`, :mod:`export.resampling`, :mod:`export.policy`) take them from.
A block's sequence of operators, each declared once with its MACs at export's choices and the
smooth formula the search's gradient follows, is :mod:`dnarch_deploy.block_ops`
(:func:`~dnarch_deploy.block_ops.block_operators`).

A block of the deployed network runs, in order: a Slice of the channels it reads (where it reads
fewer than the stream has), per cropped axis a spectral downsampling, the depthwise 'same'
convolution at the block's resolution, the two pointwise linear maps (the first with a
per-position bias, the norm folded in) with a GELU between them, per resampled axis an
upsampling back to the input's size, the residual add, and a Concat of the channels it writes
with the rest of the stream (where it writes fewer). Each operator has a *kind*, the name a
latency table is keyed by:

  ``linear``            a pointwise linear map (a 1x1 Conv over channels)
  ``pointwise``         an element-wise op (GELU)
  ``add``               an Add: the first layer's per-position bias, the residual (and, in
                        dnarch_deploy.cost, the decoder's global pooling)
  ``copy``              channels copied: the Slices and Concat around a narrowed block
  ``conv.<tactic>``     the convolution as one of :data:`CONV_TACTICS`
  ``resample.<form>``   one axis's spectral resampling as one of :data:`RESAMPLE_FORMS`

Convolution tactics (export/tactics.py builds them):
  ``direct``    ONNX grouped ``Conv`` on the channels padded to a multiple of 4
                (:func:`depthwise_channels`): C' L K.
  ``dense``     one batched MatMul: per channel the (P x P) matrix of the convolution on the
                P positions of the block, flattened: C P^2; offered up to
                :data:`DENSE_MAX_POSITIONS` positions (:func:`conv_tactics`), chosen only by
                measurement (large batches).
  ``matmul``    an FFT of MatMuls, four-step (two factors) or one dense DFT matrix in 1-D, one
                dense DFT matrix per axis in 2-D (:func:`matmul_fft_macs`).
  ``multistep`` the same MatMul FFT with up to three factors (:func:`multistep_macs`).
  ``dft``       the ONNX ``DFT`` op on power-of-two lengths: C N log2 N.
Resampling forms (export/resampling.py builds them), per line along the axis:
  ``dense``     one (n, size) MatMul: n size.
  ``factored``  a four-step FFT split by a common factor of n and size (:func:`factored_split`).
  ``split``     the same with its own split on each side (:func:`split_pair`).

Without timing, export chooses by cost (:func:`cheapest_conv`, :func:`cheapest_resample`); the
cost model prices that choice, so a search's figure is export's theoretical total for the same
architecture exported with ``--no-tune``.
"""

from __future__ import annotations

import functools
import math

from .spectral import conv_fft_length

# in order of preference: ties to the first
CONV_TACTICS = ("direct", "dense", "matmul", "multistep", "dft")
PORTABLE = ("direct", "dense", "matmul", "multistep")  # no DFT op: every backend runs them
RESAMPLE_FORMS = ("dense", "factored", "split")

# The by-cost choice's weights: measured multiply-adds per second against the four-step's.
# direct runs about as fast; multistep 3-4x slower; dense and dft are chosen by measurement only
# (docs/export.md "Lowerings"; benchmarks/direct_conv.py, benchmarks/dense_conv.py).
CONV_COST_WEIGHT = {"direct": 0.95, "dense": math.inf, "matmul": 1.0, "multistep": 3.0,
                    "dft": math.inf}
# The dense tactic's matrices hold C P^2 weights (P positions): 16 MB per block for 64 channels at
# 256 positions. Above that it is not offered.
DENSE_MAX_POSITIONS = 256

# The factored resampling forms run about a third as many multiply-adds per second as one dense
# GEMM in onnxruntime on CPU (docs/export.md "Lowerings").
FACTORED_MAC_PENALTY = 3.0

# onnxruntime's fast (NCHWc) depthwise kernel wants a channel count that is a multiple of 4 on a
# 2-D input: the direct tactic runs as a one-row image with its channels padded to it, priced at
# the padded count (benchmarks/direct_conv.py).
DEPTHWISE_CHANNEL_MULTIPLE = 4

# the largest later factor of a MatMul FFT tried (a stage's DFT matrix is factor x factor)
MAX_STAGE_FACTOR = 64
MAX_FACTORS = {"matmul": 2, "multistep": 3}
# The four-step's second factor N2 is a multiple of 8 from 16: onnxruntime runs those layouts
# faster than the grids of fewest MACs (benchmarks/four_step.py); a circular convolution at the
# training's N tries any N2 dividing N instead (benchmarks/circular_conv.py).
FOUR_STEP_N2 = range(16, MAX_STAGE_FACTOR + 1, 8)


# --- the convolution ------------------------------------------------------------------------------


@functools.cache
def fft_factors(length: int, taps: int, max_factors: int, min_factors: int = 1,
                period: int | None = None) -> tuple[int, ...]:
    """Factors (N1, N2, ..., Nk), min_factors <= k <= max_factors, with N = prod >=
    conv_fft_length(length, taps), minimising :func:`multistep_macs`: N2..Nk (2..MAX_STAGE_FACTOR,
    non-increasing; for k = 2, N2 in FOUR_STEP_N2) are tried, N1 is the smallest that makes N long
    enough. With ``period`` (a kernel periodic in it, :func:`conv_period`), N may also be exactly
    the period, a circular convolution (for k = 2, any N2 dividing it): whichever of the two costs
    less."""
    best = _best_factors(length, conv_fft_length(length, taps), max_factors, min_factors, False)
    if period:
        exact = _best_factors(length, period, max_factors, min_factors, True)
        best = min(best, exact, key=lambda f: multistep_macs(length, f))
    return best


def _best_factors(length: int, n: int, max_factors: int, min_factors: int, exact: bool
                  ) -> tuple[int, ...]:
    """:func:`fft_factors`' search for N >= n, or N == n where ``exact``."""
    best = None

    def visit(later: tuple[int, ...]) -> None:
        nonlocal best
        if len(later) + 1 >= min_factors and (len(later) != 1 or exact or later[0] in FOUR_STEP_N2):
            factors = (-(-n // math.prod(later)), *later)
            cost = multistep_macs(length, factors)
            if (best is None or cost < best[0]) and (not exact or math.prod(factors) == n):
                best = (cost, factors)
        if len(later) + 1 < max_factors:
            top = min(later[-1] if later else MAX_STAGE_FACTOR, n // math.prod(later))
            for f in range(2, top + 1):
                if math.prod(later) * f * 2 <= n:  # N1 >= 2 left
                    visit((*later, f))

    visit(())
    if best is None:  # too short for min_factors: as many as fit
        return _best_factors(length, n, max_factors, 1, exact)
    return best[1]


def four_step_factors(length: int, taps: int) -> tuple[int, int]:
    """(N1, N2) with N1 * N2 >= conv_fft_length(length, taps) minimising the MatMul FFT's MACs
    (N2 = 1: one dense DFT matrix)."""
    factors = fft_factors(length, taps, 2)
    return factors if len(factors) == 2 else (factors[0], 1)


def multistep_macs(length: int, factors: tuple[int, ...]) -> int:
    """Real multiply-accumulates per channel of the 1-D MatMul FFT convolution with these factors:
    first and last stage 2 P1 ceil(L / R1) R1 each (real input, real output; P1 = N1 // 2 + 1,
    R1 = N / N1); each middle stage 4 Nj Q (complex; Q = P1 R1 values), forward and inverse;
    each twiddle 4 Q, forward and inverse, but for two factors, where the twiddle is folded into
    the second stage's matrices (export.tactics.MatMulFFTConv); the spectrum product 4 Q."""
    n1, r1 = factors[0], math.prod(factors[1:])
    p1, rows = n1 // 2 + 1, -(-length // r1)
    q = p1 * r1
    twiddle = 4 * q if len(factors) > 2 else 0
    return 4 * p1 * rows * r1 + 2 * sum(4 * f * q + twiddle for f in factors[1:]) + 4 * q


def matmul_fft_macs(size: tuple[int, ...], taps: tuple[int, ...], max_factors: int,
                    period: tuple[int, ...] | None = None) -> int:
    """Real multiply-accumulates per channel of the MatMul FFT convolution: 1-D,
    :func:`multistep_macs` at the best factors; 2-D (H, W), one dense DFT matrix per axis:
    the rows' real DFT and its inverse 2 P H W each (P = N1 // 2 + 1), the columns' complex DFT
    and its inverse 4 P W N2 each, the spectrum product 4 P N2. ``period``: the lengths of a
    circular convolution (:func:`conv_period`) instead of the shortest linear ones."""
    if len(size) == 1:
        return multistep_macs(size[0], fft_factors(size[0], taps[0], max_factors,
                                                   period=period[0] if period else None))
    (h, w), (n1, n2) = size, period or tuple(conv_fft_length(s, k) for s, k in zip(size, taps))
    p = n1 // 2 + 1
    return 4 * p * h * w + 8 * p * w * n2 + 4 * p * n2


def conv_period(size: tuple[int, ...], taps: tuple[int, ...], fft_sizes: tuple[int, ...],
                ) -> tuple[int, ...]:
    """The lengths per axis at which a circular FFT convolution computes a block whose
    resolution mask filters its spectrum (``fft_sizes``: the training's FFT lengths,
    :attr:`~dnarch_deploy.model.BlockPlan.conv_fft`; ``taps``: the deployed kernel's,
    :attr:`~dnarch_deploy.model.BlockPlan.conv_taps`). On an axis the mask filters, the kernel
    is the masked circular filter spread over 2 S - 1 taps, periodic in the training's length:
    run circularly at exactly that length, it is the trained function, at fewer MACs than a
    linear convolution of 2 S - 1 taps needs (length >= 2 S - 1). On the other axes (the cropped
    ones of an image), the shortest linear length, as without a mask."""
    return tuple(n if k == 2 * s - 1 and n < conv_fft_length(s, k) else conv_fft_length(s, k)
                 for s, k, n in zip(size, taps, fft_sizes))


def rfft_reference_macs(n: int) -> float:
    """Multiply-adds of one textbook real FFT (or inverse real FFT) of length n: 1.25 n log2 n, a
    complex radix-2 FFT's 5 n log2 n flops, halved for real data, two flops per multiply-add."""
    return 1.25 * n * math.log2(max(n, 2))


def fft_reference_macs(n: int) -> float:
    """Multiply-adds of a textbook FFT convolution of length n per channel, the O(N log N)
    reference the MatMul forms are held to: a real FFT and an inverse real FFT
    (:func:`rfft_reference_macs`) and the spectrum product (4 per kept bin)."""
    return 2 * rfft_reference_macs(n) + 4 * (n // 2 + 1)


def resample_reference_macs(n: int, size: int) -> float:
    """Multiply-adds per line of a spectral resampling from n to ``size`` samples by textbook
    FFTs: a real FFT at n and an inverse one at ``size`` (the spectrum's crop or zero padding is
    free). What the resampling would cost where FFTs run at their operation count, against
    :func:`resample_macs`'s MatMul forms (``benchmarks/crop_cost.py``)."""
    return rfft_reference_macs(n) + rfft_reference_macs(size)


def pow2_fft_length(length: int, taps: int) -> int:
    """The power of two >= conv_fft_length(length, taps): onnxruntime's DFT is radix-2 only
    there (and exact)."""
    return 1 << (conv_fft_length(length, taps) - 1).bit_length()


def depthwise_channels(channels: int) -> int:
    """The channel count the direct tactic's grouped Conv runs at: ``channels`` rounded up to a
    multiple of :data:`DEPTHWISE_CHANNEL_MULTIPLE` (the extra filters are zero)."""
    return -(-channels // DEPTHWISE_CHANNEL_MULTIPLE) * DEPTHWISE_CHANNEL_MULTIPLE


def conv_tactics(size: tuple[int, ...]) -> tuple[str, ...]:
    """The tactics export offers for a convolution at resolution ``size``: all of
    :data:`CONV_TACTICS`, but ``dense`` only up to :data:`DENSE_MAX_POSITIONS` positions."""
    if math.prod(size) <= DENSE_MAX_POSITIONS:
        return CONV_TACTICS
    return tuple(t for t in CONV_TACTICS if t != "dense")


def conv_macs(tactic: str, channels: int, size: tuple[int, ...], taps: tuple[int, ...],
              period: tuple[int, ...] | None = None) -> float:
    """Multiply-accumulates per sample of one depthwise 'same' convolution of ``channels``
    channels at ``size`` with ``taps`` taps per axis, lowered as ``tactic``; ``period``
    (:func:`conv_period`): the MatMul FFT forms run it circularly at those lengths (the direct
    and DFT forms take the linear kernel)."""
    if tactic == "direct":
        return float(depthwise_channels(channels) * math.prod(size) * math.prod(taps))
    if tactic == "dense":
        return float(channels * math.prod(size) ** 2)
    if tactic in MAX_FACTORS:
        return float(channels * matmul_fft_macs(tuple(size), tuple(taps), MAX_FACTORS[tactic],
                                                period))
    if tactic == "dft":
        n = math.prod(pow2_fft_length(s, k) for s, k in zip(size, taps))
        return float(channels * n * math.log2(n)) if n > 1 else 0.0
    raise ValueError(f"unknown tactic {tactic!r}; choose from {', '.join(CONV_TACTICS)}")


def cheapest_conv(costs: dict[str, float]) -> str:
    """The portable tactic with the lowest MACs (``costs``: tactic -> :func:`conv_macs`, for the
    tactics offered) times its :data:`CONV_COST_WEIGHT` (an infinite weight: never by cost);
    ties go to the first in :data:`CONV_TACTICS` order."""
    return min((t for t in PORTABLE if t in costs and math.isfinite(CONV_COST_WEIGHT[t])),
               key=lambda t: costs[t] * CONV_COST_WEIGHT[t])


def conv_by_cost(channels: int, size: tuple[int, ...], taps: tuple[int, ...],
                 period: tuple[int, ...] | None = None) -> str:
    """The tactic export picks by cost for this convolution (:func:`cheapest_conv` among
    :func:`conv_tactics`)."""
    return cheapest_conv({t: conv_macs(t, channels, size, taps, period)
                          for t in conv_tactics(size)})


# --- the resampling -------------------------------------------------------------------------------


def _factored_macs(n: int, size: int, n2: int) -> int:
    """Real multiply-accumulates per line of the factored form with common split ``n2``."""
    n1, m = n // n2, size // n2
    k1 = -(-(min(n, size) // 2 + 1) // n2)
    return 2 * n2 * n2 * n1 + 4 * n2 * n1 * k1 + 4 * n2 * k1 * m + 2 * n2 * n2 * m


@functools.cache
def factored_split(n: int, size: int) -> tuple[int, int]:
    """(N2, MACs per line): the common divisor N2 of n and ``size`` minimising the factored
    form's multiply-accumulates."""
    g = math.gcd(n, size)
    return min(((d, _factored_macs(n, size, d)) for d in range(1, g + 1) if g % d == 0),
               key=lambda t: t[1])


def split_macs(n: int, size: int, a: int, b: int) -> int:
    """Real multiply-accumulates per line of the factored form with split a on the input side and
    b on the output side: 2 a n, 4 n K1, 4 K1' size, 2 b size (K1 = ceil(keep / a),
    K1' = ceil(keep / b), keep = min(n, size) // 2 + 1 bins)."""
    keep = min(n, size) // 2 + 1
    return half_macs(n, keep, a) + half_macs(size, keep, b)


def half_macs(length: int, bins: int, d: int) -> int:
    """Real multiply-accumulates per line of one half of the four-step form, split by d (dividing
    ``length``): the first ``bins`` DFT bins of ``length`` samples, or ``length`` samples from
    ``bins`` bins: 2 d length + 4 length ceil(bins / d)."""
    return 2 * d * length + 4 * length * -(-bins // d)


@functools.cache
def half_split(length: int, bins: int) -> int:
    """The split d (a divisor of ``length``) with the fewest :func:`half_macs`."""
    divisors = [d for d in range(1, length + 1) if length % d == 0]
    return min(divisors, key=lambda d: half_macs(length, bins, d))


@functools.cache
def split_pair(n: int, size: int) -> tuple[int, int, int]:
    """(N2 of the input side, N2' of the output side, MACs per line): each divides its own length
    and minimises its half of :func:`split_macs` (no common factor needed: the spectrum is
    re-laid out between the halves)."""
    keep = min(n, size) // 2 + 1
    a, b = half_split(n, keep), half_split(size, keep)
    return a, b, split_macs(n, size, a, b)


@functools.cache
def spectrum_form(length: int, bins: int) -> tuple[str, int]:
    """How one half lowers (:class:`export.spectrum.ToSpectrum`, ``FromSpectrum``): ``("dense",
    1)``, one (length, 2 bins) MatMul, or ``("factored", d)``, the four-step half split by d, when
    its MACs times FACTORED_MAC_PENALTY are fewer."""
    d = half_split(length, bins)
    if d > 1 and half_macs(length, bins, d) * FACTORED_MAC_PENALTY < 2 * length * bins:
        return "factored", d
    return "dense", 1


def spectrum_macs(length: int, bins: int) -> int:
    """Real multiply-accumulates per line of one half as :func:`spectrum_form` lowers it."""
    form, d = spectrum_form(length, bins)
    return half_macs(length, bins, d) if form == "factored" else 2 * length * bins


def resample_macs(form: str, n: int, size: int) -> int:
    """Real multiply-accumulates per line of one resampling of a length-n axis to ``size``."""
    if form == "dense":
        return n * size
    if form == "factored":
        return factored_split(n, size)[1]
    if form == "split":
        return split_pair(n, size)[2]
    raise ValueError(f"unknown resampling tactic {form!r}; choose from "
                     f"{', '.join(RESAMPLE_FORMS)}")


@functools.cache
def resample_candidates(n: int, size: int) -> tuple[str, ...]:
    """The forms worth trying: ``factored`` needs a common factor N2 > 1 of n and ``size``;
    ``split`` a split on either side, and differs from ``factored`` only where the best splits of
    the two sides differ."""
    cands = ["dense"]
    common = factored_split(n, size)[0]
    if common > 1:
        cands.append("factored")
    a, b, _ = split_pair(n, size)
    if max(a, b) > 1 and (a, b) != (common, common):
        cands.append("split")
    return tuple(cands)


@functools.cache
def cheapest_resample(n: int, size: int) -> str:
    """By cost: the factored form (``factored`` or ``split``, the fewer MACs) when its MACs times
    FACTORED_MAC_PENALTY are fewer than the dense MatMul's."""
    cands = [t for t in resample_candidates(n, size) if t != "dense"]
    if not cands:
        return "dense"
    best = min(cands, key=lambda t: resample_macs(t, n, size))
    factored = resample_macs(best, n, size) * FACTORED_MAC_PENALTY
    return best if factored < resample_macs("dense", n, size) else "dense"
