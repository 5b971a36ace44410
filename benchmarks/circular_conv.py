"""A full-resolution block's folded kernel, run circularly at the training's FFT length against
linearly, side by side in onnxruntime.

With R learned, a block that crops nothing filters its convolution's spectrum with the
resolution mask; export folds the mask into the kernel, which then has 2 S - 1 taps and is
periodic in the training's FFT length N (about 1.5 S for a global kernel). The MatMul FFT can
run that kernel circularly at exactly N (operators.conv_period) or linearly at a length of at
least 3 S - 1. This times both lowerings of the same network, every block's convolution as the
``matmul`` tactic, in one onnxruntime run with the two graphs in turns (export.timing.measure),
and checks that they compute the same output.

The network is benchmarks.export_speed's synthetic ``max`` state (every mask at its maximum: 8
blocks, 64 channels, global kernels, full resolution), whose every block has a folded kernel.

    python -m benchmarks.circular_conv    # writes benchmarks/results/circular_conv.md
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch

from benchmarks import harness
from benchmarks.export_speed import Options, batch_of, ort_ms, synthetic
from export.bench import theoretical_costs
from export.emit import to_onnx
from export.lowering import lower
from export.static import freeze, materialize


def total_macs(net) -> float:
    return sum(v["theoretical"] for v in theoretical_costs(net).values())


def compare(length: int, batches: list[int], repeats: int) -> list[dict]:
    """Rows per batch: ms and MACs of the circular and the linear lowering of one network."""
    model, x = synthetic(Options(), length, "max")
    static = materialize(model, freeze(model))
    linear = copy.deepcopy(static)
    for block in linear.blocks:
        block.conv.period = None  # the folded kernel as a plain 2 S - 1 tap kernel
    tactics = ["matmul"] * len(static.blocks)
    circ, lin = lower(static, tactics), lower(linear, tactics)
    with torch.no_grad():
        diff = float((circ(batch_of(x, 4)) - lin(batch_of(x, 4))).abs().max())
    graphs = [to_onnx(net, (batch_of(x, 2),)) for net in (circ, lin)]
    rows = []
    for b in batches:
        ms = ort_ms(graphs, [batch_of(x, b)] * 2, 1, repeats)
        rows.append({"L": length, "batch": b, "circular_ms": ms[0], "linear_ms": ms[1],
                     "circular_macs": total_macs(circ), "linear_macs": total_macs(lin),
                     "grid": (circ.blocks[0].conv.n, lin.blocks[0].conv.n), "diff": diff})
    return rows


def report(rows: list[dict], argv: list[str]) -> str:
    lines = [
        "# A folded kernel: circular at the training's FFT length against linear",
        "",
        *harness.header(__file__, argv, harness.ORT, machine_note="; 1 thread; median of the "
                        "timed calls, the two graphs in turns"),
        "",
        "| L | batch | four-step grid, circular / linear | MMAC/sample circular / linear | "
        "circular ms | linear ms | circular / linear | max output difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['L']} | {r['batch']} | {r['grid'][0]} / {r['grid'][1]} | "
            f"{r['circular_macs'] / 1e6:.1f} / {r['linear_macs'] / 1e6:.1f} | "
            f"{r['circular_ms']:.3f} | {r['linear_ms']:.3f} | "
            f"{r['circular_ms'] / r['linear_ms']:.2f} | {r['diff']:.1e} |")
    return "\n".join(lines) + "\n"


def positive_ints(text: str) -> list[int]:
    """argparse type: comma-separated positive integers."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive "
                                         f"integers")
    return values


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--lengths", type=positive_ints, default="256,427,784,1024",
                   help="input lengths, comma-separated")
    p.add_argument("--batch", type=positive_ints, default="1,32",
                   help="batches, comma-separated")
    p.add_argument("--repeats", type=int, default=30, help="timed calls per graph")
    harness.add_report(p, __file__)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = [r for n in args.lengths for r in compare(n, args.batch, args.repeats)]
    harness.publish(report(rows, harness.arguments(argv)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
