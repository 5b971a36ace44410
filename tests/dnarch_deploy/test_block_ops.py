"""The one description of a block's lowered operators (dnarch_deploy.block_ops): every operator
block_operators can produce is declared with its smooth formula, and an operator is added by
declaring it once."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dnarch_deploy import describe, model_cost
from dnarch_deploy.block_ops import (
    BLOCK_OPS,
    BlockOp,
    Operator,
    block_operators,
    declaration,
    operator_axis,
    proxy,
)
from dnarch_deploy.cost import architecture_cost, model_sizes
from dnarch_deploy.operators import CONV_TACTICS, resample_candidates, spectrum_macs

from .helpers import set_mask_state, tiny_model


def _every_lowering(input_size: tuple[int, ...], resolution: tuple[int, ...]):
    """block_operators of one block's sizes under every choice export can make: each tactic,
    each resampling form of every axis, the stream as its spectrum (1-D), wider or as wide as
    the block, a direct convolution's padding read from the stream or not."""
    cropped = tuple(r < s for r, s in zip(resolution, input_size))
    down = [a for a, c in enumerate(cropped) if c]
    up = [a for a, (r, s) in enumerate(zip(resolution, input_size)) if r != s]
    downs = itertools.product(*(resample_candidates(input_size[a], resolution[a]) for a in down))
    ups = list(itertools.product(*(resample_candidates(resolution[a], input_size[a])
                                   for a in up)))
    forms = [None, *({"down": list(d), "up": list(u)} for d in downs for u in ups)]
    spectra = [None, resolution[0] // 2 + 3] if len(input_size) == 1 and all(cropped) else [None]
    for tactic, resample, spectrum, stream, wider in itertools.product(
            [None, *CONV_TACTICS], forms, spectra, (6, 9), (True, False)):
        yield block_operators(input_size, resolution, 6, 7, 5, (3,) * len(input_size), cropped,
                              stream=stream, tactic=tactic, resample=resample,
                              spectrum=spectrum, read_wider=wider)


SHAPES = [((20,), (20,)), ((20,), (8,)), ((24,), (12,)), ((9, 12), (9, 12)), ((9, 12), (4, 12)),
          ((9, 12), (9, 6)), ((16, 16), (8, 6))]


@pytest.mark.parametrize(("input_size", "resolution"), SHAPES)
def test_every_operator_block_operators_produces_has_a_proxy(input_size, resolution):
    """Whatever export chose, every operator name is declared (BLOCK_OPS) with a smooth formula
    the search's cost can follow: a finite (D,) tensor in the straight-through sizes of a
    network on the same axes, differentiable in the masks."""
    model = tiny_model(0, input_size=input_size)
    set_mask_state(model, "random", 1)
    z = model_sizes(model)
    depth = len(z["operators"])
    seen = set()
    for ops in _every_lowering(input_size, resolution):
        for name, op in ops.items():
            assert declaration(name).proxy is not BlockOp.proxy, name
            if (name, op.kind) in seen:
                continue
            seen.add((name, op.kind))
            value = proxy(name, [op.kind] * depth, z, input_size)
            assert value.shape == (depth,) and bool(torch.isfinite(value).all()), name
            assert value.requires_grad, name
            if name.startswith(("down", "up")):
                assert operator_axis(name) == int(name[-1])
    names = {n for n, _ in seen}
    assert {"conv", "linear1", "bias1", "gelu", "linear2", "residual"} <= names


def test_the_names_cover_every_declaration():
    """Each declared operator occurs in some lowering, and lowers and prices itself."""
    names = {name.rstrip("0123456789") if name.startswith(("down", "up")) else name
             for shape in SHAPES for ops in _every_lowering(*shape) for name in ops}
    assert names == set(BLOCK_OPS)
    for op in BLOCK_OPS.values():
        assert op.lower is not BlockOp.lower and op.proxy is not BlockOp.proxy, op.name


def test_the_stream_as_its_spectrum_reads_and_adds_its_bins():
    """Carried as its first K bins, a block reads, adds and writes 2 K values per channel and
    resamples by two spectral halves at its own resolution, none per axis."""
    L, r, K, stream = 200, 20, 40, 9
    ops = block_operators((L,), (r,), 6, 7, 5, (3,), (True,), stream=stream, spectrum=K,
                          tactic="matmul")
    assert list(ops) == ["read", "from_spectrum", "conv", "linear1", "bias1", "gelu", "linear2",
                         "to_spectrum", "residual", "write"]
    assert ops["read"].macs == 2 * K * 6 and ops["residual"].macs == 2 * K * 5
    assert ops["write"].macs == 2 * K * stream
    assert ops["from_spectrum"].macs == 6 * spectrum_macs(r, r // 2 + 1)
    assert ops["to_spectrum"].macs == 5 * spectrum_macs(r, r // 2 + 1)
    assert operator_axis("from_spectrum") == operator_axis("to_spectrum") == 0
    with pytest.raises(ValueError, match="1-D"):
        block_operators((L, L), (r, r), 6, 7, 5, (3, 3), (True, True), stream=9, spectrum=K)


def test_defaults_are_the_by_cost_choices():
    """block_operators without choices is export's by-cost lowering: the same as given the
    tactic and forms it picks."""
    by_cost = block_operators((24, 20), (12, 20), 6, 7, 5, (5, 3), (True, False), stream=8)
    tactic = by_cost["conv"].kind.split(".")[1]
    forms = {"down": [by_cost["down0"].kind.split(".")[1]],
             "up": [by_cost["up0"].kind.split(".")[1]]}
    assert block_operators((24, 20), (12, 20), 6, 7, 5, (5, 3), (True, False), stream=8,
                           tactic=tactic, resample=forms) == by_cost


def test_an_operator_is_added_by_declaring_it_once():
    """A made-up operator, one subclass of BlockOp: block_operators lowers it (after the ones
    declared before it), and the search's cost and a found architecture's cost price it, with
    a gradient from its formula; nothing else is edited."""
    model = tiny_model(3, learn="KRWD")
    set_mask_state(model, "random", 3)
    before = float(model_cost(model)["total"].detach())
    arch_before = architecture_cost(describe(model))
    try:
        class Scale(BlockOp):  # a per-channel scale of the block's output
            name = "scale_test"

            @staticmethod
            def lower(b):
                yield "scale_test", Operator("pointwise", float(math.prod(b.input_size) * b.n_out))

            @staticmethod
            def proxy(name, kinds, z, input_size):
                return math.prod(float(s) for s in input_size) * z["n_out"]

        assert list(block_operators((20,), (20,), 4, 4, 4, (3,), (False,), stream=4))[-1] == (
            "scale_test")
        cost = model_cost(model)
        arch = describe(model)
        extra = sum(math.prod(arch.input_size) * b.n_out for b in arch.blocks)
        assert float(cost["total"].detach()) == pytest.approx(before + extra, rel=1e-12)
        assert architecture_cost(arch) == pytest.approx(arch_before + extra, rel=1e-12)
        cost["blocks"]["scale_test"].sum().backward()
        assert model.mask_width.grad is not None and bool(model.mask_width.grad.abs().sum() > 0)
    finally:
        BLOCK_OPS.pop("scale_test", None)
    assert float(model_cost(model)["total"].detach()) == before
