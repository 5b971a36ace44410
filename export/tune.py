"""Measure the lowering candidates in onnxruntime (``--tune``); :mod:`export.policy` chooses.

Every candidate convolution of every block goes into one wrapper module (one ONNX export for the
whole search); each candidate is then cut out as its own sub-model and timed, candidates of a block
round-robin (export.timing). Resampling candidates are measured the same way.

Each graph is exported once, its batch axis dynamic as in the shipped model, and timed at every
batch asked for: an ONNX export takes seconds, a timing milliseconds.

Per-layer timings need not add up to the whole network's (caches, the neighbouring layers), so
:func:`time_networks` also times whole lowered networks side by side.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

import onnx
import torch
from torch import Tensor, nn

from dnarch_deploy.operators import PORTABLE, resample_candidates
from dnarch_deploy.progress import bar
from dnarch_deploy.spectral import MATRIX_MAX

from .emit import to_onnx
from .lowering import block_resolution, lower, resample_axes
from .resampling import lower_resample
from .static import StaticNet
from .tactics import TACTICS, conv_macs, distinct_tactics
from .timing import (
    layer_boundaries,
    layers,
    measure,
    random_feeds,
    runner,
    session,
    sub_model,
)

# A portable tactic with this many times the theoretical MACs of the cheapest portable one is not
# timed: a direct convolution with a global kernel on a long axis would take seconds per call at
# batch 32, and is never the fastest there (L=1024, K=1023, 64 channels: 6.8x the multi-step
# form's MACs, 25x the four-step's latency in onnxruntime)
MAX_MAC_RATIO = 6.0


def worth_timing(mods: dict[str, nn.Module], block) -> dict[str, nn.Module]:
    """The candidates of one block worth timing: all but portable tactics whose theoretical MACs
    exceed MAX_MAC_RATIO times the cheapest portable tactic's."""
    size, taps = block_resolution(block), tuple(block.conv.kernel.shape[1:])
    macs = {t: conv_macs(t, block.n_in, size, taps, block.conv.period)
            for t in mods if t in PORTABLE}
    least = min(macs.values(), default=0.0)
    return {t: m for t, m in mods.items() if macs.get(t, 0.0) <= MAX_MAC_RATIO * least
            or t not in macs}


class Candidates(nn.Module):
    """Block b's input (B, n_in, *R) -> every tactic's output, for all blocks at once."""

    def __init__(self, static: StaticNet, tactics: tuple[str, ...]):
        super().__init__()
        self.keys = []
        convs = {}
        for b, block in enumerate(static.blocks):
            mods = worth_timing(distinct_tactics(block.conv.kernel, block_resolution(block),
                                                 tactics, block.conv.period), block)
            for tactic, module in mods.items():
                key = f"b{b}_{tactic}"
                convs[key] = module
                self.keys.append((b, key))
        self.convs = nn.ModuleDict(convs)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        return tuple(self.convs[key](inputs[b]) for b, key in self.keys)


def measure_tactics(
    static: StaticNet,
    batches: Sequence[int] = (1,),
    threads: int = 0,
    repeats: int = 20,
    tactics: tuple[str, ...] = TACTICS,
) -> list[list[dict[str, dict[str, float]]]]:
    """Per batch, per block, per tactic: onnxruntime latency of the convolution alone (ms); a
    tactic that would be the same lowering as an earlier one (:func:`export.tactics
    .distinct_tactics`), or that needs more than MAX_MAC_RATIO times the fewest MACs
    (:func:`worth_timing`), is left out of that block's entry. Every candidate's session stays
    open until the last batch is timed (with --threads > 1, each with its own thread pool)."""
    if not static.blocks:
        return [[] for _ in batches]
    wrapper = Candidates(static, tactics).eval()
    example = tuple(torch.randn(1, block.n_in, *block_resolution(block))
                    for block in static.blocks)
    model = to_onnx(wrapper, example)
    groups = layers(model)
    subs = []  # per block: (tactic names, their sub-models and sessions), kept for every batch
    for b in bar(range(len(static.blocks)), desc="tune tactics: sessions"):
        names = [key.split("_", 1)[1] for bb, key in wrapper.keys if bb == b]
        models = [sub_model(model, *layer_boundaries(model, groups[f"convs.b{b}_{t}"]))
                  for t in names]
        subs.append((names, [(m, session(m, threads)) for m in models]))
    results = []
    for batch in batches:
        per_block = []
        for names, sessions in bar(subs, desc=f"tune tactics B={batch}"):
            fns = [runner(sess, random_feeds(m, batch)) for m, sess in sessions]
            per_block.append(dict(zip(names, measure(fns, repeats))))
        results.append(per_block)
    return results


class NetworkExports:
    """The whole lowered networks of one export job, each exported once, batch dynamic, as the
    pipeline ships it: the whole-network check, the stream check and the shipped model are often
    the same network (the same tactics and resampling), and an export takes seconds."""

    def __init__(self, static: StaticNet):
        self.static = static
        self.models: dict[tuple, onnx.ModelProto] = {}

    def get(self, tactics: list[str], resample: list[dict[str, list[str]]]) -> onnx.ModelProto:
        key = (tuple(tactics), json.dumps(resample, sort_keys=True))
        if key not in self.models:
            self.models[key] = to_onnx(lower(self.static, tactics, resample),
                                       (example_input(self.static),))
        return self.models[key]


