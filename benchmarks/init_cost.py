"""Where a search starts: the deployed cost of DNArch's initial network over the base CCNN's, per
input shape.

At initialisation the masks give the base's depth, widths and kernels at full resolution, but with
R learned every block filters its convolution's spectrum with the resolution mask, and export
folds that into a longer kernel ("The model" in README). So the initial network may cost more or
less than the base (``dnarch_deploy.cost.model_cost`` over ``base_cost``, in the MACs export
ships). At budget 1 a search that starts above 1 must shrink before it fits; one that starts below
is free to grow.

The second table asks what cropping costs: every block of the initial network cropped to the same
resolution, over the uncropped initial network. A crop adds a spectral down- and up-sampling per
block, so a small crop costs more than it saves; the table gives the cost at the first cropped
resolution, at about 1/2 and 1/4 of the input, and the largest resolution at which cropping every
block costs less than not cropping (a search pulled towards C_target from below has no reason to
cross that wall).

    python -m benchmarks.init_cost                          # the benchmarks' task shapes
    python -m benchmarks.init_cost --shapes 150,29x29 --learn KR
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks import harness
from benchmarks.latency_prediction import shape
from dnarch_deploy import DNArch, ModelConfig, base_cost, model_cost
from dnarch_deploy import masks as M

# GunPoint, ArrowHead, OSULeaf, ListOps (200 tokens), smnist, PLAID, ACSF1; Darcy, MNIST 14x14 and
# 28x28 (search_quality.py, ucr_quality.py)
SHAPES = "150,251,427,200,784,1344,1460,29x29,14x14,28x28"


def shapes(text: str) -> list[tuple[int, ...]]:
    """argparse type: comma-separated lengths or HxW images, at least one."""
    values = [shape(v) for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} names no shape, e.g. 150,29x29")
    return values


def initial_model(size: tuple[int, ...], depth: int, width: int, learn: str) -> DNArch:
    return DNArch(ModelConfig(in_channels=1, out_channels=10, input_size=size, depth=depth,
                              width=width, learn=learn))


@torch.no_grad()
def init_ratio(size: tuple[int, ...], depth: int, width: int, learn: str) -> float:
    """model_cost of the initial DNArch over base_cost of CCNN_{depth,width}, at ``size``."""
    model = initial_model(size, depth, width, learn)
    return float(model_cost(model)["total"]) / base_cost(model.config)


@torch.no_grad()
def crop_costs(size: tuple[int, ...], depth: int, width: int, learn: str, steps: int = 400
               ) -> dict[tuple[int, ...], float]:
    """Every block's resolution mask set alike, from its initial offset to its least: each
    resolution reached (the first block's), and the network's model_cost there over the
    uncropped initial network's."""
    model = initial_model(size, depth, width, learn)
    full = float(model_cost(model)["total"])
    lo, hi = M.sigmoid_mu_range(model.config.tau_resolution)
    costs = {}
    for i in range(steps):
        model.mask_res.fill_(hi - (hi - lo) * i / (steps - 1))
        plan = model.plan()
        resolution = tuple(plan.blocks[0].resolution)
        costs.setdefault(resolution, float(model_cost(model, plan)["total"]) / full)
    return costs


def crop_row(size: tuple[int, ...], costs: dict[tuple[int, ...], float]) -> str:
    """A markdown row: the first crop, about 1/2 and 1/4 of the input, the largest that pays."""
    def show(r):
        return f"{'x'.join(map(str, r))}: {costs[r]:.2f}" if r else "–"

    def near(share):
        cropped = [r for r in costs if r != size]
        r = min(cropped, key=lambda r: abs(r[0] / size[0] - share), default=None)
        return r if r and abs(r[0] / size[0] - share) < 0.1 else None

    first = next((r for r in costs if r != size), None)
    pays = [r for r, c in costs.items() if r != size and c < 1.0]
    largest = max(pays, key=lambda r: r[0]) if pays else None
    share = f" ({largest[0] / size[0]:.2f} of the input)" if largest else ""
    return (f"| {'x'.join(map(str, size))} | {show(first)} | {show(near(0.5))} | "
            f"{show(near(0.25))} | {show(largest)}{share} |")


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--shapes", type=shapes, default=SHAPES,
                   help="lengths or HxW images, comma-separated")
    p.add_argument("--depth", type=int, default=4, help="D of the base CCNN_{D,H}")
    p.add_argument("--width", type=int, default=32, help="H of the base CCNN_{D,H}")
    p.add_argument("--learn", default="KRWD", help="what the search learns (search.run --learn)")
    args = p.parse_args(argv)
    harness.print_header(__file__, harness.arguments(argv),
                         versions_note=f"; code {harness.code_state()}")
    print(f"DNArch --learn {args.learn} at initialisation over the base "
          f"CCNN_{{{args.depth},{args.width}}}, deployed MACs\n")
    print("| input | initial cost / base |\n|---|---|")
    for size in args.shapes:
        ratio = init_ratio(size, args.depth, args.width, args.learn)
        print(f"| {'x'.join(map(str, size))} | {ratio:.3f} |", flush=True)
    if "R" in args.learn:
        print("\nEvery block cropped to the same resolution: cost over the uncropped initial "
              "network (resolution: ratio)\n")
        print("| input | first crop | about 1/2 | about 1/4 | largest crop that costs less |\n"
              "|---|---|---|---|---|")
        for size in args.shapes:
            print(crop_row(size, crop_costs(size, args.depth, args.width, args.learn)),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
