"""The training model's 1x1 convolutions in two forms, side by side in one run.

``matmul``: ``torch.matmul(weight, x.flatten(2))``, an (out, C) @ (B, C, P) product (the form
before 4ba727c). ``bmm``: ``torch.bmm`` with the weight expanded over the batch, no copy
(:func:`dnarch_deploy.model._pointwise`). When the weight takes a gradient (training),
torch.matmul folds the batch into one product and copies x transposed to do it.

Per shape: one layer's forward and forward + backward. Then whole training steps of the default
search's model (``python -m search.run`` on ucr:GunPoint, and on ucr:ACSF1's 1460 samples:
forward, task loss + lambda L_comp, backward, as ``benchmarks.model_step`` times them) with one
form or the other swapped in. Forms take turns (:func:`export.timing.measure`); medians.

    python -m benchmarks.pointwise_forms          # writes benchmarks/results/pointwise_forms.md
    python -m benchmarks.pointwise_forms --quick  # a fast sanity run (nothing written)
"""

from __future__ import annotations

import functools
import math
import os

import torch

import dnarch_deploy.model as model_module
from benchmarks import harness
from benchmarks.model_step import make_step
from dnarch_deploy import DNArch
from export.timing import measure
from search.config import SearchConfig
from search.resolve import model_config
from search.tasks import TaskError, load_task
from search.train import flush_denormals, split_tensors

SHAPES = [  # (batch, in, out, positions): GunPoint, a longer sequence, a 28x28 image
    (32, 32, 32, 150), (32, 64, 64, 150), (32, 32, 32, 1460), (32, 32, 32, 784),
]


def matmul_form(x, weight, bias=None):
    y = torch.matmul(weight, x.flatten(2))
    if bias is not None:
        y = y + bias[:, None]
    return y.view(x.shape[0], weight.shape[0], *x.shape[2:])


FORMS = {"matmul": matmul_form, "bmm": model_module._pointwise}


def medians(calls: dict, reps: int) -> dict[str, float]:
    """Median ms of each callable, the callables taking turns (:func:`export.timing.measure`)."""
    timed = measure(list(calls.values()), repeats=reps, rounds=min(4, reps))
    return {name: t["median_ms"] for name, t in zip(calls, timed)}


def layer_rows(reps: int, shapes) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(0)
    for b, c, o, p in shapes:
        args = (torch.randn(b, c, p, generator=g, requires_grad=True),
                torch.randn(o, c, generator=g, requires_grad=True),
                torch.randn(o, generator=g, requires_grad=True))
        grad = torch.randn(b, o, p, generator=g)
        with torch.no_grad():
            diff = float((FORMS["bmm"](*args) - FORMS["matmul"](*args)).abs().max())
        fwd = medians({n: functools.partial(f, *args) for n, f in FORMS.items()}, reps)
        step = medians({n: functools.partial(_forward_backward, f, args, grad)
                        for n, f in FORMS.items()}, reps)
        rows.append({"shape": f"({o}, {c}) @ ({b}, {c}, {p})", "diff": diff,
                     **{f"fwd {n}": v for n, v in fwd.items()},
                     **{f"step {n}": v for n, v in step.items()}})
    return rows


def _forward_backward(form, args, grad) -> None:
    for a in args:
        a.grad = None
    form(*args).backward(grad)


def model_row(reps: int, task_name: str = "ucr:GunPoint", task=None) -> dict:
    """The default search's model on ``task_name`` (``task``: it, already loaded) at
    initialisation, whole training steps."""
    cfg = SearchConfig(task=task_name)
    task = task or load_task(cfg.task, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    model = DNArch(model_config(cfg, task)).train()
    train = split_tensors(task, "train", torch.device("cpu"))
    step = make_step(model, train.x[: cfg.batch_size], train.y[: cfg.batch_size], cfg.lam)

    def with_form(form):
        def call():
            model_module._pointwise = form
            step()
        return call

    own = model_module._pointwise
    try:
        times = medians({n: with_form(f) for n, f in FORMS.items()}, reps)
    finally:
        model_module._pointwise = own
    length = "x".join(map(str, task.spatial))
    return {"shape": f"training step, the default {task_name} model at init (L={length})",
            "diff": float("nan"),
            **{f"step {n}": v for n, v in times.items()}}


def report(rows: list[dict], argv: list[str], threads: int, reps: int) -> str:
    lines = [
        "# The training model's 1x1 convolutions: torch.matmul against bmm with an expanded "
        "weight", "",
        *harness.header(__file__, argv, machine_note=f", torch threads {threads}, load average "
                        f"{os.getloadavg()[0]:.1f} at the end"),
        f"Forms take turns in bursts (export.timing.measure); median ms of {reps} "
        "repetitions. step = forward + backward. "
        "diff: the largest absolute difference between the two forms' outputs.", "",
        "| operands | fwd matmul | fwd bmm | fwd bmm / matmul | step matmul | step bmm "
        "| step bmm / matmul | diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fwd = (f"{r['fwd matmul']:.3f} | {r['fwd bmm']:.3f} | "
               f"{r['fwd bmm'] / r['fwd matmul']:.2f}") if "fwd bmm" in r else "- | - | -"
        diff = "-" if math.isnan(r["diff"]) else f"{r['diff']:.1e}"
        lines.append(f"| {r['shape']} | {fwd} | {r['step matmul']:.3f} | {r['step bmm']:.3f} | "
                     f"{r['step bmm'] / r['step matmul']:.2f} | {diff} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = harness.arguments(argv)
    parser = harness.parser(__doc__)
    parser.add_argument("--reps", type=int, default=41, help="timed repetitions per form")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    parser.add_argument("--quick", action="store_true", help="one shape, 3 repetitions, "
                        "nothing written")
    parser.add_argument("--tasks", default="ucr:GunPoint,ucr:ACSF1",
                        help="whose default search's training step to time, comma-separated "
                        "(--quick: ucr:GunPoint)")
    harness.add_report(parser, __file__)
    args = parser.parse_args(argv)
    if args.reps < 1 or args.threads < 0:
        parser.error(f"--reps must be >= 1 and --threads >= 0, got {args.reps}, {args.threads}")
    if not args.quick:
        harness.check_report(parser, args.out, make_folder=False)
    tasks = {}  # loaded before any timing: an unknown task is one message
    for name in ["ucr:GunPoint"] if args.quick else [t for t in args.tasks.split(",") if t]:
        try:
            tasks[name] = load_task(name, seed=SearchConfig().seed)
        except TaskError as e:
            parser.error(f"--tasks: {e}")
    if args.threads:
        torch.set_num_threads(args.threads)
    flush_denormals()
    reps = 3 if args.quick else args.reps
    rows = layer_rows(reps, SHAPES[:1] if args.quick else SHAPES)
    rows.extend(model_row(reps, name, task) for name, task in tasks.items())
    harness.publish(report(rows, argv, torch.get_num_threads(), reps),
                    None if args.quick else args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
