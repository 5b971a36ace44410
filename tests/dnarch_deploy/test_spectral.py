"""Spectral resampling (exact on band-limited signals) and FFT convolution (== direct conv).

Every resampling test runs twice, through the FFT path and through the matrix path
(``resample_path`` fixture in conftest.py): the two implementations of the same linear map.
"""

from __future__ import annotations

import math

import pytest
import torch

from dnarch_deploy.spectral import (
    _RFFT,
    FAST_LENGTH_MIN,
    conv_fft_length,
    conv_fft_sizes,
    direct_conv,
    fft_conv,
    frequency_positions,
    kept_bins,
    masked_kernel,
    next_fast_len,
    resample,
    resample_matrix,
    resolution_for_bins,
    spectrum_positions,
)

F64 = torch.float64


def band_limited(n: int, cutoff: int, batch: tuple[int, ...] = (3, 2), seed: int = 0):
    """Random real signals of length n with energy only at frequencies 0..cutoff (cycles per n);
    at an even cutoff equal to the Nyquist of the target, only the cosine (its sine vanishes on
    the target grid)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n, dtype=F64)
    x = torch.randn(*batch, 1, generator=g, dtype=F64).expand(*batch, n).clone()
    for f in range(1, cutoff + 1):
        a, b = torch.randn(2, *batch, 1, generator=g, dtype=F64)
        x += a * torch.cos(2 * math.pi * f * t / n) + b * torch.sin(2 * math.pi * f * t / n)
    return x


# (n, size): odd and even on both sides, down and up, small and past the matrix/FFT switch
PAIRS = [(16, 9), (16, 10), (17, 9), (17, 10), (30, 30), (9, 16), (10, 16), (200, 131), (201, 64)]


@pytest.mark.parametrize("n, size", PAIRS)
def test_down_up_identity_on_band_limited_signals(n, size, resample_path):
    """up(down(x)) == x when x has no energy at or above the smaller Nyquist (a cosine exactly at
    an even size's Nyquist is covered by the next test)."""
    small, large = min(n, size), max(n, size)
    x = band_limited(large, (small - 1) // 2)
    y = resample(resample(x, small), large)
    torch.testing.assert_close(y, x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, size", PAIRS)
def test_up_down_identity_for_any_signal(n, size, resample_path):
    """down(up(x)) == x for arbitrary x: upsampling loses nothing."""
    small, large = min(n, size), max(n, size)
    x = torch.randn(4, 3, small, dtype=F64)
    torch.testing.assert_close(resample(resample(x, large), small), x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, size", [(16, 8), (17, 10), (30, 12), (300, 200)])
def test_cosine_at_the_new_nyquist_keeps_its_amplitude(n, size, resample_path):
    """A cosine at exactly size/2 cycles becomes (-1)^t at the even size, amplitude 1 (the Nyquist
    bin is folded, not halved), and upsampling (-1)^t gives the cosine back."""
    t = torch.arange(n, dtype=F64)
    x = torch.cos(2 * math.pi * (size // 2) * t / n)
    alternating = torch.tensor([(-1.0) ** i for i in range(size)], dtype=F64)
    torch.testing.assert_close(resample(x, size), alternating, rtol=0, atol=1e-12)
    torch.testing.assert_close(resample(alternating, n), x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, size", [(20, 20), (21, 21), (20, 11), (21, 11), (160, 160), (160, 99)])
def test_mask_multiplies_the_rfft(n, size, resample_path):
    x = torch.randn(2, 3, n, dtype=F64)
    mask = torch.rand(kept_bins(min(n, size)), dtype=F64)
    spec = torch.fft.rfft(x)[..., : mask.numel()] * mask
    if size < n and size % 2 == 0:
        spec[..., -1] *= 2
    expected = torch.fft.irfft(spec, n=size) * (size / n)
    torch.testing.assert_close(resample(x, size, mask=mask), expected, rtol=0, atol=1e-12)


def test_masked_downsampling_is_low_pass_then_crop(resample_path):
    """Down with a mask == (mask and zero every bin above the cutoff, at full length) then down."""
    n, size = 24, 13
    x = torch.randn(3, n, dtype=F64)
    mask = torch.rand(kept_bins(size), dtype=F64)
    padded = torch.cat([mask, torch.zeros(kept_bins(n) - mask.numel(), dtype=F64)])
    low_passed = resample(x, n, mask=padded)
    torch.testing.assert_close(
        resample(x, size, mask=mask), resample(low_passed, size), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(resample(resample(x, size, mask=mask), n), low_passed)


@pytest.mark.parametrize("dim", [2, 3])
def test_resample_along_one_axis_of_an_image(dim, resample_path):
    x = torch.randn(2, 3, 10, 13, dtype=F64)
    size = 7
    expected = resample(x.movedim(dim, -1), size).movedim(-1, dim)
    out = resample(x, size, dim=dim)
    assert out.shape[dim] == size and out.shape[5 - dim] == x.shape[5 - dim]
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_constant_is_preserved():
    x = torch.full((2, 40), 3.5, dtype=F64)
    for size in (7, 40, 64):
        torch.testing.assert_close(resample(x, size), torch.full((2, size), 3.5, dtype=F64))


def test_matrix_is_the_same_linear_map():
    n, size = 23, 14
    mask = torch.rand(kept_bins(size), dtype=F64)
    matrix = resample_matrix(n, size, mask, dtype=F64)
    assert matrix.shape == (n, size)
    x = torch.randn(5, n, dtype=F64)
    torch.testing.assert_close(x @ matrix, resample(x, size, mask=mask), rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, size", [(12, 12), (13, 7), (12, 6), (7, 12)])
def test_resample_gradients(n, size, resample_path):
    """Gradients to the signal and to the mask (the FFT path has its own rfft backward)."""
    x = torch.randn(2, n, dtype=F64, requires_grad=True)
    mask = (0.2 + torch.rand(kept_bins(min(n, size)), dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, m: resample(a, size, mask=m), (x, mask))


@pytest.mark.parametrize("norm", ["forward", "backward"])
@pytest.mark.parametrize("n, padded", [(1, 1), (2, 2), (7, 7), (8, 8), (5, 9), (6, 12)])
def test_rfft_backward(n, padded, norm):
    """The hand-written backward (one real inverse FFT) is the rfft's, with zero-padding to
    ``padded`` samples and either normalisation."""
    x = torch.randn(3, n, dtype=F64, requires_grad=True)
    torch.testing.assert_close(_RFFT.apply(x, padded, norm),
                               torch.fft.rfft(x, n=padded, norm=norm))
    assert torch.autograd.gradcheck(lambda a: _RFFT.apply(a, padded, norm), (x,))


def test_frequency_positions():
    expected = torch.linspace(-1, 1, 5, dtype=F64)
    torch.testing.assert_close(frequency_positions(8, dtype=F64), expected)
    assert frequency_positions(1).tolist() == [-1.0]


@pytest.mark.parametrize("n", [1, 2, 7, 8, 150])
def test_spectrum_positions_are_frequency_positions_on_a_padded_fft(n):
    """An FFT of the axis itself has the axis's own coordinates; zero-padded to 3 n, bin 3 j is
    at input bin j's frequency and coordinate; a complex FFT's bin k and n_fft - k share one."""
    expected = frequency_positions(n, dtype=F64)
    torch.testing.assert_close(spectrum_positions(n, n, dtype=F64), expected)
    padded = spectrum_positions(3 * n, n, dtype=F64)
    torch.testing.assert_close(padded[::3], expected)
    full = spectrum_positions(3 * n, n, onesided=False, dtype=F64)
    assert full.shape == (3 * n,)
    torch.testing.assert_close(full[1:], full[1:].flip(0))
    torch.testing.assert_close(full[: padded.numel()], padded)


@pytest.mark.parametrize("n", [1, 2, 20, 21, 150, 784])
def test_resolution_for_bins_holds_the_bins_at_a_fast_length(n):
    """R is n when every bin is kept; otherwise it holds the kept bins without a Nyquist bin
    among them (R >= 2 bins - 1): exactly 2 bins - 1 on short axes (resampled by a matrix
    product), the smallest 2^a 3^b 5^c length from there on long ones (resampled by FFTs)."""
    for bins in range(1, kept_bins(n) + 1):
        r = resolution_for_bins(bins, n)
        assert r <= n and kept_bins(r) >= bins
        if bins == kept_bins(n):
            assert r == n
        elif n <= FAST_LENGTH_MIN:
            assert r == 2 * bins - 1
        else:
            assert r == min(n, next_fast_len(2 * bins - 1)) >= 2 * bins - 1
    assert resolution_for_bins(307, 784) == 625  # not 613, a prime: FFTs ~5x slower


# --- FFT convolution ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, kernel",
    [
        ((16,), (1,)),
        ((17,), (5,)),
        ((16,), (15,)),  # global: the largest odd kernel that fits
        ((17,), (17,)),
        ((16,), (31,)),  # beyond the input: full extent, still no wrap-around
        ((10, 13), (3, 9)),  # 2-D anisotropic
        ((12, 9), (11, 1)),
        ((9, 8), (9, 15)),
    ],
    ids=str,
)
def test_fft_conv_equals_direct_conv(size, kernel):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, *size, generator=g, dtype=F64)
    k = torch.randn(3, *kernel, generator=g, dtype=F64)
    out = fft_conv(x, k)
    assert out.shape == x.shape
    torch.testing.assert_close(out, direct_conv(x, k), rtol=0, atol=1e-11)


def _symmetric_mask(fft_sizes, axes, g):
    """A random resolution-mask-like spectrum filter: real, per axis, equal at bins k and N - k
    of a complex axis; 1 along the axes not in ``axes``."""
    mask = torch.ones(*[1] * len(fft_sizes), dtype=F64)
    for a in axes:
        onesided = a == len(fft_sizes) - 1
        m = torch.rand(fft_sizes[a] // 2 + 1 if onesided else fft_sizes[a], generator=g, dtype=F64)
        if not onesided:
            m[1:] = (m[1:] + m[1:].flip(0)) / 2
        mask = mask * m.view(*[-1 if i == a else 1 for i in range(len(fft_sizes))])
    return mask


@pytest.mark.parametrize(
    "size, kernel, axes",
    [((37,), (11,), (0,)), ((16,), (15,), (0,)), ((150,), (149,), (0,)), ((7,), (1,), (0,)),
     ((9, 12), (5, 7), (0, 1)), ((9, 12), (5, 7), (0,)), ((9, 12), (5, 7), (1,))],
    ids=str,
)
def test_masked_fft_conv_is_a_correlation_with_the_masked_kernel(size, kernel, axes):
    """A spectrum mask on fft_conv (at any FFT length from conv_fft_sizes on) is exactly a
    'same' correlation with masked_kernel: 2 S - 1 taps on the filtered axes, K elsewhere."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, *size, generator=g, dtype=F64)
    k = torch.randn(3, *kernel, generator=g, dtype=F64)
    for extra in (0, 5):
        n = [v + extra for v in conv_fft_sizes(size, kernel)]
        mask = _symmetric_mask(n, axes, g)
        folded = masked_kernel(k, size, mask, n)
        assert folded.shape[1:] == tuple(2 * s - 1 if a in axes else t
                                         for a, (s, t) in enumerate(zip(size, kernel)))
        torch.testing.assert_close(fft_conv(x, k, mask, n), direct_conv(x, folded),
                                   rtol=0, atol=1e-11)
    ones = torch.ones(1, dtype=F64)  # a mask of ones: the kernel itself (zero-padded)
    n = conv_fft_sizes(size, kernel)
    torch.testing.assert_close(fft_conv(x, k, ones, n), fft_conv(x, k), rtol=0, atol=1e-11)


@pytest.mark.parametrize("size, kernel", [((9,), (5,)), ((7,), (5,)), ((6, 5), (3, 5)),
                                          ((5, 6), (3, 5))], ids=str)
def test_fft_conv_gradients(size, kernel):
    """fft_conv's own backward (even and odd FFT lengths on the one-sided axis) against finite
    differences, in the input, the kernel and a spectrum mask on every axis."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, *size, generator=g, dtype=F64, requires_grad=True)
    k = torch.randn(3, *kernel, generator=g, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(fft_conv, (x, k))
    n = [v + 1 for v in conv_fft_sizes(size, kernel)]
    mask = _symmetric_mask(n, range(len(size)), g).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, m: fft_conv(a, b, m, n), (x, k, mask))


def circular_same(x: torch.Tensor, kernel: torch.Tensor, n: int) -> torch.Tensor:
    """'same' window of the circular cross-correlation of length n (1-D; indices modulo n)."""
    spec = torch.fft.rfft(x, n=n) * torch.fft.rfft(kernel.flip(-1), n=n)
    window = (kernel.shape[-1] // 2 + torch.arange(x.shape[-1])) % n
    return torch.fft.irfft(spec, n=n)[..., window]


@pytest.mark.parametrize("size", [1, 2, 5, 8, 13])
def test_conv_fft_length_is_the_shortest_without_wrap_around(size):
    """At N = S + K // 2 the circular correlation's 'same' window is the linear one; one sample
    shorter it is not (so training's S + K - 1 ran FFTs longer than the block needs)."""
    g = torch.Generator().manual_seed(size)
    for taps in range(1, 2 * size, 2):
        n = conv_fft_length(size, taps)
        assert n == size + taps // 2
        x = torch.randn(1, 1, size, generator=g, dtype=F64)
        k = torch.randn(1, taps, generator=g, dtype=F64)
        ref = direct_conv(x, k)
        torch.testing.assert_close(circular_same(x, k[0], n), ref, rtol=0, atol=1e-12)
        if taps > 1:
            assert (circular_same(x, k[0], n - 1) - ref).abs().max() > 1e-6


def test_conv_fft_length_of_relaxed_sizes():
    """The cost model's non-integer sizes follow the same line through the odd taps."""
    assert conv_fft_length(10.0, 19.0) == 19.0
    assert conv_fft_length(10.0, 4.0) == pytest.approx(11.5)
    t = torch.tensor(7.0, requires_grad=True)
    (grad,) = torch.autograd.grad(conv_fft_length(torch.tensor(20.0), t), t)
    assert float(grad) == 0.5


def test_fft_conv_has_no_wrap_around():
    """An impulse at the first sample reaches exactly the K // 2 samples after it: nothing leaks
    to the far end, as it would with a circular (periodic) convolution."""
    n, k = 32, 31
    x = torch.zeros(1, 1, n, dtype=F64)
    x[..., 0] = 1.0
    kernel = torch.rand(1, k, dtype=F64) + 0.5
    out = fft_conv(x, kernel)[0, 0]
    assert out[: k // 2 + 1].abs().min() > 0.4
    assert out[k // 2 + 1 :].abs().max() < 1e-12
    # cross-correlation: out[i] = sum_j x[i + j - K // 2] k[j] = k[K // 2 - i]
    torch.testing.assert_close(out[: k // 2 + 1], kernel[0, : k // 2 + 1].flip(0))


def test_next_fast_len_matches_scipy():
    scipy_fft = pytest.importorskip("scipy.fft")
    for n in range(1, 3000):
        assert next_fast_len(n) == scipy_fft.next_fast_len(n, real=True), n
