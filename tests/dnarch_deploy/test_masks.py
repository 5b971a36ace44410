"""Mask formulas (paper eqs. 1-4, 6-7, appendix E) against closed forms and brute force."""

from __future__ import annotations

import math

import pytest
import torch

from dnarch_deploy import masks as M

from .helpers import mask_ranges, tiny_model

F64 = torch.float64
LN9, LN19 = math.log(9.0), math.log(19.0)


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


# --- inverses and the value at the threshold ---------------------------------------------------


@pytest.mark.parametrize("threshold", [0.1, 0.05, 0.5])
@pytest.mark.parametrize("sigma", [0.02, 0.3, 1.0])
def test_gaussian_inverse_closed_form_and_value_at_threshold(sigma, threshold):
    x_t = M.gaussian_inverse(t(sigma), threshold)
    assert float(x_t) == pytest.approx(sigma * math.sqrt(-2.0 * math.log(threshold)), rel=1e-14)
    raw = M.gaussian_mask(x_t, t(sigma), threshold=0.0)  # the formula, no thresholding
    assert float(raw) == pytest.approx(threshold, rel=1e-12)
    # support is [-x_T, x_T]: non-zero just inside, exactly zero just outside
    for sign in (1.0, -1.0):
        assert M.gaussian_mask(sign * x_t * (1 - 1e-9), t(sigma), threshold) > 0
        assert M.gaussian_mask(sign * x_t * (1 + 1e-9), t(sigma), threshold) == 0


@pytest.mark.parametrize("threshold", [0.1, 0.05, 0.5])
@pytest.mark.parametrize("tau", [8.0, 25.0, 100.0])
@pytest.mark.parametrize("mu", [-0.7, 0.0, 0.9])
def test_sigmoid_inverse_closed_form_and_value_at_threshold(mu, tau, threshold):
    x_t = M.sigmoid_inverse(t(mu), tau, threshold)
    assert float(x_t) == pytest.approx(mu + math.log((1 - threshold) / threshold) / tau, abs=1e-14)
    raw = M.sigmoid_mask(x_t, t(mu), tau, threshold=0.0)
    assert float(raw) == pytest.approx(threshold, rel=1e-12)
    # support is [x_min, x_T]: the mask decreases, so non-zero left of x_T, zero right of it
    assert M.sigmoid_mask(x_t - 1e-9, t(mu), tau, threshold) > 0
    assert M.sigmoid_mask(x_t + 1e-9, t(mu), tau, threshold) == 0


def test_sigmoid_mask_is_one_minus_sigmoid():
    x = torch.linspace(-1, 1, 41, dtype=F64)
    raw = M.sigmoid_mask(x, t(0.2), 7.0, threshold=0.0)
    torch.testing.assert_close(raw, 1 - torch.sigmoid(7.0 * (x - 0.2)), rtol=1e-14, atol=1e-15)


