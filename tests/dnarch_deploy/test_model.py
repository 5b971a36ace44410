"""DNArch: only the support is materialised, yet it computes the full masked network; the masks
start at the base size; gradients reach every mask; the resolution mask is an exact low-pass."""

from __future__ import annotations

import math

import pytest
import torch

from dnarch_deploy import DNArch, ModelConfig, base_cost, complexity_loss, model_cost
from dnarch_deploy import crop as crop_module
from dnarch_deploy import fold as fold_module
from dnarch_deploy import masks as M
from dnarch_deploy import model as model_module
from dnarch_deploy.model import Block
from dnarch_deploy.plan import BlockPlan
from dnarch_deploy.spectral import frequency_positions

from .helpers import relative_error, set_mask_state, tiny_config, tiny_model

F64 = torch.float64

# One table of network cases (timm style): every contract test below runs over it.
CASES = {
    "1d-odd-classify": dict(input_size=(17,)),
    "1d-even-dense": dict(input_size=(18,), dense=True, out_channels=2),
    "1d-long-fft-resampling": dict(input_size=(150,)),  # past spectral.MATRIX_MAX
    "2d-classify": dict(input_size=(7, 10)),
    "2d-dense": dict(input_size=(8, 9), dense=True),
    "tokens": dict(input_size=(16,), vocab_size=11, in_channels=5),
    "learn-K": dict(learn="K"),
    "learn-W": dict(learn="W", input_size=(8, 7)),
    "learn-D": dict(learn="D"),
    "learn-KWD": dict(learn="KWD", input_size=(12,)),
    "learn-R-2d": dict(learn="R", input_size=(9, 12)),
}
STATES = ["init", "min", "max", "extremes", "random"]


def inputs(model: DNArch, batch: int = 3, seed: int = 0) -> torch.Tensor:
    c = model.config
    g = torch.Generator().manual_seed(seed)
    if c.vocab_size:
        return torch.randint(0, c.vocab_size, (batch, *c.input_size), generator=g)
    return torch.randn(batch, c.in_channels, *c.input_size, generator=g, dtype=F64)


