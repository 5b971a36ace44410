"""The dense tactic in onnxruntime: the by-cost weight :mod:`dnarch_deploy.operators` takes from it.

A depthwise 'same' convolution on P positions is, per channel, a (P x P) matrix:
:class:`export.tactics.DenseConv` runs it as one batched MatMul, C P^2 multiply-accumulates. On
short axes and small images that is about as many as the direct or MatMul FFT forms need, in one
GEMM per channel where they run many small products. Each row times the portable tactics offered
for one convolution (:func:`dnarch_deploy.operators.conv_tactics`; ``multistep`` where it is not
the four-step itself) in turns in one process, and gives each one's multiply-accumulates per second
(:func:`dnarch_deploy.operators.conv_macs` / median time) and the dense tactic's rate against
the four-step MatMul FFT's, the reference of ``CONV_COST_WEIGHT``. The last columns say which
tactic was fastest and which the by-cost choice picks (:func:`dnarch_deploy.operators
.conv_by_cost`), and how much slower the pick ran than the fastest.

Every form is checked against :func:`dnarch_deploy.spectral.direct_conv` (or, for a periodic
kernel, the MatMul FFT) before it is timed.

    python benchmarks/dense_conv.py            # the table
    python benchmarks/dense_conv.py --quick    # fewer cases and repeats
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dnarch_deploy.operators import conv_by_cost, conv_macs, conv_tactics  # noqa: E402
from dnarch_deploy.spectral import direct_conv  # noqa: E402
from export.emit import to_onnx  # noqa: E402
from export.tactics import PORTABLE, distinct_tactics  # noqa: E402
from export.timing import batch_sizes, measure, progress, runner, session  # noqa: E402

# (channels, size, taps, period): short axes and small images with global kernels (2 S - 1 taps),
# a kernel with a folded resolution mask (periodic in the training's FFT length), short kernels
CASES = [(32, (16,), (31,), None), (32, (54,), (107,), None), (24, (54,), (9,), None),
         (33, (150,), (149,), None), (33, (150,), (299,), (225,)), (32, (150,), (9,), None),
         (32, (96,), (191,), None), (32, (251,), (501,), None), (64, (64,), (127,), None),
         (24, (8, 8), (15, 15), None), (32, (8, 8), (3, 3), None), (32, (14, 14), (27, 27), None),
         (32, (16, 16), (31, 31), (24, 24))]
QUICK = CASES[3:5] + CASES[9:10]


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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batches", type=batch_sizes, default=(1, 32))
    p.add_argument("--repeats", type=int, default=60)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    repeats = min(args.repeats, 20) if args.quick else args.repeats
    cases = QUICK if args.quick else CASES
    print(f"$ python benchmarks/dense_conv.py {' '.join(argv or sys.argv[1:])}".rstrip())
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"python {platform.python_version()}, torch {torch.__version__}, onnxruntime "
          f"{onnxruntime.__version__}; {args.threads} onnxruntime thread(s), median of "
          f"{repeats} calls, the tactics of a row in turns\n")
    rows = ["| channels | size | taps | period | batch | ms (GMAC/s) per tactic | "
            "dense rate / matmul rate | fastest | by cost | by cost / fastest |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    ratios, regrets = [], []
    for (c, size, taps, period), b in progress([(k, b) for k in cases for b in args.batches],
                                               desc="cases"):
        kernel = case_kernel(c, taps, period)
        mods = {t: m for t, m in distinct_tactics(kernel, size, PORTABLE, period).items()}
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
    print(f"tactics offered at {cases[-1][1]}: {', '.join(conv_tactics(cases[-1][1]))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
