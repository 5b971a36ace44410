"""The cost model (the deployed network's MACs) against closed forms, against the network the masks
describe, and against torch's own FLOP counter."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dnarch_deploy import base_cost, complexity_loss, describe, model_cost, spectral
from dnarch_deploy import masks as M
from dnarch_deploy.cost import architecture_cost
from dnarch_deploy.operators import (
    cheapest_resample,
    conv_by_cost,
    conv_macs,
    depthwise_channels,
    resample_macs,
)
from dnarch_deploy.params import architecture_params, limit_loss, model_params

from .helpers import set_mask_state, tiny_config, tiny_model

CONFIGS = {
    "1d-classify": dict(input_size=(17,)),
    "1d-even-dense": dict(input_size=(18,), dense=True, out_channels=2),
    "2d-classify": dict(input_size=(9, 12), in_channels=3),
    "2d-dense": dict(input_size=(8, 7), dense=True),
    "tokens": dict(input_size=(16,), vocab_size=11, in_channels=5),
    "1d-mean-pool": dict(input_size=(17,), pool="avg"),
}
LEARN = ["KRWD", "none", "K", "R", "W", "D", "KWD"]


def closed_form_base_cost(c, conv_taps=None, period=None) -> float:
    """CCNN_{D,H} written out by hand as export deploys it: encoder (linear with the norm folded,
    none for tokens; GELU), D blocks (the depthwise convolution at the tactic export picks by
    cost, two H x H pointwise layers, the first one's per-position bias, GELU, residual; the
    norm folded; no Slice or Concat, every block as wide as the stream), decoder (each pooling
    -- mean, and max with pool "avgmax" -- over L H values, and a linear on their H outputs each;
    or a linear per position). ``conv_taps``: the deployed kernel's taps (default the global
    kernel's, K_max = S or S - 1 made odd); ``period``: the circular lengths it runs at."""
    L, H, D = math.prod(c.input_size), c.width, c.depth
    taps = conv_taps or tuple(s if s % 2 else s - 1 for s in c.input_size)
    tactic = conv_by_cost(H, tuple(c.input_size), taps, period)
    encoder = L * (0 if c.vocab_size else c.in_channels) * H + L * H
    block = conv_macs(tactic, H, tuple(c.input_size), taps, period) + 2 * L * H * H
    block += 3 * L * H
    pools = {"avg": 1, "avgmax": 2}[c.pool]
    decoder = L * H * c.out_channels if c.dense else pools * (L * H + H * c.out_channels)
    return encoder + D * block + decoder


@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_base_cost_closed_form(case):
    c = tiny_config(**case)
    assert base_cost(c) == pytest.approx(closed_form_base_cost(c), rel=1e-12)
    assert base_cost(tiny_config(**case, learn="none")) == base_cost(c)  # C_target ignores learn


@pytest.mark.parametrize("learn", LEARN)
@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_model_cost_at_init_is_base_cost(case, learn):
    """The masks start at the base size, so the search starts at C_target; with a learned
    resolution, at the base with the mask folded into every kernel (2 S - 1 taps per axis),
    which the MatMul FFT runs circularly at the training's FFT length (that of the global
    kernel), or the linear one where that is shorter."""
    model = tiny_model(0, dtype=torch.float32, learn=learn, **case)
    c = model.config
    with torch.no_grad():
        cost = model_cost(model)
    folded = period = None
    if "R" in learn:
        folded = tuple(2 * s - 1 for s in c.input_size)
        training = spectral.conv_fft_sizes(c.input_size, c.max_kernel)
        period = tuple(min(n, 2 * s - 1) for n, s in zip(training, c.input_size))
    assert float(cost["total"]) == pytest.approx(closed_form_base_cost(c, folded, period),
                                                 rel=1e-6)
    assert cost["block_weights"].tolist() == [1.0] * c.depth + [0.0] * (c.max_depth - c.depth)


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