def grads(model: DNArch, out: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradient of <out, weight> for every trained parameter; one not used counts as zero."""
    names, params = zip(*((n, p) for n, p in model.named_parameters() if p.requires_grad))
    g = torch.autograd.grad((out * weight).sum(), params, allow_unused=True)
    return {n: torch.zeros_like(p) if d is None else d for n, p, d in zip(names, params, g)}


@pytest.mark.slow
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_support_only_equals_full_masked_network(case, state):
    """model(x) slices weights, kernels, channels and blocks to the masks' support; model(x,
    full=True) runs the maximum-size network with the mask values (zero outside the support)
    multiplied in. Same outputs and same gradients, in float64, for many mask states."""
    seeds = range(8) if state in ("random", "extremes") else range(1)
    sliced_somewhere = False
    for seed in seeds:
        model = tiny_model(seed, **case)
        set_mask_state(model, state, seed)
        sliced_somewhere |= is_sliced(model)
        x = inputs(model, seed=seed)
        sliced, full = model(x), model(x, full=True)
        assert sliced.shape == full.shape
        assert relative_error(sliced, full) <= 1e-10, (state, seed)
        weight = torch.randn(full.shape, dtype=F64, generator=torch.Generator().manual_seed(seed))
        g_sliced, g_full = grads(model, sliced, weight), grads(model, full, weight)
        scale = max(float(g.abs().max()) for g in g_full.values())
        for name, g in g_full.items():
            # relative per parameter, with a floor for gradients that are zero in exact arithmetic
            # (e.g. the encoder bias, which a BatchNorm follows)
            tol = 1e-9 * float(g.abs().max()) + 1e-14 * scale
            assert float((g_sliced[name] - g).abs().max()) <= tol, (name, state, seed)
    if state in ("min", "random", "extremes") and any(map(model.config.learns, "KWD")):
        assert sliced_somewhere  # the comparison covered a real slicing, not two equal networks


def is_sliced(model: DNArch) -> bool:
    """Whether the support-only plan is smaller than the full one anywhere."""
    with torch.no_grad():
        small, full = model.plan(), model.plan(full=True)
    if len(small.blocks) < len(full.blocks) or small.stream < full.stream:
        return True
    return any(
        (a.n_in, a.n_mid, a.n_out) != (b.n_in, b.n_mid, b.n_out) or a.half_taps != b.half_taps
        for a, b in zip(small.blocks, full.blocks)
    )


@pytest.mark.parametrize("case", [CASES["1d-long-fft-resampling"], dict(input_size=(9, 12))])
def test_masks_start_at_the_base_size(case):
    """At initialisation every mask's size() is the base CCNN_{D,H}'s: width H (of 2H), depth D
    (of 2D), full resolution, global kernel; and that is also what is materialised."""
    model = tiny_model(0, dtype=torch.float32, **case)
    c = model.config
    H, D = c.width, c.depth
    widths = M.sigmoid_size(model.mask_width, c.tau_width, c.max_width)
    torch.testing.assert_close(widths, torch.full_like(widths, H))
    depth = M.sigmoid_size(model.mask_depth, c.tau_depth, c.max_depth)
    torch.testing.assert_close(depth, torch.tensor(float(D)))
    resolution = M.sigmoid_size(model.mask_res, c.tau_resolution, 1)  # fraction of the axis
    assert (resolution == 1).all()
    for axis, k in enumerate(c.max_kernel):
        assert (M.gaussian_size(model.mask_sigma[:, axis], k) == k).all()
    with torch.no_grad():
        plan = model.plan()
        kernels = model.kernels(plan)
    assert len(plan.blocks) == D and plan.stream == H
    for p, kernel in zip(plan.blocks, kernels):
        assert (p.n_in, p.n_mid, p.n_out) == (H, H, H)
        assert p.resolution == c.input_size and p.kernel_size == c.max_kernel
        assert kernel.shape == (H, *c.max_kernel)
        assert (kernel != 0).all()  # every tap of the global kernel survives the Gaussian mask


@pytest.mark.parametrize("state", ["init", "min", "random", "extremes"])
def test_resolution_plan_keeps_exactly_the_mask_support(state):
    """Each block computes at a length R that holds every bin where the resolution mask is
    non-zero; the mask values handed to the resampler cover R // 2 + 1 bins and are zero past the
    support. An axis whose support holds every bin is not filtered (no mask values, R = S)."""
    cropped = uncropped = 0
    for seed in range(4):
        model = tiny_model(seed, input_size=(150, 9))
        set_mask_state(model, state, seed)
        c = model.config
        for b, p in enumerate(model.plan().blocks):
            m_res = p.m_res or (None,) * len(c.input_size)
            for axis, (n, r, m) in enumerate(zip(c.input_size, p.resolution, m_res)):
                mu = model.mask_res[b, axis]
                full = M.sigmoid_mask(frequency_positions(n, dtype=F64), mu, c.tau_resolution)
                support = int((full > 0).sum())
                if m is None:
                    assert r == n and support == n // 2 + 1
                    uncropped += 1
                    continue
                cropped += 1
                assert r <= n and m.numel() == r // 2 + 1 >= support and support < n // 2 + 1
                torch.testing.assert_close(m[:support], full[:support], rtol=0, atol=0)
                assert (m[support:] == 0).all() and (full[support:] == 0).all()
    assert cropped if state != "init" else uncropped and not cropped


@pytest.mark.parametrize("loss", ["task", "complexity"])
@pytest.mark.parametrize("case", [dict(input_size=(13,)), dict(input_size=(7, 8), dense=True)])
def test_gradients_reach_every_mask_parameter(case, loss):
    """From the task loss alone and from L_comp alone, every entry of mask_sigma, mask_res,
    mask_width and mask_depth gets a non-zero gradient (depth mask at its maximum, so that every
    block is in use; a block outside the depth support is not computed and costs nothing; every
    resolution mask crops, since an axis kept whole is not filtered)."""
    model = tiny_model(1, **case)
    c = model.config
    with torch.no_grad():
        model.mask_depth.fill_(M.sigmoid_mu_range(c.tau_depth)[1])
        model.mask_res.fill_(M.sigmoid_mu_for_size(0.6, c.tau_resolution, 1))
    plan = model.plan()
    assert len(plan.blocks) == c.max_depth
    assert all(m is not None for p in plan.blocks for m in p.m_res)
    if loss == "task":
        out = model(inputs(model))
        value = out.square().mean()
    else:
        value = complexity_loss(model_cost(model)["total"], 0.5 * base_cost(model.config))
    names = ["mask_sigma", "mask_res", "mask_width", "mask_depth"]
    params = [getattr(model, n) for n in names]
    for name, g in zip(names, torch.autograd.grad(value, params)):
        assert g.isfinite().all() and (g != 0).all(), (name, g)


@pytest.mark.parametrize("depth", [False, True], ids=["no-depth-mask", "depth-mask"])
@pytest.mark.parametrize("sizes", [(4, 5, 3), (6, 6, 6), (1, 2, 6)], ids=str)
def test_width_mask_fold_is_slice_and_product_with_exact_gradients(sizes, depth):
    """The one-node fold of a block's width masks (and depth weight) into its parameters computes
    the plain slices and products, and its hand-written backward passes gradcheck (float64,
    every input)."""
    n_in, n_mid, n_out = sizes
    g = torch.Generator().manual_seed(sum(sizes))

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=F64).requires_grad_()

    H = 6
    params = [rand(H), rand(H), rand(H, H), rand(H), rand(H, H), rand(H)]
    masks = rand(3, H)
    weight = rand(()) if depth else None
    folded = fold_module.FoldWidthMasks.apply(*params, masks, weight, sizes)
    norm_w, norm_b, w1, b1, w2, b2 = params
    m_in, m_mid, m_out = masks[0, :n_in], masks[1, :n_mid], masks[2, :n_out]
    if depth:
        m_out = m_out * weight
    plain = (norm_w[:n_in] * m_in, norm_b[:n_in] * m_in, w1[:n_mid, :n_in] * m_mid[:, None],
             b1[:n_mid] * m_mid, w2[:n_out, :n_mid] * m_out[:, None], b2[:n_out] * m_out)
    for a, b in zip(folded, plain, strict=True):
        assert torch.equal(a, b)
    inputs = (*params, masks, weight)
    assert torch.autograd.gradcheck(
        lambda *t: fold_module.FoldWidthMasks.apply(*t, sizes), inputs)


@pytest.mark.parametrize("case", [dict(input_size=(150,)), dict(input_size=(7, 8), dense=True)])
def test_resolution_mask_is_in_the_loss_before_it_crops(case):
    """At initialisation the resolution masks crop nothing (no resampling: every block at full
    resolution), yet the mask multiplies each convolution's spectrum (paper eq. 9, appendix E:
    0.85 at the highest frequency), so the task loss moves every block's mask from step one."""
    model = tiny_model(3, learn="KR", **case)
    c = model.config
    plan = model.plan()
    assert all(p.m_res is None and p.resolution == c.input_size for p in plan.blocks)
    for p in plan.blocks:
        assert p.conv_mask is not None and p.conv_mask.shape[-1] == p.conv_fft[-1] // 2 + 1
        # below 1 towards the highest frequencies (0 past the top input bin of an odd axis)
        assert p.conv_mask.min() < 0.95 and p.conv_mask.max() <= 1.0
    # the mask at input bin n // 2 (coordinate +1) is appendix E's 0.85
    mu = model.mask_res[0, -1]
    top = M.sigmoid_mask(torch.ones(()), mu, c.tau_resolution, c.threshold)
    assert top.item() == pytest.approx(0.85)
    out = model(inputs(model))
    (g,) = torch.autograd.grad(out.square().mean(), model.mask_res)
    assert (g != 0).all()


