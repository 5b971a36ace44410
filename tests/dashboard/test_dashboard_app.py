"""Every view of the dashboard on real run directories, through Streamlit's AppTest: what is shown
(numbers, titles, table rows, figure data), and the friendly states."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import AppTest, app_test

from dnarch_deploy import rundir
from dnarch_deploy.architecture import compare_with_base

from .dashboard_runs import DAMAGED, DARCY, GUNPOINT, TRAINING

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"


def open_app(monkeypatch: pytest.MonkeyPatch, runs: Path, view: str = "Runs",
             chosen: list[str] | None = None) -> AppTest:
    monkeypatch.setenv("DNARCH_RUNS", str(runs))
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, at.exception
    if view != "Runs" or chosen is not None:
        at.sidebar.radio(key="view").set_value(view)
        if chosen is not None:
            at.sidebar.multiselect(key="runs").set_value(chosen)
        at.run()
        assert not at.exception, at.exception
    return at


def decode(value: object) -> list:
    """A plotly array from the figure JSON: plain list or {"dtype", "bdata"} (base64)."""
    if isinstance(value, dict) and "bdata" in value:
        array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return array.reshape(value["shape"]).tolist() if "shape" in value else array.tolist()
    return list(value)


def charts(at: AppTest) -> dict[str, dict]:
    """The plotly figures on the page by title (the first of each title)."""
    figures = {}
    for chart in at.get("plotly_chart"):
        figure = json.loads(chart.proto.spec)
        figures.setdefault(figure["layout"]["title"]["text"], figure)
    return figures


def titles(at: AppTest) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


def trace(figure: dict, name: str) -> dict:
    matches = [t for t in figure["data"] if t.get("name") == name]
    assert matches, f"no trace {name!r} in {[t.get('name') for t in figure['data']]}"
    return matches[0]


def metric(at: AppTest, label: str) -> str:
    values = [m.value for m in at.metric if m.label == label]
    assert values, f"no metric {label!r} in {[m.label for m in at.metric]}"
    return values[0]


# --- friendly states --------------------------------------------------------------------------


def test_empty_directory_says_how_to_start(monkeypatch, empty_dir):
    at = open_app(monkeypatch, empty_dir)
    assert at.title[0].value == "No runs yet"
    assert "holds no run directory" in at.info[0].value
    assert "python -m search.run" in at.info[0].value


def test_missing_directory_is_named(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path / "nowhere")
    assert at.title[0].value == "No runs yet"
    assert f"{tmp_path / 'nowhere'}` does not exist" in at.info[0].value


# --- runs ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_runs_table_lists_every_run(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir)
    table = at.dataframe[0].value.set_index("run")
    assert sorted(table.index) == sorted([DAMAGED, DARCY, GUNPOINT, TRAINING])
    summary = rundir.read_summary(runs_dir / GUNPOINT)
    row = table.loc[GUNPOINT]
    assert (row["task"], row["learn"], row["metric"]) == ("ucr:GunPoint", summary.learn,
                                                          "accuracy")
    assert row["test metric"] == pytest.approx(summary.test_metric)
    assert row["complexity ratio"] == pytest.approx(summary.complexity_ratio)
    assert table.loc[DARCY, "task"] == "darcy"
    assert table.loc[DARCY, "export"] == "not exported"
    assert table.loc[TRAINING, "status"] == "training"
    assert table.loc[DAMAGED, "status"] == "damaged"
    assert "architecture.json: field 'blocks[0].n_mid'" in table.loc[DAMAGED, "problem"]
    assert any("Run damaged is damaged" in e.value and "blocks[0].n_mid" in e.value
               for e in at.error)
    scatter = charts(at)["Test metric vs complexity ratio"]
    points = {name: (x, y) for t in scatter["data"]
              for name, x, y in zip(decode(t["text"]), decode(t["x"]), decode(t["y"]))}
    assert points[GUNPOINT] == pytest.approx((summary.complexity_ratio, summary.test_metric))


def test_runs_exported_status(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir)
    assert at.dataframe[0].value.set_index("run").loc[GUNPOINT, "export"] == "exported"


def test_default_run_is_a_finished_undamaged_one(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir)
    assert at.sidebar.multiselect(key="runs").value == [DARCY]


def test_compare_up_to_four_side_by_side(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Runs", [GUNPOINT, DARCY])
    compare = at.dataframe[1].value
    assert list(compare.columns) == [GUNPOINT, DARCY]
    assert compare.loc["task", DARCY] == "darcy"
    assert compare.loc["metric_name", GUNPOINT] == "accuracy"
    at = open_app(monkeypatch, runs_dir, "Training", [GUNPOINT, DARCY, TRAINING, DAMAGED])
    assert [s.value for s in at.subheader] == [GUNPOINT, DARCY, TRAINING, DAMAGED]
    assert titles(at).count("Loss") == 4


# --- architecture ---------------------------------------------------------------------------------


def test_architecture_1d(monkeypatch, runs_dir):
    stores: list[MemoryMediaFileStorage] = []

    class Recording(MemoryMediaFileStorage):
        def __init__(self, *args):
            super().__init__(*args)
            stores.append(self)

    monkeypatch.setattr(app_test, "MemoryMediaFileStorage", Recording)
    at = open_app(monkeypatch, runs_dir, "Architecture", [GUNPOINT])
    arch = rundir.read_architecture(runs_dir / GUNPOINT)
    assert metric(at, "stream width") == str(arch.stream_width)
    assert metric(at, "depth") == str(arch.depth)
    assert metric(at, "input size") == "150"
    model = rundir.read_config(runs_dir / GUNPOINT).model
    vs = compare_with_base(arch, model["depth"], model["width"])
    assert metric(at, "distance from base") == f"{vs['distance']:.2f}"
    figures = charts(at)
    resolution = trace(figures["Resolution across depth (dashed: input 150)"], "resolution L")
    assert decode(resolution["y"]) == [b.resolution[0] for b in arch.blocks]
    assert decode(resolution["base"]) == [-b.resolution[0] / 2 for b in arch.blocks]
    kernel = trace(figures["Kernel size per block"], "kernel size L")
    assert decode(kernel["y"]) == [b.kernel_size[0] for b in arch.blocks]
    widths = figures["Widths per block"]
    for column in ("n_in", "n_mid", "n_out"):
        assert decode(trace(widths, column)["y"]) == [getattr(b, column) for b in arch.blocks]
    assert widths["layout"]["shapes"][0]["y0"] == arch.stream_width
    depth = trace(figures["Depth weight per block"], "depth weight")
    assert decode(depth["y"]) == pytest.approx([b.depth_weight for b in arch.blocks])
    extents = figures["Kernel extents over the input"]
    for b in arch.blocks:
        x = decode(trace(extents, f"block {b.index}: {b.kernel_size[0]}")["x"])
        assert x[1] - x[0] == b.kernel_size[0]
    table = at.dataframe[0].value
    assert len(table) == arch.depth
    assert table["kernel L"].tolist() == [b.kernel_size[0] for b in arch.blocks]
    assert table["resolution L"].tolist() == [b.resolution[0] for b in arch.blocks]
    button = at.get("download_button")[0].proto
    assert button.label == "Download table (CSV)"
    csv = stores[-1].get_file(button.url.rsplit("/", 1)[1]).content.decode()
    assert csv.splitlines()[0].startswith("block,kernel size,resolution,kernel L")
    assert len(csv.splitlines()) == arch.depth + 1


def test_architecture_2d_draws_kernel_rectangles(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Architecture", [DARCY])
    arch = rundir.read_architecture(runs_dir / DARCY)
    height, width = arch.input_size
    figures = charts(at)
    resolution = figures[f"Resolution across depth (dashed: input {height}×{width})"]
    assert decode(trace(resolution, "resolution H")["y"]) == [b.resolution[0] for b in arch.blocks]
    assert decode(trace(resolution, "resolution W")["y"]) == [b.resolution[1] for b in arch.blocks]
    extents = figures["Kernel extents over the input grid"]
    assert decode(trace(extents, "input grid")["x"]) == [0, width, width, 0, 0]
    for b in arch.blocks:
        kh, kw = b.kernel_size
        rect = trace(extents, f"block {b.index}: {kh}×{kw}")
        x, y = decode(rect["x"]), decode(rect["y"])
        assert (max(x) - min(x), max(y) - min(y)) == (kw, kh)
        assert (min(x) + max(x)) / 2 == width / 2  # centred on the grid
    assert at.dataframe[0].value["kernel size"].tolist() == [
        f"{b.kernel_size[0]}×{b.kernel_size[1]}" for b in arch.blocks]


@pytest.mark.slow
def test_architecture_of_a_training_run_is_its_latest_snapshot(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Architecture", [TRAINING])
    snapshots = rundir.read_architectures(runs_dir / TRAINING)
    assert f"latest snapshot (epoch {snapshots[-1].epoch})" in at.main.caption[0].value
    assert any("still training" in i.value for i in at.sidebar.info)


def test_damaged_architecture_names_file_and_field(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Architecture", [DAMAGED])
    message = at.error[0].value
    assert str(runs_dir / DAMAGED / "architecture.json") in message
    assert "field 'blocks[0].n_mid' must be an integer >= 1, got 'wide'" in message
    assert not at.get("plotly_chart")


# --- evolution ------------------------------------------------------------------------------------


def test_evolution_slider_moves_through_epochs(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Evolution", [GUNPOINT])
    snapshots = rundir.read_architectures(runs_dir / GUNPOINT)
    epochs = [a.epoch for a in snapshots]
    slider = at.select_slider(key=f"{GUNPOINT}-epoch")
    assert list(slider.options) == [str(e) for e in epochs] and slider.value == epochs[-1]
    lines = charts(at)["kernel L over epochs"]
    for b in snapshots[0].blocks:
        block = trace(lines, f"block {b.index}")
        assert decode(block["x"]) == epochs
        assert decode(block["y"]) == [a.blocks[b.index].kernel_size[0] for a in snapshots
                                      if b.index < len(a.blocks)]
    slider.set_value(epochs[0]).run()
    assert f"Epoch {epochs[0]} of {epochs[-1]}" in at.main.caption[0].value
    first = snapshots[0]
    kernel = trace(charts(at)["Kernel size per block"], "kernel size L")
    assert decode(kernel["y"]) == [b.kernel_size[0] for b in first.blocks]
    assert charts(at)["kernel L over epochs"]["layout"]["shapes"][0]["x0"] == epochs[0]
    at.selectbox(key=f"{GUNPOINT}-quantity").set_value("n_mid").run()
    lines = charts(at)["n_mid over epochs"]
    assert decode(trace(lines, "block 0")["y"]) == [a.blocks[0].n_mid for a in snapshots]


def test_evolution_2d_offers_both_axes(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Evolution", [DARCY])
    options = at.selectbox(key=f"{DARCY}-quantity").options
    assert options[:4] == ["kernel H", "kernel W", "resolution H", "resolution W"]


# --- training -------------------------------------------------------------------------------------


def test_training_curves_match_metrics_file(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Training", [GUNPOINT])
    rows = rundir.read_jsonl(runs_dir / GUNPOINT / "metrics.jsonl")
    summary = rundir.read_summary(runs_dir / GUNPOINT)
    train = [r for r in rows if r["split"] == "train"]
    val = [r for r in rows if r["split"] == "val"]
    figures = charts(at)
    loss = figures["Loss"]
    assert decode(trace(loss, "train loss")["x"]) == [r["step"] for r in train]
    assert decode(trace(loss, "train loss")["y"]) == pytest.approx([r["loss"] for r in train])
    # the legend says how each split was scored: validation as the search scores it, the test
    # point as export ships the network
    assert decode(trace(loss, "val loss (batch statistics)")["y"]) == pytest.approx(
        [r["loss"] for r in val])
    accuracy = figures["Task metric: accuracy"]
    assert decode(trace(accuracy, "val accuracy (batch statistics)")["y"]) == pytest.approx(
        [r["accuracy"] for r in val])
    assert decode(trace(accuracy, "test accuracy (as shipped)")["y"]) == pytest.approx(
        [summary.test_metric])
    complexity = figures["Complexity ratio vs target"]
    assert decode(trace(complexity, "train complexity_ratio")["y"]) == pytest.approx(
        [r["complexity_ratio"] for r in train])
    target = complexity["layout"]["shapes"][0]
    assert (target["y0"], target["y1"]) == (1.0, 1.0)
    assert metric(at, "epoch") == str(train[-1]["epoch"])
    assert metric(at, "val accuracy") == f"{val[-1]['accuracy']:.4g}"
    assert f"test accuracy {summary.test_metric:.4g}" in at.success[0].value
    assert f"{summary.params:,} parameters" in at.success[0].value


def test_training_dense_task_metric(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Training", [DARCY])
    name = rundir.read_summary(runs_dir / DARCY).metric_name
    assert f"Task metric: {name}" in titles(at)


def test_training_run_still_running_refreshes(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Training", [TRAINING])
    rows = rundir.read_jsonl(runs_dir / TRAINING / "metrics.jsonl")
    message = at.info[0].value
    assert message.startswith(f"Still training: epoch {rows[-1]['epoch']}, step {rows[-1]['step']}")
    assert "refreshes every" in message
    assert not at.success  # no summary yet
    assert "Loss" in titles(at)


# --- deployment -----------------------------------------------------------------------------------


def exported(runs_dir: Path) -> dict:
    return json.loads((runs_dir / GUNPOINT / "export" / "report.json").read_text())


def test_a_report_from_before_version_3_labels_its_cost_appendix_c(monkeypatch, runs_dir,
                                                                     tmp_path):
    """Before report version 3 the "paper" figure was appendix C's (resampling left out), not
    the search's cost model of the deployed network: the view says so."""
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(runs_dir / GUNPOINT, runs / GUNPOINT)
    path = runs / GUNPOINT / "export" / "report.json"
    report = json.loads(path.read_text())
    report["version"] = 2
    path.write_text(json.dumps(report))
    at = open_app(monkeypatch, runs, "Deployment", [GUNPOINT])
    paper = report["latency"]["total"]["paper"]
    assert metric(at, "appendix C (report v1-2)") == f"{paper:,.0f} MACs"
    assert not [m for m in at.metric if m.label == "search's cost model"]