@pytest.mark.parametrize("state", ["random", "extremes"])
@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_mac_units_skip_the_per_kind_pass_with_the_same_cost_and_gradients(case, state):
    """model_cost in MACs (a training step's units) takes each operator's MACs at once; priced
    kind by kind instead (a one-part blend of MAC units goes that way), the total, every block
    term and every mask's gradient are bit for bit the same."""
    from dnarch_deploy.cost import MACS, BatchBlend

    kind_by_kind = BatchBlend(((MACS, 1.0),))
    assert MACS.counts_macs and not kind_by_kind.counts_macs
    model = tiny_model(1, learn="KRWD", **case)
    set_mask_state(model, state, 1)
    results = []
    for units in (MACS, kind_by_kind):
        model.zero_grad()
        cost = model_cost(model, units=units)
        cost["total"].backward()
        results.append((cost, [p.grad.clone() for p in model.mask_parameters()]))
    (fast, fast_grads), (slow, slow_grads) = results
    assert torch.equal(fast["total"], slow["total"])
    assert fast["blocks"].keys() == slow["blocks"].keys()
    for name in fast["blocks"]:
        assert torch.equal(fast["blocks"][name], slow["blocks"][name]), name
    assert all(torch.equal(a, b) for a, b in zip(fast_grads, slow_grads))
    assert any(float(g.abs().sum()) > 0 for g in fast_grads)


def test_a_block_narrower_than_the_stream_pays_for_its_slices_and_concat():
    """A block reading n_in < stream channels Slices them (n_in L elements); one writing n_out <
    stream adds to a Slice and Concats the rest back (the stream's L C elements copied)."""
    from dnarch_deploy.block_ops import block_operators

    L, args = 20, ((20,), (20,), 8, 10, 8, (3,), (False,))
    full = block_operators(*args, stream=8)  # as wide as the stream: no Slice, no Concat
    assert "read" not in full and "write" not in full
    assert full["bias1"].macs == L * 10 and full["residual"].macs == L * 8
    narrow = block_operators(*args, stream=12)
    assert narrow["read"].macs == L * 8 and narrow["write"].macs == L * 12
    assert list(narrow) == ["read", "conv", "linear1", "bias1", "gelu", "linear2", "residual",
                            "write"]  # the order they run in


@pytest.mark.parametrize(("n_in", "stream", "read"), [(6, 12, 8), (6, 8, None), (6, 7, None),
                                                      (8, 12, 8)])
def test_a_direct_convolution_reads_its_zero_channels_from_the_stream(n_in, stream, read):
    """The direct tactic runs n_in channels at the next multiple of 4 with zero filters: the
    block reads that many stream channels, or all there are (no read Slice), resamples them, and
    its first linear map has a column for each (export's StaticBlock.read_wider)."""
    from dnarch_deploy.block_ops import block_operators

    L, n_mid, r = 20, 10, 10
    ops = block_operators((L,), (r,), n_in, n_mid, 4, (3,), (True,), stream=stream)
    assert ops["conv"].kind == "conv.direct"
    columns = depthwise_channels(n_in)
    assert ("read" in ops) == (read is not None)
    if read is not None:
        assert ops["read"].macs == L * read
    assert ops["down0"].macs == min(columns, stream) * resample_macs(
        cheapest_resample(L, r), L, r)
    assert ops["linear1"].macs == r * columns * n_mid and ops["linear1"].width == columns * n_mid


def test_cost_gradient_reaches_every_mask():
    model = tiny_model(0, input_size=(9, 12))
    set_mask_state(model, "random", 1)
    model_cost(model)["total"].backward()
    for p in model.mask_parameters():
        assert p.grad is not None and bool(p.grad.abs().sum() > 0)


@pytest.mark.parametrize("mask", ["mask_sigma", "mask_res", "mask_width", "mask_depth"])
def test_shrinking_any_mask_lowers_the_cost(mask):
    # a learned resolution folds its mask into a full-resolution kernel (2 S - 1 taps, whatever
    # the kernel mask keeps): the kernel's size shows in the cost where R is not learned
    learn = "KWD" if mask == "mask_sigma" else "KRWD"
    model = tiny_model(0, input_size=(9, 12), learn=learn)
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


