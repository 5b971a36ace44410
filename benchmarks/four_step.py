"""The four-step MatMul FFT's second factor N2 in onnxruntime: the fact behind
:data:`dnarch_deploy.operators.FOUR_STEP_N2`.

Per depthwise convolution (channels, length, global kernel) and batch, the matmul tactic
(:class:`export.tactics.MatMulFFTConv`) is built on each grid N1 x N2 (N1 the smallest that
reaches the FFT length) and timed in turns in one process: the grid of fewest multiply-adds over
every N2 from 2 to 64, and every N2 of FOUR_STEP_N2 up to 48. Printed: median ms, MACs per
channel, and each grid's time against the fewest-MACs grid's (< 1: faster). The grid export now
picks (:func:`dnarch_deploy.operators.fft_factors`) is marked *. Every module is checked against
:func:`dnarch_deploy.spectral.direct_conv` first.

A second table times the inverse half's two layouts on the grid export picks: step (3) writing
real and imaginary parts as two leading blocks, read by step (4) as they are (export's, since
813fe2d), against the layout before it, real and imaginary parts side by side and a Transpose
between steps (3) and (4) (:class:`TransposedInverse`, kept here for the comparison).

A third times the filter's complex product between the two halves in three forms: export's
(real and imaginary parts cut apart, four Mul, a Sub and an Add, joined again), one broadcast Mul
with the 2x2 real block of each bin and a ReduceSum (:class:`BlockFilter`), and the spectrum
times [g_re | g_re] plus its halves swapped times [-g_im | g_im] (:class:`SwappedFilter`): fewer
nodes each, kept here for the comparison.

    python -m benchmarks.four_step
    python -m benchmarks.four_step --quick    # the two shortest cases, two grids each
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks import harness
from dnarch_deploy.operators import FOUR_STEP_N2, fft_factors, multistep_macs
from dnarch_deploy.spectral import conv_fft_length, direct_conv
from export.emit import to_onnx
from export.tactics import MatMulFFTConv
from export.timing import measure, runner, session

CASES = ((32, 150), (64, 256), (64, 512), (64, 1024), (32, 1460), (32, 4096))  # channels, length


def fewest_macs(length: int, taps: int) -> tuple[int, int]:
    """The two-factor grid of fewest MACs over every N2 in 2..64 (the rule before FOUR_STEP_N2)."""
    n = conv_fft_length(length, taps)
    grids = [(-(-n // f), f) for f in range(2, 65) if 2 * f <= n]
    return min(grids, key=lambda g: multistep_macs(length, g))


class TransposedInverse(MatMulFFTConv):
    """The four-step convolution with the inverse half as it was before 813fe2d: step (3) writes
    (k2', lines, re | im s1) and a Transpose moves the real / imaginary split to the front."""

    def __init__(self, kernel: torch.Tensor, size: tuple[int, ...]):
        super().__init__(kernel, size)
        self.register_buffer("w3_side_by_side", torch.cat(list(self.second_inverse), -1))

    def _inverse(self, z: torch.Tensor) -> torch.Tensor:
        p, r1 = self.bins, z.shape[-1] // 2
        z = torch.matmul(z, self.w3_side_by_side)  # (3): (k2', lines, re | im s1)
        z = z.reshape(p, -1, 2, r1).permute(2, 0, 1, 3).reshape(2 * p, -1)
        y = torch.matmul(self.back, z)  # (4)
        s2 = self.back.shape[0]
        return y.reshape(s2, -1, r1).transpose(0, 1).reshape(-1, s2 * r1)


class BlockFilter(MatMulFFTConv):
    """The filter's product as one broadcast Mul and a ReduceSum: per bin, [re, im] times the
    real 2x2 block [[g_re, g_im], [-g_im, g_re]], summed over the input part."""

    def __init__(self, kernel: torch.Tensor, size: tuple[int, ...]):
        super().__init__(kernel, size)
        re, im = self.g_re, self.g_im  # (P1, 1, C, N2)
        rows = [torch.stack([re, im], -2), torch.stack([-im, re], -2)]
        self.register_buffer("g_block", torch.stack(rows, -3))  # (P1, 1, C, 2, 2, N2)

    def _filter(self, z: torch.Tensor) -> torch.Tensor:
        p, c, r1 = z.shape[0], z.shape[2], z.shape[-1] // 2
        blocks = z.reshape(p, -1, c, 2, 1, r1)  # (P1, B, C, 2, 1, N2)
        return (blocks * self.g_block).sum(-3).flatten(-2)


class SwappedFilter(MatMulFFTConv):
    """The filter's product as z [g_re | g_re] + [im | re] [-g_im | g_im]."""

    def __init__(self, kernel: torch.Tensor, size: tuple[int, ...]):
        super().__init__(kernel, size)
        self.register_buffer("g_same", torch.cat([self.g_re, self.g_re], -1))
        self.register_buffer("g_swapped", torch.cat([-self.g_im, self.g_im], -1))

    def _filter(self, z: torch.Tensor) -> torch.Tensor:
        r1 = z.shape[-1] // 2
        swapped = torch.cat([z[..., r1:], z[..., :r1]], -1)
        return z * self.g_same + swapped * self.g_swapped


def timed_rows(opt: argparse.Namespace, forms: tuple[type, ...], header: str) -> None:
    """One row per case and batch: each form's median ms and its time against the first's
    (export's), equal outputs checked first."""
    print(f"\n| channels | length | batch | grid | {header} |")
    print("|---" * (4 + len(forms)) + "|")
    for channels, length in CASES[:2] if opt.quick else CASES:
        kernel = torch.randn(channels, 2 * length - 1)
        modules = [form(kernel, (length,)) for form in forms]
        x = torch.randn(2, channels, length)
        assert all(torch.allclose(modules[0](x), m(x), atol=1e-5) for m in modules[1:])
        for batch in opt.batch:
            x = torch.randn(batch, channels, length)
            graphs = [to_onnx(m, (x,)) for m in modules]
            fns = [runner(session(g, 1), {g.graph.input[0].name: x.numpy()}) for g in graphs]
            ms = [r["median_ms"] for r in measure(fns, opt.repeats)]
            cells = [f"{ms[0]:.3f}"] + [f"{t:.3f} ({t / ms[0]:.2f})" for t in ms[1:]]
            grid = "x".join(map(str, modules[0].n))
            print(f"| {channels} | {length} | {batch} | {grid} | {' | '.join(cells)} |",
                  flush=True)


def inverse_layouts(opt: argparse.Namespace) -> None:
    """Export's inverse half against the Transpose layout, on the grid export picks."""
    print("\n| channels | length | batch | grid | ms: by part (export) | ms: Transpose (before) "
          "| by part / Transpose |")
    print("|---|---|---|---|---|---|---|")
    for channels, length in CASES[:2] if opt.quick else CASES:
        kernel = torch.randn(channels, 2 * length - 1)
        modules = [MatMulFFTConv(kernel, (length,)), TransposedInverse(kernel, (length,))]
        x = torch.randn(2, channels, length)
        assert torch.allclose(modules[0](x), modules[1](x), atol=1e-5)
        for batch in opt.batch:
            x = torch.randn(batch, channels, length)
            graphs = [to_onnx(m, (x,)) for m in modules]
            fns = [runner(session(g, 1), {g.graph.input[0].name: x.numpy()}) for g in graphs]
            ms = [r["median_ms"] for r in measure(fns, opt.repeats)]
            grid = "x".join(map(str, modules[0].n))
            print(f"| {channels} | {length} | {batch} | {grid} | {ms[0]:.3f} | {ms[1]:.3f} | "
                  f"{ms[0] / ms[1]:.2f} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--repeats", type=int, default=20)
    harness.add_quick(p, "the two shortest cases only, and of the grids the fewest-MACs one and "
                      "export's")
    opt = p.parse_args(argv)
    if min(opt.batch) < 1 or opt.repeats < 1:
        p.error(f"--batch and --repeats must be >= 1, got {opt.batch} and {opt.repeats}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    harness.print_header(__file__, harness.arguments(argv), harness.ORT,
                         machine_note=", 1 onnxruntime thread")
    print("| channels | length | taps | batch | grid N1 x N2: ms (MACs per channel), / fewest-MACs "
          "grid's ms |")
    print("|---|---|---|---|---|")
    for channels, length in CASES[:2] if opt.quick else CASES:
        taps = 2 * length - 1  # global: every output sees every input
        kernel = torch.randn(channels, taps)
        n = conv_fft_length(length, taps)
        chosen = fft_factors(length, taps, 2)
        grids = [fewest_macs(length, taps)]
        others = ((-(-n // f), f) for f in FOUR_STEP_N2 if f <= 48)  # N1 the least reaching n
        grids += [g for g in others if g != grids[0] and (not opt.quick or g == chosen)]
        modules = [MatMulFFTConv(kernel, (length,), factors=g) for g in grids]
        x = torch.randn(2, channels, length)
        ref = direct_conv(x.double(), kernel.double())
        for m in modules:
            err = float((m(x).double() - ref).abs().max() / ref.abs().max())
            assert err < 1e-4, f"grid {m.n}: relative error {err:.1e}"
        for batch in opt.batch:
            x = torch.randn(batch, channels, length)
            graphs = [to_onnx(m, (x,)) for m in modules]
            fns = [runner(session(g, 1), {g.graph.input[0].name: x.numpy()}) for g in graphs]
            ms = [r["median_ms"] for r in measure(fns, opt.repeats)]
            cells = [f"{'*' if g == chosen else ''}{g[0]}x{g[1]}: {t:.3f} "
                     f"({multistep_macs(length, g) / 1e3:.0f}K), {t / ms[0]:.2f}"
                     for g, t in zip(grids, ms)]
            print(f"| {channels} | {length} | {taps} | {batch} | {'; '.join(cells)} |", flush=True)
    inverse_layouts(opt)
    timed_rows(opt, (MatMulFFTConv, BlockFilter, SwappedFilter),
               "ms: filter as export's | as a 2x2 block (/ export's) | swapped (/ export's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
