"""`python -m search.rescore RUN_DIR ...`: score a finished run's result as export ships it.

Runs written before summary.json's test metric was the shipped network's (BatchNorm calibrated on
the training inputs, :func:`search.train.evaluate_shipped`) scored it with BatchNorm on each test
batch's own statistics; their summary reads with ``scored_as_shipped`` false
(:func:`dnarch_deploy.migrate.summary_v1`). This is the one migration that is not applied on read:
it needs the run's weights, its data and torch, which readers of records (the dashboard, export's
inference) do not load. It rescores such a run from its result's weights and rewrites summary.json
and metrics.jsonl's test row (each atomically): the shipped figures as ``test_metric`` /
``test_loss``, the old ones as ``test_*_batch_statistics``. A run that already has them is left
alone. Reused runs (search.jobs: the benchmarks, the sweep) are rescored so that their figures
average with new ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from dnarch_deploy import rundir as R
from dnarch_deploy.io import atomic_write_text

from .records import write_json
from .train import evaluate_shipped, flush_denormals, split_tensors


def rescore(run: R.Run) -> float:
    """Rescore one finished run, loaded with its result's weights and task (see the module's
    docstring); returns the new test metric."""
    summary = run.summary
    loss, metric = evaluate_shipped(run.model, split_tensors(run.task, "test"), run.task,
                                    run.config.train["eval_batch_size"])
    rows = R.read_jsonl(run.path / R.METRICS, within=run.path)
    for row in rows:
        if row.get("split") == "test":
            row.update(loss=loss, metric=metric, metric_batch_statistics=row.get("metric"))
            row[summary.metric_name] = metric
    atomic_write_text(run.path / R.METRICS, "".join(json.dumps(r) + "\n" for r in rows))
    rescored = dataclasses.replace(
        summary, test_metric=metric, test_loss=loss, scored_as_shipped=True,
        test_metric_batch_statistics=summary.test_metric,
        test_loss_batch_statistics=summary.test_loss)
    write_json(run.path / R.SUMMARY, rescored.to_dict())
    return metric


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    args = parser.parse_args(argv)
    flush_denormals()
    try:  # every run read, weights and data, before any is rewritten
        runs = [R.load_run(R.check_run_dir(d)) for d in args.run_dirs]
        if missing := [r.path for r in runs if r.summary is None]:
            raise R.RunError(f"{missing[0]}: no summary.json (the run has not finished)")
    except R.RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for run in runs:
        if run.summary.scored_as_shipped:
            print(f"{run.path}: already scored as shipped")
            continue
        before = run.summary.test_metric
        print(f"{run.path}: test {before:.4f} (batch statistics) -> {rescore(run):.4f} "
              "(as shipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
