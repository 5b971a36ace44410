"""The dnarch-deploy dashboard: ``streamlit run dashboard/app.py -- --runs DIR``.

The runs directory comes from ``--runs``, else the environment variable ``DNARCH_RUNS``, else
``runs/``. The app only reads files under it. Views (sidebar): Runs, Architecture, Evolution,
Training, Deployment; one run, or up to four side by side; Pareto: the accuracy-versus-latency
front of a sweep (``python -m search.sweep``) found under the runs directory.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from dashboard import data, figures
from dnarch_deploy import rundir
from dnarch_deploy.architecture import Architecture, SchemaError, compare_with_base

VIEWS = ("Runs", "Pareto", "Architecture", "Evolution", "Training", "Deployment")
MAX_COMPARE = 4
REFRESH_SECONDS = 5


def runs_root(argv: list[str]) -> Path:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--runs", default=os.environ.get("DNARCH_RUNS", "runs"))
    args, _ = parser.parse_known_args(argv)
    return Path(args.runs)


def number(fmt: str) -> st.column_config.NumberColumn:
    return st.column_config.NumberColumn(format=fmt)


def chart(fig: go.Figure, key: str) -> None:
    st.plotly_chart(fig, key=key, config={"displaylogo": False})


def chart_grid(charts: list[tuple[go.Figure, str]], wide: bool) -> None:
    """Figures two per row when the run has the page to itself, stacked when compared."""
    if not wide:
        for fig, key in charts:
            chart(fig, key)
        return
    for i in range(0, len(charts), 2):
        for column, (fig, key) in zip(st.columns(2), charts[i:i + 2]):
            with column:
                chart(fig, key)


def not_read(e: rundir.RefusedFile) -> None:
    """A file the dashboard refuses to read (a link out of the run, not a regular file, too
    large): said calmly, since nothing is broken in the dashboard or the run's other files."""
    st.warning(f"Not shown: {e}. The dashboard reads only regular files inside the run "
               f"directory, up to {rundir.MAX_RECORD_BYTES // 2**20} MiB each.")


def section(title: str, show: Callable[[], None]) -> None:
    """A titled part of a view; a damaged file shows its message here without hiding the rest."""
    st.markdown(f"#### {title}")
    try:
        show()
    except rundir.RefusedFile as e:
        not_read(e)
    except SchemaError as e:
        st.error(f"Cannot show {title.lower()}: {e}")


# --- views ----------------------------------------------------------------------------------------


def runs_view(root: Path, chosen: dict[str, Path]) -> None:
    runs = data.runs_frame(root)
    st.caption(f"{len(runs)} run(s) under `{root}`")
    shown = runs if (runs["problem"] != "").any() else runs.drop(columns="problem")
    st.dataframe(shown, hide_index=True, key="runs-table",
                 column_config={"test metric": number("%.4f"),
                                "complexity ratio": number("%.3f")})
    damaged = runs[runs["problem"] != ""]
    for _, row in damaged.iterrows():
        if row["status"] == "not read":
            st.warning(f"Run {row['run']}: a file was not read: {row['problem']}")
        else:
            st.error(f"Run {row['run']} is damaged: {row['problem']}")
    if runs["test metric"].notna().any():
        chart(figures.runs_scatter(runs), "runs-scatter")
    if chosen:
        st.markdown("#### Chosen runs side by side")
        st.dataframe(data.comparison_frame(chosen), key="runs-compare")


def load_architecture(run: Path) -> tuple[Architecture | None, str]:
    """The final architecture, or the latest snapshot of a run still training."""
    if (run / rundir.ARCHITECTURE).exists():
        return rundir.read_architecture(run), "final architecture"
    snapshots = rundir.read_architectures(run)
    if snapshots:
        return snapshots[-1], f"latest snapshot (epoch {snapshots[-1].epoch}), still searching"
    return None, ""


