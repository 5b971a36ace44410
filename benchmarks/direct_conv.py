"""The direct tactic in onnxruntime: the two facts :mod:`dnarch_deploy.operators` takes from it.

Table 1, why the direct tactic pads channels to a multiple of 4 and runs 1-D convolutions as
one-row images (``DEPTHWISE_CHANNEL_MULTIPLE``): the same depthwise correlation timed as

- ``plain``: the Conv torch exports for ``F.conv1d`` / ``F.conv2d`` with groups = channels;
- ``shipped``: :class:`export.tactics.DirectConv`, what export writes (a one-row 2-D Conv in 1-D,
  the channels padded with zero filters to :func:`dnarch_deploy.operators.depthwise_channels`);

median ms of each and plain / shipped (> 1: the shipped form is faster).

Table 2, the by-cost choice's weight of the direct tactic against the four-step MatMul FFT
(``CONV_COST_WEIGHT``): both tactics on the same convolution, their multiply-accumulates per
second (:func:`dnarch_deploy.operators.conv_macs` / median time) and the ratio direct / matmul.

Every form is checked against :func:`dnarch_deploy.spectral.direct_conv`; the forms of a row are
timed in turns in one process.

    python -m benchmarks.direct_conv            # prints both tables
    python -m benchmarks.direct_conv --quick    # fewer cases and repeats
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks import harness
from dnarch_deploy.operators import conv_macs, depthwise_channels
from dnarch_deploy.progress import bar
from dnarch_deploy.spectral import direct_conv
from export.emit import to_onnx
from export.tactics import DirectConv, make_conv
from export.timing import measure, runner, session

# (size, taps): short and long 1-D axes with small and global kernels, small and MNIST-size images
SHAPES = [((54,), (47,)), ((150,), (9,)), ((150,), (299,)), ((1024,), (31,)), ((512,), (3,)),
          ((8, 8), (3, 3)), ((8, 7), (15, 3)), ((28, 28), (5, 5))]
CHANNELS = (8, 22, 23, 24, 31, 32)
QUICK = {"shapes": SHAPES[1:2] + SHAPES[5:6], "channels": (23, 24)}
# (channels, size, taps) for table 2: short to long axes, small to global kernels
TACTIC_CASES = [(24, (150,), (299,)), (24, (150,), (47,)), (32, (54,), (47,)),
                (32, (1024,), (31,)), (32, (1024,), (255,)), (32, (512,), (1023,)),
                (24, (8, 8), (15, 15)), (32, (28, 28), (55, 55)), (32, (28, 28), (9, 9))]


class PlainConv(torch.nn.Module):
    """The grouped Conv as torch exports it: 1-D stays 1-D, no padding of the channels."""

    def __init__(self, kernel: torch.Tensor):
        super().__init__()
        self.register_buffer("weight", kernel.unsqueeze(1))
        self.padding = tuple(k // 2 for k in kernel.shape[1:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = F.conv1d if x.dim() == 3 else F.conv2d
        return conv(x, self.weight, padding=self.padding, groups=self.weight.shape[0])


def timed(modules, kernel, x, threads, repeats, label):
    """Median ms of each module's ONNX export on ``x`` in onnxruntime, timed in turns, each
    checked first against the correlation with ``kernel``."""
    ref = direct_conv(x.double(), kernel.double()).numpy()
    runs = []
    for module in modules:
        model = to_onnx(module, (x,))
        sess = session(model, threads)
        feeds = {model.graph.input[0].name: x.numpy()}
        out = sess.run(None, feeds)[0]
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        if err > 1e-5:
            raise AssertionError(f"{type(module).__name__} {label}: relative error {err:.1e}")
        runs.append(runner(sess, feeds))
    return [m["median_ms"] for m in measure(runs, repeats=repeats)]


def case_input(channels, size, taps, batch):
    g = torch.Generator().manual_seed(channels + sum(size) + sum(taps))
    return torch.randn(channels, *taps, generator=g), torch.randn(batch, channels, *size,
                                                                  generator=g)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    harness.add_onnxruntime(parser, repeats=60, quick="two shapes, two channel counts")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    shapes = QUICK["shapes"] if args.quick else SHAPES
    channels = QUICK["channels"] if args.quick else CHANNELS
    batches = args.batches
    repeats = min(args.repeats, 20) if args.quick else args.repeats
    cases = [(s, t, c, b) for s, t in shapes for c in channels for b in batches]
    harness.print_header(
        __file__, harness.arguments(argv), harness.ORT,
        machine_note=f"; {args.threads} onnxruntime thread(s), median of {repeats} calls, the "
        "forms of a row in turns")
    rows = ["| size | taps | channels (shipped) | batch | plain ms | shipped ms | "
            "plain / shipped |", "|---|---|---|---|---|---|---|"]
    for size, taps, c, b in bar(cases, desc="table 1"):
        kernel, x = case_input(c, size, taps, b)
        plain, shipped = timed([PlainConv(kernel), DirectConv(kernel)], kernel, x,
                               args.threads, repeats, f"C={c} {size}")
        rows.append(f"| {'x'.join(map(str, size))} | {'x'.join(map(str, taps))} | {c} "
                    f"({depthwise_channels(c)}) | {b} | {plain:.4f} | {shipped:.4f} | "
                    f"{plain / shipped:.2f} |")
    print("\n".join(rows), "\n", flush=True)
    rows = ["| channels | size | taps | batch | direct ms | direct GMAC/s | matmul ms | "
            "matmul GMAC/s | MAC rate direct / matmul |", "|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    tactic_cases = TACTIC_CASES[:2] if args.quick else TACTIC_CASES
    for (c, size, taps), b in bar([(t, b) for t in tactic_cases for b in batches],
                                       desc="table 2"):
        kernel, x = case_input(c, size, taps, b)
        mods = [make_conv(t, kernel, size) for t in ("direct", "matmul")]
        ms = timed(mods, kernel, x, args.threads, repeats, f"C={c} {size}")
        rate = [conv_macs(t, c, size, taps) * b / m / 1e6 for t, m in zip(("direct", "matmul"), ms)]
        ratios.append(rate[0] / rate[1])
        rows.append(f"| {c} | {'x'.join(map(str, size))} | {'x'.join(map(str, taps))} | {b} | "
                    f"{ms[0]:.3f} | {rate[0]:.1f} | {ms[1]:.3f} | {rate[1]:.1f} | "
                    f"{ratios[-1]:.2f} |")
    print("\n".join(rows))
    print(f"\nmedian MAC rate direct / matmul over {len(ratios)} rows: "
          f"{float(np.median(ratios)):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
