"""Is a trained run limited by its features or by its head? Refit the head by ridge and see.

MiniRocket classifies its pooled features with a ridge classifier fitted on train + val. This takes
finished classification runs (any `search.run` output, e.g. `benchmarks.ucr_quality`'s ``--out``),
builds the network export ships (BatchNorm calibrated on the training inputs,
:func:`dnarch_deploy.calibration.calibrate`), reads the pooled features its linear head reads
(:meth:`DNArch.pooled`, which :meth:`DNArch.head` maps to the logits) on every split, and fits
sklearn's ``RidgeClassifierCV`` with the penalties of `benchmarks.ucr_quality`'s MiniRocket (chosen
by leave-one-out) on the standardised features of the training split, then of train + val. Per run:
test accuracy of the trained head, recomputed as shipped (summary.json's figure for runs scored as
shipped), and of both refits; per set, mean ± std over the runs. A refit on the training split that
lifts accuracy says the features held more than the trained head used; on train + val the refit
also has the 20 % more series the search held out. A refit that ties says this linear head, at
least, finds no more in the features. A refit head is a linear map on the same features, so export
could ship it exactly; this script only measures. With ``--blocks every`` the refits read every
block's output, each pooled as the head pools the last, concatenated: do the earlier blocks hold
what the last one lost? (The trained head's column is unchanged.)

    python -m benchmarks.ridge_head RUN_DIR [RUN_DIR ...] [--blocks every] --results FILE
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import harness
from benchmarks.harness import fmt
from benchmarks.ucr_quality import RIDGE_PENALTIES
from dnarch_deploy import rundir as R
from dnarch_deploy.tasks import TaskError


@torch.no_grad()
def pooled_features(model, x: torch.Tensor, every_block: bool = False
                    ) -> tuple[np.ndarray, torch.Tensor]:
    """The features the refits read and the trained head's logits. The features are the pooled
    ones the head reads, (N, reductions x stream), or with ``every_block`` each block's output
    pooled the same way, in block order, (N, blocks x reductions x stream): the last block's
    are the trunk's output, so they end the row."""
    outputs: list[torch.Tensor] = []
    hooks = [b.register_forward_hook(lambda _m, _i, out: outputs.append(out))
             for b in (model.blocks if every_block else [])]
    try:
        pooled = model.pooled(model.trunk(x, model.plan()))
    finally:
        for hook in hooks:
            hook.remove()
    features = [r for h in outputs for r in model.pooled(h)] if every_block else pooled
    return torch.cat(features, dim=1).numpy(), model.head(pooled)


def ridge_accuracy(x_fit, y_fit, x_test, y_test) -> float:
    from sklearn.linear_model import RidgeClassifierCV
    from sklearn.preprocessing import StandardScaler

    scale = StandardScaler().fit(x_fit)
    clf = RidgeClassifierCV(alphas=np.logspace(*RIDGE_PENALTIES)).fit(scale.transform(x_fit), y_fit)
    return float(clf.score(scale.transform(x_test), y_test))


def load_classification_run(run_dir: Path, allow_data_change: bool = False) -> R.Run:
    """A finished classification run and its data (as trained on, unless allowed otherwise), or
    RunError / TaskError."""
    run_dir = R.check_run_dir(run_dir)
    if not (run_dir / R.SUMMARY).is_file():
        raise R.RunError(f"{run_dir}: no summary.json (the run has not finished)")
    run = R.load_run(run_dir)
    if run.task.kind != "classification" or run.model.config.dense:
        raise R.RunError(f"{run_dir}: not a classification run (task {run.config['task']})")
    if not allow_data_change:
        R.check_data(run_dir, run.config, run.task, "--allow-data-change")
    return run


def refit(run: R.Run, every_block: bool = False) -> dict:
    """One run's shipped and ridge test accuracies (module doc)."""
    from dnarch_deploy.calibration import calibrate, task_batches
    from search.train import split_tensors

    model = calibrate(copy.deepcopy(run.model), task_batches(run.task.x_train),
                      show_progress=False)
    splits = {}
    for split in ("train", "val", "test"):
        data = split_tensors(run.task, split)
        features, logits = pooled_features(model, data.x, every_block)  # logits: DNArch.run's
        splits[split] = (features, data.y.numpy(), logits.argmax(1).numpy())
    (x_tr, y_tr, _), (x_va, y_va, _), (x_te, y_te, shipped) = splits.values()
    return {"name": run.path.name, "set": run.config["task"],
            "shipped": float((shipped == y_te).mean()),
            "train": ridge_accuracy(x_tr, y_tr, x_te, y_te),
            "train_val": ridge_accuracy(np.concatenate([x_tr, x_va]),
                                        np.concatenate([y_tr, y_va]), x_te, y_te)}


def report(rows: list[dict], seconds: float, every_block: bool = False,
           argv: list[str] = ()) -> str:
    lines = [
        "# The head refit by ridge on the shipped network's pooled features",
        "",
        *harness.header(__file__, argv, ("torch", "scikit-learn"),
                        versions_note=f"; {seconds:.0f} s wall"),
        "Test accuracy, mean ± std over the runs of each set: the trained head, as shipped, and "
        "`RidgeClassifierCV` (MiniRocket's penalties) on the standardised pooled features "
        + ("of every block's output, concatenated, " if every_block else "")
        + "of the training split, then of train + val.",
        "",
        "| set | runs | trained head | ridge, train | ridge, train + val |",
        "|---|---|---|---|---|",
    ]
    by_set: dict[str, list[dict]] = {}
    for row in rows:
        by_set.setdefault(row["set"], []).append(row)
    for name, group in by_set.items():
        lines.append(f"| {name} | {len(group)} | "
                     + " | ".join(fmt([r[k] for r in group])
                                  for k in ("shipped", "train", "train_val")) + " |")
    lines += ["", "| run | set | trained head | ridge, train | ridge, train + val |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['set']} | {r['shipped']:.3f} | {r['train']:.3f} | "
              f"{r['train_val']:.3f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    harness.add_report(p, flag="--results")
    p.add_argument("--allow-data-change", action="store_true",
                   help="refit runs whose task data changed since they were trained")
    p.add_argument("--blocks", choices=("last", "every"), default="last",
                   help="the refits read the pooled output of the last block (what the head "
                        "reads, the default) or of every block, concatenated")
    args = p.parse_args(argv)
    start = time.time()
    try:  # every run and its data loaded before any refit: bad input is one line
        runs = [load_classification_run(d, args.allow_data_change) for d in args.run_dirs]
    except (R.RunError, TaskError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    every_block = args.blocks == "every"
    text = report([refit(run, every_block) for run in runs], time.time() - start, every_block,
                  harness.arguments(argv))
    harness.publish(text, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
