"""Why the default search trails a plain CNN on some sets: a ladder from the FCN toward the CCNN.

benchmarks.ucr_quality's FCN peer (Wang et al. 2017) is ahead of the default search on four bundled
sets, OSULeaf by 0.18. Each rung takes the rung above one step toward the CCNN the search trains (a
step may change several settings; the list says which), all with free weights (no kernel network,
no masks), all fitted exactly as the FCN peer is (`ucr_quality.fit_cnn`: train + val, batch 16,
cosine decay with no warm-up, last weights on test, BatchNorm's running statistics at test), each
fit in a process of its own with one thread:

- fcn: the peer itself (full convolutions of 8, 5 and 3 taps, conv-BN-ReLU, mean pooling, Adam
  at 1e-3, 64 / 128 / 64 channels);
- depthwise: the second and third convolutions made depthwise-separable (depthwise, then
  pointwise), as a CCNN's; the first stays full, as a CCNN's encoder lifts the input to many
  channels before its first kernel (depthwise on one input channel would be one filter);
- search optimiser: AdamW at the search's learning rate and weight decay (0.01, 0.01), and GELU
  for ReLU;
- ccnn blocks: the CCNN's encoder and residual block (pointwise, BatchNorm, GELU; then per
  block x + W2 GELU(W1 depthwise(BatchNorm(x)))) at the base CCNN's sizes, 4 blocks of 32
  channels (for 3 layers of 64 / 128 / 64), kernels of 9, 5, 3 and 9 taps;
- avg+max pool: the search's default decoder, each channel's mean and maximum;
- long kernels: the blocks' kernels a quarter of the input long (the search's found kernels are
  tens to hundreds of taps; the base CCNN's span the input).

Rungs that split a step of the ladder (each changes the rung `SPLITS` names):

- 32x4 stack: the depthwise conv-BN-GELU stack of "search optimiser" at the CCNN's sizes, 4
  layers of 32 channels with kernels of 9, 5, 3 and 9 taps (size and depth, not the block's form);
- norm after kernel: "ccnn blocks" with the BatchNorm moved from the block's input to the
  kernel's output, x + W2 GELU(W1 BatchNorm(depthwise(x))), as the FCN normalises each
  convolution's output;
- norm after mixing: x + W2 GELU(BatchNorm(W1 depthwise(x)));
- final gelu: the original CCNN block's second GELU (Knigge et al. 2023),
  x + GELU(W2 GELU(W1 depthwise(BatchNorm(x))));
- conv encoder: "norm after mixing" with the stack's first layer (a full convolution of 9 taps,
  BatchNorm, GELU) for the pointwise encoder and the first block, so the depth is the stack's;
- residual stack: "32x4 stack" with a skip around each layer after the first,
  x + GELU(BatchNorm(W1 depthwise(x))): the stack's layers as residual blocks, no second mixing;
- conv encoder, long / residual stack, long: the blocks' kernels a quarter of the input long, as
  "long kernels" does (the first layer keeps its 9 taps).

What no rung reaches: the search's validation hold-out and result rule, its warm-up, label
smoothing, shifts and jitter, and the kernel network and masks themselves.

    python -m benchmarks.cnn_ablation --tasks ucr:OSULeaf ucr:ArrowHead --seeds 2

Writes benchmarks/results/cnn_ablation.md (and prints it).
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace

from tqdm import tqdm

from benchmarks import harness
from benchmarks.harness import fmt
from benchmarks.ucr_quality import FCN_STEPS, cnn_data, fcn_net, fit_cnn


@dataclass(frozen=True)
class Rung:
    conv: str = "full"  # 'full' or 'depthwise' (depthwise-separable)
    block: str = "plain"  # 'plain' (conv-BN-act stack, the FCN's) or a residual block's form:
    #  'pre-norm' (the search's), 'kernel-norm', 'mix-norm', 'pre-norm+gelu', 'post-act'
    #  (see the docstring)
    stack: tuple[int, ...] = (1, 2, 1)  # the plain stack's widths, in multiples of `width`
    encoder: str = "pointwise"  # residual rungs: 'pointwise' (the CCNN's) or 'conv' (the stack's
    #  full first convolution of kernels[0] taps; the blocks then take kernels[1:])
    kernels: tuple[int, ...] = (8, 5, 3)  # taps per layer; 0: a quarter of the input
    width: int = 64
    pool: str = "avg"  # 'avg' or 'avgmax'
    act: str = "relu"
    lr: float = 1e-3
    weight_decay: float = 0.0


FCN = Rung()
DEPTHWISE = replace(FCN, conv="depthwise")
SEARCH_OPTIMISER = replace(DEPTHWISE, act="gelu", lr=1e-2, weight_decay=1e-2)
CCNN_BLOCKS = replace(SEARCH_OPTIMISER, block="pre-norm", kernels=(9, 5, 3, 9), width=32)
AVGMAX = replace(CCNN_BLOCKS, pool="avgmax")
LONG = replace(AVGMAX, kernels=(0, 0, 0, 0))
STACK_32X4 = replace(SEARCH_OPTIMISER, kernels=(9, 5, 3, 9), width=32, stack=(1, 1, 1, 1))
RUNGS = {"fcn": FCN, "depthwise": DEPTHWISE, "search optimiser": SEARCH_OPTIMISER,
         "ccnn blocks": CCNN_BLOCKS, "avg+max pool": AVGMAX, "long kernels": LONG,
         "32x4 stack": STACK_32X4,
         "norm after kernel": replace(CCNN_BLOCKS, block="kernel-norm"),
         "norm after mixing": replace(CCNN_BLOCKS, block="mix-norm"),
         "final gelu": replace(CCNN_BLOCKS, block="pre-norm+gelu"),
         "conv encoder": replace(CCNN_BLOCKS, block="mix-norm", encoder="conv"),
         "residual stack": replace(STACK_32X4, block="post-act", encoder="conv")}
# the blocks' kernels long, the conv encoder's first layer still 9 taps
RUNGS |= {"conv encoder, long": replace(RUNGS["conv encoder"], kernels=(9, 0, 0, 0)),
          "residual stack, long": replace(RUNGS["residual stack"], kernels=(9, 0, 0, 0))}
# the rungs that split a step of the ladder rather than extend it, and the rung each changes
SPLITS = {"32x4 stack": "search optimiser", "norm after kernel": "ccnn blocks",
          "norm after mixing": "ccnn blocks", "final gelu": "ccnn blocks",
          "conv encoder": "norm after mixing", "residual stack": "32x4 stack",
          "conv encoder, long": "conv encoder", "residual stack, long": "residual stack"}


def build(rung: Rung, in_channels: int, classes: int, length: int):
    """The rung's network, (B, in_channels, length) -> (B, classes)."""
    import torch
    from torch import nn

    if rung == FCN:  # the peer's own module, so this rung reproduces its column
        return fcn_net(in_channels, classes, rung.width)
    act = {"relu": nn.ReLU, "gelu": nn.GELU}[rung.act]
    taps = [k or length // 4 | 1 for k in rung.kernels]  # odd: a centred 'same' kernel

    def conv(a: int, b: int, k: int, first: bool) -> nn.Module:
        if rung.conv == "full" or first:  # a depthwise first layer: see the docstring
            return nn.Conv1d(a, b, k, padding="same")
        return nn.Sequential(nn.Conv1d(a, a, k, padding="same", groups=a), nn.Conv1d(a, b, 1))

    class Block(nn.Module):  # a residual block with a free depthwise kernel, in rung.block's form
        def __init__(self, width: int, k: int):
            super().__init__()
            self.norm = nn.BatchNorm1d(width)
            self.conv = nn.Conv1d(width, width, k, padding="same", groups=width)
            # (post-act leaves w2 unused: it gets no gradient, so AdamW neither moves nor decays it)
            self.w1, self.w2 = nn.Conv1d(width, width, 1), nn.Conv1d(width, width, 1)

        def forward(self, x):
            form = rung.block
            if form == "post-act":  # the stack's layer with a skip: no second mixing
                return x + act()(self.norm(self.w1(self.conv(x))))
            if form == "kernel-norm":
                z = self.w1(self.norm(self.conv(x)))
            elif form == "mix-norm":
                z = self.norm(self.w1(self.conv(x)))
            else:
                z = self.w1(self.conv(self.norm(x)))
            z = self.w2(act()(z))
            return x + (act()(z) if form == "pre-norm+gelu" else z)

    class Pool(nn.Module):
        def forward(self, x):
            return torch.cat([x.mean(-1), x.amax(-1)], 1) if rung.pool == "avgmax" \
                else x.mean(-1)

    w = rung.width
    if rung.block != "plain":
        if rung.encoder == "conv":
            body = [conv(in_channels, w, taps[0], first=True), nn.BatchNorm1d(w), act(),
                    *(Block(w, k) for k in taps[1:])]
        else:
            body = [nn.Conv1d(in_channels, w, 1, bias=False), nn.BatchNorm1d(w), act(),
                    *(Block(w, k) for k in taps)]
        out = w
    else:  # the FCN's stack: widths w, 2w, w
        body, channels = [], in_channels
        for i, (k, c) in enumerate(zip(taps, (m * w for m in rung.stack), strict=True)):
            body += [conv(channels, c, k, first=i == 0), nn.BatchNorm1d(c), act()]
            channels = c
        out = channels
    return nn.Sequential(*body, Pool(), nn.Linear(out * (2 if rung.pool == "avgmax" else 1),
                                                  classes))


def fit(name: str, task: str, seed: int, steps: int) -> tuple[float, float]:
    """(test accuracy, seconds) of one rung on one task and seed, in this process, one thread."""
    import torch

    torch.set_num_threads(1)
    data = cnn_data(task, seed)
    torch.manual_seed(seed)
    net = build(RUNGS[name], data.in_channels, data.classes, data.x.shape[-1])
    return fit_cnn(net, data, steps, seed, RUNGS[name].lr, RUNGS[name].weight_decay)


def parse(argv: list[str]):
    """The arguments; a wrong or 2-D task, a count below 1 or a report that cannot be written is
    one parser error before any fit."""
    parser = harness.parser(__doc__)
    parser.add_argument("--tasks", nargs="+", default=["ucr:OSULeaf", "ucr:ArrowHead"])
    parser.add_argument("--rungs", nargs="+", default=list(RUNGS), choices=list(RUNGS))
    harness.add_jobs(parser, seeds=2, what="fits")
    parser.add_argument("--steps", type=int, default=FCN_STEPS)
    harness.add_report(parser, __file__)
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.steps < 1 or args.jobs < 1:
        parser.error("--seeds, --steps and --jobs must be at least 1")
    from dnarch_deploy.tasks import TaskError, load_task

    for task in args.tasks:  # a wrong name or a 2-D task: one message before any fit
        try:
            if len(load_task(task, seed=0).x_train.shape) != 3:
                parser.error(f"{task}: the ladder is of 1-D networks; give a 1-D (series) task")
        except TaskError as e:
            parser.error(str(e))
    harness.check_report(parser, args.out)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = harness.arguments(argv)
    args = parse(argv)
    jobs = [(rung, task, seed) for task in args.tasks for rung in args.rungs
            for seed in range(args.seeds)]
    results, t0 = {}, time.time()
    spawn = multiprocessing.get_context("spawn")
    failed = []
    with ProcessPoolExecutor(args.jobs, mp_context=spawn) as pool, \
            tqdm(total=len(jobs), desc="fits", disable=bool(os.environ.get("CI"))) as bar:
        futures = {pool.submit(fit, *job, args.steps): job for job in jobs}
        for future in as_completed(futures):
            try:
                results[futures[future]] = future.result()
            except Exception as e:  # noqa: BLE001 - report every failure, keep the others
                failed.append(futures[future])
                print(f"FAILED {futures[future]}: {e}", file=sys.stderr)
            bar.update(1)
    harness.publish(report(args, results, time.time() - t0, argv), args.out)
    return 1 if failed else 0


def report(args, results: dict, seconds: float, argv: list[str] = ()) -> str:
    lines = ["| rung | " + " | ".join(args.tasks) + " | s/fit |",
             "|---|" + "---|" * (len(args.tasks) + 1)]
    for rung in args.rungs:
        cells = [fmt([results[(rung, t, s)][0] for s in range(args.seeds)
                      if (rung, t, s) in results]) for t in args.tasks]
        walls = [r[1] for (name, _, _), r in results.items() if name == rung]
        lines.append(f"| {rung} | " + " | ".join(cells)
                     + f" | {statistics.mean(walls) if walls else float('nan'):.0f} |")
    return "\n".join([
        "# From the FCN toward the CCNN, one step a rung",
        "",
        *harness.header(__file__, argv, machine_note=f", {args.jobs} fits at a time, 1 thread "
                        f"each; {seconds / 60:.0f} min wall",
                        versions_note=f"; code {harness.code_state()}"),
        f"Test accuracy, mean ± std over {args.seeds} seed(s); {args.steps} steps a fit on "
        "train + val. Each rung takes the one above it a step toward the CCNN, or splits the "
        "step of the rung `SPLITS` names (benchmarks/cnn_ablation.py's docstring says what "
        "each changes).",
        "",
        *lines,
    ]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
