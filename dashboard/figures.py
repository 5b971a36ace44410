"""Plotly figure builders: pure functions from the tidy frames of :mod:`dashboard.data` to figures.

No Streamlit here, so every figure can be built and checked in a plain test.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dnarch_deploy.architecture import Architecture
from dnarch_deploy.sweepdir import pareto_front

from .data import axis_names, blocks_frame

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf"]
SPLIT_DASH = {"train": "solid", "val": "dash", "test": "dot"}
SPLIT_COLOR = {"train": COLORS[0], "val": COLORS[1], "test": COLORS[2]}
HEIGHT = 360


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = HEIGHT) -> go.Figure:
    """Title, axis titles and a horizontal legend in the bottom margin (below the axis title)."""
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=height,
                      margin=dict(l=50, r=20, t=50, b=100), template="plotly_white",
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0))
    return fig


def _block_axis(fig: go.Figure, blocks: pd.DataFrame) -> None:
    fig.update_xaxes(tickmode="array", tickvals=list(blocks["block"]), type="linear")


# --- architecture ---------------------------------------------------------------------------------


def resolution_profile(arch: Architecture) -> go.Figure:
    """Resolution per axis across depth, as bars centred on zero (bar ``i`` spans
    ``[-r_i / 2, r_i / 2]``): a U-Net-like network shows as an hourglass."""
    blocks = blocks_frame(arch)
    fig = go.Figure()
    for i, axis in enumerate(axis_names(arch)):
        resolution = blocks[f"resolution {axis}"]
        fig.add_bar(x=blocks["block"], y=resolution, base=-resolution / 2,
                    name=f"resolution {axis}", marker_color=COLORS[i], text=resolution,
                    textposition="inside", hovertemplate="block %{x}: %{y} samples")
        size = arch.input_size[i]
        for side in (-1, 1):
            fig.add_hline(y=side * size / 2, line_dash="dash", line_color=COLORS[i])
    fig.update_layout(barmode="group")
    _block_axis(fig, blocks)
    sizes = "×".join(str(s) for s in arch.input_size)
    return _layout(fig, f"Resolution across depth (dashed: input {sizes})", "block",
                   "samples, centred")


def kernel_profile(arch: Architecture) -> go.Figure:
    """Kernel size per axis for each block (in input samples), grouped bars."""
    blocks = blocks_frame(arch)
    fig = go.Figure()
    for i, axis in enumerate(axis_names(arch)):
        fig.add_bar(x=blocks["block"], y=blocks[f"kernel {axis}"], name=f"kernel size {axis}",
                    marker_color=COLORS[i], text=blocks[f"kernel {axis}"], textposition="outside",
                    cliponaxis=False)
    _block_axis(fig, blocks)
    return _layout(fig, "Kernel size per block", "block", "kernel size (input samples)")


def widths_figure(arch: Architecture) -> go.Figure:
    """n_in, n_mid, n_out per block, with the stream width as a line."""
    blocks = blocks_frame(arch)
    fig = go.Figure()
    for i, column in enumerate(("n_in", "n_mid", "n_out")):
        fig.add_bar(x=blocks["block"], y=blocks[column], name=column, marker_color=COLORS[i + 2])
    fig.add_hline(y=arch.stream_width, line_dash="dash",
                  annotation_text=f"stream width = {arch.stream_width}")
    _block_axis(fig, blocks)
    return _layout(fig, "Widths per block", "block", "channels")


def depth_weight_figure(arch: Architecture, threshold: float = 0.1) -> go.Figure:
    """Depth-mask value per block; blocks under the threshold are removed at export."""
    blocks = blocks_frame(arch)
    fig = go.Figure()
    fig.add_bar(x=blocks["block"], y=blocks["depth weight"], name="depth weight",
                marker_color=COLORS[5])
    fig.add_hline(y=threshold, line_dash="dot", annotation_text=f"threshold {threshold}")
    _block_axis(fig, blocks)
    fig.update_yaxes(range=[0, 1.05])
    return _layout(fig, "Depth weight per block", "block", "depth-mask value")


def kernel_extents(arch: Architecture) -> go.Figure:
    """Each block's kernel extent drawn centred over the input grid (2-D: rectangles, earlier
    blocks with wider lines so equal kernels stay visible; 1-D: one segment per block)."""
    fig = go.Figure()
    if len(arch.input_size) == 2:
        height, width = arch.input_size
        fig.add_scatter(x=[0, width, width, 0, 0], y=[0, 0, height, height, 0], name="input grid",
                        mode="lines", line=dict(color="black", width=2), fill="toself",
                        fillcolor="rgba(0,0,0,0.04)")
        for j, b in enumerate(arch.blocks):
            kh, kw = b.kernel_size
            x0, y0 = (width - kw) / 2, (height - kh) / 2
            fig.add_scatter(x=[x0, x0 + kw, x0 + kw, x0, x0], y=[y0, y0, y0 + kh, y0 + kh, y0],
                            name=f"block {b.index}: {kh}×{kw}", mode="lines",
                            line=dict(color=COLORS[j % len(COLORS)],
                                      width=2 + 3 * (len(arch.blocks) - 1 - j)))
        fig.update_xaxes(constrain="domain")
        fig.update_yaxes(scaleanchor="x", scaleratio=1, autorange="reversed", constrain="domain")
        return _layout(fig, "Kernel extents over the input grid", "W (samples)", "H (samples)",
                       height=420)
    (length,) = arch.input_size
    fig.add_scatter(x=[0, length], y=[-1, -1], name="input", mode="lines",
                    line=dict(color="black", width=6))
    labels = {-1: f"input ({length})"}
    for j, b in enumerate(arch.blocks):
        (k,) = b.kernel_size
        x0 = (length - k) / 2
        fig.add_scatter(x=[x0, x0 + k], y=[b.index, b.index], name=f"block {b.index}: {k}",
                        mode="lines+markers", line=dict(color=COLORS[j % len(COLORS)], width=6))
        labels[b.index] = f"block {b.index} ({k})"
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(labels),
                     ticktext=list(labels.values()))
    fig.update_layout(showlegend=False)
    fig = _layout(fig, "Kernel extents over the input", "position (samples)", "")
    fig.update_layout(margin=dict(l=110, b=60))
    return fig


# --- evolution ------------------------------------------------------------------------------------


def evolution_lines(evolution: pd.DataFrame, column: str, epoch: int | None = None) -> go.Figure:
    """One line per block: ``column`` (e.g. "kernel L", "resolution H", "n_mid") over epochs,
    with a marker line at the selected ``epoch``."""
    fig = go.Figure()
    for j, (block, rows) in enumerate(evolution.groupby("block", sort=True)):
        fig.add_scatter(x=rows["epoch"], y=rows[column], name=f"block {block}",
                        mode="lines+markers", line=dict(color=COLORS[j % len(COLORS)]))
    if epoch is not None:
        fig.add_vline(x=epoch, line_dash="dot", annotation_text=f"epoch {epoch}")
    return _layout(fig, f"{column} over epochs", "epoch", column)


def evolution_totals(evolution: pd.DataFrame, epoch: int | None = None) -> go.Figure:
    """Depth (blocks in use) and stream width over epochs."""
    per_epoch = evolution.groupby("epoch", sort=True)[["stream width", "depth"]].first()
    fig = go.Figure()
    fig.add_scatter(x=per_epoch.index, y=per_epoch["stream width"], name="stream width",
                    mode="lines+markers")
    fig.add_scatter(x=per_epoch.index, y=per_epoch["depth"], name="depth", mode="lines+markers",
                    yaxis="y2")
    fig.update_layout(yaxis2=dict(title="depth (blocks)", overlaying="y", side="right"))
    if epoch is not None:
        fig.add_vline(x=epoch, line_dash="dot")
    return _layout(fig, "Stream width and depth over epochs", "epoch", "stream width")


# --- training -------------------------------------------------------------------------------------


def _scored_as(split: str, rows: pd.DataFrame) -> str:
    """How a split's loss and metric were scored: validation rounds with BatchNorm on each
    batch's own statistics, as the search picks its result; the test point as export ships the
    network (BatchNorm calibrated on the training inputs), in runs that record both figures
    (search.train.evaluate_shipped), else as the validation rounds."""
    if split == "test" and rows.get("metric_batch_statistics", pd.Series()).notna().any():
        return " (as shipped)"
    return " (batch statistics)" if split in ("val", "test") else ""


def _by_split(metrics: pd.DataFrame, column: str, title: str, y: str,
              scored: bool = False) -> go.Figure:
    """One trace per split of ``column`` over steps; ``scored``: a loss or metric, whose legend
    says how each split was scored (:func:`_scored_as`)."""
    fig = go.Figure()
    for split in ("train", "val", "test"):
        rows = metrics[(metrics["split"] == split)]
        rows = rows[rows[column].notna()] if column in rows else rows.iloc[0:0]
        if rows.empty:
            continue
        sparse = len(rows) < 50 or split != "train"
        name = f"{split} {column}" + (_scored_as(split, rows) if scored else "")
        fig.add_scatter(x=rows["step"], y=rows[column], name=name,
                        mode="lines+markers" if sparse else "lines",
                        line=dict(dash=SPLIT_DASH[split], color=SPLIT_COLOR[split]),
                        marker=dict(size=10 if split == "test" else 6),
                        customdata=rows["epoch"], hovertemplate="epoch %{customdata}: %{y:.4g}")
    return _layout(fig, title, "step", y)


def loss_figure(metrics: pd.DataFrame) -> go.Figure:
    return _by_split(metrics, "loss", "Loss", "loss", scored=True)


def metric_figure(metrics: pd.DataFrame, name: str) -> go.Figure:
    column = name if name in metrics else "metric"
    return _by_split(metrics, column, f"Task metric: {name}", name, scored=True)


def complexity_figure(metrics: pd.DataFrame, target: float = 1.0) -> go.Figure:
    """Complexity ratio C_curr / C_target over steps against the target line (the budget: 1)."""
    fig = _by_split(metrics, "complexity_ratio", "Complexity ratio vs target", "C / C_target")
    fig.add_hline(y=target, line_dash="dash", line_color="red",
                  annotation_text=f"target {target:g}")
    return fig


# --- deployment -----------------------------------------------------------------------------------


def latency_scatter(latency: pd.DataFrame, cost: str = "theoretical") -> go.Figure:
    """Per-layer measured vs theoretical latency (ms) with the y = x line: a layer above the line
    takes more time than its share of the cost predicts."""
    layers = latency[(latency["layer"] != "total") & latency["measured_ms"].notna()]
    fig = go.Figure()
    fig.add_scatter(x=layers["theoretical_ms"], y=layers["measured_ms"], name="layers",
                    mode="markers+text", text=layers["layer"], textposition="top center",
                    marker=dict(size=11, color=COLORS[0]), cliponaxis=False,
                    hovertemplate="%{text}<br>theoretical %{x:.3g} ms<br>measured %{y:.3g} ms")
    top = max([*layers["theoretical_ms"], *layers["measured_ms"], 1e-3]) * 1.15
    fig.add_scatter(x=[0, top], y=[0, top], name="y = x", mode="lines",
                    line=dict(color="gray", dash="dash"))
    return _layout(fig, "Measured vs theoretical latency per layer",
                   f"theoretical (ms: share of {cost} MACs × measured total)", "measured (ms)")


def latency_bars(latency: pd.DataFrame) -> go.Figure:
    """Per-layer measured and theoretical latency side by side."""
    layers = latency[latency["layer"] != "total"]
    fig = go.Figure()
    fig.add_bar(x=layers["layer"], y=layers["measured_ms"], name="measured", marker_color=COLORS[0])
    fig.add_bar(x=layers["layer"], y=layers["theoretical_ms"], name="theoretical",
                marker_color=COLORS[1])
    fig.update_layout(barmode="group")
    return _layout(fig, "Latency per layer", "layer", "ms")


def totals_figure(totals: pd.DataFrame) -> go.Figure:
    """Total latency per backend, one bar group per batch size (log scale: they differ a lot)."""
    fig = go.Figure()
    for j, (batch, rows) in enumerate(totals.groupby("batch", sort=False)):
        fig.add_bar(x=rows["backend"], y=rows["measured_ms"], name=f"batch {batch}",
                    marker_color=COLORS[j], text=[f"{v:.3g}" for v in rows["measured_ms"]],
                    textposition="outside", cliponaxis=False)
    fig.update_yaxes(type="log", dtick=1)
    fig.update_layout(barmode="group")
    return _layout(fig, "Total latency per backend", "backend", "ms (log)")


def equivalence_figure(equivalence: pd.DataFrame, tolerance: float | None = None) -> go.Figure:
    """max_abs and max_rel per verification stage (log scale), with the tolerance line."""
    fig = go.Figure()
    for j, column in enumerate(("max_abs", "max_rel")):
        values = [max(v, 1e-12) for v in equivalence[column]]  # log axis: exact zeros at 1e-12
        fig.add_bar(x=equivalence["stage"], y=values, name=column, marker_color=COLORS[j])
    if tolerance:
        fig.add_hline(y=tolerance, line_dash="dash", line_color="red",
                      annotation_text=f"tolerance {tolerance:g} (max_rel)")
    fig.update_yaxes(type="log", dtick=1)
    fig.update_layout(barmode="group")
    return _layout(fig, "Equivalence error per stage", "stage", "error (log)")


def ops_figure(ops: pd.DataFrame) -> go.Figure:
    """Op-type counts (horizontal bars, most frequent on top)."""
    fig = go.Figure()
    fig.add_bar(y=ops["op"], x=ops["count"], name="model", orientation="h")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Op types", "count", "op", height=max(HEIGHT, 24 * len(ops) + 100))


def runs_scatter(runs: pd.DataFrame) -> go.Figure:
    """Every finished run: test metric against complexity ratio, one panel per metric (their
    scales differ: accuracy, relative L2 error, ...)."""
    done = runs[runs["test metric"].notna() & runs["complexity ratio"].notna()]
    metrics = list(dict.fromkeys(done["metric"]))
    fig = make_subplots(rows=1, cols=max(len(metrics), 1), subplot_titles=metrics,
                        horizontal_spacing=0.12)
    fig = _layout(fig, "Test metric vs complexity ratio", "", "")
    fig.update_layout(showlegend=False, margin=dict(t=80, b=60))
    for j, metric in enumerate(metrics):
        rows = done[done["metric"] == metric]
        fig.add_scatter(x=rows["complexity ratio"], y=rows["test metric"], name=str(metric),
                        mode="markers+text", text=rows["run"], textposition="top center",
                        marker=dict(size=12, color=COLORS[j % len(COLORS)]), cliponaxis=False,
                        row=1, col=j + 1)
        fig.update_yaxes(title_text=f"test {metric}", row=1, col=j + 1)
        fig.update_xaxes(title_text="complexity ratio (C / C_target)", row=1, col=j + 1)
    return fig


# --- sweeps ---------------------------------------------------------------------------------------

KIND_COLOR = {"search": COLORS[0], "base": COLORS[1]}  # pareto.png's colours too
KIND_NAME = {"search": "searched (budget)", "base": "base CCNN (width x depth)"}


def pareto_figure(frame: pd.DataFrame, batch: str, metric: str, higher_is_better: bool = True,
                  threads: int | None = None) -> go.Figure:
    """A sweep's models: test metric against measured latency at one batch size (log axis);
    searched networks and the base family in two colours, each family's own front a thin line
    of its colour, the front over all models a dashed grey step line. Every point carries its
    run's name (``customdata``) for selection."""
    ms = f"ms B={batch}"
    fig = go.Figure()
    for kind, color in KIND_COLOR.items():
        rows = frame[frame["kind"] == kind]
        if rows.empty:
            continue
        fig.add_scatter(x=rows[ms], y=rows["test metric"], name=KIND_NAME[kind],
                        mode="markers+text", text=rows["label"], textposition="top center",
                        customdata=rows["run"], marker=dict(size=12, color=color),
                        hovertemplate="%{text}<br>%{x:.4g} ms, " + metric
                        + " %{y:.4g}<br>%{customdata}<extra></extra>")
        own = rows[pareto_front(list(rows[ms]), list(rows["test metric"]), higher_is_better)]
        own = own.sort_values(ms)
        fig.add_scatter(x=own[ms], y=own["test metric"], name=f"{kind} front", mode="lines",
                        line=dict(color=color, width=1, shape="hv"), hoverinfo="skip")
    front = frame[frame[f"front B={batch}"]].sort_values(ms)
    fig.add_scatter(x=front[ms], y=front["test metric"], name="Pareto front (all)",
                    mode="lines", line=dict(color="#7f7f7f", dash="dash", shape="hv"),
                    hoverinfo="skip")
    where = f", {threads} thread(s)" if threads else ""
    _layout(fig, f"Test {metric} vs onnxruntime latency, batch {batch}",
            f"ms per batch of {batch} (log scale{where})", f"test {metric}", height=440)
    fig.update_xaxes(type="log")
    return fig
