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

    python benchmarks/channel_padding.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import copy
import shlex
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import torch

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from export_speed import machine, ort_ms  # noqa: E402

from dnarch_deploy import calibration  # noqa: E402
from dnarch_deploy.rundir import RunError, load_run  # noqa: E402
from export.bench import theoretical_costs  # noqa: E402
from export.emit import to_onnx  # noqa: E402
from export.lowering import lower  # noqa: E402
from export.policy import cheapest, tactic_costs  # noqa: E402
from export.static import StaticNet, freeze, materialize  # noqa: E402
from export.timing import batch_sizes, progress, session  # noqa: E402


def padding_around_the_conv(lowered: StaticNet) -> StaticNet:
    """``lowered`` with each direct convolution padding and trimming its own channels (a Pad
    before it, a Slice after it), as export lowered it before StaticBlock.read_wider."""
    plain = copy.deepcopy(lowered)
    for block in plain.blocks:
        if block.tactic == "direct":
            block.conv.trim, block.read, block.w1 = True, block.n_in, block.w1[:, : block.n_in]
    return plain


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories (python -m search.run --out)")
    parser.add_argument("--batch", type=batch_sizes, default=(1, 32),
                        help="batch sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per form")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads")
    opt = parser.parse_args(argv)
    try:
        nets = [by_cost(run) for run in opt.runs]
    except RunError as e:
        parser.exit(2, f"error: {e}\n")
    print(f"$ {shlex.join(['python', 'benchmarks/channel_padding.py', *(argv or sys.argv[1:])])}")
    print(f"machine: {machine()}; torch {torch.__version__}, onnxruntime "
          f"{onnxruntime.__version__}; {opt.threads} onnxruntime thread(s), median of "
          f"{opt.repeats} calls, the two forms of a row in turns\n")
    print("| run | blocks padded | nodes (stream / Pad+Slice) | MMAC (stream / Pad+Slice) | "
          "batch | ms from the stream | ms with Pad+Slice | stream / Pad+Slice |")
    print("|---|---|---|---|---|---|---|---|")
    for run, (shipped, example) in progress(list(zip(opt.runs, nets)), desc="runs"):
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
