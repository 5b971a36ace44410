"""Stage 7: latency per layer and in total in onnxruntime, beside the theoretical cost; the masked
trained model and the static module in eager PyTorch measured in the same run.

Theoretical figures are multiply-accumulates per sample:

- ``theoretical``: the lowered layer's own operators, from the one description of a block's
  operators (:func:`dnarch_deploy.block_ops.block_operators`) at the choices export made for it:
  its tactic (direct conv C*L*K, dense C*P^2, MatMul-FFT its MatMuls, DFT op C*N*log2 N), its
  resampling as executed (per axis dense MatMul n*m per line, or the factored four-step form's
  MatMuls), or the stream carried as its spectrum (per block two spectral halves at its own
  resolution, the residual over 2 K values; :func:`dnarch_deploy.block_ops.spectrum_stream`
  outside the blocks);
- ``paper`` (the key is kept from version 1 of report.json): the search's cost model for the
  found architecture, per layer (:func:`dnarch_deploy.cost.layer_costs`): the same operators,
  at the tactics export picks by cost; its total is
  :func:`dnarch_deploy.cost.architecture_cost`, the figure the budget constrains. Equal to
  ``theoretical`` layer by layer where the export chose by cost (``--no-tune``).

Measured figures: wall-clock milliseconds, medians over round-robin repeats (export.timing); per
layer from sub-models cut out of model.onnx at layer boundaries.

The ceiling: one large float32 MatMul in onnxruntime, same threads, measured in the same run
(:func:`export.timing.matmul_ceiling`); the exported model's achieved GFLOP/s (2 x theoretical
MACs x batch / time) at each batch, and its fraction of that ceiling.
"""

from __future__ import annotations

import math
import os

import onnx
import torch
from torch import Tensor, nn

from dnarch_deploy import Architecture, DNArch, describe
from dnarch_deploy.block_ops import Operator, block_operators, spectrum_stream
from dnarch_deploy.cost import decoder_cost, layer_costs, linear_cost, pointwise_cost

from .static import StaticNet
from .timing import (
    achieved_gflops,
    layer_latency,
    layer_models,
    matmul_ceiling,
    measure,
    runner,
    session,
)


def axis_matmul_macs(module: nn.Module, channels: int, shape: tuple[int, ...]) -> float:
    """MACs of one lowered resampling (n -> m samples along its axis) on a (channels, *shape)
    input, counted from the module: its MACs per line (dense MatMul n * m; factored its four
    MatMuls) times the lines along the axis."""
    lines = channels * math.prod(shape) // shape[module.dim]
    return float(lines * module.macs())


def tactic_of(block: nn.Module) -> str:
    return getattr(block, "tactic", "fft")


def lowered_operators(block: nn.Module, size: tuple[int, ...], stream: int,
                      bins: int | None) -> dict[str, Operator]:
    """The operators of a lowered block (:func:`dnarch_deploy.block_ops.block_operators`) at
    the choices export made for it: its tactic, its resampling forms, the stream carried as its
    first ``bins`` bins (None: as its samples) and whether a direct convolution reads its
    padding from the stream (``StaticBlock.read_wider``)."""
    axes = {len(size) + m.dim for m in block.down}
    return block_operators(
        size, tuple(block.bias1.shape[1:]), block.n_in, block.w1.shape[0], block.n_out,
        tuple(block.conv.taps), tuple(a in axes for a in range(len(size))), stream=stream,
        conv_fft=block.conv.period,  # the circular lengths: their own conv_period
        tactic=block.tactic, resample=None if bins else block.resample_tactics, spectrum=bins,
        read_wider=block.w1.shape[1] > block.n_in)


def theoretical_costs(
    lowered: StaticNet, found: Architecture | None = None
) -> dict[str, dict[str, float]]:
    """Per layer: ``theoretical`` (lowered operators) MACs, and with the ``found`` architecture
    the lowered network was made from, ``paper`` (the search's cost model) MACs."""
    spec = lowered.spec
    size = tuple(spec["spatial"])
    length = float(math.prod(size))
    enc = lowered.encoder
    stream = enc.weight.shape[1] if enc.tokens else enc.weight.shape[0]
    c_in = 0 if enc.tokens else enc.weight.shape[1]  # a token encoder is a table look-up
    # the stream as its spectrum (export.spectrum): its price outside the blocks
    spectrum = enc.spectrum
    bins = None if spectrum is None else spectrum.out_bins
    carried = None if bins is None else spectrum_stream(
        int(length), stream, bins, lowered.decoder.spectrum.back is not None)
    extra = {} if carried is None else carried.encoder
    out: dict[str, dict[str, float]] = {}
    out["encoder"] = {
        "theoretical": float(linear_cost(length, c_in, stream) + pointwise_cost(length, stream)
                             + sum(op.macs for op in extra.values())),
    }
    for i, block in enumerate(lowered.blocks):
        ops = lowered_operators(block, size, stream, bins)
        out[f"blocks.{i}"] = {"theoretical": float(sum(op.macs for op in ops.values()))}
    pooled = length if carried is None else carried.pooled
    dec = decoder_cost(pooled, stream, lowered.decoder.weight.shape[0], lowered.decoder.pooling)
    if carried is not None and carried.decoder:
        dec["back"] = sum(op.macs for op in carried.decoder.values())
    out["decoder"] = {"theoretical": float(sum(dec.values()))}
    if found is not None:
        paper = layer_costs(found)
        assert paper.keys() == out.keys(), "the lowered network is not the found architecture's"
        for name, macs in paper.items():
            out[name]["paper"] = macs
    return out


