"""A direct convolution's zero channels: from the stream, or padded around the Conv?

onnxruntime's fast depthwise kernel wants a multiple of 4 channels, so export's direct tactic
runs n_in channels at the next multiple C' with zero filters (export.tactics.DirectConv). Export
now takes the C' - n_in extra inputs from the stream (the block reads C' of its channels, or all
it has) and lets linear1's zero columns meet the extra outputs (StaticBlock.read_wider); before,
a Pad in front of the Conv and a Slice after it did it. The first costs a few more MACs (the
down-sampling and linear1 on C' channels), the second two more nodes per block, about a
microsecond each at batch 1 (onnxruntime's per-node cost). Per run directory this script lowers
the trained network as export does by cost (``--no-tune``), builds both forms, checks they give
the same outputs and times them in turns in onnxruntime.

    python -m benchmarks.channel_padding RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from benchmarks import harness
from benchmarks.export_speed import ort_ms
from dnarch_deploy import calibration
from dnarch_deploy.progress import bar
from dnarch_deploy.rundir import RunError, load_run
from export.bench import theoretical_costs
from export.emit import to_onnx
from export.lowering import cheapest, lower, padding_around_the_conv, tactic_costs
from export.static import StaticNet, freeze, materialize
from export.timing import session


def by_cost(run_dir: str) -> tuple[StaticNet, torch.Tensor]:
    """The run's network lowered as ``python -m export.onnx --no-tune`` lowers it, and a few
    test inputs."""
    run = load_run(run_dir)
    calibration.calibrate(run.model, calibration.task_batches(run.task.x_train),
                          show_progress=False)
    static = materialize(run.model, freeze(run.model))
    return lower(static, cheapest(tactic_costs(static))), torch.as_tensor(run.task.x_test[:2])


def total_macs(net: StaticNet) -> float:
    return sum(layer["theoretical"] for layer in theoretical_costs(net).values())


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("runs", nargs="+", help="run directories (python -m search.run --out)")
    harness.add_onnxruntime(parser, repeats=200, batch_flag="--batch")
    opt = parser.parse_args(argv)
    try:
        nets = [by_cost(run) for run in opt.runs]
    except RunError as e:
        parser.exit(2, f"error: {e}\n")
    harness.print_header(
        __file__, harness.arguments(argv), harness.ORT,
        machine_note=f"; {opt.threads} onnxruntime thread(s), median of {opt.repeats} calls, "
        "the two forms of a row in turns")
    print("| run | blocks padded | nodes (stream / Pad+Slice) | MMAC (stream / Pad+Slice) | "
          "batch | ms from the stream | ms with Pad+Slice | stream / Pad+Slice |")
    print("|---|---|---|---|---|---|---|---|")
    for run, (shipped, example) in bar(list(zip(opt.runs, nets)), desc="runs"):
        forms = [shipped, padding_around_the_conv(shipped)]
        graphs = [to_onnx(net, (example,)) for net in forms]
        outs = [session(g).run(None, {g.graph.input[0].name: example.numpy()})[0]
                for g in graphs]
        gap = float(np.abs(outs[0] - outs[1]).max())
        if gap > 1e-5 * float(np.abs(outs[1]).max()):
            raise SystemExit(f"{run}: the two forms differ by {gap}")
        padded = sum(not getattr(b.conv, "trim", True) for b in shipped.blocks)  # read_wider
        nodes = "/".join(str(len(g.graph.node)) for g in graphs)
        macs = "/".join(f"{total_macs(net) / 1e6:.3f}" for net in forms)
        for b in opt.batch:
            x = example[:1].expand(b, *example.shape[1:]).contiguous()
            ms = ort_ms(graphs, [x, x], opt.threads, opt.repeats)
            print(f"| {run} | {padded} of {len(shipped.blocks)} | {nodes} | {macs} | {b} | "
                  f"{ms[0]:.4f} | {ms[1]:.4f} | {ms[0] / ms[1]:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