@pytest.mark.parametrize("learn, size, expected", [
    ("KRWD", (1460,), (1459,)),  # a long axis starts global too
    ("KRWD", (100,), (99,)),
    ("K", (28, 300), (27, 299)),  # per axis
    ("RWD", (1460,), (1459,)),  # kernel size not learned: global (the base CCNN's)
    ("none", (1460,), (1459,)),
])
def test_kernels_start_global(learn, size, expected):
    """The first plan's kernels span the input (max_kernel taps per axis), and the kernel gain
    gives them unit-order output variance: 1 / sqrt(taps)."""
    config = ModelConfig(in_channels=1, out_channels=2, input_size=size, depth=2, width=4,
                         learn=learn)
    assert config.max_kernel == expected
    model = DNArch(config)
    with torch.no_grad():
        plan = model.plan()
    for block in plan.blocks:
        assert tuple(2 * h + 1 for h in block.half_taps) == expected
    assert model.kernel_gain == pytest.approx(1.0 / math.prod(expected) ** 0.5)


def test_blocks_outside_the_depth_support_get_no_gradient():
    model = tiny_model(2, input_size=(13,))
    depth = len(model.plan().blocks)
    assert depth < model.config.max_depth
    out = model(inputs(model))
    g = torch.autograd.grad(out.square().mean(), model.mask_width)[0]
    assert (g[:depth] != 0).all() and (g[depth:] == 0).all()


