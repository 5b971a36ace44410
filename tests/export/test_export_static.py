"""Stages 2-4 in eager PyTorch: freeze, materialise, lower (every tactic)."""

from __future__ import annotations

import pytest
import torch

from dnarch_deploy.operators import depthwise_channels
from export.emit import to_onnx
from export.lowering import lower, padding_around_the_conv
from export.resampling import AxisMatMul
from export.static import Resample, freeze, materialize
from export.tactics import TACTICS, DFTConv, DirectConv, MatMulFFTConv, make_conv
from export.timing import session

from .export_cases import random_input, random_model

SEEDS = range(50)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_static_and_lowered_compute_the_trained_model(seed):
    model = random_model(seed)
    static = materialize(model, freeze(model))
    x = random_input(model, 3, seed=seed)
    with torch.no_grad():
        ref = model(x)
        assert rel_error(static(x), ref) < 1e-5
        for tactic in TACTICS:
            assert rel_error(lower(static, [tactic] * len(static.blocks))(x), ref) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(16))
def test_a_direct_convolution_takes_its_zero_channels_from_the_stream(seed):
    """A direct convolution of n_in channels runs at the next multiple of 4 with zero filters:
    the block reads that many of the stream's channels (or all it has) and its first linear map
    has zero columns for the extra outputs. So the graph drops the Pad before the Conv where the
    stream is wide enough and the Slice after it; onnxruntime computes what the static module
    does."""
    model = random_model(seed)
    static = materialize(model, freeze(model))
    lowered = lower(static, ["direct"] * len(static.blocks))
    unpadded = 0
    for block in lowered.blocks:
        padded = depthwise_channels(block.n_in)
        assert block.read == (min(padded, block.stream) if padded > block.n_in else block.n_in)
        assert block.w1.shape[1] == padded and not block.w1[:, block.n_in :].any()
        assert block.conv.trim == (padded == block.n_in)
        unpadded += padded > block.n_in and block.read == padded
    x = random_input(model, 3, seed=seed)
    graphs = [to_onnx(net, (x,)) for net in (lowered, padding_around_the_conv(lowered))]
    ops = [[n.op_type for n in g.graph.node] for g in graphs]
    assert ops[1].count("Pad") - ops[0].count("Pad") == unpadded
    assert ops[0].count("Slice") <= ops[1].count("Slice")
    with torch.no_grad():
        ref = static(x)
    for graph in graphs:
        out = session(graph).run(None, {graph.graph.input[0].name: x.numpy()})[0]
        assert rel_error(torch.from_numpy(out), ref) < 1e-5


@pytest.mark.parametrize("seed", [2, 35, 55, 57])
def test_static_module_keeps_only_the_support(seed):
    """No masks, no kernel network, no parameters; blocks, stream and weights cut to the plan."""
    model = random_model(seed)
    frozen = freeze(model)
    plan = frozen.plan
    static = materialize(model, frozen)
    assert list(static.parameters()) == []  # everything is a fixed buffer
    assert not any("kernel_net" in name for name, _ in static.named_buffers())
    assert [b.index for b in static.blocks] == [p.index for p in plan.blocks]
    assert len(static.blocks) == frozen.architecture.depth
    for block, p in zip(static.blocks, plan.blocks):
        assert block.w1.shape == (p.n_mid, p.n_in) and block.w2.shape == (p.n_out, p.n_mid)
        assert tuple(block.bias1.shape[1:]) == p.resolution
        # a resolution mask on the convolution's spectrum folds into the kernel: 2 R - 1 taps
        filtered = [p.conv_mask is not None and p.conv_mask.shape[a] > 1
                    for a in range(len(p.resolution))]
        assert tuple(block.conv.kernel.shape[1:]) == tuple(
            2 * r - 1 if f else 2 * h + 1 for r, h, f in zip(p.resolution, p.half_taps, filtered))
    assert static.decoder.weight.shape[1] == plan.stream
    lowered = lower(static, ["matmul"] * len(static.blocks))
    kinds = {type(m) for m in lowered.modules()}
    assert Resample not in kinds and (not static.blocks or MatMulFFTConv in kinds)
    assert not any("mask" in name for name, _ in lowered.named_buffers())  # folded into MatMuls


def test_removed_blocks_are_absent():
    for seed in SEEDS:
        model = random_model(seed)
        if model.config.learns("D") and len(model.plan().blocks) < model.config.max_depth:
            static = materialize(model, freeze(model))
            assert len(static.blocks) == len(model.plan().blocks) < model.config.max_depth
            return
    pytest.fail("no random case removes a block")


def test_tactic_modules():
    kernel = torch.randn(4, 9)
    convs = {t: make_conv(t, kernel, (40,)) for t in TACTICS}
    assert isinstance(convs["direct"], DirectConv)
    assert isinstance(convs["matmul"], MatMulFFTConv)
    assert isinstance(convs["dft"], DFTConv) and convs["dft"].n == (64,)  # power of two >= 40+4
    assert all(c.taps == (9,) for c in convs.values())


def test_lower_checks_the_tactic_list():
    model = random_model(1)
    static = materialize(model, freeze(model))
    with pytest.raises(ValueError, match="tactics for"):
        lower(static, ["direct"] * (len(static.blocks) + 1))
    with pytest.raises(ValueError, match="unknown tactic"):
        lower(static, ["fast"] * len(static.blocks))


def test_materialize_needs_calibrated_norms():
    model = random_model(4)
    model.enc_norm.calibrated.fill_(False)
    with pytest.raises(ValueError, match="calibrate"):
        materialize(model, freeze(model))


def test_resampling_lowered_to_one_matmul_per_axis():
    model = random_model(32)  # 2-D, resolution learned
    static = materialize(model, freeze(model))
    plan = freeze(model).plan
    lowered = lower(static, ["direct"] * len(static.blocks))
    for p, block in zip(plan.blocks, lowered.blocks):
        assert all(isinstance(m, AxisMatMul) for m in [*block.down, *block.up])
        cropped = [m is not None for m in p.m_res or ()]
        assert len(block.down) == sum(cropped)  # one MatMul per axis the resolution mask crops
        assert len(block.up) == sum(r != n for r, n in zip(p.resolution, model.config.input_size))
    assert any(len(block.down) for block in lowered.blocks)
