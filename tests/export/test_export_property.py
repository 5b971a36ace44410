"""Property: over 50 random architectures (random mask states: removed blocks, heavy
downsampling, tiny and global kernels, 1-D and 2-D, classification and dense, token input) and
random tactics, trained model == static module == onnxruntime.

Export cost is what limits this test (the dynamo exporter takes ~10 ms per graph node, ~10 s per
ten architectures on a busy 2-core machine). So the static modules of up to eleven architectures
share one wrapper module and one export (each is still its own input and output of the graph),
and four of the five groups go through the legacy TorchScript-based ONNX exporter, about 4x
faster, with the tactics it can export (all but dft: it has no FFT); one group goes through the
shipped dynamo exporter with every tactic, as do the artifact tests (test_export_pipeline.py).
Each block draws among the tactics offered at its resolution (dense: up to 256 positions).
"""

from __future__ import annotations

import io
import random
import warnings

import onnx
import pytest
import torch

from dnarch_deploy.operators import conv_tactics
from export.emit import quiet, to_onnx
from export.lowering import block_resolution, lower
from export.static import freeze, materialize
from export.tactics import TACTICS
from export.timing import session

from .export_cases import random_input, random_model

# 50 architectures in 5 exports: 4 x 11 through the legacy exporter, 6 through dynamo; then 4 on
# long inputs (L = 1024 .. 2100), legacy exporter
GROUPS = [range(1000 + 11 * g, 1011 + 11 * g) for g in range(4)] + [range(1044, 1050)]
GROUPS += [range(2000, 2004)]
DYNAMO_GROUPS = {4}
LONG_GROUPS = {5}
TOLERANCE = 1e-4


class Together(torch.nn.Module):
    def __init__(self, nets: list[torch.nn.Module]):
        super().__init__()
        self.nets = torch.nn.ModuleList(nets)

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(net(x) for net, x in zip(self.nets, xs))


def rel_error(out, ref) -> float:
    out, ref = torch.as_tensor(out).double(), ref.double()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def legacy_onnx(module: torch.nn.Module, example: tuple[torch.Tensor, ...]) -> onnx.ModelProto:
    names = [f"x{i}" for i in range(len(example))]
    buffer = io.BytesIO()
    with quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, buffer, dynamo=False, opset_version=18,
                          input_names=names, dynamic_axes={n: {0: "batch"} for n in names})
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.slow
@pytest.mark.parametrize("group", range(len(GROUPS)))
def test_trained_static_onnxruntime_agree(group):
    seeds = GROUPS[group]
    models = [random_model(seed, long=group in LONG_GROUPS) for seed in seeds]
    rng = random.Random(group)
    tactics = TACTICS if group in DYNAMO_GROUPS else ("direct", "dense", "matmul", "multistep")
    nets = []
    for model in models:
        static = materialize(model, freeze(model))
        nets.append(lower(static, [rng.choice([t for t in tactics
                                               if t in conv_tactics(block_resolution(b))])
                                   for b in static.blocks]))
    example = tuple(random_input(m, 2, seed=1) for m in models)
    if group in DYNAMO_GROUPS:
        graph = to_onnx(Together(nets), example, dynamic_batch=True)
    else:
        graph = legacy_onnx(Together(nets), example)
    xs = [random_input(m, 3, seed=2) for m in models]  # another batch size than exported
    feeds = {i.name: x.numpy() for i, x in zip(graph.graph.input, xs)}
    outs = session(graph).run(None, feeds)
    for seed, model, net, x, out in zip(seeds, models, nets, xs, outs):
        with torch.no_grad():
            ref = model(x)
            assert rel_error(net(x), ref) <= TOLERANCE, f"static, seed {seed}"
        assert rel_error(out, ref) <= TOLERANCE, f"onnxruntime, seed {seed}"


def test_cases_cover_the_interesting_architectures():
    """The random cases include what the issue lists (checked, so the property means it)."""
    seen = set()
    assert sum(len(g) for i, g in enumerate(GROUPS) if i not in LONG_GROUPS) >= 50
    for i, group in enumerate(GROUPS):
        for seed in group:
            seen |= _features(random_model(seed, long=i in LONG_GROUPS))
    assert seen >= {"1d", "2d", "dense", "global", "tokens", "removed blocks",
                    "heavy downsampling", "tiny kernel", "global kernel", "narrow block",
                    "L >= 1024", "long global kernel"}


def _features(model) -> set[str]:
    """What of the issue's list one random architecture covers."""
    seen = set()
    c, plan = model.config, model.plan()
    seen.add("2d" if len(c.input_size) == 2 else "1d")
    seen.add("dense" if c.dense else "global")
    seen.add("tokens") if c.vocab_size else None
    if len(plan.blocks) < c.max_depth:
        seen.add("removed blocks")
    for p in plan.blocks:
        if any(4 * r <= s for r, s in zip(p.resolution, c.input_size)):
            seen.add("heavy downsampling")
        if all(h == 0 for h in p.half_taps) or max(p.half_taps) == 1:
            seen.add("tiny kernel")
        if all(2 * h + 1 >= r - 1 for h, r in zip(p.half_taps, p.resolution)):
            seen.add("global kernel")
        if p.n_in < plan.stream or p.n_out < plan.stream:
            seen.add("narrow block")
        if max(p.resolution) >= 512 and max(p.half_taps) >= 256:
            seen.add("long global kernel")
    if max(c.input_size) >= 1024:
        seen.add("L >= 1024")
    return seen