# --- resolution: the cropped block is the masked full-resolution block when linear ---------------


@pytest.mark.parametrize(
    "size, resolution",
    [((20,), (9,)), ((21,), (13,)), ((150,), (61,)), ((10, 12), (7, 5)), ((9, 8), (9, 3))],
    ids=str,
)
def test_cropped_block_equals_low_pass_at_full_resolution_when_linear(
    size, resolution, monkeypatch
):
    """With a linear branch (GELU replaced by the identity, no dropout) and a 1-tap kernel, the
    block computed at the cropped resolution R equals the block at full resolution whose spectrum
    is multiplied by the mask and zeroed above the cutoff (a low-pass at full length): pointwise
    layers commute with resampling and up(down(x)) is that low-pass. The kernel has one tap
    because a zero-padded, finite-window convolution is not band-preserving at the borders, so a
    longer kernel at R is not the same operator as at full resolution. With the GELU back the two
    differ: at a lower resolution, cropping *is* the model."""
    torch.manual_seed(0)
    width = 5
    block = Block(width, dropout=0.0).to(F64)
    x = torch.randn(4, width, *size, dtype=F64)
    kernel = torch.randn(width, *([1] * len(size)), dtype=F64)
    masks = tuple(0.1 + 0.9 * torch.rand(r // 2 + 1, dtype=F64) for r in resolution)
    low_pass = tuple(
        torch.cat([m, torch.zeros(n // 2 + 1 - m.numel(), dtype=F64)]) for m, n in zip(masks, size)
    )

    def plan(res, m_res):
        half_taps, kernel_size = (0,) * len(size), (1,) * len(size)
        return BlockPlan(0, width, width, width, res, half_taps, kernel_size, None, m_res=m_res)

    cropped, full = plan(resolution, masks), plan(size, low_pass)
    nonlinear = relative_error(block(x, cropped, kernel), block(x, full, kernel))
    monkeypatch.setattr(model_module.F, "gelu", lambda z: z)
    torch.testing.assert_close(
        block(x, cropped, kernel), block(x, full, kernel), rtol=0, atol=1e-11
    )
    assert nonlinear > 1e-6  # the test has teeth: with the GELU, they differ


# --- the rest of the contract ------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_output_shape_and_forward_changes_no_state(case):
    model = tiny_model(0, **case)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = model(inputs(model, batch=2))
    c = model.config
    assert out.shape == ((2, c.out_channels, *c.input_size) if c.dense else (2, c.out_channels))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_run_with_the_plans_kernels_given_is_run_computing_them():
    """run() with the plan's kernels given is run() computing them; the given ones are used."""
    model = tiny_model(0, learn="KRWD")
    x, plan = inputs(model), model.plan()
    given = model.kernels(plan)
    torch.testing.assert_close(model.run(x, plan, given), model.run(x, plan), rtol=0, atol=0)
    doubled = model.run(x, plan, [2 * k for k in given])  # the given kernels are the ones used
    assert (doubled - model.run(x, plan)).abs().max() > 1e-3
    with pytest.raises(ValueError):  # another plan's kernels: one per block, or an error
        model.run(x, plan, given[:-1])


def test_base_ccnn_has_no_masks():
    model = tiny_model(0, learn="none", input_size=(9, 12))
    assert model.mask_parameters() == []
    plan = model.plan()
    assert len(plan.blocks) == 2 and plan.stream == 4
    assert all(p.resolution == (9, 12) and p.kernel_size == (9, 11) for p in plan.blocks)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(learn="KX"), "'KX'"),
        (dict(learn="KK"), "'KK'"),
        (dict(input_size=(4, 5, 6)), r"\(4, 5, 6\)"),
        (dict(input_size=(0,)), r"\(0,\)"),
        (dict(input_size=()), r"\(\)"),
        (dict(width=0), "width must be >= 1, got 0"),
        (dict(depth=-1), "depth must be >= 1, got -1"),
        (dict(in_channels=0), "in_channels must be >= 1, got 0"),
        (dict(dropout=1.0), "dropout must be in .*got 1.0"),
        (dict(input_norm="minmax"), "input_norm must be one of .*got 'minmax'"),
        (dict(tau_width=0.0), "tau_width must be > 0, got 0.0"),
    ],
)
def test_config_errors_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(input_mean=[0.0]), "input mean/std need 2 values, got 1/2"),
        (dict(input_std=[1.0, -2.0]), r"input_std must be positive, got \[1.0, -2.0\]"),
    ],
)
def test_model_errors_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DNArch(tiny_config(**kwargs))