def architecture_view(run: Path, key: str, wide: bool) -> None:
    arch, what = load_architecture(run)
    if arch is None:
        st.info("No architecture yet: the search has not finished its first epoch.")
        return
    facts = data.architecture_facts(arch)
    st.caption(f"{what} · input {facts['input size']} · learn {arch.learn} · decoder "
               f"{facts['decoder']}")
    a, b, c, d = st.columns(4)
    a.metric("stream width", arch.stream_width, help=f"maximum {arch.max_width}")
    b.metric("depth", arch.depth, help=f"maximum {arch.max_depth}")
    c.metric("input size", facts["input size"])
    base = rundir.read_config(run).model
    vs = compare_with_base(arch, base["depth"], base["width"])
    d.metric("distance from base", f"{vs['distance']:.2f}",
             help=f"the base CCNN_{{{base['depth']},{base['width']}}} is 0: the mean over "
                  "depth, width, resolution and kernel of |log2(found / base)| (README: how far "
                  f"the search went). Widths {vs['width_range'][0]}-{vs['width_range'][1]}, "
                  f"mean {vs['width_mean']:g} (base {base['width']}); depth {arch.depth} "
                  f"(base {base['depth']}).")
    chart_grid([(figures.resolution_profile(arch), f"{key}-resolution"),
                (figures.kernel_profile(arch), f"{key}-kernel"),
                (figures.widths_figure(arch), f"{key}-widths"),
                (figures.depth_weight_figure(arch), f"{key}-depth")], wide)
    chart(figures.kernel_extents(arch), f"{key}-extents")
    blocks = data.blocks_frame(arch)
    st.dataframe(blocks, hide_index=True, key=f"{key}-blocks",
                 column_config={c: number("%.3f") for c in blocks.columns
                                if "fraction" in c or c == "depth weight"})
    st.download_button("Download table (CSV)", blocks.to_csv(index=False),
                       file_name=f"{key.replace('/', '_')}-architecture.csv", mime="text/csv",
                       key=f"{key}-csv")


def evolution_view(run: Path, key: str, wide: bool) -> None:
    snapshots = rundir.read_architectures(run)
    if not snapshots:
        st.info("No architecture snapshots yet (architectures.jsonl is empty or missing).")
        return
    evolution = data.evolution_frame(snapshots)
    by_epoch = data.snapshots_by_epoch(snapshots)
    epochs = sorted(by_epoch)
    epoch = epochs[-1]
    if len(epochs) > 1:
        epoch = st.select_slider("Epoch", options=epochs, value=epochs[-1], key=f"{key}-epoch")
    arch = by_epoch[epoch]
    st.caption(f"Epoch {epoch} of {epochs[-1]}: depth {arch.depth}, "
               f"stream width {arch.stream_width}")
    axes = data.axis_names(arch)
    quantities = [f"kernel {a}" for a in axes] + [f"resolution {a}" for a in axes]
    quantities += ["n_in", "n_mid", "n_out", "depth weight"]
    quantity = st.selectbox("Quantity over epochs", quantities, key=f"{key}-quantity")
    chart_grid([(figures.evolution_lines(evolution, quantity, epoch), f"{key}-lines"),
                (figures.evolution_totals(evolution, epoch), f"{key}-totals")], wide)
    st.markdown(f"#### The architecture at epoch {epoch}")
    chart_grid([(figures.resolution_profile(arch), f"{key}-evo-resolution"),
                (figures.kernel_profile(arch), f"{key}-evo-kernel"),
                (figures.widths_figure(arch), f"{key}-evo-widths"),
                (figures.depth_weight_figure(arch), f"{key}-evo-depth")], wide)


def training_view(run: Path, key: str, wide: bool) -> None:
    metrics = data.metrics_frame(run)
    if metrics.empty:
        st.info("No metrics logged yet (metrics.jsonl is empty or missing).")
        return
    name = data.metric_name(run, metrics)
    last = metrics[metrics["split"] != "test"].iloc[-1]
    if data.run_status(run) == "training":
        st.info(f"Still training: epoch {last['epoch']}, step {last['step']}. "
                f"This page refreshes every {REFRESH_SECONDS} s.")
    a, b, c, d = st.columns(4)
    a.metric("epoch", int(last["epoch"]))
    b.metric("step", int(last["step"]))
    val = metrics[(metrics["split"] == "val") & metrics["metric"].notna()]
    if not val.empty:
        c.metric(f"val {name}", f"{val['metric'].iloc[-1]:.4g}")
    ratio = metrics.loc[metrics["split"] != "test", "complexity_ratio"].dropna()
    if not ratio.empty:
        d.metric("complexity ratio", f"{ratio.iloc[-1]:.4g}")
    if (run / rundir.SUMMARY).exists():
        summary = rundir.read_summary(run)
        st.success(f"Finished: test {summary.metric_name} {summary.test_metric:.4g}, "
                   f"complexity ratio {summary.complexity_ratio:.4g}, "
                   f"{summary.params:,} parameters, {summary.macs:,.0f} MACs, "
                   f"{summary.wall_seconds:.1f} s")
        if summary.within_budget is False:
            st.warning(f"No epoch's network fit the budget (C/C_target at most 1 + "
                       f"budget_tolerance); the result is the best over it, epoch "
                       f"{summary.best_epoch}.")
    chart_grid([(figures.loss_figure(metrics), f"{key}-loss"),
                (figures.metric_figure(metrics, name), f"{key}-metric"),
                (figures.complexity_figure(metrics), f"{key}-complexity")], wide)