def test_deployment_shows_report(monkeypatch, runs_dir):
    report = exported(runs_dir)
    at = open_app(monkeypatch, runs_dir, "Deployment", [GUNPOINT])
    latency = report["latency"]
    layers, total = latency["layers"], latency["total"]
    assert metric(at, "onnxruntime total (batch 1)") == f"{total['measured_ms']:.3f} ms"
    assert metric(at, "theoretical total, as exported") == f"{total['theoretical']:,.0f} MACs"
    assert metric(at, "search's cost model") == f"{total['paper']:,.0f} MACs"
    figures = charts(at)
    scatter = figures["Measured vs theoretical latency per layer"]
    points = trace(scatter, "layers")
    assert decode(points["text"]) == list(layers)
    assert decode(points["y"]) == pytest.approx([e["measured_ms"] for e in layers.values()])
    shares = [e["theoretical"] / total["theoretical"] * total["measured_ms"]
              for e in layers.values()]
    assert decode(points["x"]) == pytest.approx(shares)
    identity = trace(scatter, "y = x")
    assert decode(identity["x"]) == decode(identity["y"])
    bars = figures["Latency per layer"]
    assert decode(trace(bars, "measured")["y"]) == pytest.approx(
        [e["measured_ms"] for e in layers.values()])
    totals = figures["Total latency per backend"]
    batch1 = trace(totals, "batch 1")
    assert decode(batch1["x"])[0] == "onnxruntime"
    assert decode(batch1["y"])[0] == pytest.approx(total["measured_ms"])
    assert "PyTorch eager, static" in decode(batch1["x"])
    tables = [d.value for d in at.dataframe]
    latency_table = tables[0]
    assert latency_table["layer"].tolist() == [*layers, "total"]
    assert latency_table["tactic"].tolist()[1:-2] == report["tactics"]
    equivalence = next(t for t in tables if "stage" in t.columns)
    assert equivalence["stage"].tolist() == list(report["equivalence"])
    assert equivalence["max_rel"].tolist() == pytest.approx(
        [v["max_rel"] for v in report["equivalence"].values()])
    assert equivalence["within tolerance"].all()
    ops = figures["Op types"]
    counts = {op: n for t in ops["data"] for op, n in zip(decode(t["y"]), decode(t["x"]))}
    assert counts == report["ops"]
    backends = next(t for t in tables if "compatible" in t.columns)
    assert backends["backend"].tolist() == list(report["backends"])
    compatible = [v["compatible"] for v in report["backends"].values()]
    assert backends["compatible"].tolist() == compatible
    artifacts = next(t for t in tables if "file" in t.columns).set_index("file")
    for name in report["artifacts"]:
        size = (runs_dir / GUNPOINT / "export" / name).stat().st_size
        assert artifacts.loc[name, "bytes"] == size


