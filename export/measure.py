"""`python -m export.measure RUN_DIR... --out FILE`: the onnxruntime latency of several exports,
measured in one session so that their figures compare.

Every model.onnx gets a session with the same threads; at each batch size the models take turns
(:func:`export.timing.measure`: rounds in which each runs its warm-up and then its timed calls), so
a burst of load from other processes hits them alike. Inputs are random, of each model's input
shape (token ids below its vocabulary for token tasks). Writes FILE as JSON: per run directory the
median and minimum milliseconds per batch, with the threads, repeats and environment.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import onnx

from dnarch_deploy.io import atomic_write_text
from dnarch_deploy.progress import bar
from dnarch_deploy.rundir import EXPORT

from .artifacts import ONNX_FILE
from .infer import InputError, load_spec, open_model
from .timing import batch_sizes, measure, random_feeds, runner

SCHEMA = "dnarch-latency"
VERSION = 1


def measure_exports(run_dirs: list[Path], batches: tuple[int, ...] = (1, 32), threads: int = 1,
                    repeats: int = 20) -> dict:
    """Latency of every run's export/model.onnx at every batch size, in turns (module doc).
    Raises InputError naming the first run whose export cannot be used."""
    models = []
    for run_dir in run_dirs:
        export_dir = Path(run_dir) / EXPORT
        spec = load_spec(export_dir)
        sess = open_model(export_dir, spec, threads)
        models.append((sess, onnx.load(str(export_dir / ONNX_FILE)), spec["vocab_size"]))
    rows = [{"run_dir": str(d), "median_ms": {}, "min_ms": {}} for d in run_dirs]
    for batch in bar(batches, desc="batches"):
        fns = [runner(sess, random_feeds(model, batch, vocab)) for sess, model, vocab in models]
        for row, t in zip(rows, measure(fns, repeats)):
            row["median_ms"][str(batch)] = t["median_ms"]
            row["min_ms"][str(batch)] = t["min_ms"]
    from .pipeline import environment  # torch: only once the measurements are done

    return {"schema": SCHEMA, "version": VERSION,
            "method": "wall clock; models in turns (export.timing.measure), median of repeats",
            "threads": threads, "batches": list(batches), "repeats": repeats,
            "environment": environment(), "models": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.measure",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("run_dirs", type=Path, nargs="+", help="run directories exported by "
                   "python -m export.onnx")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--batches", type=batch_sizes, default="1,32",
                   help="batch sizes, comma-separated")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per model and batch")
    args = p.parse_args(argv)
    batches = args.batches
    if args.threads < 1 or args.repeats < 1:
        p.error("--threads and --repeats must be >= 1")
    try:
        result = measure_exports(args.run_dirs, batches, args.threads, args.repeats)
        atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    except (InputError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for row in result["models"]:
        times = "  ".join(f"B={b}: {ms:.3f} ms" for b, ms in row["median_ms"].items())
        print(f"{row['run_dir']}  {times}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