def test_learn_is_normalised():
    assert tiny_config(learn="dwk").learn == "KWD"
    assert tiny_config(learn="NONE").learn == "none"
    assert tiny_config(learn="R").max_width == 4 and tiny_config(learn="W").max_width == 8
    assert tiny_config(learn="R").max_depth == 2 and tiny_config(learn="D").max_depth == 4
    assert ModelConfig(1, 1, [8]).input_size == (8,) and tiny_config().max_kernel == (17,)


def test_dense_output_is_denormalised():
    model = tiny_model(
        0, dense=True, out_channels=2, output_mean=[1.0, -3.0], output_std=[2.0, 0.5]
    )
    plain = tiny_model(0, dense=True, out_channels=2)
    x = inputs(model)
    y, y0 = model(x), plain(x)
    torch.testing.assert_close(y[:, 0], 2.0 * y0[:, 0] + 1.0)
    torch.testing.assert_close(y[:, 1], 0.5 * y0[:, 1] - 3.0)


def test_sample_norm_standardises_each_sample_channel():
    """standardise: mean 0 and variance v / (v + eps) per sample and channel, in closed form."""
    x = torch.randn(3, 2, 50, dtype=torch.float64) * torch.tensor([1e-3, 1.0, 1e3])[:, None, None]
    eps = torch.tensor([1e-8, 0.0], dtype=torch.float64)
    y = model_module.standardise(x, eps)
    var = x.var(-1, unbiased=False)
    torch.testing.assert_close(y.mean(-1), torch.zeros(3, 2, dtype=torch.float64))
    torch.testing.assert_close(y.var(-1, unbiased=False), var / (var + eps))


