"""The dense tactic in onnxruntime: why :mod:`dnarch_deploy.operators` leaves it to measurement.

A depthwise 'same' convolution on P positions is, per channel, a (P x P) matrix:
:class:`export.tactics.DenseConv` runs it as one batched MatMul, C P^2 multiply-accumulates. On
short axes and small images that is about as many as the direct or MatMul FFT forms need, in one
GEMM per channel where they run many small products.

Table 1, one convolution alone: the portable tactics offered for it
(:func:`dnarch_deploy.operators.conv_tactics`; ``multistep`` where it is not the four-step
itself) timed in turns in one process, each one's multiply-accumulates per second
(:func:`dnarch_deploy.operators.conv_macs` / median time) and the dense tactic's rate against the
four-step MatMul FFT's; which tactic was fastest, which the by-cost choice picks
(:func:`dnarch_deploy.operators.conv_by_cost`), and how much slower the pick ran.

Table 2, whole networks: base CCNN_{D,W} networks (random weights, BatchNorm calibrated) lowered
with every convolution dense and with the by-cost tactics, the two timed in turns at each batch:
at batch 1 a network streams every block's C P^2 weights per call, which one convolution timed
alone (its matrix hot in the cache) does not show.

Every form in table 1 is checked against :func:`dnarch_deploy.spectral.direct_conv` (or, for a
periodic kernel, the MatMul FFT) before it is timed.

    python -m benchmarks.dense_conv            # both tables
    python -m benchmarks.dense_conv --quick    # fewer cases and repeats
"""

from __future__ import annotations

import math

import numpy as np
import torch

from benchmarks import harness
from dnarch_deploy import DNArch, ModelConfig
from dnarch_deploy.calibration import calibrate
from dnarch_deploy.operators import conv_by_cost, conv_macs, conv_tactics
from dnarch_deploy.progress import bar
from dnarch_deploy.spectral import direct_conv
from export.emit import to_onnx
from export.lowering import cheapest, lower, resample_tactics_by_cost, tactic_costs
from export.static import freeze, materialize
from export.tactics import PORTABLE, distinct_tactics
from export.timing import measure, runner, session

# (channels, size, taps, period): short axes and small images with global kernels (2 S - 1 taps),
# a kernel with a folded resolution mask (periodic in the training's FFT length), short kernels
CASES = [(32, (16,), (31,), None), (32, (54,), (107,), None), (24, (54,), (9,), None),
         (33, (150,), (149,), None), (33, (150,), (299,), (225,)), (32, (150,), (9,), None),
         (32, (96,), (191,), None), (32, (251,), (501,), None), (64, (64,), (127,), None),
         (24, (8, 8), (15, 15), None), (32, (8, 8), (3, 3), None), (32, (14, 14), (27, 27), None),
         (32, (16, 16), (31, 31), (24, 24))]
QUICK = CASES[3:5] + CASES[9:10]
# (input size, width, depth) of table 2's base networks
NETWORKS = [((64,), 32, 4), ((96,), 32, 4), ((150,), 16, 4), ((150,), 32, 4), ((251,), 32, 4),
            ((8, 8), 32, 4), ((16, 16), 32, 4)]
QUICK_NETWORKS = NETWORKS[2:3]


def case_kernel(channels: int, taps: tuple[int, ...], period) -> torch.Tensor:
    """A random kernel; with a period, one whose taps repeat with it per axis, as a folded
    resolution mask's do (tap j is the circular filter's value at lag K // 2 - j mod N), so that
    the linear forms (direct) and the circular ones compute the same function."""
    if period is None:
        return torch.randn(channels, *taps)
    g = torch.randn(channels, *period)
    index = [((k // 2 - torch.arange(k)) % n).reshape([-1 if i == a else 1 for i in
                                                       range(len(taps))])
             for a, (k, n) in enumerate(zip(taps, period))]
    return g[(slice(None), *index)]