def example_input(static: StaticNet) -> Tensor:
    """One random input of the network's shape (token ids below its vocabulary)."""
    spec = static.spec
    shape = [1 if d is None else d for d in spec["input_shape"]]
    if spec["input_dtype"] == "int64":
        return torch.randint(0, max(spec["vocab_size"], 1), shape)
    return torch.randn(shape)


def time_networks(
    static: StaticNet,
    candidates: list[list[str] | tuple[list[str], list[dict[str, list[str]]]]],
    resample: list[dict[str, list[str]]],
    batches: Sequence[int] = (1,),
    threads: int = 0,
    repeats: int = 20,
    exports: NetworkExports | None = None,
) -> list[list[dict[str, float]]]:
    """Per batch, per candidate tactic assignment (or a (tactics, resampling tactics) pair): the
    whole network lowered with it (and ``resample``), exported as the pipeline exports it (batch
    dynamic; once per ``exports``) and timed side by side in onnxruntime (export.timing.measure:
    round-robin, medians) on the same random input of that many samples."""
    exports = exports or NetworkExports(static)
    sessions = []
    for candidate in bar(candidates, desc="tune whole networks: export"):
        tactics, rs = candidate if isinstance(candidate, tuple) else (candidate, resample)
        model = exports.get(tactics, rs)
        sessions.append((model, session(model, threads)))
    vocab = static.spec["vocab_size"]
    return [measure([runner(sess, random_feeds(m, batch, vocab)) for m, sess in sessions],
                    repeats)
            for batch in bar(batches, desc="tune whole networks: time")]


class ResampleCandidates(nn.Module):
    """Every candidate lowering of every resampled axis (that has more than one), one input each."""

    def __init__(self, static: StaticNet, axes: list[dict], keys: list[tuple]):
        super().__init__()
        mods = {}
        for b, kind, j, tactic in keys:
            module = getattr(static.blocks[b], kind)[j]
            mods[f"b{b}_{kind}{j}_{tactic}"] = lower_resample(module, axes[b][kind][j][0], tactic)
        self.keys = [f"b{b}_{kind}{j}_{tactic}" for b, kind, j, tactic in keys]
        self.mods = nn.ModuleDict(mods)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        return tuple(self.mods[key](x) for key, x in zip(self.keys, inputs))


def measure_resample(
    static: StaticNet, batches: Sequence[int] = (1,), threads: int = 0, repeats: int = 20
) -> list[list[dict[str, list[dict]]]]:
    """Per batch, per block, ``down`` / ``up``, per resampled axis: ``{"tactic", "by", "ms"}``.
    Axes with one candidate (no common factor for the factored form) or up to MATRIX_MAX samples
    (where the model itself uses the matrix, and the dense MatMul wins) keep ``dense``
    untimed."""
    axes = resample_axes(static)
    size = tuple(static.spec["spatial"])
    keys, inputs, untimed = [], [], []
    for b, (block, ax) in enumerate(zip(static.blocks, axes)):
        entry = {}
        for kind, channels in (("down", block.n_in), ("up", block.n_out)):
            shape = list(size if kind == "down" else block_resolution(block))
            entry[kind] = []
            for j, (n, m, dim) in enumerate(ax[kind]):
                cands = resample_candidates(n, m)
                if len(cands) == 1 or max(n, m) <= MATRIX_MAX:
                    entry[kind].append({"tactic": "dense", "by": "short axis or no factor"})
                else:
                    entry[kind].append({"tactic": None, "by": "measured", "ms": {}})
                    x = torch.randn(1, channels, *shape)
                    for tactic in cands:
                        keys.append((b, kind, j, tactic))
                        inputs.append(x.clone())
                shape[dim] = m
        untimed.append(entry)
    choices = [copy.deepcopy(untimed) for _ in batches]
    if not keys:
        return choices
    wrapper = ResampleCandidates(static, axes, keys).eval()
    model = to_onnx(wrapper, tuple(inputs))
    groups = layers(model)
    subs = {}  # per resampled axis: its tactics, their sub-models and sessions
    for b, kind, j in bar(sorted({(b, kind, j) for b, kind, j, _ in keys}),
                               desc="tune resampling: sessions"):
        tactics = [t for bb, k, jj, t in keys if (bb, k, jj) == (b, kind, j)]
        models = [sub_model(model, *layer_boundaries(model, groups[f"mods.b{b}_{kind}{j}_{t}"]))
                  for t in tactics]
        subs[b, kind, j] = tactics, [(m, session(m, threads)) for m in models]
    for batch, choice in zip(batches, choices):
        for (b, kind, j), (tactics, sessions) in bar(subs.items(),
                                                          desc=f"tune resampling B={batch}"):
            fns = [runner(sess, random_feeds(m, batch)) for m, sess in sessions]
            ms = {t: r["median_ms"] for t, r in zip(tactics, measure(fns, repeats))}
            entry = choice[b][kind][j]
            entry["ms"] = ms
            entry["tactic"] = min(ms, key=ms.get)
    return choices
