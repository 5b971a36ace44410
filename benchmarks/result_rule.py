"""Does the result rule earn its keep? The round it chose against the last round, on finished runs.

search.result.is_result picks the latest validation round whose metric is within one standard error
of the best (among rounds within the budget); the metric is the round's own in runs before the
rule averaged it over the last rounds (search.result.smoothed). On a 7- to 13-sample validation
split the round's own metric often picks an early round. This script asks what the simplest
alternative, the last round, would have scored on the test split. It trains nothing: for each
finished run directory it reads the chosen round's test metric from summary.json and evaluates the
last round's weights (checkpoints/model.safetensors) on the same test split, when that round fits
the budget. Rows group the runs by task and --learn; mean ± std over seeds.

    python -m benchmarks.result_rule RUN_DIR [RUN_DIR ...] --results OUT.md
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

from benchmarks import harness
from dnarch_deploy import rundir as R
from search.train import evaluate, evaluate_shipped, split_tensors


def compare(run_dir: Path) -> dict:
    """The chosen round's and the last round's test metric (None: the last is over budget)."""
    summary = R.read_summary(run_dir)
    val = [r for r in R.read_jsonl(run_dir / R.METRICS) if r["split"] == "val"]
    last = val[-1]
    tolerance = R.read_config(run_dir)["train"]["budget_tolerance"]
    row = {"group": f"{summary['task']} {summary['learn']}", "chosen": summary["test_metric"],
           "chosen_epoch": summary["best_epoch"], "last_epoch": last["epoch"],
           "higher": summary["higher_is_better"]}
    if summary["best_epoch"] == last["epoch"]:
        row["last"] = summary["test_metric"]
    elif last["complexity_ratio"] > 1 + tolerance:
        row["last"] = None
    else:
        run = R.load_run(run_dir, weights="last")
        # scored as the run scored its result: the shipped network's metric since runs record
        # the batch-statistics one beside it, that one before
        score = evaluate_shipped if R.scored_as_shipped(summary) else evaluate
        with torch.no_grad():
            row["last"] = score(run.model, split_tensors(run.task, "test"), run.task,
                                run.config["train"]["eval_batch_size"])[1]
    return row


def fmt(values: list[float]) -> str:
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {std:.3f}"


def report(rows: list[dict], head: list[str]) -> str:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    lines = [
        "# The result rule against the last round",
        "",
        "Test metric of the round search.result.is_result chose (the latest within one standard "
        "error of the best validation metric, within the budget) and of the run's last round, "
        "evaluated from its saved weights; mean ± std over the runs of a row.",
        "",
        *head,
        "",
        "| task --learn | runs | chose an earlier round | chosen round | last round "
        "| last − chosen |",
        "|---|---|---|---|---|---|",
    ]
    deltas = []
    for group, members in groups.items():
        chosen = [r["chosen"] for r in members]
        last = [r["last"] for r in members if r["last"] is not None]
        earlier = sum(r["chosen_epoch"] != r["last_epoch"] for r in members)
        sign = 1 if members[0]["higher"] else -1
        delta = sign * (statistics.mean(last) - statistics.mean(chosen)) if last else None
        over = len(members) - len(last)
        note = f" ({over} over budget)" if over else ""
        if delta is not None and not over:
            deltas.append(delta)
        lines.append(f"| {group} | {len(members)} | {earlier} | {fmt(chosen)} | {fmt(last)}{note} "
                     f"| {'–' if delta is None else f'{delta:+.3f}'} |")
    if deltas:
        lines += ["", f"Mean of *last − chosen* over the {len(deltas)} rows whose last rounds all "
                      f"fit (positive: the last round is better): {statistics.mean(deltas):+.4f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("run_dirs", nargs="+", type=Path, help="finished search.run directories")
    harness.add_report(parser, flag="--results")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        for run_dir in args.run_dirs:  # every directory checked before any work
            R.read_summary(run_dir)
        rows = [compare(d) for d in args.run_dirs]  # a damaged record or weights file
    except R.RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    parents = sorted({harness.portable(str(d.resolve().parent)) for d in args.run_dirs})
    head = harness.header(__file__, ["RUN_DIR", "..."], command_note=f" ({len(args.run_dirs)} "
                          f"run directories in {', '.join(parents)})")
    harness.publish(report(rows, head), args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