def deployment_view(run: Path, key: str, wide: bool) -> None:
    data.check_export(run)  # export/ leading out of the run: RefusedFile, shown as "not read"
    if not (run / data.REPORT).exists():
        hint = f"`python -m export.onnx {run}`"
        if data.export_status(run) == "exporting":
            st.info(f"Export in progress or incomplete: no export/report.json yet ({hint}).")
        else:
            st.info(f"Not exported yet. Export this run with {hint}.")
        return
    report = data.read_report(run)

    def latency() -> None:
        if not data.has_latency(report):
            st.info(f"Latency was not measured: this export ran with --no-bench. Export again "
                    f"without it to see it: `python -m export.onnx {run}`.")
            return
        batches = data.latency_batches(report)
        if not batches:
            st.info("Latency was not measured (export --no-bench).")
            return
        left, right = st.columns(2)
        batch = left.selectbox("Batch", batches, key=f"{key}-batch")
        # before report version 3 the "paper" figure was appendix C's, resampling left out
        search = "search's cost model" if report.version >= 3 else "appendix C (report v1-2)"
        cost = right.radio(
            "Theoretical cost", ["theoretical", "paper"], horizontal=True, key=f"{key}-cost",
            format_func={"theoretical": "as exported", "paper": search}.get,
            help="as exported: MACs of the operators this export lowered to, at the tactics it "
                 "chose; search's cost model: the same operators at the tactics export picks by "
                 "cost, the figure the budget constrained (they differ only where tuning by "
                 "measured latency chose another tactic, or carried a 1-D stream as its "
                 "spectrum)")
        frame = data.latency_frame(report, batch, cost)
        total = frame.iloc[-1]
        a, b, c = st.columns(3)
        a.metric(f"onnxruntime total (batch {batch})", f"{total['measured_ms']:.3f} ms")
        b.metric("theoretical total, as exported", f"{total['theoretical']:,.0f} MACs")
        c.metric(search, f"{total['paper']:,.0f} MACs")
        if frame["measured_ms"].iloc[:-1].isna().all():
            st.info("Per-layer latency was not measured (export --no-per-layer).")
        else:
            chart_grid([(figures.latency_scatter(frame, cost), f"{key}-latency-scatter"),
                        (figures.latency_bars(frame), f"{key}-latency-bars")], wide)
        st.dataframe(frame, hide_index=True, key=f"{key}-latency-table",
                     column_config={"theoretical": number("localized"),
                                    "paper": number("localized"),
                                    "measured_ms": number("%.4f"),
                                    "theoretical_ms": number("%.4f")})
        totals = data.totals_frame(report)
        if not totals.empty:
            chart(figures.totals_figure(totals), f"{key}-latency-totals")

    def equivalence() -> None:
        frame = data.equivalence_frame(report)
        st.dataframe(frame, hide_index=True, key=f"{key}-equivalence-table",
                     column_config={"max_abs": number("%.2e"), "max_rel": number("%.2e")})
        tolerance = data.report_tolerance(report)
        chart(figures.equivalence_figure(frame, tolerance), f"{key}-equivalence")

    def ops() -> None:
        chart(figures.ops_figure(data.ops_frame(report)), f"{key}-ops")

    def backends() -> None:
        st.dataframe(data.backends_frame(report), hide_index=True, key=f"{key}-backends")

    def artifacts() -> None:
        st.dataframe(data.artifacts_frame(run), hide_index=True, key=f"{key}-artifacts",
                     column_config={"bytes": number("localized")})

    section("Latency: measured vs theoretical", latency)
    section("Equivalence errors", equivalence)
    section("Op types", ops)
    section("Backend compatibility", backends)
    section("Artifacts", artifacts)


def open_architecture(run: str) -> None:
    """Show ``run`` in the Architecture view: a callback, so the sidebar's view and runs change
    before the page is drawn again."""
    st.session_state["view"] = "Architecture"
    st.session_state["runs"] = [run]