def linear_terms(cost: dict, config) -> float:
    """The cost's linear terms; with tokens plus the training model's encoder linear map, which
    the deployed network folds into its look-up table (priced 0 there)."""
    terms = cost["blocks"]
    blocks = (cost["block_weights"] * (terms["linear1"] + terms["linear2"])).sum()
    tokens = math.prod(config.input_size) * config.in_channels * config.width
    return float(cost["encoder"]["linear"] + blocks + cost["decoder"]["linear"]
                 + (tokens if config.vocab_size else 0))


@pytest.mark.parametrize("learn", ["none", "KRWD"])
@pytest.mark.parametrize("case", CONFIGS.values(), ids=CONFIGS.keys())
def test_linear_terms_match_flop_counter(case, learn, monkeypatch):
    """An independent count of the base CCNN's operations: FlopCounterMode counts the matmuls of
    a forward pass at batch 1 (2 FLOPs per multiply-accumulate). The linear terms of model_cost
    (encoder, the two pointwise layers per block, decoder) must equal them, once the kernel
    network's own matmuls are subtracted.

    What the comparison leaves out, and why: the training model computes its convolutions and
    resampling with FFTs, which the counter does not see (the cost prices them as export lowers
    them; tests/export checks those against the lowered operators; resampling is forced onto its
    FFT path here: its matrix path is a matmul), nor the element-wise terms; and the counter
    sees the kernel network, which the deployed network does not run (counted separately here
    and subtracted). Input normalisation, embedding look-ups and the mask values (folded into
    weights) are not counted by either."""
    monkeypatch.setattr(spectral, "MATRIX_MAX", 0)
    model = tiny_model(0, dtype=torch.float32, learn=learn, **case)
    x = torch.randn(1, model.config.in_channels, *model.config.input_size)
    if model.config.vocab_size:
        x = torch.randint(0, model.config.vocab_size, (1, *model.config.input_size))
    total, kernel_net = counted_macs(model, x)
    assert kernel_net > 0
    with torch.no_grad():
        expected = linear_terms(model_cost(model), model.config)
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
    expected += decoder_cost(L, plan.stream, c.out_channels, c.pooling)["linear"]
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
    tactic = conv_by_cost(p.n_in, (r,), (taps,))  # a cropped axis: the kernel's own taps
    # a direct convolution's zero channels are read from the stream and meet linear1's columns
    columns = depthwise_channels(p.n_in) if tactic == "direct" else p.n_in
    read = min(columns, plan.stream)
    assert float(block["linear1"].detach()) == pytest.approx(r * columns * p.n_mid)
    assert float(block["conv"].detach()) == pytest.approx(conv_macs(tactic, p.n_in, (r,), (taps,)))
    down, up = cheapest_resample(20, r), cheapest_resample(r, 20)
    assert float(block["down0"].detach()) == pytest.approx(read * resample_macs(down, 20, r))
    assert float(block["up0"].detach()) == pytest.approx(p.n_out * resample_macs(up, r, 20))
    # size(m_depth) = 2.5, but only the blocks the plan runs are paid for
    assert len(plan.blocks) == 2
    torch.testing.assert_close(
        cost["block_weights"].detach(), torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    )
    # d linear1 / d mu_mid = R columns d size(m_mid) / d mu_mid
    (grad,) = torch.autograd.grad(block["linear1"], model.mask_width)
    mu = model.mask_width.detach()[0, 1].clone().requires_grad_()
    (dsize,) = torch.autograd.grad(M.sigmoid_size(mu, c.tau_width, c.max_width), mu)
    assert float(grad[0, 1]) == pytest.approx(r * columns * float(dsize), rel=1e-9)


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


# --- predicted milliseconds (--cost latency) ------------------------------------------------------


