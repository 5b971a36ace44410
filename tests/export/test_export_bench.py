"""The report's cost columns: ``paper`` is the search's cost model of the found architecture,
the same figure the budget constrained, layer by layer; it is ``theoretical``, the lowered
network's MACs, where export chose by cost."""

from __future__ import annotations

import math

import pytest

from dnarch_deploy import describe
from dnarch_deploy.block_ops import block_operators, spectrum_stream
from dnarch_deploy.cost import architecture_cost, decoder_cost, encoder_cost
from export.bench import axis_matmul_macs, theoretical_costs
from export.lowering import (
    cheapest,
    lower,
    resample_axes,
    resample_tactics_by_cost,
    spectrum_resample,
    tactic_costs,
)
from export.spectrum import why_not
from export.static import freeze, materialize

from .export_cases import random_model

SEEDS = range(40, 56)  # 1-D, 2-D, token and dense models, some with blocks removed


@pytest.mark.parametrize("seed", SEEDS)
def test_paper_column_is_the_search_cost_of_the_found_architecture(seed):
    model = random_model(seed)
    found = describe(model)
    static = materialize(model, freeze(model))
    lowered = lower(static, cheapest(tactic_costs(static)))
    costs = theoretical_costs(lowered, found)
    assert list(costs) == ["encoder", *(f"blocks.{i}" for i in range(found.depth)), "decoder"]
    assert sum(c["paper"] for c in costs.values()) == pytest.approx(architecture_cost(found),
                                                                    rel=1e-12)
    # one cost model: the network lowered by cost is, layer by layer, what the search priced
    for name, c in costs.items():
        assert c["theoretical"] == pytest.approx(c["paper"], rel=1e-12), name
    # the encoder: its linear map at the input channels (none for tokens: a table look-up)
    length = float(math.prod(found.input_size))
    channels = 0 if found.vocab_size else found.in_channels
    expected = sum(encoder_cost(length, channels, found.stream_width).values())
    assert costs["encoder"]["paper"] == pytest.approx(expected, rel=1e-12)
    assert theoretical_costs(lowered).keys() == costs.keys()  # theoretical needs no architecture
    assert all("paper" not in c for c in theoretical_costs(lowered).values())


def test_cases_cover_tokens_and_removed_blocks():
    models = [random_model(s) for s in SEEDS]
    assert any(m.config.vocab_size for m in models)
    assert any(len(describe(m).blocks) < m.config.max_depth for m in models)


# 21, 35: long 1-D networks whose blocks all crop (the stream carried as its spectrum); 40-47:
# 1-D, 2-D, token and dense models
BLOCK_SEEDS = [21, 35, *range(40, 48)]


def _lowering(static, name: str):
    """(tactics, resampling) of one lowering: by cost, every convolution direct, every axis
    factored or split, the stream as its spectrum."""
    n = len(static.blocks)
    tactics = ["direct"] * n if name == "direct" else cheapest(tactic_costs(static))
    if name == "spectrum":
        return tactics, spectrum_resample(static)
    if name in ("factored", "split"):
        return tactics, [{k: [name] * len(v) for k, v in axes.items()}
                         for axes in resample_axes(static)]
    return tactics, resample_tactics_by_cost(static)


@pytest.mark.slow
@pytest.mark.parametrize("seed", BLOCK_SEEDS)
@pytest.mark.parametrize("name", ["cost", "direct", "factored", "split", "spectrum"])
def test_theoretical_block_macs_are_block_operators_at_the_lowered_choices(seed, name):
    """The report's per-block figure is the sum of block_operators called with the choices the
    lowering was given (its tactic, each axis's form, the spectrum's K) on the static block's
    sizes; and that description's resampling and convolution are what the lowered modules count
    themselves (their macs())."""
    model = random_model(seed, long=seed in (21, 35))
    static = materialize(model, freeze(model))
    if name == "spectrum" and why_not(static) is not None:
        pytest.skip(why_not(static))
    tactics, resample = _lowering(static, name)
    lowered = lower(static, tactics, resample)
    costs = theoretical_costs(lowered)
    size = tuple(static.spec["spatial"])
    bins = max(b.bias1.shape[-1] // 2 + 1 for b in static.blocks) if name == "spectrum" else None
    for i, (block, tactic, rs) in enumerate(zip(static.blocks, tactics, resample)):
        res = tuple(block.bias1.shape[1:])
        cropped = tuple(any(len(size) + m.dim == a for m in block.down) for a in range(len(size)))
        ops = block_operators(size, res, block.n_in, block.w1.shape[0], block.n_out,
                              tuple(block.conv.kernel.shape[1:]), cropped, stream=block.stream,
                              conv_fft=block.conv.period, tactic=tactic,
                              resample=None if bins else rs, spectrum=bins)
        assert costs[f"blocks.{i}"]["theoretical"] == sum(op.macs for op in ops.values())
        # counted from the lowered modules: each resampling's MACs per line times its lines
        low, shape, counted = lowered.blocks[i], list(size), 0.0
        for m in low.down:
            counted += axis_matmul_macs(m, low.read, tuple(shape))
            shape[m.dim] = m.sizes[1]
        shape = list(res)
        for m in low.up:
            counted += axis_matmul_macs(m, low.n_out, tuple(shape))
            shape[m.dim] = m.sizes[1]
        resampling = ("down", "up", "from_spectrum", "to_spectrum")
        assert counted == sum(op.macs for n, op in ops.items() if n.startswith(resampling))
        if hasattr(low.conv, "macs"):  # the MatMul FFT forms count their own MatMuls
            assert ops["conv"].macs == low.conv.macs()
        assert ops["linear1"].width == low.w1.shape[0] * low.w1.shape[1]


def test_the_spectrum_carried_stream_is_priced_by_the_description():
    """Outside the blocks, the stream as its spectrum costs what spectrum_stream declares: one
    transform of L samples after the encoder, and for a maximum-pooling decoder the positions
    back (the bins' change, one transform, the add); the mean is read from DC."""
    model = random_model(21, long=True)
    static = materialize(model, freeze(model))
    tactics = cheapest(tactic_costs(static))
    per_axis = theoretical_costs(lower(static, tactics, resample_tactics_by_cost(static)))
    lowered = lower(static, tactics, spectrum_resample(static))
    spectral = theoretical_costs(lowered)
    (length,) = static.spec["spatial"]
    stream, bins = static.decoder.weight.shape[1], lowered.encoder.spectrum.out_bins
    back = lowered.decoder.spectrum.back is not None
    carried = spectrum_stream(length, stream, bins, back)
    assert spectral["encoder"]["theoretical"] - per_axis["encoder"]["theoretical"] == sum(
        op.macs for op in carried.encoder.values())
    dec = decoder_cost(carried.pooled, stream, static.decoder.weight.shape[0],
                       static.decoder.pooling)
    assert spectral["decoder"]["theoretical"] == sum(dec.values()) + sum(
        op.macs for op in carried.decoder.values())