def pareto_view(root: Path) -> None:
    sweeps = {data.sweep_name(root, s): s for s in data.find_sweeps(root)}
    if not sweeps:
        st.info(f"No sweep under `{root}` (a folder holding pareto.json). Make one with "
                f"`python -m search.sweep --task ucr:GunPoint --out {root / 'sweep'}` "
                f"and its front appears here.")
        return
    name = next(iter(sweeps))
    if len(sweeps) > 1:
        name = st.selectbox("Sweep", list(sweeps), key="sweep")
    sweep = sweeps[name]
    facts = data.pareto_facts(sweep)
    frame = data.pareto_frame(root, sweep)
    better = "higher" if facts["higher_is_better"] else "lower"
    st.caption(f"`{name}` · {facts['task']} · {len(frame)} models · test {facts['metric_name']} "
               f"({better} is better) against onnxruntime latency measured in one session, "
               f"{facts['threads']} thread(s). Click a point to open its run's architecture.")
    batches = [str(b) for b in facts["batches"]]
    batch = st.radio("Batch", batches, horizontal=True, key="pareto-batch")

    def on_select() -> None:
        points = st.session_state["pareto-chart"].selection.points
        runs = [p.get("customdata") for p in points if p.get("customdata")]
        if runs:
            open_architecture(runs[0])

    st.plotly_chart(figures.pareto_figure(frame, batch, facts["metric_name"],
                                          facts["higher_is_better"], facts["threads"]),
                    key="pareto-chart", on_select=on_select, selection_mode="points",
                    config={"displaylogo": False})
    st.dataframe(frame, hide_index=True, key="pareto-table",
                 column_config={"test metric": number("%.4f"), "MACs": number("localized"),
                                **{f"ms B={b}": number("%.4f") for b in batches}})
    runs = [r for r in frame["run"] if r]
    if runs:
        left, right = st.columns([3, 1])
        left.selectbox("Model", runs, key="pareto-open")
        right.button("Open its architecture", key="pareto-open-button",
                     on_click=lambda: open_architecture(st.session_state["pareto-open"]))


RUN_VIEWS: dict[str, Callable[[Path, str, bool], None]] = {
    "Architecture": architecture_view,
    "Evolution": evolution_view,
    "Training": training_view,
    "Deployment": deployment_view,
}


def page(view: str, root: Path, chosen: dict[str, Path]) -> None:
    st.header(view)
    if view == "Runs":
        runs_view(root, chosen)
        return
    if view == "Pareto":
        try:
            pareto_view(root)
        except rundir.RefusedFile as e:
            not_read(e)
        except SchemaError as e:
            st.error(f"Cannot show the sweep: {e}")
        return
    if not chosen:
        st.info("Pick a run in the sidebar.")
        return
    columns = st.columns(len(chosen)) if len(chosen) > 1 else [st.container()]
    for column, (name, run) in zip(columns, chosen.items()):
        with column:
            st.subheader(name)
            try:
                RUN_VIEWS[view](run, name, len(chosen) == 1)
            except rundir.RefusedFile as e:
                not_read(e)
            except SchemaError as e:
                st.error(f"Cannot show this run's {view.lower()}: {e}")


def main() -> None:
    st.set_page_config(page_title="dnarch-deploy", layout="wide")
    root = runs_root(sys.argv[1:])
    st.sidebar.title("dnarch-deploy")
    st.sidebar.caption(f"Runs directory: `{root}`")
    runs = {data.run_name(root, run): run for run in data.find_runs(root)}
    if not runs:
        st.title("No runs yet")
        where = "does not exist" if not root.is_dir() else "holds no run directory"
        st.info(f"`{root}` {where}. Start a search with "
                f"`python -m search.run --task ucr:GunPoint --out {root / 'gunpoint'}` "
                f"and its run appears here.")
        return
    view = st.sidebar.radio("View", VIEWS, key="view")
    table = data.runs_frame(root)
    finished = table.loc[table["status"] == "finished", "run"].tolist()
    if "runs" not in st.session_state:  # the first page; later the widget's (or the Pareto
        st.session_state["runs"] = (finished or list(runs))[:1]  # view's) choice is kept,
    else:  # less any run gone since
        st.session_state["runs"] = [r for r in st.session_state["runs"] if r in runs]
    names = st.sidebar.multiselect(
        "Runs", list(runs), max_selections=MAX_COMPARE,
        key="runs",
        help=f"Pick one run, or up to {MAX_COMPARE} to compare side by side.")
    chosen = {name: runs[name] for name in names}
    if any(data.run_status(run) == "training" for run in chosen.values()):
        st.sidebar.info(f"Live: a chosen run is still training; refreshing every "
                        f"{REFRESH_SECONDS} s.")
        st.fragment(page, run_every=REFRESH_SECONDS)(view, root, chosen)
    else:
        page(view, root, chosen)


if __name__ == "__main__":  # streamlit runs the script as __main__; tests import it
    main()
