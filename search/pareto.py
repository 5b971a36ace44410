"""A sweep's result: DIR/pareto.json (a row per model, the Pareto-optimal rows marked; the fields
are written down in :func:`dnarch_deploy.sweepdir.read_pareto`) and DIR/pareto.png."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from dnarch_deploy import sweepdir as S
from dnarch_deploy.io import atomic_write_text
from dnarch_deploy.records import Summary

COLOURS = {"search": "#1f77b4", "base": "#ff7f0e"}  # plotly's first two: the dashboard's too


def pareto_rows(sweep_dir: Path, models: list[tuple[dict, Path]],
                summaries: dict[Path, Summary], latency: dict) -> list[dict]:
    """A row per (model, run directory): the model's description, its summary.json figures,
    its measured milliseconds per batch, and per batch whether it is Pareto-optimal."""
    ms = {Path(m["run_dir"]): m["median_ms"] for m in latency["models"]}
    rows = []
    for model, run_dir in models:
        summary = summaries[run_dir]
        search = model["kind"] == "search"
        rows.append({
            "kind": model["kind"],
            "budget": model["budget"] if search else None,
            "width": model["width"],
            "depth": model["depth"],
            "seed": model["seed"],
            "test_metric": summary.test_metric,
            "ms": ms[run_dir],
            "macs": summary.macs,
            "params": summary.params,
            "run_dir": str(run_dir.relative_to(sweep_dir)),
        })
    higher = next(iter(summaries.values())).higher_is_better
    for batch in [str(b) for b in latency["batches"]]:
        marks = S.pareto_front([r["ms"][batch] for r in rows], [r["test_metric"] for r in rows],
                               higher)
        for row, mark in zip(rows, marks):
            row.setdefault("pareto", {})[batch] = mark
    return rows


def write_pareto(sweep_dir: Path, plan: dict, models: list[tuple[dict, Path]],
                 summaries: dict[Path, Summary], latency: dict) -> dict:
    """DIR/pareto.json; returns its content."""
    first = next(iter(summaries.values()))
    pareto = {
        "schema": S.PARETO_SCHEMA,
        "version": S.VERSION,
        "task": plan["task"],
        "metric_name": first.metric_name,
        "higher_is_better": first.higher_is_better,
        "batches": latency["batches"],
        "threads": latency["threads"],
        "repeats": latency["repeats"],
        "environment": latency["environment"],
        "rows": pareto_rows(sweep_dir, models, summaries, latency),
    }
    atomic_write_text(sweep_dir / S.PARETO, json.dumps(pareto, indent=1) + "\n")
    return pareto


def mean_points(rows: list[dict], batch: str) -> dict[str, tuple[float, float]]:
    """Each model of a sweep as one point over its seeds, by :func:`label` (search points as
    ``search <budget>``, base points as ``WIDTHxDEPTH``): (mean ms at ``batch``, mean test
    metric)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(("search " if r["kind"] == "search" else "") + label(r), []).append(r)
    return {k: (statistics.mean(r["ms"][batch] for r in g),
                statistics.mean(r["test_metric"] for r in g)) for k, g in groups.items()}


def against_base_front(pareto: dict, batch: str) -> dict[float, list[str]]:
    """Per budget, the base points (mean over seeds) that dominate the searched networks' mean
    point at ``batch``: at least as fast and at least as good, better in one. An empty list: the
    searched networks are on or above the base family's front there."""
    points = mean_points(pareto["rows"], batch)
    sign = 1.0 if pareto["higher_is_better"] else -1.0
    base = {k: p for k, p in points.items() if not k.startswith("search ")}
    budgets = sorted({r["budget"] for r in pareto["rows"] if r["kind"] == "search"})
    out = {}
    for budget in budgets:
        ms, metric = points[f"search {budget:g}"]
        out[budget] = [k for k, (t, m) in base.items()
                       if t <= ms and sign * m >= sign * metric and (t, m) != (ms, metric)]
    return out


def label(row: dict) -> str:
    return f"{row['budget']:g}" if row["kind"] == "search" else f"{row['width']}x{row['depth']}"


def draw(pareto: dict, path: Path) -> None:
    """pareto.png: test metric against measured latency (log axis), one panel per batch size;
    searched networks and the base family in two colours, each labelled with its budget or
    WIDTHxDEPTH, the front over all of them drawn as a step line."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, batches = pareto["rows"], [str(b) for b in pareto["batches"]]
    fig, axes = plt.subplots(1, len(batches), figsize=(5.5 * len(batches), 4.2), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        for kind, colour in COLOURS.items():
            mine = [r for r in rows if r["kind"] == kind]
            ax.scatter([r["ms"][batch] for r in mine], [r["test_metric"] for r in mine],
                       color=colour, label="searched (budget)" if kind == "search"
                       else "base CCNN (width x depth)", zorder=3)
            for r in mine:
                ax.annotate(label(r), (r["ms"][batch], r["test_metric"]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        front = sorted((r["ms"][batch], r["test_metric"]) for r in rows if r["pareto"][batch])
        if front:
            xs, ys = zip(*front)
            ax.step(xs, ys, where="post", color="0.4", linestyle="--", label="Pareto front",
                    zorder=2)
        ax.set_xscale("log")
        plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.3g}")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain)
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.set_xlabel(f"onnxruntime ms per batch of {batch} ({pareto['threads']} thread(s))")
        ax.set_ylabel(f"test {pareto['metric_name']}")
        ax.set_title(f"{pareto['task']}, batch {batch}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    tmp.replace(path)
