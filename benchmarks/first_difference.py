"""The first difference as a second input channel: a screen of an input representation.

For each bundled UCR/UEA set named, two `npz:` tasks on one split (the task's seed-0 train / val /
test): *raw*, the series as the task gives them, and *diff*, the channels and then their first
differences x[t] - x[t-1] (0 at t = 0) as more channels, a common extra input for series that
trace a shape's outline (leaves, arrowheads). Both
tasks are searched with every flag at its default by `python -m benchmarks.ucr_quality` (search
only, no peer), two runs at a time, one thread each; its report is this screen's table.

    python -m benchmarks.first_difference --sets ArrowHead OSULeaf --seeds 3 --out /tmp/fd \\
        --results benchmarks/results/ucr_quality_first_difference.md
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks import harness

SPLITS = ("train", "val", "test")


def with_first_difference(x: np.ndarray) -> np.ndarray:
    """(N, C, L) -> (N, 2 C, L): the channels, then their first differences (0 at t = 0)."""
    return np.concatenate([x, np.diff(x, axis=-1, prepend=x[..., :1])], axis=1)


def write_pair(name: str, data: Path) -> tuple[Path, Path]:
    """``data``/NAME-raw.npz and NAME-diff.npz from ucr:NAME's seed-0 split."""
    from dnarch_deploy.tasks import load_task

    task = load_task(f"ucr:{name}", seed=0)
    arrays = {f"{v}_{s}": np.asarray(getattr(task, f"{v}_{s}")) for s in SPLITS for v in "xy"}
    raw, diff = data / f"{name}-raw.npz", data / f"{name}-diff.npz"
    np.savez_compressed(raw, **arrays)
    np.savez_compressed(diff, **{k: with_first_difference(v).astype(np.float32)
                                 if k.startswith("x_") else v for k, v in arrays.items()})
    return raw, diff


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--sets", nargs="+", default=["ArrowHead", "OSULeaf"],
                        help="bundled UCR/UEA sets (python -m search.tasks lists them)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of every model")
    parser.add_argument("--out", default="runs/first_difference", help="data and runs go here")
    parser.add_argument("--results", default=None, help="the report (default: OUT/report.md; "
                        "the committed one: benchmarks/results/ucr_quality_first_difference.md)")
    args = parser.parse_args(argv)
    from dnarch_deploy.tasks import TaskError

    data = Path(args.out).resolve() / "data"
    results = args.results or str(Path(args.out).resolve() / "report.md")
    harness.check_report(parser, results, "--results")  # before any file is written
    try:
        data.mkdir(parents=True, exist_ok=True)
        tasks = [f"npz:{p}" for name in args.sets for p in write_pair(name, data)]
    except (TaskError, OSError) as e:
        parser.error(str(e))
    command = [sys.executable, "-m", "benchmarks.ucr_quality", "--tasks", *tasks,
               "--variants", "search", "--no-peer", "--seeds", str(args.seeds),
               "--out", str(Path(args.out).resolve() / "runs"), "--results", results]
    path = os.pathsep.join(filter(None, [str(harness.ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.call(command, env=dict(os.environ, PYTHONPATH=path))


if __name__ == "__main__":
    sys.exit(main())
