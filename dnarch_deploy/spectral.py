"""Spectral operators: resampling by cropping/padding the spectrum, and FFT convolution.

Both are exact, pure functions; the DNArch block composes them (paper §2.4.2, eq. 9):
downsample (with the resolution mask on the spectrum) -> convolve at the lower resolution ->
upsample back. Resampling is done one axis at a time: a real linear map per axis, computed with
real FFTs on long axes and as one (n, size) matrix product on short ones (the same map; export
lowers every axis to that MatMul).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor


def frequency_positions(n: int, device=None, dtype=None) -> Tensor:
    """Mask coordinates of the n // 2 + 1 real-FFT bins of a length-n axis: DC at -1, Nyquist
    (or the highest bin) at +1."""
    bins = n // 2 + 1
    if bins == 1:
        return torch.full((1,), -1.0, device=device, dtype=dtype)
    return torch.linspace(-1.0, 1.0, bins, device=device, dtype=dtype)


def spectrum_positions(n_fft: int, n: int, onesided: bool = True, device=None,
                       dtype=None) -> Tensor:
    """Mask coordinates of the bins of a length-``n_fft`` FFT of a length-``n`` axis, on the scale
    of :func:`frequency_positions` (a bin at the frequency of input bin j gets input bin j's
    coordinate): the resolution mask evaluated on a zero-padded FFT's spectrum. ``onesided``: the
    n_fft // 2 + 1 bins of a real FFT; else all n_fft bins of a complex one (bin k and n_fft - k
    share the frequency |k|)."""
    k = torch.arange(n_fft // 2 + 1 if onesided else n_fft, device=device, dtype=dtype)
    if not onesided:
        k = torch.minimum(k, n_fft - k)
    top = n // 2  # input bin n // 2 sits at +1
    if top == 0:
        return torch.full_like(k, -1.0)
    return k * (2.0 * n / (n_fft * top)) - 1.0


def kept_bins(size: int) -> int:
    """Real-FFT bins a length-``size`` signal holds."""
    return size // 2 + 1


# Axes longer than this are resampled with FFTs (the default MATRIX_MAX below), so a cropped length
# on them is rounded up to a fast FFT length; a fixed rule of the model, not a performance knob.
FAST_LENGTH_MIN = 128


def resolution_for_bins(bins: int, n: int) -> int:
    """The length R at which ``bins`` low-frequency bins of a length-n axis are represented exactly:
    n itself when every bin is kept, else at least 2 bins - 1 (no Nyquist bin among the kept ones):
    exactly that on short axes, and on axes longer than FAST_LENGTH_MIN the smallest fast FFT
    length (2^a 3^b 5^c, :func:`next_fast_len`) from there, at most n. (2 bins - 1 is often prime
    or has a large prime factor, which makes the resampling FFTs several times slower.) The bins
    from ``bins`` up to R // 2 carry nothing: the mask is zero there.
    """
    if bins >= n // 2 + 1:
        return n
    return min(n, next_fast_len(2 * bins - 1)) if n > FAST_LENGTH_MIN else 2 * bins - 1


# Axes up to this length are resampled by one real (n, size) matrix product instead of FFTs: on CPU
# the matrix wins below ~128 samples (2-D images), the FFTs above (long 1-D sequences).
MATRIX_MAX = 128


def resample(x: Tensor, size: int, dim: int = -1, mask: Tensor | None = None) -> Tensor:
    """Resample ``x`` along ``dim`` to ``size`` samples by cropping or zero-padding its spectrum.

    Exact on band-limited signals: down(up(x)) == x for any x, and up(down(x)) == x when x has no
    energy above the new Nyquist frequency. An even target (down) or even source (up) splits the
    Nyquist bin between +/- frequencies so that a cosine at that frequency keeps its amplitude.
    ``mask`` (optional, one value per kept bin) multiplies the spectrum: the resolution mask.
    Short axes use :func:`resample_matrix` (the same linear map, applied as one matrix product).
    """
    n = x.shape[dim]
    if size == n and mask is None:
        return x
    if max(n, size) <= MATRIX_MAX:
        matrix = resample_matrix(n, size, mask, dtype=x.dtype, device=x.device)  # (n, size)
        return torch.matmul(x.movedim(dim, -1), matrix).movedim(-1, dim)
    return _resample_fft(x.movedim(dim, -1), size, mask).movedim(-1, dim)


def resample_matrix(
    n: int, size: int, mask: Tensor | None = None, dtype=None, device=None
) -> Tensor:
    """:func:`resample` from n to ``size`` samples as an (n, size) matrix M (``x @ M``): row i is
    the resampled unit impulse e_i. Differentiable in ``mask``."""
    return _resample_fft(torch.eye(n, dtype=dtype, device=device), size, mask)


def _resample_fft(x: Tensor, size: int, mask: Tensor | None) -> Tensor:
    """:func:`resample` along the last axis, by real FFTs."""
    n = x.shape[-1]
    spec = _RFFT.apply(x)  # (..., n // 2 + 1), norm="forward"
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
    return torch.fft.irfft(spec, n=size, dim=-1, norm="forward")


class _RFFT(torch.autograd.Function):
    """``torch.fft.rfft(x, n, norm=norm)`` on the last axis (zero-padded to ``n`` samples), in
    float32 whatever the input's precision, with a backward that is one real inverse FFT.
    (Autograd's own backward pads the gradient to a full complex spectrum and runs a complex FFT
    on it, about twice the work; this makes a resampling step ~25% faster on CPU, and serves the
    FFT convolution's forward transforms too.)"""

    @staticmethod
    def forward(ctx, x: Tensor, n: int | None = None, norm: str = "forward") -> Tensor:
        ctx.length, ctx.n, ctx.norm = x.shape[-1], n or x.shape[-1], norm
        if x.dtype in (torch.bfloat16, torch.float16):
            # CUDA AMP hands bfloat16 activations here, which cuFFT refuses (and float16 it takes
            # at power-of-two lengths only): every FFT runs in float32, its gradient is cast back
            x = x.float()
        return torch.fft.rfft(x, n=ctx.n, norm=norm)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        # X_k = c sum_t x_t e^{-2 pi i k t / n} for the one-sided k (c = 1/n for norm="forward",
        # 1 for "backward"): dL/dx_t is c Re sum_k grad_k e^{2 pi i k t / n}, which irfft with the
        # opposite normalisation computes once the bins it counts twice (all but DC and, for even
        # n, Nyquist) are halved. Zero-padding's gradient keeps the first ``length`` samples.
        n = ctx.n
        weight = torch.ones(grad.shape[-1], dtype=grad.real.dtype, device=grad.device)
        weight[1 : (n + 1) // 2] = 0.5
        adjoint = {"forward": "backward", "backward": "forward"}[ctx.norm]
        x_grad = torch.fft.irfft(grad * weight, n=n, norm=adjoint)
        return x_grad[..., : ctx.length], None, None


def rfftn(x: Tensor, s: list[int]) -> Tensor:
    """``torch.fft.rfftn(x, s)`` over the last len(s) axes (unnormalised), through :class:`_RFFT`
    on the last axis and complex FFTs on the others."""
    y = _RFFT.apply(x, s[-1], "backward")
    for axis, n in zip(range(-len(s), -1), s[:-1]):
        y = torch.fft.fft(y, n=n, dim=axis)
    return y


@functools.cache
def next_fast_len(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n: a fast real-FFT length (what
    ``scipy.fft.next_fast_len(n, real=True)`` returns, without making scipy a dependency)."""
    m = max(n, 1)
    while True:
        r = m
        for p in (2, 3, 5):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 1


def conv_fft_length(size, taps):
    """The shortest circular-convolution length N at which an FFT computes the 'same'
    cross-correlation of ``size`` samples with an odd ``taps``-tap kernel: size + taps // 2.

    The one FFT-length rule: training's :func:`fft_conv`, the cost model and every FFT form export
    lowers to use it (each may round N up to a length its FFT runs fast at). Why it suffices: the
    full correlation has size + taps - 1 samples, the 'same' window is samples h ... h + size - 1
    (h = taps // 2); at length N the samples from N on wrap around onto 0 ... size + taps - 2 - N,
    all before the window when N >= size + h, and the window itself fits. (The kernel fits too
    while taps <= 2 size - 1; the model's kernels are at most as long as their input.)
    Non-integer sizes (the cost model's relaxed sizes) give size + (taps - 1) / 2, the same line.
    """
    if isinstance(size, int) and isinstance(taps, int):
        return size + taps // 2
    return size + (taps - 1) / 2


def conv_fft_sizes(sizes, taps) -> list[int]:
    """The FFT length per axis of :func:`fft_conv` for ``sizes`` samples and ``taps``-tap kernels:
    the fast length from :func:`conv_fft_length` on."""
    return [next_fast_len(conv_fft_length(int(s), int(k))) for s, k in zip(sizes, taps)]


def fft_conv(x: Tensor, kernel: Tensor, spectrum_mask: Tensor | None = None,
             fft_sizes: list[int] | None = None) -> Tensor:
    """Depthwise cross-correlation with zero padding and 'same' output size, via real FFTs.

    ``x`` (B, C, *S), ``kernel`` (C, *K) with odd K per axis: the same as
    ``F.conv{d}d(x, kernel[:, None], padding=K // 2, groups=C)``; the FFT length per axis is
    :func:`conv_fft_sizes` (S + K // 2 rounded up to a fast length), so the wrap-around falls
    outside the 'same' window. ``spectrum_mask`` (optional, broadcastable to the kernel's
    ``rfftn`` spectrum) multiplies that spectrum: the resolution mask of a block at full
    resolution (paper eq. 9), at the cost of one element-wise product on C kernel spectra; the
    result is then a 'same' correlation with :func:`masked_kernel`. ``fft_sizes`` (at least
    :func:`conv_fft_sizes`) fixes the FFT lengths, so that a masked result does not depend on
    how many taps the kernel has.
    """
    dims = tuple(range(-kernel.dim() + 1, 0))
    sizes = x.shape[2:]
    n = list(fft_sizes or conv_fft_sizes(sizes, kernel.shape[1:]))
    x_f = rfftn(x, n)
    k_f = rfftn(kernel.flip(dims), n)  # flip: convolution -> correlation
    if spectrum_mask is not None:
        k_f = k_f * spectrum_mask
    y = torch.fft.irfftn(x_f * k_f, s=n, dim=dims)
    for d, s, k in zip(dims, sizes, kernel.shape[1:]):  # full convolution -> the 'same' window
        y = y.narrow(d, k // 2, s)
    return y


def masked_kernel(kernel: Tensor, sizes, spectrum_mask: Tensor, fft_sizes: list[int]) -> Tensor:
    """The kernel whose 'same' correlation with a (B, C, *S) input equals
    ``fft_conv(x, kernel, spectrum_mask, fft_sizes)``: how export folds a full-resolution
    resolution mask. 2 S - 1 taps on each axis the mask filters (where it has more than one
    value), the kernel's own taps on the others.

    fft_conv with a mask is still linear and shift-invariant on the S samples it returns (output
    i sees input j through the masked circular filter c at (i - j) mod N alone), so it is a
    correlation with one tap per offset i - j in [-(S - 1), S - 1]; a kernel of T taps reads
    tap u at c[(K // 2 + T // 2 - u) mod N], per axis. Exact up to rounding (use float64).
    """
    dims = tuple(range(-kernel.dim() + 1, 0))
    spectrum = rfftn(kernel.flip(dims), list(fft_sizes)) * spectrum_mask
    c = torch.fft.irfftn(spectrum, s=list(fft_sizes), dim=dims)  # (C, *N)
    all_taps = masked_taps(sizes, kernel.shape[1:], spectrum_mask)
    for d, taps, k, n in zip(dims, all_taps, kernel.shape[1:], fft_sizes):
        u = torch.arange(taps, device=c.device)
        c = c.index_select(d, (k // 2 + taps // 2 - u) % n)
    return c


def masked_taps(sizes, taps, spectrum_mask: Tensor) -> tuple[int, ...]:
    """The taps per axis of :func:`masked_kernel`: 2 S - 1 on each axis the mask filters (where it
    has more than one value), the kernel's own ``taps`` on the others."""
    axes = len(taps)
    return tuple(
        2 * int(s) - 1 if spectrum_mask.dim() >= axes - a and spectrum_mask.shape[a - axes] > 1
        else int(k) for a, (s, k) in enumerate(zip(sizes, taps)))


def folded_taps(sizes, taps, cropped, learned: bool) -> tuple[int, ...]:
    """:func:`masked_taps` from the sizes alone: with a learned resolution (``learned``) the mask
    filters every axis it does not crop, where the folded kernel has 2 S - 1 taps."""
    return tuple(2 * int(s) - 1 if learned and not crop else int(k)
                 for s, k, crop in zip(sizes, taps, cropped))


def direct_conv(x: Tensor, kernel: Tensor) -> Tensor:
    """The reference for :func:`fft_conv`: ``F.conv{d}d`` with groups=C and 'same' padding."""
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[kernel.dim() - 1]
    padding = tuple(k // 2 for k in kernel.shape[1:])
    return conv(x, kernel.unsqueeze(1), padding=padding, groups=kernel.shape[0])
