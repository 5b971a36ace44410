"""Differentiable masks (paper §2.1, eqs. 1-4, 6-7; appendix E).

Every formula lives here once, as a pure function of tensors:

- mask values (Gaussian for kernel size, sigmoid for width, depth and resolution),
- the inverse ``x_T`` at the threshold ``T_m`` (eqs. 3-4), which gives the support,
- the number of grid positions inside the support (what is materialised),
- the differentiable ``size()`` (eqs. 6-7) with straight-through clipping at the maximum,
- the clamping ranges of appendix E.

Conventions. Sigmoid masks live on ``linspace(-1, 1, n)`` (channel index, block index, frequency
from DC to Nyquist), ``x_min = -1``. Gaussian masks are centred (mean 0) on kernel coordinates
``linspace(-1, 1, K_max)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

THRESHOLD = 0.1  # T_m: mask values below it are exactly zero and never materialised
SIGMOID_LOW = 0.95  # appendix E: the lowest offset puts 0.95 at the lowest position ...
SIGMOID_HIGH = 0.85  # ... and the highest offset puts 0.85 at the highest position
# The Gaussian bounds put the last tap meant to be kept a hair inside the support: exactly on the
# boundary the mask is T_m in theory, and rounding zeroes it about half the time (in float32: the
# outermost taps of the initial global kernel, the +-1 taps at sigma_min).
INSIDE = 1.0 + 1e-4


# --- values ------------------------------------------------------------------------------------


def gaussian_mask(x: Tensor, sigma: Tensor, threshold: float = THRESHOLD) -> Tensor:
    """exp(-x^2 / 2 sigma^2), zero where below ``threshold`` (eq. 1, mean fixed at 0)."""
    m = torch.exp(-0.5 * (x / sigma) ** 2)
    return torch.where(m >= threshold, m, torch.zeros_like(m))


def sigmoid_mask(x: Tensor, mu: Tensor, tau: float, threshold: float = THRESHOLD) -> Tensor:
    """1 - sigmoid(tau (x - mu)), zero where below ``threshold`` (eq. 2)."""
    m = torch.sigmoid(-tau * (x - mu))  # == 1 - sigmoid(tau (x - mu)), without cancellation
    return torch.where(m >= threshold, m, torch.zeros_like(m))


# --- inverses (eqs. 3-4) -----------------------------------------------------------------------


def gaussian_inverse(sigma: Tensor, threshold: float = THRESHOLD) -> Tensor:
    """x_T = sigma sqrt(-2 ln T_m): the Gaussian mask is >= T_m exactly on [-x_T, x_T]."""
    return sigma * math.sqrt(-2.0 * math.log(threshold))


def sigmoid_inverse(mu: Tensor, tau: float, threshold: float = THRESHOLD) -> Tensor:
    """x_T = mu - ln(1 / (1 - T_m) - 1) / tau: the mask is >= T_m exactly on [x_min, x_T]."""
    return mu - math.log(1.0 / (1.0 - threshold) - 1.0) / tau


# --- support on a grid (what is materialised) ---------------------------------------------------


def grid(n: int, device=None, dtype=None) -> Tensor:
    """The n mask positions linspace(-1, 1, n) (a single position sits at -1)."""
    if n == 1:
        return torch.full((1,), -1.0, device=device, dtype=dtype)
    return torch.linspace(-1.0, 1.0, n, device=device, dtype=dtype)


def sigmoid_count(x_t: float, n: int) -> int:
    """How many of the n positions linspace(-1, 1, n) lie in [-1, x_t] (at least 1)."""
    if n == 1:
        return 1
    k = math.floor((x_t + 1.0) * (n - 1) / 2.0 + 1e-9) + 1
    return max(1, min(n, k))


def gaussian_half_taps(x_t: float, k_max: int, scale: float = 1.0) -> int:
    """Half-width h of the odd kernel (2h + 1 taps) whose taps at coordinates j * step / scale
    (step = 2 / (k_max - 1), the full-resolution tap spacing) lie in [-x_t, x_t].

    ``scale`` = (resolution used) / (full resolution): at a lower resolution the taps are farther
    apart in kernel coordinates, so fewer of them cover the same extent.
    """
    if k_max == 1:
        return 0
    step = 2.0 / (k_max - 1)
    return max(0, min((k_max - 1) // 2, math.floor(x_t * scale / step + 1e-9)))


# --- differentiable size (eqs. 6-7) -------------------------------------------------------------


def clip_straight_through(size: Tensor, maximum: float) -> Tensor:
    """min(size, maximum) in value, identity in gradient (appendix E), so a mask clipped at the
    maximum can still shrink."""
    return size - (size - size.clamp(max=maximum)).detach()


def gaussian_size(sigma: Tensor, n_max: int, threshold: float = THRESHOLD) -> Tensor:
    """Eq. 6 with the initial mask spanning the whole axis (x_T^0 = 1, N_0 = n_max)."""
    return clip_straight_through(gaussian_inverse(sigma, threshold) * n_max, n_max)


def sigmoid_size(mu: Tensor, tau: float, n_max: int, threshold: float = THRESHOLD) -> Tensor:
    """Eq. 7 normalised so that the whole axis [-1, 1] has size n_max (N_0 / (x_T^0 - x_min)
    = n_max / 2), clipped at n_max with a straight-through estimator."""
    x_t = sigmoid_inverse(mu, tau, threshold)
    return clip_straight_through((x_t + 1.0) * (n_max / 2.0), n_max)


# --- initialisation and clamping ranges (appendix E) --------------------------------------------


def sigmoid_mu_for_size(size: float, tau: float, n_max: int, threshold: float = THRESHOLD) -> float:
    """The offset mu whose size() is ``size`` (inverse of :func:`sigmoid_size`), kept in range."""
    x_t = 2.0 * size / n_max - 1.0
    mu = x_t + math.log(1.0 / (1.0 - threshold) - 1.0) / tau
    lo, hi = sigmoid_mu_range(tau)
    return min(max(mu, lo), hi)


def sigmoid_mu_range(tau: float) -> tuple[float, float]:
    """[mu_min, mu_max]: at mu_min the mask is 0.95 at x = -1; at mu_max it is 0.85 at x = +1."""
    mu_min = -1.0 + math.log(SIGMOID_LOW / (1.0 - SIGMOID_LOW)) / tau
    mu_max = 1.0 + math.log(SIGMOID_HIGH / (1.0 - SIGMOID_HIGH)) / tau
    return mu_min, mu_max


def gaussian_sigma_range(k_max: int, threshold: float = THRESHOLD) -> tuple[float, float]:
    """[sigma_min, sigma_max]: at sigma_min the support holds the shortest kernel allowed, 3 taps
    (one step either side of the centre, so the kernel never collapses to one sample; counted at
    full resolution); at sigma_max it spans the kernel."""
    step = 2.0 / max(k_max - 1, 1)
    root = math.sqrt(-2.0 * math.log(threshold))
    return min(step, 1.0) * INSIDE / root, INSIDE / root


def sigma_for_kernel(taps: int, k_max: int, threshold: float = THRESHOLD) -> float:
    """The sigma whose support holds the centred kernel of ``taps`` (odd) of the k_max taps on
    linspace(-1, 1, k_max): the global kernel's sigma when taps >= k_max, sigma_min when taps is
    under the shortest kernel allowed."""
    if taps >= k_max:
        return sigma_for_full_kernel(threshold)
    x_t = (taps // 2) * 2.0 / (k_max - 1) * INSIDE
    sigma_min = gaussian_sigma_range(k_max, threshold)[0]
    return max(x_t / math.sqrt(-2.0 * math.log(threshold)), sigma_min)


def sigma_for_full_kernel(threshold: float = THRESHOLD) -> float:
    """The sigma whose support just covers [-1, 1]: the base CCNN's global kernel (every tap
    non-zero; size() is clipped to the maximum)."""
    return INSIDE / math.sqrt(-2.0 * math.log(threshold))