def eager_runner(module: nn.Module, x: Tensor):
    def run():
        with torch.no_grad():
            module(x)

    return run


def benchmark(
    trained: DNArch,
    static: StaticNet,
    lowered: StaticNet,
    onnx_model: onnx.ModelProto,
    example: Tensor,
    batch: int | list[int] = 32,
    threads: int = 1,
    repeats: int = 20,
    per_layer: bool = True,
    tuned_for: list[int] | None = None,
) -> dict:
    """The report's ``latency`` section (see module docstring), at batch 1 and every ``batch``;
    ``tuned_for``: the batches the tactics were chosen for (recorded as given)."""
    batches = sorted({1, *([batch] if isinstance(batch, int) else batch)})
    vocab = static.spec["vocab_size"]
    costs = theoretical_costs(lowered, describe(trained))
    layers: dict[str, dict] = {
        name: {"tactic": tactic_of(b) if name.startswith("blocks.") else None, **cost}
        for (name, cost), b in zip(costs.items(), [None, *lowered.blocks, None])
    }
    total: dict = {
        "theoretical": sum(v["theoretical"] for v in costs.values()),
        "paper": sum(v["paper"] for v in costs.values()),
        "measured_ms_by_batch": {},
    }
    eager: dict = {"trained_ms": {}, "static_ms": {}, "lowered_ms": {}}
    sess = session(onnx_model, threads)
    subs = layer_models(onnx_model) if per_layer else {}
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for b in batches:
            x = _repeat(example, b)
            # onnxruntime and torch separately: each one's spinning threads would slow the other
            ort_t = measure([runner(sess, {"x": x.numpy()})], repeats)[0]
            fns = [eager_runner(m, x) for m in (trained, static, lowered)]
            trained_t, static_t, lowered_t = measure(fns, repeats)
            total["measured_ms_by_batch"][str(b)] = ort_t["median_ms"]
            eager["trained_ms"][str(b)] = trained_t["median_ms"]
            eager["static_ms"][str(b)] = static_t["median_ms"]
            eager["lowered_ms"][str(b)] = lowered_t["median_ms"]
            for name, t in layer_latency(subs, b, threads, repeats, vocab).items():
                if name in layers:
                    layers[name].setdefault("measured_ms_by_batch", {})[str(b)] = t["median_ms"]
        ceiling = matmul_ceiling(threads, repeats)
    finally:
        torch.set_num_threads(torch_threads)
    total["achieved_gflops_by_batch"] = {
        b: achieved_gflops(total["theoretical"], int(b), ms)
        for b, ms in total["measured_ms_by_batch"].items()}
    ceiling["fraction_by_batch"] = {
        b: g / ceiling["gflops"] for b, g in total["achieved_gflops_by_batch"].items()}
    for entry in [*layers.values(), total]:
        by_batch = entry.get("measured_ms_by_batch", {})
        entry["measured_ms"] = by_batch.get("1")
    return {
        "method": "wall clock, median of round-robin repeats; per layer: sub-models of model.onnx",
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "batches": batches,
        "tuned_for_batches": tuned_for,
        "repeats": repeats,
        "ceiling": ceiling,
        "unit_theoretical": "multiply-accumulates per sample",
        "layers": layers,
        "total": total,
        "eager": eager,
        "speedup_vs_trained": eager["trained_ms"]["1"] / total["measured_ms_by_batch"]["1"],
    }


def _repeat(example: Tensor, batch: int) -> Tensor:
    reps = -(-batch // example.shape[0])
    return example.repeat(reps, *[1] * (example.dim() - 1))[:batch].contiguous()


def format_table(latency: dict) -> str:
    """The latency section as a markdown table."""
    batches = [str(b) for b in latency["batches"]]
    head = ["layer", "tactic", "theoretical MMAC", "search cost MMAC"]
    head += [f"ORT ms (B={b})" for b in batches]
    rows = [head, ["---"] * len(head)]
    for name, entry in [*latency["layers"].items(), ("total", latency["total"])]:
        by = entry.get("measured_ms_by_batch", {})
        rows.append(
            [name, entry.get("tactic") or "", f"{entry['theoretical'] / 1e6:.3f}",
             f"{entry['paper'] / 1e6:.3f}"]
            + [f"{by[b]:.3f}" if by.get(b) is not None else "-" for b in batches]
        )
    eager = latency["eager"]
    for key in ("trained_ms", "static_ms", "lowered_ms"):
        label = {"trained_ms": "eager trained (masked)", "static_ms": "eager static",
                 "lowered_ms": "eager lowered"}[key]
        rows.append([label, "", "", ""] + [f"{eager[key][b]:.3f}" for b in batches])
    ceiling = latency.get("ceiling")
    if ceiling:
        gflops = latency["total"]["achieved_gflops_by_batch"]
        rows.append(["GFLOP/s (model / MatMul ceiling)", "", "", ""]
                    + [f"{gflops[b]:.2f} / {ceiling['gflops']:.1f}" for b in batches])
    return "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n"