def test_sample_norm_makes_the_network_blind_to_each_samples_offset_and_scale():
    model = tiny_model(0, input_norm="sample").eval()
    x = inputs(model)
    scale = torch.tensor([3.0, 0.2, 50.0, 1.0], dtype=x.dtype)[: x.shape[0]].view(-1, 1, 1)
    moved = x * scale + torch.randn(x.shape[0], x.shape[1], 1, dtype=x.dtype)
    torch.testing.assert_close(model(moved), model(x), rtol=1e-6, atol=1e-6)
    dataset = tiny_model(0).eval()  # the same weights, normalised by the data set's statistics
    assert not torch.allclose(dataset(moved), dataset(x), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("pool", ["avg", "avgmax"])
def test_the_global_decoder_reads_the_mean_and_the_maximum(pool):
    """logits = W mean_t(h) + b (+ W_max max_t(h)): the stream h at the decoder's input, taken
    from a hook, against the closed form."""
    model = tiny_model(3, input_size=(9, 8), pool=pool)
    seen = {}
    last = model.plan().blocks[-1].index  # its output is the decoder's input
    model.blocks[last].register_forward_hook(lambda m, i, out: seen.update(h=out))
    x = torch.randn(4, 2, 9, 8, dtype=torch.float64)
    with torch.no_grad():
        y = model(x)
    h = seen["h"].flatten(2)
    s = h.shape[1]
    expected = h.mean(-1) @ model.dec_w[:, :s].T + model.dec_b
    if pool == "avgmax":
        expected = expected + h.amax(-1) @ model.dec_w_max[:, :s].T
    else:
        assert not hasattr(model, "dec_w_max")
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # trunk and pooled are that h and its reductions, in the head's order
        trunk = model.trunk(x, model.plan())
    torch.testing.assert_close(trunk.flatten(2), h, rtol=0, atol=0)
    reductions = [h.mean(-1)] + ([h.amax(-1)] if pool == "avgmax" else [])
    torch.testing.assert_close(model.pooled(trunk), reductions, rtol=0, atol=0)
    torch.testing.assert_close(model.head(model.pooled(trunk)), y, rtol=0, atol=0)


def test_pool_must_be_known():
    with pytest.raises(ValueError, match="pool must be one of avg, avgmax, got 'max'"):
        ModelConfig(in_channels=1, out_channels=2, input_size=(16,), pool="max")
    dense = ModelConfig(in_channels=1, out_channels=2, input_size=(16,), dense=True)
    assert dense.pooling == ()  # a dense decoder pools nothing


@pytest.mark.parametrize("input_size", [(17,), (9, 9)])
def test_every_fft_runs_in_float32_under_bfloat16_autocast(input_size, monkeypatch):
    """search.run trains under bfloat16 autocast on CUDA (--amp), where cuFFT refuses bfloat16:
    the activations that reach an FFT are bfloat16 there, and each FFT must get float32."""
    seen = []
    for name in ("rfft", "irfft", "fft", "irfftn"):
        original = getattr(torch.fft, name)

        def recording(x, *args, _original=original, **kwargs):
            seen.append(x.dtype)
            return _original(x, *args, **kwargs)

        monkeypatch.setattr(torch.fft, name, recording)
    model = tiny_model(dtype=torch.float32, input_size=input_size)
    x = torch.randn(3, 2, *input_size)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model.run(x, model.plan())
    out.float().square().sum().backward()
    assert out.dtype == torch.bfloat16  # autocast was on: bfloat16 flowed through the blocks
    assert seen and set(seen) <= {torch.float32, torch.complex64}, set(seen)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("size", [(150,), (40,), (16, 12)])
def test_the_crop_limit_is_the_largest_resolution_whose_crop_costs_less(size):
    """crop_limit: the cropped block costs less than the full-resolution one there, and at every
    larger resolution a mask can give it costs at least as much."""
    from dnarch_deploy.spectral import resolution_for_bins

    full = crop_module.block_macs(size, size, 4)
    # the initial network's blocks, as the cost model and export price them
    from dnarch_deploy import describe
    from dnarch_deploy.cost import layer_costs
    initial = describe(tiny_model(0, input_size=size, width=4, learn="R"))
    assert layer_costs(initial)["blocks.0"] == pytest.approx(full, rel=1e-12)
    for axis, n in enumerate(size):
        limit = crop_module.crop_limit(size, axis, 4)
        assert 0 < limit < n
        if len(size) == 1:  # its two dense resamplings outweigh what a first crop saves
            assert limit < n - 1
        cost = {r: crop_module.block_macs(size, size[:axis] + (r,) + size[axis + 1:], 4)
                for r in {resolution_for_bins(k, n) for k in range(1, n // 2 + 1)} - {n}}
        assert cost[limit] < full
        assert all(c >= full for r, c in cost.items() if r > limit)
    assert tiny_config(input_size=size).crop_limits() == size  # "bin": every crop


def test_crop_pays_computes_at_full_resolution_until_a_crop_costs_less():
    """With crop="pays" a mask whose support gives a resolution above the limit leaves the block
    at full resolution, filtering its convolution's spectrum (the mask stays in the loss); below
    the limit the block crops as with "bin". The search pays for what runs either way, and above
    the limit less than the "bin" rule's block at the same mask."""
    from dnarch_deploy import describe
    from dnarch_deploy.cost import architecture_cost

    size = (150,)
    limit = crop_module.crop_limit(size, 0, 4)
    for share, crops in ((0.8, False), (0.5 * limit / 150, True)):
        costs = {}
        for rule in ("bin", "pays"):
            model = tiny_model(0, input_size=size, learn="KR", crop=rule)
            c = model.config
            with torch.no_grad():
                model.mask_res.fill_(M.sigmoid_mu_for_size(share, c.tau_resolution, 1))
            p = model.plan().blocks[0]
            if rule == "bin" or crops:
                assert p.resolution[0] <= (limit if crops else 149) and p.m_res is not None
            else:
                assert p.resolution == size and p.m_res is None
                assert p.conv_mask is not None and p.conv_mask.min() < 0.1  # filtered
                out = model(inputs(model))
                (g,) = torch.autograd.grad(out.square().mean(), model.mask_res)
                assert (g[: len(model.plan().blocks)] != 0).all()
            with torch.no_grad():
                costs[rule] = float(model_cost(model)["total"])
            assert costs[rule] == pytest.approx(architecture_cost(describe(model)), rel=1e-9)
        if crops:
            assert costs["pays"] == pytest.approx(costs["bin"], rel=1e-12)
        else:
            assert costs["pays"] < costs["bin"]


def test_an_unknown_crop_rule_is_refused():
    with pytest.raises(ValueError, match="crop must be one of"):
        tiny_config(crop="sometimes")