def test_deployment_batch_and_cost_model_choices(monkeypatch, runs_dir):
    report = exported(runs_dir)
    at = open_app(monkeypatch, runs_dir, "Deployment", [GUNPOINT])
    big = str(report["latency"]["batches"][-1])
    at.selectbox(key=f"{GUNPOINT}-batch").set_value(big).run()
    at.radio(key=f"{GUNPOINT}-cost").set_value("paper").run()
    total = report["latency"]["total"]
    assert metric(at, f"onnxruntime total (batch {big})") == (
        f"{total['measured_ms_by_batch'][big]:.3f} ms")
    layers = report["latency"]["layers"]
    points = trace(charts(at)["Measured vs theoretical latency per layer"], "layers")
    assert decode(points["y"]) == pytest.approx(
        [e["measured_ms_by_batch"][big] for e in layers.values()])
    assert decode(points["x"]) == pytest.approx(
        [e["paper"] / total["paper"] * total["measured_ms_by_batch"][big]
         for e in layers.values()])


def test_deployment_without_export_says_how(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Deployment", [DARCY])
    assert at.info[0].value == (f"Not exported yet. Export this run with "
                                f"`python -m export.onnx {runs_dir / DARCY}`.")
    assert not at.get("plotly_chart")


def test_deployment_damaged_report_names_field(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Deployment", [DAMAGED])
    message = at.error[0].value
    assert "export/report.json: missing field 'latency'" in message


def test_damaged_run_still_shows_training(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, "Training", [DAMAGED])
    assert not at.error
    assert {"Loss", "Complexity ratio vs target"} <= set(titles(at))
    frame = pd.DataFrame(rundir.read_jsonl(runs_dir / DAMAGED / "metrics.jsonl"))
    assert decode(trace(charts(at)["Loss"], "train loss")["y"]) == pytest.approx(
        frame.loc[frame["split"] == "train", "loss"].tolist())
