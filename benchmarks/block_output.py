"""Two sets of trained runs side by side, as deployed: accuracy, MACs and onnxruntime time.

Made for the block's output form (``--block-output gelu`` against the paper's second pointwise
mixing), and good for any two variants of `benchmarks/ucr_quality.py` trained on the same sets
and seeds: ``--runs`` and ``--against`` are two of its ``--out`` directories. Runs are paired by
directory name (task, what is learned, seed). Each run not yet exported is exported as
``python -m export.onnx RUN_DIR --no-tune`` would (tactics by the cost model, so that a
measurement does not choose them), then every export is timed in one onnxruntime session each,
all models taking turns at each batch (:func:`export.measure.measure_exports`), one thread.

Per set: test accuracy (mean ± std over seeds, as shipped: summary.json), MACs per sample
(summary.json ``macs``: the found architecture's cost by the cost model, which is export's
theoretical total where export picks tactics by that model, as ``--no-tune`` does; a run
exported before, with tuning, keeps its export and may run other tactics), and per seed the
ratio runs / against of MACs and of the median milliseconds at each batch, given as the mean of
the seeds' ratios.

    python benchmarks/ucr_quality.py --tasks ... --variants search --no-peer --no-fcn \\
        --extra="--block-norm mix --block-output gelu" --out /tmp/uq/gelu
    python benchmarks/ucr_quality.py --tasks ... --variants search --no-peer --no-fcn \\
        --out /tmp/uq/default
    python benchmarks/block_output.py --runs /tmp/uq/gelu --against /tmp/uq/default \\
        --results benchmarks/results/block_output.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from search_quality import fmt  # noqa: E402

from dnarch_deploy import rundir as R  # noqa: E402


def pairs(runs: Path, against: Path) -> list[tuple[Path, Path]]:
    """(run, its counterpart) for every finished run directory of ``runs`` with a finished one of
    the same name in ``against``, sorted by name."""
    def finished(root: Path) -> dict[str, Path]:
        return {d.name: d for d in root.iterdir() if (d / R.SUMMARY).is_file()}

    mine, theirs = finished(runs), finished(against)
    common = sorted(set(mine) & set(theirs))
    if not common:
        raise SystemExit(f"error: no finished run of {runs} has a counterpart in {against}")
    return [(mine[n], theirs[n]) for n in common]


def export_missing(run_dirs: list[Path]) -> None:
    """Export every run without export/model.onnx, as ``--no-tune`` (module doc)."""
    from export.artifacts import ONNX_FILE
    from export.pipeline import ExportOptions, export_run

    options = ExportOptions(tune=False, torchscript=False, bench=False, per_layer=False)
    todo = [d for d in run_dirs if not (d / R.EXPORT / ONNX_FILE).is_file()]
    for run_dir in tqdm(todo, desc="export", unit="run"):
        export_run(run_dir, options)


def set_name(run_dir: Path) -> str:
    """The task of a run directory (its config.json)."""
    return R.read_config(run_dir)["task"]


def report(args, rows: list[dict], batches: tuple[int, ...], env: dict, seconds: float) -> str:
    by_set: dict[str, list[dict]] = {}
    for row in rows:
        by_set.setdefault(row["set"], []).append(row)
    command = "python benchmarks/block_output.py " + shlex.join(sys.argv[1:])
    from dnarch_deploy.latency import cpu_model

    lines = [
        "# Two variants side by side, as deployed",
        "",
        f"Command: `{command}`  ",
        f"Machine: {platform.machine()} ({cpu_model()}), {os.cpu_count()} "
        f"cores; onnxruntime {env['onnxruntime']}, 1 thread, models in turns; Python "
        f"{env['python']}, torch {env['torch']}; {seconds / 60:.0f} min wall.  ",
        f"*runs*: `{args.runs}`; *against*: `{args.against}`. Accuracy mean ± std over seeds (as "
        "shipped); MACs per sample of the exported network; ratios runs / against per seed, "
        "then their mean ± std.",
        "",
        "| set | seeds | accuracy, runs | accuracy, against | MACs, runs | MACs, against | "
        "MACs ratio | " + " | ".join(f"time ratio B={b}" for b in batches) + " |",
        "|---" * (7 + len(batches)) + "|",
    ]
    for name, group in by_set.items():
        cells = [name, str(len(group)), fmt([r["acc"] for r in group]),
                 fmt([r["acc_against"] for r in group]),
                 fmt([r["macs"] for r in group], 0), fmt([r["macs_against"] for r in group], 0),
                 fmt([r["macs"] / r["macs_against"] for r in group], 2)]
        cells += [fmt([r["ms"][b] / r["ms_against"][b] for r in group], 2) for b in batches]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| " + " | ".join(mean_row(by_set, batches)) + " |")
    lines += ["", "Every pair (milliseconds: medians of the timed calls):", "",
              "| run | accuracy | against | MACs | against | "
              + " | ".join(f"ms B={b} | against" for b in batches) + " |",
              "|---" * (5 + 2 * len(batches)) + "|"]
    for row in rows:
        cells = [row["name"], f"{row['acc']:.3f}", f"{row['acc_against']:.3f}",
                 f"{row['macs']:.0f}", f"{row['macs_against']:.0f}"]
        for b in batches:
            cells += [f"{row['ms'][b]:.4g}", f"{row['ms_against'][b]:.4g}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def mean_row(by_set: dict[str, list[dict]], batches: tuple[int, ...]) -> list[str]:
    """The table's last row: over the sets, the mean of each set's mean ratio."""
    def mean(ratio) -> str:
        return f"{statistics.mean(statistics.mean(map(ratio, g)) for g in by_set.values()):.2f}"

    macs = mean(lambda r: r["macs"] / r["macs_against"])
    return (["mean over the sets", "", "", "", "", "", macs]
            + [mean(lambda r, b=b: r["ms"][b] / r["ms_against"][b]) for b in batches])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, required=True, help="ucr_quality.py --out directory")
    p.add_argument("--against", type=Path, required=True, help="another such directory, the "
                   "same sets and seeds")
    p.add_argument("--batches", default="1,32", help="batch sizes, comma-separated")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per model and batch")
    p.add_argument("--results", type=Path, help="also write the table here (markdown)")
    args = p.parse_args(argv)
    for root in (args.runs, args.against):
        if not root.is_dir():
            p.error(f"{root}: no such directory")
    batches = tuple(int(b) for b in args.batches.split(","))
    start = time.time()
    from export.infer import InputError
    from export.measure import measure_exports
    from export.pipeline import ExportError
    from export.verify import VerificationError

    matched = pairs(args.runs, args.against)
    try:  # every run read before any is exported: a damaged one is one line, nothing written
        rows = []
        for run, other in matched:
            s, t = R.read_summary(run), R.read_summary(other)
            rows.append({"name": run.name, "set": set_name(run), "acc": s["test_metric"],
                         "acc_against": t["test_metric"], "macs": s["macs"],
                         "macs_against": t["macs"]})
        export_missing([d for pair in matched for d in pair])
        timed = measure_exports([d for pair in matched for d in pair], batches, threads=1,
                                repeats=args.repeats)
    except (ValueError, OSError, KeyError, InputError, ExportError, VerificationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for i, row in enumerate(rows):
        mine, theirs = timed["models"][2 * i], timed["models"][2 * i + 1]
        row["ms"] = {b: mine["median_ms"][str(b)] for b in batches}
        row["ms_against"] = {b: theirs["median_ms"][str(b)] for b in batches}
    text = report(args, rows, batches, timed["environment"], time.time() - start)
    print(text)
    if args.results:
        args.results.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
