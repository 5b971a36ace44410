"""The residual stream sequence-first: would a 1-D network run faster in onnxruntime with its
stream laid out (L, B, C) instead of (B, C, L)?

benchmarks.export_profile found that about a quarter of the max network's time at batch 32 goes to
moving data, most of it the four-step FFT convolution's Transposes (export.tactics.MatMulFFTConv):
its stages contract the positions' slow index, which in (B, C, L) lies between the lines and the
fast index. With positions outermost, (L, B, C), every stage is a MatMul on a reshape: the first
contracts the leading axis, the DFT matrices' rows are ordered (bin, real | imaginary) so the
second stage reads its input as it lies, and the pointwise layers become one MatMul over all
positions. This script builds both forms of the same residual blocks (a full-resolution depthwise
convolution with a global kernel, then pointwise, GELU, pointwise, residual add), checks they
compute the same function, and times them side by side in onnxruntime, with onnxruntime's profile
by operator kind at the largest batch.

    python -m benchmarks.stream_layout --length 1024 --channels 64
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks import harness
from benchmarks.export_profile import ort_by_kind, table
from benchmarks.export_speed import ort_ms
from dnarch_deploy.operators import MAX_FACTORS, fft_factors
from export.emit import to_onnx
from export.latency_table import global_taps
from export.static import pointwise
from export.tactics import MatMulFFTConv
from export.timing import batch_sizes


class SequenceFirstConv(nn.Module):
    """A four-step :class:`MatMulFFTConv` on a sequence-first stream, (L, B, C) -> (L, B, C): the
    same buffers, re-laid so that no stage needs a Transpose."""

    def __init__(self, conv: MatMulFFTConv):
        super().__init__()
        if len(conv.factors) != 2 or conv.length is None:
            raise ValueError(f"a 1-D four-step convolution is needed, not factors {conv.factors}")
        (self.rows, self.cols), self.bins, self.pad = conv.grid, conv.bins, conv.pad
        p = self.bins
        # first stage: rows ordered (bin, re | im), so its output is the second stage's input
        self.register_buffer("first", torch.stack([conv.first[:p], conv.first[p:]], 1)
                             .reshape(2 * p, self.rows))
        self.register_buffer("second", conv.second.transpose(1, 2).contiguous())  # from the left
        self.register_buffer("third", conv.second_inverse.transpose(2, 3).contiguous())
        self.register_buffer("back", conv.back)  # (rows, 2 P), columns (re | im, bin)
        self.register_buffer("g_re", conv.g_re.permute(0, 3, 1, 2).contiguous())  # (P, N2, 1, C)
        self.register_buffer("g_im", conv.g_im.permute(0, 3, 1, 2).contiguous())

    def forward(self, h: Tensor) -> Tensor:
        length, batch, channels = h.shape
        if self.pad:
            h = F.pad(h, (0, 0, 0, 0, 0, self.pad))
        z = torch.matmul(self.first, h.reshape(self.rows, -1))  # (2 P, N2 B C)
        z = torch.matmul(self.second, z.reshape(self.bins, 2 * self.cols, -1))
        z = z.reshape(self.bins, 2, self.cols, batch, channels)
        re, im = z[:, 0], z[:, 1]
        z = torch.cat([re * self.g_re - im * self.g_im, re * self.g_im + im * self.g_re], 1)
        z = torch.matmul(self.third, z.reshape(self.bins, 2 * self.cols, -1))  # (2, P, N2, B C)
        y = torch.matmul(self.back, z.reshape(2 * self.bins, -1)).reshape(-1, batch, channels)
        return y[:length] if self.pad else y


class Blocks(nn.Module):
    """``depth`` full-resolution residual blocks sharing one convolution and one pair of
    pointwise layers, (B, C, L) in and out; ``sequence_first``: (L, B, C) in and out (a network
    would lay its stream out so once, in the encoder, whose input has few channels)."""

    def __init__(self, conv: MatMulFFTConv, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor,
                 depth: int, sequence_first: bool):
        super().__init__()
        self.depth, self.sequence_first = depth, sequence_first
        self.conv = SequenceFirstConv(conv) if sequence_first else conv
        if sequence_first:  # right-hand MatMul weights, (C_in, C_out)
            w1, w2 = w1.T.contiguous(), w2.T.contiguous()
        for name, value in {"w1": w1, "b1": b1, "w2": w2, "b2": b2}.items():
            self.register_buffer(name, value)

    def forward(self, x: Tensor) -> Tensor:
        if not self.sequence_first:
            for _ in range(self.depth):
                z = F.gelu(pointwise(self.conv(x), self.w1, self.b1))
                x = x + pointwise(z, self.w2, self.b2)
            return x
        for _ in range(self.depth):
            z = F.gelu(torch.matmul(self.conv(x), self.w1) + self.b1)
            x = x + torch.matmul(z, self.w2) + self.b2
        return x


def both_forms(length: int, channels: int, depth: int, dtype: torch.dtype = torch.float32,
               seed: int = 0) -> tuple[Blocks, Blocks]:
    """Today's layout and the sequence-first one, the same random weights; a global kernel."""
    g = torch.Generator().manual_seed(seed)
    (taps,) = global_taps((length,))
    kernel = torch.randn(channels, taps, generator=g, dtype=torch.float64) / taps
    conv = MatMulFFTConv(kernel, (length,)).to(dtype)

    def mixing() -> tuple[Tensor, Tensor]:  # a pointwise layer's weight and bias, drawn anew
        weight = torch.randn(channels, channels, generator=g, dtype=dtype) / math.sqrt(channels)
        return weight, torch.randn(channels, generator=g, dtype=dtype)

    (w1, b1), (w2, b2) = mixing(), mixing()
    return (Blocks(conv, w1, b1, w2, b2, depth, False).eval(),
            Blocks(conv, w1, b1, w2, b2, depth, True).eval())