# --- support counts on grids (what is materialised) vs brute force ------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("tau", [8.0, 25.0, 50.0, 100.0])
def test_sigmoid_count_matches_brute_force(tau, dtype):
    lo, hi = M.sigmoid_mu_range(tau)
    for n in [1, 2, 3, 4, 7, 8, 16, 33, 64, 280]:
        x = M.grid(n, dtype=dtype)
        for mu in torch.linspace(lo, hi, 53, dtype=dtype):
            count = M.sigmoid_count(float(M.sigmoid_inverse(mu, tau)), n)
            nonzero = (M.sigmoid_mask(x, mu, tau) > 0).nonzero().flatten().tolist()
            # the non-zero positions are exactly the first `count` ones
            assert nonzero == list(range(count)), (n, float(mu))


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.3])
def test_gaussian_half_taps_matches_brute_force(scale):
    for k_max in [1, 3, 5, 9, 27, 101]:
        step = 2.0 / max(k_max - 1, 1)
        j = torch.arange(-(k_max // 2), k_max // 2 + 1, dtype=F64)
        coords = j * step / scale  # tap coordinates at the reduced resolution
        for sigma in torch.linspace(0.01, 0.5, 37, dtype=F64):
            half = M.gaussian_half_taps(float(M.gaussian_inverse(sigma)), k_max, scale)
            inside = j[M.gaussian_mask(coords, sigma) > 0].abs().max()
            assert half == int(inside), (k_max, float(sigma))


def test_grid_positions():
    torch.testing.assert_close(M.grid(5, dtype=F64), t([-1.0, -0.5, 0.0, 0.5, 1.0]))
    assert M.grid(1).tolist() == [-1.0]  # a single position sits at x_min


# --- differentiable size (eqs. 6-7) ---------------------------------------------------------------


@pytest.mark.parametrize("tau", [8.0, 25.0, 50.0])
def test_sigmoid_size_inverts_mu_for_size(tau):
    n_max = 64
    lo, hi = M.sigmoid_mu_range(tau)
    s_lo, s_hi = float(M.sigmoid_size(t(lo), tau, n_max)), float(M.sigmoid_size(t(hi), tau, n_max))
    for size in torch.linspace(s_lo, s_hi, 17, dtype=F64).tolist():
        mu = M.sigmoid_mu_for_size(size, tau, n_max)
        assert float(M.sigmoid_size(t(mu), tau, n_max)) == pytest.approx(size, rel=1e-12)


def test_sigmoid_size_closed_form():
    """Eq. 7 with x_min = -1 and the whole axis [-1, 1] of size n_max: (x_T + 1) n_max / 2."""
    mu, tau, n_max = t(-0.3), 25.0, 40
    x_t = -0.3 + LN9 / tau
    assert float(M.sigmoid_size(mu, tau, n_max)) == pytest.approx((x_t + 1) * n_max / 2, rel=1e-14)


def test_gaussian_size_closed_form():
    """Eq. 6 with x_T^0 = 1 (the initial kernel spans the axis): N_0 * x_T / 1."""
    sigma, k_max = t(0.2), 31
    expected = 0.2 * math.sqrt(-2 * math.log(0.1)) * k_max
    assert float(M.gaussian_size(sigma, k_max)) == pytest.approx(expected, rel=1e-14)


def test_sizes_are_monotone_in_the_parameters():
    mus = torch.linspace(-1.0, 1.2, 200, dtype=F64)
    sizes = M.sigmoid_size(mus, 25.0, 50)
    unclipped = sizes < 50
    assert (sizes.diff() >= 0).all()
    assert (sizes[unclipped].diff() > 0).all() and unclipped.sum() > 100
    sigmas = torch.linspace(0.01, 0.6, 200, dtype=F64)
    sizes = M.gaussian_size(sigmas, 21)
    assert (sizes.diff() >= 0).all()
    assert (sizes[sizes < 21].diff() > 0).all()


def test_straight_through_gradient_at_the_clip():
    """Clipped at the maximum in value, but the gradient is that of the unclipped size, so a mask
    at its maximum can still be pushed to shrink (appendix E)."""
    tau, n_max = 25.0, 32
    mu = t(M.sigmoid_mu_range(tau)[1]).requires_grad_()
    size = M.sigmoid_size(mu, tau, n_max)
    assert size.item() == n_max  # x_T > 1: clipped
    (grad,) = torch.autograd.grad(size, mu)
    assert float(grad) == pytest.approx(n_max / 2)  # d/dmu of (x_T + 1) n_max / 2
    sigma = t(0.9).requires_grad_()  # x_T = 1.93 > 1
    size = M.gaussian_size(sigma, 15)
    assert size.item() == 15
    (grad,) = torch.autograd.grad(size, sigma)
    assert float(grad) == pytest.approx(15 * math.sqrt(-2 * math.log(0.1)))


# --- appendix E ranges ------------------------------------------------------------------------


@pytest.mark.parametrize("tau", [8.0, 16.0, 25.0, 50.0, 100.0])
def test_sigmoid_range_values_at_the_ends(tau):
    mu_min, mu_max = M.sigmoid_mu_range(tau)
    assert float(M.sigmoid_mask(t(-1.0), t(mu_min), tau)) == pytest.approx(0.95, rel=1e-12)
    assert float(M.sigmoid_mask(t(1.0), t(mu_max), tau)) == pytest.approx(0.85, rel=1e-12)


@pytest.mark.parametrize(
    "tau, n_max, expected",
    [
        (25.0, 1, 0.103),  # "10%" of the resolution / channels (paper, appendix F)
        (50.0, 1, 0.051),  # "5%"
        (100.0, 1, 0.026),  # "2.5%"
        (8.0, 8, 2.6),  # 2.6 of 8 blocks: "a minimum depth of 2"
    ],
)
def test_minimum_support(tau, n_max, expected):
    """At mu_min the support is (ln 19 + ln 9) / tau of the length-2 axis [-1, 1]."""
    mu_min = M.sigmoid_mu_range(tau)[0]
    length = float(M.sigmoid_inverse(t(mu_min), tau)) + 1.0
    assert length == pytest.approx((LN19 + LN9) / tau, rel=1e-12)
    size = float(M.sigmoid_size(t(mu_min), tau, n_max))
    assert size == pytest.approx(expected, abs=0.0005 if n_max == 1 else 0.05)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_sigma_range_keeps_three_taps_and_the_whole_kernel(dtype):
    """At sigma_min the kernel keeps its centre and one tap either side (never collapses to one
    sample); at sigma_max (the initial, global kernel) every tap is non-zero — in float32 too."""
    for k_max in range(3, 1600, 2):
        lo, hi = M.gaussian_sigma_range(k_max)
        step = 2.0 / (k_max - 1)
        taps = torch.arange(-(k_max // 2), k_max // 2 + 1) * step  # as DNArch.kernels builds them
        taps = taps.to(dtype)
        assert int((M.gaussian_mask(taps, torch.tensor(lo, dtype=dtype)) > 0).sum()) == 3, k_max
        assert int((M.gaussian_mask(taps, torch.tensor(hi, dtype=dtype)) > 0).sum()) == k_max
        assert M.gaussian_half_taps(float(M.gaussian_inverse(torch.tensor(lo))), k_max) == 1
    assert M.sigma_for_full_kernel() == M.gaussian_sigma_range(99)[1]


def test_clamp_masks_restores_the_ranges_after_a_wild_update():
    model = tiny_model(learn="KRWD", input_size=(9, 12))
    ranges = mask_ranges(model)
    for wild in (1e3, -1e3):
        with torch.no_grad():
            for p in model.mask_parameters():
                p.fill_(wild)
        model.clamp_masks_()
        for name, (lo, hi) in ranges.items():
            expected = hi if wild > 0 else lo
            torch.testing.assert_close(getattr(model, name).detach(), expected.to(F64))
    # at the lower bounds the network keeps its minimum sizes, never zero
    c = model.config
    plan = model.plan()
    depth_min = M.sigmoid_count(-1 + (LN19 + LN9) / c.tau_depth, c.max_depth)
    width_min = M.sigmoid_count(-1 + (LN19 + LN9) / c.tau_width, c.max_width)
    assert len(plan.blocks) == depth_min >= 1
    assert all(min(b.n_in, b.n_mid, b.n_out) == width_min >= 1 for b in plan.blocks)
    assert all(min(b.resolution) >= 1 for b in plan.blocks)


def test_clamp_masks_holds_kernels_at_three_taps():
    """A wild update towards tiny kernels ends at the shortest kernel allowed: 3 of 63 taps, and
    sigma_for_kernel below it gives sigma_min."""
    model = tiny_model(learn="K", input_size=(64,))
    with torch.no_grad():
        model.mask_sigma.fill_(-1e3)
    model.clamp_masks_()
    assert {b.kernel_size for b in model.plan().blocks} == {(3,)}
    assert M.sigma_for_kernel(1, 63) == M.gaussian_sigma_range(63)[0]


def test_sigma_for_kernel_holds_exactly_that_many_taps():
    """The initial kernel's sigma: its support on the k_max grid is ``taps`` taps, the global
    kernel's sigma from k_max up, and never below sigma_min (3 taps)."""
    for k_max in (5, 149, 427, 1459):
        for taps in range(1, k_max + 1, 2):
            sigma = M.sigma_for_kernel(taps, k_max)
            half = M.gaussian_half_taps(float(M.gaussian_inverse(torch.tensor(sigma))), k_max)
            assert 2 * half + 1 == max(taps, 3), (k_max, taps)
        assert M.sigma_for_kernel(k_max + 2, k_max) == M.sigma_for_full_kernel()
