"""The Pareto view on a real tiny sweep (tests/sweeps.py) through Streamlit's AppTest: the
figure holds every model at its measured latency, the front is pareto.json's marks, choosing a
model opens its Architecture view; a damaged pareto.json names its field; no sweep says how to
make one."""

from __future__ import annotations

import json
import shutil

import pytest

from dashboard import data
from dnarch_deploy.sweepdir import read_pareto

from .test_dashboard_app import charts, decode, open_app, trace

TITLE = "Test accuracy vs onnxruntime latency, batch {}"


@pytest.mark.slow  # the sweep fixture trains and exports a whole sweep
def test_pareto_figure_is_the_sweeps_rows(monkeypatch, sweep_dir):
    pareto = read_pareto(sweep_dir)
    at = open_app(monkeypatch, sweep_dir.parent, view="Pareto")
    assert "ucr:GunPoint · 3 models" in at.caption[0].value
    for batch in [str(b) for b in pareto["batches"]]:
        at.radio(key="pareto-batch").set_value(batch).run()
        figure = charts(at)[TITLE.format(batch)]
        assert figure["layout"]["xaxis"]["type"] == "log"
        for kind, name in (("search", "searched (budget)"), ("base", "base CCNN (width x depth)")):
            rows = [r for r in pareto["rows"] if r["kind"] == kind]
            points = trace(figure, name)
            assert decode(points["x"]) == [r["ms"][batch] for r in rows]
            assert decode(points["y"]) == [r["test_metric"] for r in rows]
            assert decode(points["customdata"]) == [f"sweep/{r['run_dir']}" for r in rows]
        front = sorted((r["ms"][batch], r["test_metric"]) for r in pareto["rows"]
                       if r["pareto"][batch])
        drawn = trace(figure, "Pareto front (all)")
        assert list(zip(decode(drawn["x"]), decode(drawn["y"]))) == front
        table = at.dataframe[0].value
        assert list(table[f"front B={batch}"]) == [r["pareto"][batch] for r in pareto["rows"]]


@pytest.mark.slow  # the sweep fixture trains and exports a whole sweep
def test_choosing_a_model_opens_its_architecture(monkeypatch, sweep_dir):
    at = open_app(monkeypatch, sweep_dir.parent, view="Pareto")
    base = next(r for r in read_pareto(sweep_dir)["rows"] if r["kind"] == "base")
    name = f"sweep/{base['run_dir']}"
    at.selectbox(key="pareto-open").set_value(name)
    at.button(key="pareto-open-button").click().run()
    assert not at.exception, at.exception
    assert at.sidebar.radio(key="view").value == "Architecture"
    assert at.sidebar.multiselect(key="runs").value == [name]
    assert [h.value for h in at.header] == ["Architecture"]
    assert [s.value for s in at.subheader] == [name]
    assert "Kernel extents over the input" in charts(at)


def test_no_sweep_says_how_to_make_one(monkeypatch, runs_dir):
    at = open_app(monkeypatch, runs_dir, view="Pareto")
    assert "python -m search.sweep --task ucr:GunPoint" in at.info[0].value


@pytest.mark.slow  # the sweep fixture trains and exports a whole sweep
def test_damaged_pareto_names_file_and_field(monkeypatch, sweep_dir, tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy)
    pareto = json.loads((copy / "pareto.json").read_text())
    del pareto["rows"][1]["ms"]
    (copy / "pareto.json").write_text(json.dumps(pareto))
    at = open_app(monkeypatch, tmp_path, view="Pareto")
    assert "Cannot show the sweep" in at.error[0].value
    assert "pareto.json: rows[1]: missing field 'ms'" in at.error[0].value


@pytest.mark.slow  # the sweep fixture trains and exports a whole sweep
def test_find_sweeps_and_frame(sweep_dir, tmp_path):
    assert data.find_sweeps(sweep_dir.parent) == [sweep_dir]
    assert data.find_sweeps(tmp_path / "missing") == []
    frame = data.pareto_frame(sweep_dir, sweep_dir)  # the sweep itself as the runs root
    assert list(frame["label"]) == ["budget 0.25", "budget 0.5", "4x1"]
    assert list(frame["run"]) == [f"runs/{n}" for n in
                                  ("search-b0.25-s0", "search-b0.5-s0", "base-w4-d1-s0")]
    copy = tmp_path / "root" / "sweep"
    shutil.copytree(sweep_dir, copy)
    pareto = json.loads((copy / "pareto.json").read_text())
    pareto["rows"][0]["run_dir"] = "../../elsewhere"  # leads out of the dashboard's root
    (copy / "pareto.json").write_text(json.dumps(pareto))
    assert list(data.pareto_frame(tmp_path / "root", copy)["run"])[:2] == [
        "", "sweep/runs/search-b0.5-s0"]