@pytest.mark.parametrize("state", ["init", "random", "min"])
@pytest.mark.parametrize("case", [CONFIGS["1d-classify"], CONFIGS["2d-dense"], CONFIGS["tokens"]],
                         ids=["1d", "2d", "tokens"])
def test_latency_units_price_each_operator_of_the_described_network(case, state):
    """In milliseconds the search's cost is the table's prediction summed over the lowered
    operators of the network the masks describe, and its gradient reaches the masks."""
    from dnarch_deploy.cost import Units, architecture_operators, layer_costs
    from dnarch_deploy.latency import load_table

    units = Units(load_table(), batch=32)
    model = tiny_model(0, learn="KRWD", **case)
    set_mask_state(model, state, 1)
    cost = model_cost(model, units=units)
    found = describe(model)
    assert float(cost["total"].detach()) == pytest.approx(architecture_cost(found, units), rel=1e-9)
    dims = len(found.input_size)  # an image's operators are priced by the table's 2-D points,
    # a resampling by those along its axis
    axis = {"down0": 0, "down1": 1, "up0": 0, "up1": 1}
    by_hand = [sum(units.table.predict_ms(op.kind, op.macs, 32, dims, axis.get(n),
                                          (op.width, op.positions, op.taps))
                   for n, op in ops.items()) for ops in architecture_operators(found)]
    blocks = [v for k, v in layer_costs(found, units).items() if k.startswith("blocks.")]
    assert blocks == pytest.approx(by_hand, rel=1e-12)
    # a network is one call: the table's fixed cost of a call once, beside the layers
    assert architecture_cost(found, units) == pytest.approx(
        sum(layer_costs(found, units).values()) + units.table.overhead(32), rel=1e-12)
    cost["total"].backward()
    assert any(float(p.grad.abs().sum()) > 0 for p in model.mask_parameters())


def test_the_base_in_milliseconds_is_the_table_at_the_base_sizes():
    from dnarch_deploy.cost import Units
    from dnarch_deploy.latency import load_table

    table = load_table()
    c = tiny_config(input_size=(17,), learn="KWD")
    model = tiny_model(0, learn="KWD", input_size=(17,))
    with torch.no_grad():
        at_init = float(model_cost(model, units=Units(table, 1))["total"])
    assert base_cost(c, Units(table, 1)) == pytest.approx(at_init, rel=1e-9)
    assert base_cost(c, Units(table, 32)) > base_cost(c, Units(table, 1))


@pytest.mark.parametrize("case", [CONFIGS["1d-classify"], CONFIGS["2d-dense"]], ids=["1d", "2d"])
def test_a_blend_of_batches_is_the_mean_of_the_per_batch_ratios(case):
    """--cost latency at batches 1 and 32: a network's cost over the base's is the mean of its
    predicted per-batch ratios, the base costs its batch-1 milliseconds, and the search's
    differentiable cost equals the frozen architecture's."""
    from dnarch_deploy.cost import Units, latency_units
    from dnarch_deploy.latency import load_table

    table = load_table()
    model = tiny_model(0, learn="KRWD", **case)
    set_mask_state(model, "random", 1)
    found, c = describe(model), model.config
    one, large = Units(table, 1), Units(table, 32)
    blend = latency_units(table, (1, 32), c)
    ratios = [architecture_cost(found, u) / base_cost(c, u) for u in (one, large)]
    assert ratios[0] != pytest.approx(ratios[1], rel=1e-3)  # the batches price it differently
    assert base_cost(c, blend) == pytest.approx(base_cost(c, one), rel=1e-12)
    assert architecture_cost(found, blend) / base_cost(c, blend) == pytest.approx(
        sum(ratios) / 2, rel=1e-12)
    cost = model_cost(model, units=blend)
    assert float(cost["total"].detach()) == pytest.approx(architecture_cost(found, blend),
                                                          rel=1e-9)
    cost["total"].backward()
    assert any(float(p.grad.abs().sum()) > 0 for p in model.mask_parameters())
    # one batch (or one named twice) is that batch's units
    assert latency_units(table, (32, 32), c) == large


