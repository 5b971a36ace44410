"""Does the cost model predict the exported network's measured latency?

`--cost latency` prices a network as the sum of its lowered operators' milliseconds from the
per-operator latency table (dnarch_deploy.latency). A budget is a ratio to the base network, so
what must hold is that predicted ratios are measured ratios. Per input shape, this script draws
random DNArch architectures (depth, widths, resolution and kernel per block), exports each as
``python -m export.onnx --no-tune`` lowers it (the lowering the cost model prices), and measures
them in onnxruntime beside the base CCNN_{4,32} of that shape, all in turns in one session per
batch. It reports, per shape and batch, predicted/measured milliseconds (the table's absolute
error) and the ratio to the base, predicted against measured (what a budget relies on); then,
per sequence length, the one convolution the random networks rarely have, timed alone: a
full-resolution block's kernel with its resolution mask folded in; last, a direct convolution
alone at 16-36 channels, which onnxruntime runs on whole blocks of channels (the table's
``channel_block``).

    python -m benchmarks.latency_prediction --networks 8
    python -m benchmarks.latency_prediction --table /path/to/table.json --shapes 150 8x8

A `--table` that cannot be read is an error (it is the table to judge); without one, the table
`--cost latency` would use.

Weights are random and BatchNorm is calibrated on random inputs: latency does not depend on them.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

import torch

from benchmarks import harness
from dnarch_deploy import DNArch, ModelConfig
from dnarch_deploy import masks as M
from dnarch_deploy.cost import Units, architecture_cost
from dnarch_deploy.latency import LatencyTable, load_table
from dnarch_deploy.operators import conv_by_cost
from dnarch_deploy.progress import bar
from export.base_latency import calibrated, untrained_export
from export.emit import to_onnx
from export.latency_table import (
    Case,
    block_probe_cases,
    build,
    folded_kernel,
    macs,
    point_shape,
)
from export.timing import measure, runner, session

DEFAULT_SHAPES = ("150", "512", "8x8", "16x16", "28x28")


def shape(text: str) -> tuple[int, ...]:
    try:
        size = tuple(int(s) for s in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is LENGTH or HxW, got {text!r}") from None
    if not 1 <= len(size) <= 2 or min(size) < 4:
        raise argparse.ArgumentTypeError(f"a shape is 1-D or 2-D, each side >= 4, got {text!r}")
    return size


def random_state(model: DNArch, rng: torch.Generator) -> None:
    """Masks describing a random architecture inside the search space: depth 1..max, widths
    1/8..1 of the maximum, resolution 1/4..1 of the input per axis, kernels 1/16..1."""
    c = model.config
    H, D, T = c.max_width, c.max_depth, c.threshold

    def u(lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(torch.rand((), generator=rng))

    with torch.no_grad():
        depth = int(torch.randint(1, D + 1, (), generator=rng))
        # a size just under `depth`: the last block's weight 0.9, not on a rounding edge
        model.mask_depth.fill_(M.sigmoid_mu_for_size(depth - 0.1, c.tau_depth, D, T))
        for b in range(D):
            for i in range(3):
                model.mask_width[b, i] = M.sigmoid_mu_for_size(u(H / 8, H), c.tau_width, H, T)
            for a in range(model.mask_res.shape[1]):
                model.mask_res[b, a] = M.sigmoid_mu_for_size(u(0.25, 1.0), c.tau_resolution, 1, T)
                model.mask_sigma[b, a] = (u(1 / 16, 1.0) * M.INSIDE
                                          / math.sqrt(-2 * math.log(T)))
    model.clamp_masks_()


def network(size: tuple[int, ...], learn: str, rng: torch.Generator | None) -> DNArch:
    model = DNArch(ModelConfig(in_channels=1, out_channels=10, input_size=size, depth=4,
                               width=32, learn=learn))
    if rng is not None:
        random_state(model, rng)
    return calibrated(model)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--shapes", nargs="+", type=shape, default=[shape(s) for s in DEFAULT_SHAPES])
    p.add_argument("--networks", type=int, default=8, help="random networks per shape")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--table", default=None, help="a latency table file (default: as --cost "
                   "latency finds it: this machine's cache, else the bundled one)")
    p.add_argument("--compare", nargs="+", default=[], metavar="TABLE",
                   help="other latency table files whose ratio error on the same measurements "
                   "is shown beside the table's (an A/B of two tables without timing twice)")
    opt = p.parse_args(argv)
    if opt.networks < 1 or min(opt.batch) < 1 or opt.threads < 1:
        p.error("--networks, --batch and --threads must be >= 1")
    if opt.table is None:
        table = load_table(threads=opt.threads)
    else:  # the table asked to be judged, or nothing (no fall-back to another)
        try:
            table = LatencyTable.load(opt.table)
        except (OSError, ValueError) as e:
            p.error(f"--table {opt.table}: {e}")
    others = []
    for path in opt.compare:
        try:
            others.append(LatencyTable.load(path))
        except (OSError, ValueError) as e:
            p.error(f"--compare {path}: {e}")
    torch.set_num_threads(opt.threads)
    rng = torch.Generator().manual_seed(opt.seed)

    harness.print_header(
        __file__, harness.arguments(argv), harness.ORT,
        machine_note=f", {torch.get_num_threads()} torch thread(s), {opt.threads} onnxruntime "
        "thread(s)", versions_note=f"; table: {table.header.get('command', '?')} "
        f"({table.header.get('date', '?')})")
    print("Per shape: the base CCNN_{4,32} and random DNArch networks, exported --no-tune, timed "
          "in turns (median ms). pred/meas: the table's milliseconds over the measured ones; "
          "ratio error: (predicted ms / predicted base ms) / (measured ms / measured base ms), "
          "1 when the cost model ranks the network against the base exactly. A search with "
          "--cost latency divides by the base's measured ms (export.base_latency), so its "
          "ratio error is a network's own pred/meas.\n")
    compared = "".join(f" ratio error with {path} |" for path in opt.compare)
    print("| shape | batch | base ms measured | base pred/meas | networks' pred/meas "
          f"(median, range) | ratio error (median, range) | measured ratio to base (range) |"
          f"{compared}")
    print("|---|---|---|---|---|---|---|" + "---|" * len(opt.compare))
    shown = bar(None, total=len(opt.shapes) * (opt.networks + 1))
    for size in opt.shapes:
        models = [network(size, "none", None)]
        models += [network(size, "KRWD", rng) for _ in range(opt.networks)]
        graphs, archs = [], []
        for m in models:
            g, a = untrained_export(m)
            graphs.append(g)
            archs.append(a)
            shown.update()
        for b in opt.batch:
            x = torch.randn(b, 1, *size).numpy()
            fns = [runner(session(g, opt.threads), {g.graph.input[0].name: x}) for g in graphs]
            meas = [r["median_ms"] for r in measure(fns, opt.repeats)]
            pred = predicted(archs, table, b)
            err = [p_ / m_ for p_, m_ in zip(pred, meas)]
            rel = [m_ / meas[0] for m_ in meas[1:]]
            label = "x".join(map(str, size))
            others_errors = "".join(f" {ratio_error(predicted(archs, t, b), meas)} |"
                                    for t in others)
            shown.write(
                f"| {label} | {b} | {meas[0]:.4f} | {err[0]:.2f} | {statistics.median(err[1:]):.2f}"
                f" ({min(err[1:]):.2f}-{max(err[1:]):.2f}) | "
                f"{ratio_error(pred, meas)} | {min(rel):.2f}-{max(rel):.2f} |"
                f"{others_errors}")
    shown.close()
    folded_table(opt, table)
    channel_table(opt, table)
    return 0


def predicted(archs: list, table: LatencyTable, batch: int) -> list[float]:
    return [float(architecture_cost(a, Units(table, batch))) for a in archs]


def ratio_error(pred: list[float], meas: list[float]) -> str:
    """Median (range) over the networks (all but the first, the base) of (predicted ms /
    predicted base ms) / (measured ms / measured base ms)."""
    ratio = [(p_ / pred[0]) / (m_ / meas[0]) for p_, m_ in zip(pred[1:], meas[1:])]
    return f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})"


def folded_table(opt: argparse.Namespace, table: LatencyTable) -> None:
    """The one convolution random networks rarely have, alone: a full-resolution block's kernel
    with its resolution mask folded in (2 S - 1 taps, circular at the training's FFT length), 32
    channels, lowered as export --no-tune lowers it, per sequence length of --shapes."""
    lengths = [s for s in opt.shapes if len(s) == 1]
    if not lengths:
        return
    print("\nThe folded kernel of a full-resolution block with R learned, alone (32 channels, "
          "the tactic by cost; predicted: the table's ms plus its fixed cost of a call):\n")
    print("| length | circular at | tactic | batch | measured ms | predicted ms | pred/meas |")
    print("|---|---|---|---|---|---|---|")
    for size in lengths:
        taps, period = folded_kernel(size)
        tactic = conv_by_cost(32, size, taps, period)
        case = Case(f"conv.{tactic}", 32, size, taps=taps, period=period)
        for b, (meas, pred) in zip(opt.batch, alone(case, opt, table)):
            print(f"| {size[0]} | {period[0]} | {tactic} | {b} | {meas:.4f} | {pred:.4f} | "
                  f"{pred / meas:.2f} |")


def channel_table(opt: argparse.Namespace, table: LatencyTable) -> None:
    """The direct convolution export.latency_table.channel_block times, alone at each of its
    channel counts: onnxruntime runs it on whole blocks of channels, which the table prices
    (its header's channel_block)."""
    cases = block_probe_cases()
    print(f"\nA direct convolution alone by channel count ({cases[0].taps[0]} taps on "
          f"{cases[0].size[0]} samples; the table's channel block: {table.channel_block}; "
          "time and prediction over the 32-channel one's):\n")
    print("| channels | batch | measured ms | measured / 32 channels' | predicted / 32 channels' |")
    print("|---|---|---|---|---|")
    by_case = [alone(c, opt, table) for c in cases]  # per case, per batch
    for i, b in enumerate(opt.batch):
        timed = [per_batch[i] for per_batch in by_case]
        ref = next(t for c, t in zip(cases, timed) if c.channels == 32)
        for c, (meas, pred) in zip(cases, timed):
            print(f"| {c.channels} | {b} | {meas:.4f} | {meas / ref[0]:.2f} | "
                  f"{pred / ref[1]:.2f} |")


def alone(case: Case, opt: argparse.Namespace, table: LatencyTable) -> list[tuple[float, float]]:
    """(measured, predicted) ms of ``case`` alone in one session, at each of --batch (one
    export for all); the prediction is the table's plus its fixed cost of a call."""
    graph = to_onnx(build(case).eval(), (torch.randn(2, case.channels, *case.size),))
    sess = session(graph, opt.threads)
    timed = []
    for batch in opt.batch:
        x = torch.randn(batch, case.channels, *case.size).numpy()
        meas = measure([runner(sess, {graph.graph.input[0].name: x})], opt.repeats)[0]["median_ms"]
        pred = table.predict_ms(case.kind, macs(case), batch, len(case.size), None,
                                point_shape(case))
        timed.append((meas, pred + table.overhead(batch)))
    return timed


if __name__ == "__main__":
    sys.exit(main())
