"""Why the direct tactic pads channels to a multiple of 4 and runs 1-D convolutions as one-row
images: onnxruntime's CPU depthwise Conv, timed three ways on the same kernel in one session.

- ``plain``: the Conv torch exports for ``F.conv1d`` / ``F.conv2d`` with groups = channels;
- ``shipped``: :class:`export.tactics.DirectConv`, what export writes (a one-row 2-D Conv in 1-D,
  the channels padded with zero filters to :func:`dnarch_deploy.operators.depthwise_channels`).

Both compute the same correlation (checked against :func:`dnarch_deploy.spectral.direct_conv`);
the table gives the median ms of each and plain / shipped (> 1: the shipped form is faster).

    python benchmarks/depthwise_channels.py            # prints the table
    python benchmarks/depthwise_channels.py --quick    # fewer cases and repeats
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
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dnarch_deploy.operators import depthwise_channels  # noqa: E402
from dnarch_deploy.spectral import direct_conv  # noqa: E402
from export.emit import to_onnx  # noqa: E402
from export.tactics import DirectConv  # noqa: E402
from export.timing import measure, progress, runner, session  # noqa: E402

# (size, taps): short and long 1-D axes with small and global kernels, small and MNIST-size images
SHAPES = [((54,), (47,)), ((150,), (9,)), ((150,), (299,)), ((1024,), (31,)), ((512,), (3,)),
          ((8, 8), (3, 3)), ((8, 7), (15, 3)), ((28, 28), (5, 5))]
CHANNELS = (8, 22, 23, 24, 31, 32)
QUICK = {"shapes": SHAPES[1:2] + SHAPES[5:6], "channels": (23, 24)}


class PlainConv(torch.nn.Module):
    """The grouped Conv as torch exports it: 1-D stays 1-D, no padding of the channels."""

    def __init__(self, kernel: torch.Tensor):
        super().__init__()
        self.register_buffer("weight", kernel.unsqueeze(1))
        self.padding = tuple(k // 2 for k in kernel.shape[1:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = F.conv1d if x.dim() == 3 else F.conv2d
        return conv(x, self.weight, padding=self.padding, groups=self.weight.shape[0])


def time_case(size, taps, channels, batch, threads, repeats):
    g = torch.Generator().manual_seed(channels + sum(size))
    kernel = torch.randn(channels, *taps, generator=g)
    x = torch.randn(batch, channels, *size, generator=g)
    ref = direct_conv(x.double(), kernel.double()).numpy()
    feeds, runs = {}, []
    for module in (PlainConv(kernel), DirectConv(kernel)):
        model = to_onnx(module, (x,))
        sess = session(model, threads)
        feeds = {model.graph.input[0].name: x.numpy()}
        out = sess.run(None, feeds)[0]
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        if err > 1e-5:
            name = type(module).__name__
            raise AssertionError(f"{name} C={channels} {size}: relative error {err:.1e}")
        runs.append(runner(sess, feeds))
    plain, shipped = measure(runs, repeats=repeats)
    return plain["median_ms"], shipped["median_ms"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two shapes, two channel counts")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--batches", default="1,32", help="batch sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=60, help="timed calls per form (medians)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    shapes = QUICK["shapes"] if args.quick else SHAPES
    channels = QUICK["channels"] if args.quick else CHANNELS
    batches = [int(b) for b in args.batches.split(",")]
    repeats = min(args.repeats, 20) if args.quick else args.repeats
    cases = [(s, t, c, b) for s, t in shapes for c in channels for b in batches]
    print(f"$ python benchmarks/depthwise_channels.py {' '.join(argv or sys.argv[1:])}".rstrip())
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"python {platform.python_version()}, torch {torch.__version__}, onnxruntime "
          f"{onnxruntime.__version__}; {args.threads} onnxruntime thread(s), median of "
          f"{repeats} calls, the two forms in turns\n")
    print("| size | taps | channels (shipped) | batch | plain ms | shipped ms | plain / shipped |")
    print("|---|---|---|---|---|---|---|")
    for size, taps, c, b in progress(cases, desc="cases"):
        plain, shipped = time_case(size, taps, c, b, args.threads, repeats)
        print(f"| {'x'.join(map(str, size))} | {'x'.join(map(str, taps))} | {c} "
              f"({depthwise_channels(c)}) | {b} | {plain:.4f} | {shipped:.4f} | "
              f"{plain / shipped:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