def first(x: Tensor) -> Tensor:
    """(B, C, L) -> (L, B, C), contiguous."""
    return x.permute(2, 0, 1).contiguous()


def fixed_graphs(today: Blocks, sequence_first: Blocks, x: Tensor) -> list:
    """Both forms exported for x's shape (the batch is a different axis in each)."""
    return [to_onnx(today, (x,), dynamic_batch=False),
            to_onnx(sequence_first, (first(x),), dynamic_batch=False)]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    p.add_argument("--length", type=int, default=1024, help="positions L")
    p.add_argument("--channels", type=int, default=64, help="channels C of every block")
    p.add_argument("--depth", type=int, default=2, help="residual blocks")
    p.add_argument("--batch", type=batch_sizes, default=(1, 32),
                   help="batch sizes timed, comma-separated (as export's --batch)")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads")
    p.add_argument("--repeats", type=int, default=40, help="timed calls per form and batch")
    args = p.parse_args(argv)
    harness.at_least_one(p, args, "length", "channels", "depth", "threads", "repeats")
    factors = fft_factors(args.length, global_taps((args.length,))[0], MAX_FACTORS["matmul"])
    if len(factors) != 2:
        p.error(f"--length {args.length}: its FFT is one dense DFT ({factors[0]}), not a four-step "
                f"grid; take a longer one")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    load_before = os.getloadavg()[0]
    torch.set_num_threads(args.threads)
    today, sequence_first = both_forms(args.length, args.channels, args.depth)
    x = torch.randn(2, args.channels, args.length, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = today(x)
        gap = float((sequence_first(first(x)).permute(1, 2, 0) - want).abs().max()
                    / want.abs().max())
    print("\n".join(harness.header(
        __file__, harness.arguments(argv), harness.ORT,
        machine_note=f"; {args.threads} thread(s); load average {load_before:.1f} before")))
    print(f"{args.depth} residual blocks of {args.channels} channels, L={args.length}, four-step "
          f"grid {today.conv.grid} of factors {today.conv.factors}; the two forms' outputs differ "
          f"by {gap:.1e} of the largest (float32)\n")
    print("| batch | (B, C, L), today ms | (L, B, C) ms | today / sequence-first |")
    print("|---|---|---|---|")
    for batch in args.batch:
        xb = torch.randn(batch, args.channels, args.length)
        graphs = fixed_graphs(today, sequence_first, xb)
        ms = ort_ms(graphs, [xb, first(xb)], args.threads, args.repeats)
        print(f"| {batch} | {ms[0]:.3f} | {ms[1]:.3f} | {ms[0] / ms[1]:.2f} |")
    xb = torch.randn(max(args.batch), args.channels, args.length)
    graphs = fixed_graphs(today, sequence_first, xb)
    for name, graph, xs in zip(("(B, C, L), today", "(L, B, C)"), graphs, (xb, first(xb))):
        kinds, profiled = ort_by_kind(graph, xs, args.threads, 8)
        print(f"\n{name}, batch {max(args.batch)}: onnxruntime by op type (kernel time, median of "
              f"8 calls; a profiled call took {profiled:.3f} ms):\n")
        print("\n".join(table(kinds, 8)))
    print(f"\nLoad average {os.getloadavg()[0]:.1f} after. Medians of {args.repeats} calls each, "
          f"the two forms in turns: a ratio within a few per cent of 1 is a tie on a shared "
          f"machine.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
