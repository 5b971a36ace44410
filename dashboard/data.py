"""Read run directories into tidy pandas frames for the dashboard (read-only, never writes).

Everything goes through :mod:`dnarch_deploy.rundir`, so a damaged file raises a ``RunError`` (a
``SchemaError``) whose message names the file and the field; the app shows that message.
Only regular files inside their run directory, under the runs root, are read, each up to
``rundir.MAX_RECORD_BYTES``: a link out of the run (or the root), a device or a FIFO, an oversized
file is a ``RefusedFile`` (a RunError), which the app shows as "not read" rather than an error.
The export report (written by ``python -m export.onnx``) is read through its one schema,
:func:`dnarch_deploy.rundir.read_report`, which checks it field by field as it is read.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pandas as pd

from dnarch_deploy import rundir, sweepdir
from dnarch_deploy.architecture import Architecture, SchemaError
from dnarch_deploy.rundir import RefusedFile, RunError

REPORT = rundir.REPORT
LIVE_SECONDS = 600.0  # a run without summary.json whose metrics changed this recently is training
MAX_DEPTH = 4  # how deep under the runs directory run directories are looked for


# --- finding runs and their state ----------------------------------------------------------------


def find_runs(root: str | Path) -> list[Path]:
    """Run directories (those holding config.json) under ``root``, sorted by relative path; not
    those in hidden folders (a search's RUN_DIR being made, an export's temporary folder) nor
    those that lead out of ``root``."""
    root = Path(root)
    if not root.is_dir():
        return []
    real_root = root.resolve()
    found = []
    for config in root.rglob(rundir.CONFIG):  # rglob does not descend into linked folders
        run = config.parent
        depth = len(run.relative_to(root).parts)
        parts = run.relative_to(root).parts
        inside = run.resolve().is_relative_to(real_root)
        hidden = any(p.startswith(".") for p in parts)  # a run or an export being written
        if inside and not hidden and depth <= MAX_DEPTH and rundir.EXPORT not in parts:
            found.append(run)
    return sorted(found, key=lambda p: str(p.relative_to(root)))


def run_name(root: str | Path, run: Path) -> str:
    name = str(Path(run).relative_to(root))
    return Path(run).name if name == "." else name


def run_status(run: Path, now: float | None = None) -> str:
    """"finished" (summary.json written), "training" (metrics recently written) or "stopped"."""
    if (run / rundir.SUMMARY).exists():
        return "finished"
    now = time.time() if now is None else now
    metrics = run / rundir.METRICS
    if metrics.exists() and now - metrics.stat().st_mtime < LIVE_SECONDS:
        return "training"
    return "stopped"


def export_status(run: Path) -> str:
    """"exported", "damaged report" (report.json unreadable), "not read" (export/ or its report
    is a link out of the run, or not a regular file), "exporting" or "not exported"."""
    if not _inside(run, run / rundir.EXPORT):
        return "not read"
    if (run / REPORT).exists():
        try:
            read_report(run)
        except RefusedFile:
            return "not read"
        except RunError:
            return "damaged report"
        return "exported"
    return "exporting" if (run / rundir.EXPORT).is_dir() else "not exported"


def runs_frame(root: str | Path) -> pd.DataFrame:
    """One row per run: task, learned components, metric, complexity ratio, status, export."""
    rows = []
    for run in find_runs(root):
        row: dict[str, Any] = {"run": run_name(root, run), "task": None, "learn": None,
                               "metric": None, "test metric": None, "complexity ratio": None,
                               "status": run_status(run), "export": export_status(run),
                               "problem": ""}
        try:
            config = rundir.read_config(run)
            row["task"] = config.task
            row["learn"] = config.model.get("learn")
            if (run / rundir.SUMMARY).exists():
                summary = rundir.read_summary(run)
                row.update({"task": summary.task, "learn": summary.learn,
                            "metric": summary.metric_name, "test metric": summary.test_metric,
                            "complexity ratio": summary.complexity_ratio})
            else:
                last = last_metrics(run)
                row["metric"] = last.get("metric_name")
                row["complexity ratio"] = last.get("complexity_ratio")
            check_run(run)
        except SchemaError as e:
            row["problem"] = str(e)
            row["status"] = "not read" if isinstance(e, RefusedFile) else "damaged"
        rows.append(row)
    return pd.DataFrame(rows, columns=["run", "task", "learn", "metric", "test metric",
                                       "complexity ratio", "status", "export", "problem"])


def check_run(run: Path) -> None:
    """Read every record of a run; the first damaged file raises a RunError naming it."""
    rundir.read_config(run)
    if (run / rundir.SUMMARY).exists():
        rundir.read_summary(run)
    if (run / rundir.ARCHITECTURE).exists():
        rundir.read_architecture(run)
    rundir.read_architectures(run)
    metrics_frame(run)


# --- training records -----------------------------------------------------------------------------

METRIC_KEYS = ("step", "epoch", "split", "loss")
STANDARD_COLUMNS = {"step", "epoch", "split", "loss", "loss_obj", "loss_comp", "complexity_ratio",
                    "lr", "metric", "seconds"}


def metrics_frame(run: Path) -> pd.DataFrame:
    """metrics.jsonl as a frame (one row per logged epoch and split), checked for required keys.

    The test row is logged with ``step`` null and the epoch whose weights it tests; it is placed
    at that epoch's last step so it can be drawn beside the validation curve.
    """
    path = Path(run) / rundir.METRICS
    rows = rundir.read_jsonl(path, within=run)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise RunError(f"{path}: line {i + 1} is not a JSON object")
        for key in METRIC_KEYS:
            if key not in row:
                raise RunError(f"{path}: line {i + 1}: missing field '{key}'")
        step = row["step"]
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            raise RunError(f"{path}: line {i + 1}: field 'step' must be an integer or null, "
                           f"got {step!r}")
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=[*METRIC_KEYS, "metric", "complexity_ratio"])
    for column in ("metric", "complexity_ratio"):
        if column not in frame:
            frame[column] = float("nan")
    epoch_step = frame.groupby("epoch")["step"].max()  # the test row: where its epoch ended
    frame["step"] = frame["step"].fillna(frame["epoch"].map(epoch_step))
    frame["step"] = frame["step"].fillna(frame["step"].max()).fillna(0).astype(int)
    return frame


def last_metrics(run: Path) -> dict[str, Any]:
    """The last logged row (for a run still training), with ``metric_name`` when it can tell."""
    frame = metrics_frame(run)
    if frame.empty:
        return {}
    last = frame.iloc[-1].dropna().to_dict()
    last["metric_name"] = metric_name(run, frame)
    return last


def metric_name(run: Path, frame: pd.DataFrame | None = None) -> str:
    """The task metric's name: summary.json's ``metric_name``, else the extra key the metrics rows
    carry next to ``metric`` (e.g. "accuracy"), else "metric"."""
    run = Path(run)
    if (run / rundir.SUMMARY).exists():
        return rundir.read_summary(run).metric_name
    frame = metrics_frame(run) if frame is None else frame
    extra = [c for c in frame.columns if c not in STANDARD_COLUMNS]
    return extra[0] if len(extra) == 1 else "metric"


# --- architectures --------------------------------------------------------------------------------


def axis_names(arch: Architecture) -> list[str]:
    """Names for the spatial axes: "L" for sequences, "H", "W" for images."""
    return ["L"] if len(arch.input_size) == 1 else ["H", "W"]


def _extent(values: list[int]) -> str:
    return "×".join(str(v) for v in values)


def blocks_frame(arch: Architecture) -> pd.DataFrame:
    """One row per block: kernel size, resolution and taps per axis, widths, depth weight."""
    axes = axis_names(arch)
    rows = []
    for b in arch.blocks:
        row: dict[str, Any] = {"block": b.index, "kernel size": _extent(b.kernel_size),
                               "resolution": _extent(b.resolution)}
        for i, axis in enumerate(axes):
            row[f"kernel {axis}"] = b.kernel_size[i]
            row[f"resolution {axis}"] = b.resolution[i]
            row[f"resolution {axis} (fraction)"] = b.resolution[i] / arch.input_size[i]
            row[f"taps {axis}"] = b.kernel_taps[i]
        row.update({"n_in": b.n_in, "n_mid": b.n_mid, "n_out": b.n_out,
                    "depth weight": b.depth_weight})
        rows.append(row)
    return pd.DataFrame(rows)


def evolution_frame(archs: list[Architecture]) -> pd.DataFrame:
    """All architecture snapshots stacked: the blocks frame plus epoch, stream width and depth."""
    frames = []
    for epoch, arch in snapshots_by_epoch(archs).items():
        frame = blocks_frame(arch)
        frame.insert(0, "epoch", epoch)
        frame["stream width"] = arch.stream_width
        frame["depth"] = arch.depth
        frames.append(frame)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def snapshots_by_epoch(archs: list[Architecture]) -> dict[int, Architecture]:
    """The last snapshot of each epoch (a resumed run may log an epoch twice)."""
    return {arch.epoch if arch.epoch is not None else i: arch for i, arch in enumerate(archs)}


def architecture_facts(arch: Architecture) -> dict[str, Any]:
    return {"input size": _extent(arch.input_size), "stream width": arch.stream_width,
            "max width": arch.max_width, "depth": arch.depth, "max depth": arch.max_depth,
            "learn": arch.learn, "dense": arch.dense, "epoch": arch.epoch,
            "decoder": ("linear per position" if arch.dense else
                        " + ".join(arch.decoder_pooling()) + " pool, linear")}


# --- the export report ----------------------------------------------------------------------------
# Its schema is dnarch_deploy.rundir.read_report's: the frames below build on what it checked.


def read_report(run: Path) -> rundir.Report:
    """export/report.json, checked field by field (:func:`dnarch_deploy.rundir.read_report`)."""
    return rundir.read_report(run)


def has_latency(report: rundir.Report) -> bool:
    """False when the export did not measure latency (``--no-bench``: ``latency`` is null)."""
    return report.latency is not None


def check_export(run: Path) -> Path:
    """RUN/export, or a RefusedFile when it is a link that leads out of the run directory."""
    export = Path(run) / rundir.EXPORT
    if not _inside(run, export):
        raise RefusedFile(f"{export}: a link to {export.resolve()}, outside the run directory: "
                          "not read")
    return export


def _inside(run: Path, path: Path) -> bool:
    """Whether ``path`` (followed through any links) stays inside the run directory."""
    return path.resolve().is_relative_to(Path(run).resolve())


def report_tolerance(report: rundir.Report) -> float | None:
    """The relative-error tolerance the export verified against, when the report gives it."""
    return report.tolerance


def latency_batches(report: rundir.Report) -> list[str]:
    """The batch sizes the export measured, as strings ("1", "32"); none without a benchmark."""
    latency = report.latency
    return [] if latency is None else [str(b) for b in latency["batches"]]


def _measured(entry: dict[str, Any], batch: str) -> float | None:
    """An entry's measured milliseconds at ``batch``; None when the export did not measure it
    (a layer under --no-per-layer)."""
    by_batch = entry.get("measured_ms_by_batch", {})
    if batch in by_batch:
        return float(by_batch[batch])
    return entry["measured_ms"] if batch == "1" else None


def latency_frame(report: rundir.Report, batch: str = "1",
                  cost: str = "theoretical") -> pd.DataFrame:
    """One row per layer plus a "total" row: tactic, theoretical and paper MACs per sample,
    measured_ms (onnxruntime, at ``batch``; NaN for a layer not measured) and theoretical_ms.

    ``theoretical_ms`` puts ``cost`` ("theoretical" or "paper") in milliseconds: the layer's share
    of the total cost times the measured total, so a layer on y = x takes exactly its share.
    """
    latency = report.latency
    rows = [{"layer": name, "tactic": entry.get("tactic"), "theoretical": entry["theoretical"],
             "paper": entry["paper"], "measured_ms": _measured(entry, batch)}
            for name, entry in latency["layers"].items()]
    total = latency["total"]
    measured_total = _measured(total, batch)
    rows.append({"layer": "total", "tactic": None, "theoretical": total["theoretical"],
                 "paper": total["paper"], "measured_ms": measured_total})
    frame = pd.DataFrame(rows, columns=["layer", "tactic", "theoretical", "paper", "measured_ms"])
    frame["measured_ms"] = frame["measured_ms"].astype(float)
    cost_total = frame[cost].iloc[-1]
    frame["theoretical_ms"] = frame[cost] / cost_total * measured_total if cost_total else None
    return frame


EAGER_NAMES = {"trained_ms": "PyTorch eager, trained (masked)",
               "static_ms": "PyTorch eager, static", "lowered_ms": "PyTorch eager, lowered"}


def totals_frame(report: rundir.Report) -> pd.DataFrame:
    """Total latency per backend and batch: onnxruntime (``latency.total``) and the eager
    PyTorch modules the export also timed (``latency.eager``: {name_ms: {batch: ms}})."""
    latency = report.latency
    rows = [{"backend": "onnxruntime", "batch": batch, "measured_ms": _measured(latency["total"],
                                                                               batch)}
            for batch in latency_batches(report)]
    rows += [{"backend": EAGER_NAMES.get(key, key), "batch": str(batch), "measured_ms": float(ms)}
             for key, by_batch in latency.get("eager", {}).items()
             for batch, ms in by_batch.items()]
    return pd.DataFrame(rows, columns=["backend", "batch", "measured_ms"])


def equivalence_frame(report: rundir.Report) -> pd.DataFrame:
    """One row per verification stage: max_abs, max_rel and, when the report gives its
    ``tolerance``, whether max_rel is within it."""
    tolerance = report_tolerance(report)
    rows = []
    for stage, entry in report.equivalence.items():
        row = {"stage": stage, "max_abs": float(entry["max_abs"]),
               "max_rel": float(entry["max_rel"])}
        if tolerance is not None:
            row["within tolerance"] = row["max_rel"] <= tolerance
        rows.append(row)
    return pd.DataFrame(rows)


def ops_frame(report: rundir.Report) -> pd.DataFrame:
    """Op-type counts of model.onnx: columns op, count, most frequent first."""
    frame = pd.DataFrame([{"op": op, "count": n} for op, n in report.ops.items()],
                         columns=["op", "count"])
    return frame.sort_values("count", ascending=False, ignore_index=True)


def backends_frame(report: rundir.Report) -> pd.DataFrame:
    """One row per backend: compatible, and the op types it lacks."""
    rows = [{"backend": name, "compatible": entry["compatible"],
             "detail": "unsupported_ops: " + (", ".join(entry.get("unsupported_ops", []))
                                              or "none")}
            for name, entry in report.backends.items()]
    return pd.DataFrame(rows, columns=["backend", "compatible", "detail"])


def artifacts_frame(run: Path) -> pd.DataFrame:
    """Regular files under export/ with their sizes; links are not followed (a RefusedFile when
    export/ itself leads out of the run)."""
    export = check_export(run)
    rows = []
    for folder, dirs, files in os.walk(export, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                rows.append({"file": str(path.relative_to(export)), "bytes": info.st_size,
                             "size": human_size(info.st_size)})
    return pd.DataFrame(rows, columns=["file", "bytes", "size"])


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def comparison_frame(runs: dict[str, Path]) -> pd.DataFrame:
    """The chosen runs side by side: one column per run, one row per summary figure."""
    fields = ["task", "learn", "metric_name", "test_metric", "complexity_ratio", "params", "macs",
              "wall_seconds"]
    columns = {}
    for name, run in runs.items():
        values: dict[str, Any] = dict.fromkeys(fields)
        try:
            if (run / rundir.SUMMARY).exists():
                summary = rundir.read_summary(run)
                values.update({k: getattr(summary, k) for k in fields})
            else:
                config = rundir.read_config(run)
                values.update(task=config.task, learn=config.model.get("learn"))
            values["status"] = run_status(run)
        except SchemaError:
            values["status"] = "damaged"
        values["export"] = export_status(run)
        columns[name] = {k: _format(v) for k, v in values.items()}
    return pd.DataFrame(columns)


def _format(value: Any) -> str | None:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return None if value is None else str(value)


# --- sweeps (python -m search.sweep) --------------------------------------------------------------


def find_sweeps(root: str | Path) -> list[Path]:
    """Sweep directories (those holding pareto.json) at or under ``root``, as find_runs looks
    for runs: not in hidden folders, not leading out of ``root``."""
    root = Path(root)
    if not root.is_dir():
        return []
    real_root = root.resolve()
    found = []
    for path in root.rglob(sweepdir.PARETO):
        sweep = path.parent
        parts = sweep.relative_to(root).parts
        if (sweep.resolve().is_relative_to(real_root) and len(parts) <= MAX_DEPTH
                and not any(p.startswith(".") for p in parts) and rundir.EXPORT not in parts):
            found.append(sweep)
    return sorted(found, key=lambda p: str(p.relative_to(root)))


def sweep_name(root: str | Path, sweep: Path) -> str:
    name = str(Path(sweep).relative_to(root))
    return Path(sweep).resolve().name if name == "." else name


def pareto_frame(root: str | Path, sweep: Path) -> pd.DataFrame:
    """pareto.json's rows: kind, label (budget or WIDTHxDEPTH), seed, test metric, ms and front
    mark per batch (``ms B=1``, ``front B=1``, ...), MACs, params, and ``run``: the run's name
    in the sidebar (relative to ``root``), empty when the run lies outside it."""
    pareto = sweepdir.read_pareto(sweep)
    batches = [str(b) for b in pareto["batches"]]
    rows = []
    for row in pareto["rows"]:
        run = Path(sweep) / row["run_dir"]
        inside = run.resolve().is_relative_to(Path(root).resolve())
        label = (f"budget {row['budget']:g}" if row["kind"] == "search"
                 else f"{row['width']}x{row['depth']}")
        rows.append({"kind": row["kind"], "label": label, "seed": row["seed"],
                     "test metric": row["test_metric"],
                     **{f"ms B={b}": row["ms"][b] for b in batches},
                     **{f"front B={b}": bool(row["pareto"][b]) for b in batches},
                     "MACs": round(row["macs"]), "params": row["params"],
                     "run": run_name(root, run) if inside else ""})
    return pd.DataFrame(rows)


def pareto_facts(sweep: Path) -> dict[str, Any]:
    """What the Pareto view says above its figure: task, metric and its direction, batches,
    threads."""
    pareto = sweepdir.read_pareto(sweep)
    return {k: pareto.get(k) for k in ("task", "metric_name", "higher_is_better", "batches",
                                       "threads")}
