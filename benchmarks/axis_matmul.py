"""Dense resampling along an image's first axis in onnxruntime: the fact behind
:data:`export.resampling.TRANSPOSE_ROWS_BELOW`.

Resampling along the second-to-last axis of x (B, C, n, W) to ``size`` samples is one linear map
M (size x n) applied to every column, timed as

- ``left``: ``M @ x``, a left multiply (onnxruntime runs one (size x n) @ (n x W) GEMM per
  image and channel);
- ``transposed``: ``(x^T @ M^T)^T``, Transpose, one GEMM over all B C W rows, Transpose;

both :class:`export.resampling.AxisMatMul`, its form fixed;

median ms of each, left / transposed (> 1: the transposed form is faster), and which one
:class:`export.resampling.AxisMatMul` ships for that row length W. Both forms are checked
against :func:`dnarch_deploy.spectral.resample`; the forms of a row are timed in turns in one
process.

    python -m benchmarks.axis_matmul            # every case
    python -m benchmarks.axis_matmul --quick    # fewer cases and repeats
"""

from __future__ import annotations

import numpy as np
import torch

from benchmarks import harness
from dnarch_deploy.progress import bar
from dnarch_deploy.spectral import resample, resample_matrix
from export.emit import to_onnx
from export.resampling import TRANSPOSE_ROWS_BELOW, AxisMatMul
from export.timing import measure, runner, session

# (n, size, W): down- and upsampling of square images from digits' 8x8 to 64x64, and the first
# axis of a tall image with short rows
CASES = [(8, 5, 8), (8, 8, 8), (5, 8, 8), (12, 7, 12), (16, 9, 16), (20, 11, 20),
         (28, 15, 28), (15, 28, 28), (64, 33, 64), (64, 33, 8)]
CHANNELS = 32
QUICK = [(8, 5, 8), (28, 15, 28)]


def timed(n, size, rows, batch, threads, repeats):
    """Median ms of the left and the transposed form on one case, timed in turns."""
    g = torch.Generator().manual_seed(n * 100 + size + rows)
    x = torch.randn(batch, CHANNELS, n, rows, generator=g, dtype=torch.float64)
    ref = resample(x, size, dim=-2).numpy()
    matrix = resample_matrix(n, size, None, dtype=torch.float64)
    runs = []
    for transposed in (False, True):
        module = AxisMatMul(matrix, -2, transposed)
        model = to_onnx(module, (x.float(),))
        sess = session(model, threads)
        feeds = {model.graph.input[0].name: x.float().numpy()}
        err = float(np.abs(sess.run(None, feeds)[0] - ref).max() / np.abs(ref).max())
        if err > 1e-5:
            raise AssertionError(f"transposed={transposed} {n}->{size}, W={rows}: error {err:.1e}")
        runs.append(runner(sess, feeds))
    return [m["median_ms"] for m in measure(runs, repeats=repeats)]


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    harness.add_onnxruntime(parser, repeats=60, quick="two cases, fewer repeats")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    batches = args.batches
    repeats = min(args.repeats, 20) if args.quick else args.repeats
    cases = [(*c, b) for c in (QUICK if args.quick else CASES) for b in batches]
    harness.print_header(
        __file__, harness.arguments(argv), harness.ORT,
        machine_note=f"; {args.threads} onnxruntime thread(s), {CHANNELS} channels, median of "
        f"{repeats} calls, the forms of a row in turns")
    rows = ["| n -> size | row length W | batch | left ms | transposed ms | left / transposed | "
            "shipped |", "|---|---|---|---|---|---|---|"]
    for n, size, w, b in bar(cases, desc="cases"):
        left, transposed = timed(n, size, w, b, args.threads, repeats)
        shipped = "transposed" if w < TRANSPOSE_ROWS_BELOW else "left"
        rows.append(f"| {n} -> {size} | {w} | {b} | {left:.4f} | {transposed:.4f} | "
                    f"{left / transposed:.2f} | {shipped} |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