@pytest.mark.parametrize("case", [CONFIGS["1d-classify"], CONFIGS["2d-dense"]], ids=["1d", "2d"])
def test_a_measured_base_is_the_reference_of_every_ratio(case):
    """With the base's measured milliseconds (--base-ms), the base costs them, at each batch and
    blended, and a network's cost over the base's is the mean of its predicted milliseconds over
    the base's measured ones; the network itself is still priced by the table."""
    from dnarch_deploy.cost import Units, latency_units
    from dnarch_deploy.latency import load_table

    table = load_table()
    model = tiny_model(0, learn="KRWD", **case)
    set_mask_state(model, "random", 1)
    found, c = describe(model), model.config
    measured = (0.3, 4.0)
    one, large = Units(table, 1, 0.3), Units(table, 32, 4.0)
    assert (base_cost(c, one), base_cost(c, large)) == measured
    assert architecture_cost(found, one) == architecture_cost(found, Units(table, 1))
    blend = latency_units(table, (1, 32), c, measured)
    assert base_cost(c, blend) == pytest.approx(0.3, rel=1e-12)  # reads as ms at batch 1
    predicted = [architecture_cost(found, Units(table, b)) for b in (1, 32)]
    mean_ratio = (predicted[0] / 0.3 + predicted[1] / 4.0) / 2
    assert architecture_cost(found, blend) / base_cost(c, blend) == pytest.approx(mean_ratio,
                                                                                  rel=1e-12)
    cost = model_cost(model, units=blend)
    assert float(cost["total"].detach()) == pytest.approx(architecture_cost(found, blend),
                                                          rel=1e-9)
    assert latency_units(table, (32,), c, (4.0,)) == large


def test_the_fixed_cost_of_a_call_is_priced_once_per_network():
    """A table that measured a call's fixed cost adds it once to every network's figure (the
    search's, the frozen architecture's and the base's); MACs have none."""
    from dnarch_deploy.cost import MACS, Units
    from dnarch_deploy.latency import LatencyTable, load_table

    bundled = load_table()
    header = {**bundled.header, "overhead_ms": {str(b): 0.25 for b in bundled.batches}}
    with_call = Units(LatencyTable(header=header, points=bundled.points), 1)
    without = Units(LatencyTable(header={k: v for k, v in header.items() if k != "overhead_ms"},
                                 points=bundled.points), 1)
    c = tiny_config(input_size=(17,), learn="KWD")
    model = tiny_model(0, learn="KWD", input_size=(17,))
    with torch.no_grad():
        both = [float(model_cost(model, units=u)["total"]) for u in (with_call, without)]
    assert both[0] - both[1] == pytest.approx(0.25, rel=1e-9)
    assert base_cost(c, with_call) - base_cost(c, without) == pytest.approx(0.25, rel=1e-9)
    found = describe(model)
    assert architecture_cost(found, with_call) - architecture_cost(found, without) == (
        pytest.approx(0.25, rel=1e-9))
    assert MACS.per_call == 0.0 and without.per_call == 0.0


@pytest.mark.parametrize("state", ["init", "random", "min"])
@pytest.mark.parametrize("case", [CONFIGS["1d-classify"], CONFIGS["2d-classify"]], ids=["1d", "2d"])
def test_files_without_the_deployed_taps_are_priced_by_the_plans_rule(case, state):
    """architecture.json from before conv_taps / cropped were recorded: a learned resolution's
    mask is folded into every uncropped axis's kernel (2 R - 1 taps), as the plan does."""
    from dnarch_deploy import Architecture

    model = tiny_model(0, learn="KRWD", **case)
    set_mask_state(model, state, 2)
    found = describe(model)
    data = found.to_dict()
    for block in data["blocks"]:
        del block["conv_taps"], block["cropped"]
    old = Architecture.from_dict(data)
    assert architecture_cost(old) == pytest.approx(architecture_cost(found), rel=1e-12)
    assert architecture_params(old) == architecture_params(found)