def check(mods: dict, kernel: torch.Tensor, size, period) -> None:
    """Every form computes the same convolution (float64) as the reference, or it is not timed."""
    k64 = kernel.double()
    x = torch.randn(2, kernel.shape[0], *size, dtype=torch.float64)
    reference = (distinct_tactics(k64, size, ("matmul",), period)["matmul"](x) if period
                 else direct_conv(x, k64))
    for name in mods:
        got = distinct_tactics(k64, size, (name,), period)[name](x)
        err = float((got - reference).abs().max() / reference.abs().max())
        if err > 1e-9:
            raise AssertionError(f"{name} differs from the reference by {err:.1e} at {size}")


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    harness.add_onnxruntime(p, repeats=60, per="tactic", quick="fewer cases and repeats")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    repeats = min(args.repeats, 20) if args.quick else args.repeats
    cases = QUICK if args.quick else CASES
    harness.print_header(
        __file__, harness.arguments(argv), harness.ORT,
        machine_note=f"; {args.threads} onnxruntime thread(s), median of {repeats} calls, the "
        "tactics of a row in turns")
    rows = ["| channels | size | taps | period | batch | ms (GMAC/s) per tactic | "
            "dense rate / matmul rate | fastest | by cost | by cost / fastest |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    ratios, regrets = [], []
    for (c, size, taps, period), b in bar([(k, b) for k in cases for b in args.batches],
                                               desc="cases"):
        kernel = case_kernel(c, taps, period)
        mods = distinct_tactics(kernel, size, PORTABLE, period)
        check(mods, kernel, size, period)
        x = torch.randn(b, c, *size)
        sessions = [session(to_onnx(m, (x,)), args.threads) for m in mods.values()]
        feeds = [{s.get_inputs()[0].name: x.numpy()} for s in sessions]
        ms = {t: r["median_ms"] for t, r in
              zip(mods, measure([runner(s, f) for s, f in zip(sessions, feeds)], repeats))}
        rate = {t: conv_macs(t, c, size, taps, period) * b / ms[t] / 1e6 for t in mods}
        ratios.append(rate["dense"] / rate["matmul"])
        fastest, pick = min(ms, key=ms.get), conv_by_cost(c, size, taps, period)
        regrets.append(ms[pick] / ms[fastest])
        cells = ", ".join(f"{t} {ms[t]:.3f} ({rate[t]:.1f})" for t in mods)
        rows.append(f"| {c} | {'x'.join(map(str, size))} | {'x'.join(map(str, taps))} | "
                    f"{'x'.join(map(str, period)) if period else '-'} | {b} | {cells} | "
                    f"{ratios[-1]:.2f} | {fastest} | {pick} | {regrets[-1]:.2f} |")
    print("\n".join(rows))
    print(f"\nmedian MAC rate dense / matmul over {len(ratios)} rows: "
          f"{float(np.median(ratios)):.2f} (batch 1: "
          f"{float(np.median(ratios[0::len(args.batches)])):.2f}); by-cost pick / fastest: "
          f"median {float(np.median(regrets)):.2f}, worst {max(regrets):.2f}")
    print(f"tactics offered at {cases[-1][1]}: {', '.join(conv_tactics(cases[-1][1]))}\n")
    rows = ["| input | base | dense matrices MB | by-cost tactics | batch | dense ms | "
            "by-cost ms | dense / by-cost |", "|---|---|---|---|---|---|---|---|"]
    for size, width, depth in bar(QUICK_NETWORKS if args.quick else NETWORKS,
                                       desc="networks"):
        static, by_cost = base_network(size, width, depth)
        example = torch.randn(2, 1, *size)
        resample = resample_tactics_by_cost(static)
        sessions = [session(to_onnx(lower(static, t, resample), (example,)), args.threads)
                    for t in (["dense"] * len(by_cost), by_cost)]
        megabytes = sum(b.n_in for b in static.blocks) * math.prod(size) ** 2 * 4 / 2**20
        for b in args.batches:
            x = torch.randn(b, 1, *size).numpy()
            ms = [r["median_ms"] for r in measure([runner(s, {s.get_inputs()[0].name: x})
                                                   for s in sessions], repeats)]
            rows.append(f"| {'x'.join(map(str, size))} | {width}x{depth} | {megabytes:.1f} | "
                        f"{' '.join(by_cost)} | {b} | {ms[0]:.3f} | {ms[1]:.3f} | "
                        f"{ms[0] / ms[1]:.2f} |")
    print("\n".join(rows))
    return 0


def base_network(size: tuple[int, ...], width: int, depth: int):
    """The static base CCNN_{depth,width} on one input channel (random weights, BatchNorm
    calibrated) and its by-cost tactics."""
    config = ModelConfig(in_channels=1, out_channels=10, input_size=size, depth=depth,
                         width=width, learn="none")
    model = DNArch(config)
    model = calibrate(model, [torch.randn(16, 1, *size) for _ in range(2)],
                      show_progress=False).eval()
    static = materialize(model, freeze(model))
    return static, cheapest(tactic_costs(static))


if __name__ == "__main__":
    raise SystemExit(main())
