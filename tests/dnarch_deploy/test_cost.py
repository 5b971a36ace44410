"""The cost model (appendix C) against closed forms and against torch's own FLOP counter."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dnarch_deploy import base_cost, complexity_loss, describe, model_cost, spectral
from dnarch_deploy import masks as M
from dnarch_deploy.cost import (
    architecture_cost,
    architecture_params,
    fft_length,
    limit_loss,
    model_params,
)

from .helpers import set_mask_state, tiny_config, tiny_model

CONFIGS = {
    "1d-classify": dict(input_size=(17,)),
    "1d-even-dense": dict(input_size=(18,), dense=True, out_channels=2),
    "2d-classify": dict(input_size=(9, 12), in_channels=3),
    "2d-dense": dict(input_size=(8, 7), dense=True),
    "tokens": dict(input_size=(16,), vocab_size=11, in_channels=5),
}
LEARN = ["KRWD", "none", "K", "R", "W", "D", "KWD"]


def closed_form_base_cost(c) -> float:
    """CCNN_{D,H} written out by hand: encoder (linear, norm, GELU), D blocks (norm, depthwise FFT
    convolution over N = prod(S + K_max // 2) samples, two H x H pointwise layers, GELU, residual),
    decoder (pool + linear, or a linear per position)."""
    L, H, D = math.prod(c.input_size), c.width, c.depth
    N = math.prod(s + (s if s % 2 else s - 1) // 2 for s in c.input_size)
    encoder = L * c.in_channels * H + 2 * L * H
    block = L * H + H * N * math.log2(N) + 2 * L * H * H + L * H + L * H
    decoder = L * H * c.out_channels if c.dense else L * H + H * c.out_channels
    return encoder + D * block + decoder


@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_base_cost_closed_form(case):
    c = tiny_config(**case)
    assert base_cost(c) == pytest.approx(closed_form_base_cost(c), rel=1e-12)
    assert base_cost(tiny_config(**case, learn="none")) == base_cost(c)  # C_target ignores learn


@pytest.mark.parametrize("learn", LEARN)
@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_model_cost_at_init_is_base_cost(case, learn):
    """The masks start at the base size, so the search starts exactly at C_target."""
    model = tiny_model(0, dtype=torch.float32, learn=learn, **case)
    with torch.no_grad():
        cost = model_cost(model)
    assert float(cost["total"]) == pytest.approx(base_cost(model.config), rel=1e-6)
    assert cost["block_weights"].tolist() == [1.0] * model.config.depth + [0.0] * (
        model.config.max_depth - model.config.depth
    )


@pytest.mark.parametrize("state", ["init", "random", "extremes", "min"])
@pytest.mark.parametrize("learn", LEARN)
@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_search_pays_for_the_network_it_describes(case, learn, state):
    """model_cost's value == architecture_cost of the frozen architecture (what export builds):
    the budget constrains the network that runs, not the continuous relaxation."""
    for seed in range(3):
        model = tiny_model(seed, learn=learn, **case)
        set_mask_state(model, state, seed)
        with torch.no_grad():
            paid = float(model_cost(model)["total"])
        assert paid == pytest.approx(architecture_cost(describe(model)), rel=1e-9)


def test_cost_gradient_reaches_every_mask():
    model = tiny_model(0, input_size=(9, 12))
    set_mask_state(model, "random", 1)
    model_cost(model)["total"].backward()
    for p in model.mask_parameters():
        assert p.grad is not None and bool(p.grad.abs().sum() > 0)


def test_fft_length_closed_form():
    assert fft_length([20], [19]) == 29
    assert fft_length([10], [9.5]) == pytest.approx(10 + 8.5 / 2)  # relaxed taps
    assert fft_length([9, 12], [9, 11]) == 13 * 17


@pytest.mark.parametrize("mask", ["mask_sigma", "mask_res", "mask_width", "mask_depth"])
def test_shrinking_any_mask_lowers_the_cost(mask):
    model = tiny_model(0, input_size=(9, 12))
    with torch.no_grad():
        before = float(model_cost(model)["total"])
        # the depth is paid for by whole blocks: move its edge past one block position
        shift = 2.0 / (model.config.max_depth - 1) if mask == "mask_depth" else 0.3
        getattr(model, mask).mul_(0.5) if mask == "mask_sigma" else getattr(model, mask).sub_(shift)
        after = float(model_cost(model)["total"])
    assert after < before


def test_complexity_loss_closed_form():
    cost = torch.tensor(150.0, requires_grad=True)
    loss = complexity_loss(cost, 100.0)
    assert loss.item() == pytest.approx(0.25)
    (grad,) = torch.autograd.grad(loss, cost)
    assert float(grad) == pytest.approx(2 * 0.5 / 100.0)


# --- cross-check with torch.utils.flop_counter ----------------------------------------------------


def counted_macs(model, x) -> tuple[float, float]:
    """(MACs of the forward pass, MACs of the kernel network alone), from FlopCounterMode's
    matmul FLOPs / 2."""
    with FlopCounterMode(display=False) as total, torch.no_grad():
        model(x)
    with FlopCounterMode(display=False) as kernel_net, torch.no_grad():
        model.kernels(model.plan())
    return total.get_total_flops() / 2, kernel_net.get_total_flops() / 2


def linear_terms(cost: dict) -> float:
    terms = cost["blocks"]
    blocks = (cost["block_weights"] * (terms["linear1"] + terms["linear2"])).sum()
    return float(cost["encoder"]["linear"] + blocks + cost["decoder"]["linear"])


@pytest.mark.parametrize("learn", ["none", "KRWD"])
@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_linear_terms_match_flop_counter(case, learn, monkeypatch):
    """An independent count of the base CCNN's operations: FlopCounterMode counts the matmuls of
    a forward pass at batch 1 (2 FLOPs per multiply-accumulate). The linear terms of model_cost
    (encoder, the two pointwise layers per block, decoder) must equal them, once the kernel
    network's own matmuls are subtracted.

    What the comparison leaves out, and why: the cost model's other terms are not matmuls, so
    the counter does not see them (the FFT convolution's C N log2 N; BatchNorm, GELU, residual
    add and pooling, L x C each); and the counter sees matmuls the paper's cost model leaves out
    on purpose (see cost.py): the kernel network (its cost does not scale with the input; counted
    separately here and subtracted) and the spectral resampling, which the paper fuses with the
    convolution's FFTs (resampling is forced onto its FFT path here, which the counter does not
    count; its matrix path is a matmul). Input normalisation, embedding look-ups and the mask
    values (folded into weights) are not counted by either."""
    monkeypatch.setattr(spectral, "MATRIX_MAX", 0)
    model = tiny_model(0, dtype=torch.float32, learn=learn, **case)
    x = torch.randn(1, model.config.in_channels, *model.config.input_size)
    if model.config.vocab_size:
        x = torch.randint(0, model.config.vocab_size, (1, *model.config.input_size))
    total, kernel_net = counted_macs(model, x)
    assert kernel_net > 0
    with torch.no_grad():
        expected = linear_terms(model_cost(model))
    assert total - kernel_net == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("case", [CONFIGS["1d-classify"], CONFIGS["2d-dense"]], ids=["1d", "2d"])
def test_cost_functions_at_the_materialised_sizes_match_flop_counter(case, seed, monkeypatch):
    """With shrunk masks, the network computes each block's pointwise layers at its cropped
    resolution and widths: the cost functions evaluated at the materialised (integer) sizes of
    the plan equal the counted MACs."""
    from dnarch_deploy.cost import decoder_cost, encoder_cost, linear_cost

    monkeypatch.setattr(spectral, "MATRIX_MAX", 0)
    model = tiny_model(seed, dtype=torch.float32, **case)
    set_mask_state(model, "random", seed)
    c = model.config
    with torch.no_grad():
        plan = model.plan()
    L = math.prod(c.input_size)
    expected = encoder_cost(L, c.in_channels, plan.stream)["linear"]
    expected += decoder_cost(L, plan.stream, c.out_channels, c.dense)["linear"]
    for p in plan.blocks:
        r = math.prod(p.resolution)
        expected += linear_cost(r, p.n_in, p.n_mid) + linear_cost(r, p.n_mid, p.n_out)
    total, kernel_net = counted_macs(model, torch.randn(1, c.in_channels, *c.input_size))
    assert any(p.resolution != c.input_size for p in plan.blocks)  # a cropped block is covered
    assert total - kernel_net == pytest.approx(expected, rel=1e-9)


def test_cost_values_are_the_plan_and_gradients_the_mask_sizes():
    """Straight-through sizes: each term's value uses what the plan materialises (channels,
    resolution, kernel taps, whole blocks); its gradient is that of the masks' size()."""
    model = tiny_model(0, input_size=(20,))
    c = model.config
    with torch.no_grad():
        model.mask_width[0].fill_(M.sigmoid_mu_for_size(3.4, c.tau_width, c.max_width))
        model.mask_res[0, 0] = M.sigmoid_mu_for_size(0.47, c.tau_resolution, 1)
        model.mask_sigma[0, 0] = 0.25 / math.sqrt(-2 * math.log(c.threshold))
        model.mask_depth.fill_(M.sigmoid_mu_for_size(2.5, c.tau_depth, c.max_depth))
    cost = model_cost(model)
    plan = model.plan()
    p, block = plan.blocks[0], {term: v[0] for term, v in cost["blocks"].items()}
    r, taps = p.resolution[0], 2 * p.half_taps[0] + 1
    assert r < 20 and taps < c.max_kernel[0]  # the masks did crop
    assert float(block["linear1"].detach()) == pytest.approx(r * p.n_in * p.n_mid)
    n = r + taps // 2  # the 'same' convolution's FFT length at resolution r
    assert float(block["conv"].detach()) == pytest.approx(p.n_in * n * math.log2(n))
    assert float(block["norm"].detach()) == pytest.approx(20 * p.n_in)  # at the input's length
    # size(m_depth) = 2.5, but only the blocks the plan runs are paid for
    assert len(plan.blocks) == 2
    torch.testing.assert_close(
        cost["block_weights"].detach(), torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    )
    # d linear1 / d mu_mid = R n_in d size(m_mid) / d mu_mid
    (grad,) = torch.autograd.grad(block["linear1"], model.mask_width)
    mu = model.mask_width.detach()[0, 1].clone().requires_grad_()
    (dsize,) = torch.autograd.grad(M.sigmoid_size(mu, c.tau_width, c.max_width), mu)
    assert float(grad[0, 1]) == pytest.approx(r * p.n_in * float(dsize), rel=1e-9)


