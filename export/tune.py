"""Choose each block's convolution tactic by measured onnxruntime latency (``--tune``).

Every candidate convolution of every block goes into one wrapper module (one ONNX export for the
whole search); each candidate is then cut out as its own sub-model and timed, candidates of a block
round-robin (export.timing). The fastest wins; ties go to the first in :data:`TACTICS` order.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .emit import to_onnx
from .lowering import TACTICS, block_resolution, make_conv
from .static import StaticNet
from .timing import (
    layer_boundaries,
    layers,
    measure,
    progress,
    random_feeds,
    runner,
    session,
    sub_model,
)


class Candidates(nn.Module):
    """Block b's input (B, n_in, *R) -> every tactic's output, for all blocks at once."""

    def __init__(self, static: StaticNet, tactics: tuple[str, ...]):
        super().__init__()
        self.keys = []
        convs = {}
        for b, block in enumerate(static.blocks):
            for tactic in tactics:
                key = f"b{b}_{tactic}"
                convs[key] = make_conv(tactic, block.conv.kernel, block_resolution(block))
                self.keys.append((b, key))
        self.convs = nn.ModuleDict(convs)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        return tuple(self.convs[key](inputs[b]) for b, key in self.keys)


def measure_tactics(
    static: StaticNet,
    batch: int = 1,
    threads: int = 0,
    repeats: int = 20,
    tactics: tuple[str, ...] = TACTICS,
) -> list[dict[str, dict[str, float]]]:
    """Per block, per tactic: onnxruntime latency of the convolution alone (ms)."""
    if not static.blocks:
        return []
    wrapper = Candidates(static, tactics).eval()
    example = tuple(
        torch.randn(batch, block.n_in, *block_resolution(block)) for block in static.blocks
    )
    model = to_onnx(wrapper, example, dynamic_batch=False)
    groups = layers(model)
    results: list[dict[str, dict[str, float]]] = []
    for b in progress(range(len(static.blocks)), desc="tune tactics"):
        fns = []
        for tactic in tactics:
            sub = sub_model(model, *layer_boundaries(model, groups[f"convs.b{b}_{tactic}"]))
            fns.append(runner(session(sub, threads), random_feeds(sub, batch)))
        results.append(dict(zip(tactics, measure(fns, repeats))))
    return results


def fastest(measured: list[dict[str, dict[str, float]]]) -> list[str]:
    return [min(m, key=lambda t: m[t]["median_ms"]) for m in measured]
