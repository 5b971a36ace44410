"""The sweep directory contract (``python -m search.sweep``): file names, pareto.json's schema and
its reader, and the Pareto rule, each written down once.

    DIR/
      sweep.json     the plan: task, budgets, seeds, base grid, the search and export flags
      runs/          one run directory per model (search-b0.25-s0/, base-w8-d2-s0/, ...)
      latency.json   every export measured in one session (python -m export.measure)
      pareto.json    a row per model (below), the Pareto-optimal rows marked
      pareto.png     the same, drawn
      jobs.txt, jobs.slurm   with --emit-jobs: one command per model, a SLURM array script
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .rundir import RunError, read_json

PLAN = "sweep.json"
RUNS = "runs"
LATENCY = "latency.json"
PARETO = "pareto.json"
PARETO_PNG = "pareto.png"
JOBS = "jobs.txt"
SLURM = "jobs.slurm"

PLAN_SCHEMA = "dnarch-sweep"
PARETO_SCHEMA = "dnarch-pareto"
VERSION = 1
KINDS = ("search", "base")
PARETO_KEYS = ("schema", "version", "task", "metric_name", "higher_is_better", "batches", "rows")
ROW_KEYS = ("kind", "budget", "width", "depth", "seed", "test_metric", "ms", "macs", "params",
            "run_dir", "pareto")


def pareto_front(latency: Sequence[float], metric: Sequence[float],
                 higher_is_better: bool = True) -> list[bool]:
    """Which points are Pareto-optimal: no other point is at least as fast and at least as good,
    and strictly better in one of the two. Equal points are all optimal; a point whose latency
    or metric is not a finite number is never optimal (and dominates nothing)."""
    sign = 1.0 if higher_is_better else -1.0
    points = [(t, sign * m) if math.isfinite(t) and math.isfinite(m) else None
              for t, m in zip(latency, metric, strict=True)]

    def dominated(p: tuple[float, float]) -> bool:
        return any(q is not None and q[0] <= p[0] and q[1] >= p[1] and q != p for q in points)

    return [p is not None and not dominated(p) for p in points]


def read_pareto(sweep_dir: str | Path) -> dict[str, Any]:
    """DIR/pareto.json, checked; a RunError names the file and the field.

        schema, version     PARETO_SCHEMA, VERSION
        task, metric_name   the task and its test metric's name
        higher_is_better    the metric's direction
        batches             [1, large]: the batch sizes measured
        threads             onnxruntime intra-op threads of the measurement
        rows                one per model:
          kind              "search" (a DNArch search at a budget) or "base" (the fixed CCNN)
          budget            C_target as a multiple of the base cost (search), else null
          width, depth      the base network's flags (base rows; search rows: the base it grew from)
          seed              the run's seed
          test_metric       summary.json's test metric
          ms                {batch: median onnxruntime ms} from latency.json
          macs, params      summary.json's (the materialised network)
          run_dir           the run directory, relative to DIR
          pareto            {batch: true when no other row is at least as fast and as good}
    """
    path = Path(sweep_dir) / PARETO
    data = read_json(path, PARETO_KEYS, within=sweep_dir)
    if data["schema"] != PARETO_SCHEMA or data["version"] != VERSION:
        raise RunError(f"{path}: schema {data['schema']!r} version {data['version']!r}; this "
                       f"dnarch-deploy reads {PARETO_SCHEMA!r} version {VERSION}")
    if not isinstance(data["rows"], list):
        raise RunError(f"{path}: field 'rows' must be a list")
    batches = [str(b) for b in data["batches"]]
    for i, row in enumerate(data["rows"]):
        where = f"{path}: rows[{i}]"
        if not isinstance(row, dict):
            raise RunError(f"{where} must be an object")
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            raise RunError(f"{where}: missing field '{missing[0]}'")
        if row["kind"] not in KINDS:
            raise RunError(f"{where}.kind must be one of {KINDS}, got {row['kind']!r}")
        for key in ("test_metric", "macs", "params"):
            if not _number(row[key]):
                raise RunError(f"{where}.{key} must be a number, got {row[key]!r}")
        for key in ("ms", "pareto"):
            if not isinstance(row[key], dict) or any(b not in row[key] for b in batches):
                raise RunError(f"{where}.{key} must hold every batch of {batches}, "
                               f"got {row[key]!r}")
        if not all(_number(row["ms"][b]) for b in batches):
            raise RunError(f"{where}.ms must be numbers, got {row['ms']!r}")
        if not isinstance(row["run_dir"], str):
            raise RunError(f"{where}.run_dir must be a path, got {row['run_dir']!r}")
    return data


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