def test_depth_cost_is_straight_through():
    """The cost's value counts the blocks that run; its gradient is the continuous depth's:
    d C / d mu_depth = (cost of the boundary block) * d size(m_depth) / d mu_depth."""
    model = tiny_model(0, input_size=(20,))
    c = model.config
    with torch.no_grad():
        model.mask_depth.fill_(M.sigmoid_mu_for_size(2.5, c.tau_depth, c.max_depth))
    cost = model_cost(model)
    cost["total"].backward()
    mu = model.mask_depth.detach().clone().requires_grad_()
    (dsize,) = torch.autograd.grad(M.sigmoid_size(mu, c.tau_depth, c.max_depth), mu)
    per_block = sum(cost["blocks"].values()).detach()
    boundary = float(per_block[2])  # half of it in size()
    assert float(model.mask_depth.grad) == pytest.approx(boundary * float(dsize), rel=1e-9)
    with torch.no_grad():  # the value: blocks 0 and 1 only, as in the plan
        ran = float(per_block[:2].sum())
        rest = float(cost["total"]) - ran
        assert rest == pytest.approx(
            float(sum(cost["encoder"].values()) + sum(cost["decoder"].values())), rel=1e-9
        )


# --- the second constraint: parameters (--max-params) ---------------------------------------------


@pytest.mark.parametrize("state", ["init", "random", "min"])
@pytest.mark.parametrize("learn", LEARN)
@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_params_term_counts_the_network_it_describes(case, learn, state):
    """model_params' value == architecture_params of the frozen architecture (the deployed
    network's count), as the cost's value is architecture_cost."""
    for seed in range(2):
        model = tiny_model(seed, learn=learn, **case)
        set_mask_state(model, state, seed)
        with torch.no_grad():
            counted = float(model_params(model))
        assert counted == pytest.approx(architecture_params(describe(model)), rel=1e-9)


def test_params_gradient_reaches_width_kernel_resolution_and_depth_masks():
    model = tiny_model(0, input_size=(9, 12))
    set_mask_state(model, "random", 1)
    model_params(model).backward()
    for name in ("mask_width", "mask_sigma", "mask_res", "mask_depth"):
        grad = getattr(model, name).grad
        assert grad is not None and bool(grad.abs().sum() > 0), name


def test_limit_loss_is_zero_within_the_limit_and_quadratic_over_it():
    values = torch.tensor([50.0, 100.0, 150.0, 300.0])
    torch.testing.assert_close(limit_loss(values, 100.0), torch.tensor([0.0, 0.0, 0.25, 4.0]))
