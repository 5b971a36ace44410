"""Channels in onnxruntime's NCHWc blocks, against what the cost model prices.

onnxruntime's CPU provider runs 2-D convolutions in a blocked layout (NCHWc, MLAS's block of
channels: 16 with AVX-512, 8 with AVX2). This times, as export ships them, the two convolutions
of a block on images of 8x8, 16x16 and 28x28 and on a 150-sample line: the depthwise one
(:class:`export.tactics.DirectConv`, a one-row image in 1-D) and a 1x1 pointwise layer
(:func:`export.static.pointwise`, C -> C), each at channel counts 8 to 48. A row gives each
count's median ms over the 32-channel layer's, beside the ratio the cost model prices
(:func:`dnarch_deploy.operators.conv_macs` for the depthwise layer,
:func:`dnarch_deploy.cost.linear_cost` for the pointwise one: the true channel counts). The
layers of a row are timed in turns in one process.

    python -m benchmarks.channel_block            # the table
    python -m benchmarks.channel_block --quick    # one image size, fewer calls
"""

from __future__ import annotations

import torch

from benchmarks import harness
from dnarch_deploy.cost import linear_cost
from dnarch_deploy.operators import conv_macs
from dnarch_deploy.progress import bar
from export.emit import to_onnx
from export.static import pointwise
from export.tactics import DirectConv
from export.timing import measure, runner, session

CHANNELS = (8, 12, 16, 20, 24, 28, 32, 36, 48)
REFERENCE = 32  # each row's times are over this count's
# (size, depthwise taps): small to MNIST-size images, and a line for contrast
SHAPES = [((8, 8), (7, 7)), ((16, 16), (5, 5)), ((28, 28), (7, 7)), ((150,), (49,))]


class Pointwise(torch.nn.Module):
    """One C -> C 1x1 layer as export writes a block's pointwise maps (one Conv node)."""

    def __init__(self, channels: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("weight", torch.randn(channels, channels, generator=g) / channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pointwise(x, self.weight)


def layer(kind: str, channels: int, taps: tuple[int, ...]) -> torch.nn.Module:
    if kind == "depthwise":
        g = torch.Generator().manual_seed(channels)
        return DirectConv(torch.randn(channels, *taps, generator=g))
    return Pointwise(channels, channels)


def priced(kind: str, channels: int, size: tuple[int, ...], taps: tuple[int, ...]) -> float:
    """What the cost model charges for the layer (MACs per sample)."""
    if kind == "depthwise":
        return conv_macs("direct", channels, size, taps)
    return float(linear_cost(1, channels, channels))  # per position


def row_times(kind, size, taps, batch, threads, repeats) -> list[float]:
    """Median ms of the layer at each of CHANNELS, timed in turns."""
    runs = []
    for c in CHANNELS:
        x = torch.randn(batch, c, *size)
        model = to_onnx(layer(kind, c, taps), (x,))
        runs.append(runner(session(model, threads), {model.graph.input[0].name: x.numpy()}))
    return [m["median_ms"] for m in measure(runs, repeats=repeats)]


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    harness.add_onnxruntime(parser, repeats=60, per="layer", quick="8x8 images only, fewer calls")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.threads < 0:
        parser.error(f"--repeats must be >= 1 and --threads >= 0 (0: onnxruntime's default), "
                     f"got {args.repeats} and {args.threads}")
    torch.set_num_threads(1)
    shapes = SHAPES[:1] if args.quick else SHAPES
    repeats = min(args.repeats, 12) if args.quick else args.repeats
    harness.print_header(
        __file__, harness.arguments(argv), harness.ORT,
        machine_note=f"; {args.threads} onnxruntime thread(s), median of {repeats} calls, the "
        "layers of a row in turns")
    ref = CHANNELS.index(REFERENCE)
    head = " | ".join(str(c) for c in CHANNELS)
    print(f"Each cell: measured / priced time of that many channels over {REFERENCE}'s.\n")
    print(f"| layer | size | batch | ms at {REFERENCE} | {head} |")
    print("|---|---|---|---|" + "---|" * len(CHANNELS))
    cases = [(k, s, t, b) for s, t in shapes for k in ("depthwise", "pointwise")
             for b in args.batches]
    for kind, size, taps, batch in bar(cases, desc="layers"):
        ms = row_times(kind, size, taps, batch, args.threads, repeats)
        cost = [priced(kind, c, size, taps) for c in CHANNELS]
        cells = " | ".join(f"{m / ms[ref]:.2f} / {p / cost[ref]:.2f}" for m, p in zip(ms, cost))
        what = kind + (f" {'x'.join(map(str, taps))}" if kind == "depthwise" else " 1x1")
        print(f"| {what} | {'x'.join(map(str, size))} | {batch} | {ms[ref]:.4f} | {cells} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
