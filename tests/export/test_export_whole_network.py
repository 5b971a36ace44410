"""Whole-network tuning (export.policy.fastest_network): the per-layer choice against each single
tactic for every block, the fastest whole network kept. Timings are injected (export.tune.measure
replaced), so the choice does not depend on the machine's load."""

from __future__ import annotations

import json

import pytest
from onnx import TensorProto, helper

from export import policy, tune
from export.lowering import resample_tactics_by_cost
from export.pipeline import ExportOptions, export_model
from export.static import freeze, materialize

from .export_cases import random_model
from .test_export_pipeline import fake_task


def injected(medians=None):
    """A stand-in for export.timing.measure: runs every candidate once, then reports the given
    medians (None: decreasing with the candidate's position, so the last one is fastest)."""
    calls = []

    def measure(fns, repeats=20, **kwargs):
        for fn in fns:
            fn()
        calls.append(len(fns))
        ms = medians if medians is not None else [float(len(fns) - i) for i in range(len(fns))]
        assert len(ms) == len(fns)
        return [{"median_ms": m, "min_ms": m / 2} for m in ms]

    return measure, calls


def stand_in_exporter(exported: list):
    """For the selection tests: export.tune.to_onnx recording each candidate's lowered tactics
    and returning a tiny Identity graph (the real export is the pipeline tests' business)."""

    def to_onnx(module, example, **kwargs):
        exported.append([block.tactic for block in module.blocks])
        x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 1]) for n in "xy")
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)

    return to_onnx


@pytest.fixture(scope="module")
def one_block():
    model = random_model(1)  # 1-D, one block
    static = materialize(model, freeze(model))
    assert len(static.blocks) == 1
    return static, resample_tactics_by_cost(static)


@pytest.mark.parametrize(("medians", "kept"), [
    ([2.0, 1.5, 1.5, 1.5, 1.5], "direct"),  # the smallest median; of equal ones the first
    ([1.0, 1.0, 3.0, 3.0, 3.0], "per-layer"),  # a tie with the per-layer choice keeps it
])
def test_keeps_the_network_with_the_smallest_median(monkeypatch, one_block, medians, kept):
    static, resample = one_block
    measure, calls = injected(medians)
    exported = []
    monkeypatch.setattr(tune, "measure", measure)
    monkeypatch.setattr(tune, "to_onnx", stand_in_exporter(exported))
    tactics, evidence = policy.fastest_network(static, ["matmul"], resample, threads=1, repeats=3)
    # each candidate lowered as it says
    assert exported == [["matmul"], ["direct"], ["dense"], ["multistep"], ["dft"]]
    assert calls == [5]  # and timed side by side, in one measurement
    # matmul everywhere is the per-layer choice itself: timed once, as "per-layer"
    assert [(c["name"], c["tactics"], c["median_ms"]) for c in evidence["candidates"]] == [
        ("per-layer", ["matmul"], medians[0]), ("direct", ["direct"], medians[1]),
        ("dense", ["dense"], medians[2]), ("multistep", ["multistep"], medians[3]),
        ("dft", ["dft"], medians[4])]
    assert evidence["kept"] == kept and kept in evidence["why"]
    assert tactics == next(c["tactics"] for c in evidence["candidates"] if c["name"] == kept)
    assert (evidence["batch"], evidence["threads"], evidence["repeats"]) == (1, 1, 3)


def test_no_alternative_times_nothing(monkeypatch, one_block):
    static, resample = one_block
    measure, calls = injected()
    exported = []
    monkeypatch.setattr(tune, "measure", measure)
    monkeypatch.setattr(tune, "to_onnx", stand_in_exporter(exported))
    tactics, evidence = policy.fastest_network(static, ["direct"], resample, singles=("direct",))
    assert tactics == ["direct"] and evidence["kept"] == "per-layer"
    assert calls == [] and exported == []
    assert evidence["candidates"] == [{"name": "per-layer", "tactics": ["direct"]}]


def test_each_candidate_is_exported_once_and_timed_at_every_batch(monkeypatch, one_block):
    """Two batches: each whole network is exported once (its batch axis is dynamic) and the same
    sessions are timed side by side at each batch, on inputs of that many samples."""
    static, resample = one_block
    measure, calls = injected()
    exported, fed = [], []
    monkeypatch.setattr(tune, "measure", measure)
    monkeypatch.setattr(tune, "to_onnx", stand_in_exporter(exported))
    feeds = tune.random_feeds
    monkeypatch.setattr(tune, "random_feeds", lambda model, batch, *a: fed.append(batch) or
                        feeds(model, batch, *a))
    tactics, evidence = policy.fastest_network(static, ["matmul"], resample, batch=[1, 4])
    assert exported == [["matmul"], ["direct"], ["dense"], ["multistep"], ["dft"]]
    assert calls == [5, 5] and fed == [1] * 5 + [4] * 5
    assert all(set(c["ms_by_batch"]) == {"1", "4"} for c in evidence["candidates"])


@pytest.mark.slow
def test_tactics_and_resampling_are_exported_once_for_every_batch(monkeypatch):
    """measure_tactics and measure_resample export one wrapper for all batches and time each
    candidate at each batch: per batch, the same blocks and candidates."""
    model = random_model(51, long=True)  # two blocks at 80 of 1522 samples
    static = materialize(model, freeze(model))
    measure, calls = injected()
    exports, fed = [], []
    real_export, real_feeds = tune.to_onnx, tune.random_feeds
    monkeypatch.setattr(tune, "measure", measure)
    monkeypatch.setattr(tune, "to_onnx", lambda *a, **k: exports.append(1) or real_export(*a, **k))

    def feeds(*args):  # the batch each session actually gets (a fixed batch would ignore it)
        out = real_feeds(*args)
        fed.extend(len(v) for v in out.values())
        return out

    monkeypatch.setattr(tune, "random_feeds", feeds)
    tactics = tune.measure_tactics(static, [1, 3], threads=1, repeats=1)
    assert len(exports) == 1 and len(tactics) == 2
    assert [list(b) for b in tactics[0]] == [list(b) for b in tactics[1]] != []
    n = sum(calls)  # every candidate's sub-model, once per batch
    assert fed == [1] * (n // 2) + [3] * (n // 2)
    fed.clear()
    resample = tune.measure_resample(static, [1, 3], threads=1, repeats=1)
    timed = [[e for block in r for axes in block.values() for e in axes if e["by"] == "measured"]
             for r in resample]
    assert len(exports) == 2 and len(timed) == 2 and len(timed[0]) == len(timed[1]) > 0
    for one, three in zip(*timed):  # the same candidates, in entries of their own per batch
        assert sorted(one["ms"]) == sorted(three["ms"]) and len(one["ms"]) > 1
        assert one is not three and one["ms"] is not three["ms"]
    assert fed == [1] * (len(fed) // 2) + [3] * (len(fed) // 2) != []


@pytest.mark.slow
def test_export_uses_the_kept_network_and_records_why(monkeypatch, tmp_path):
    """With injected timings the per-layer winner is dft for every block, but the whole network
    with matmul everywhere is fastest: the export lowers matmul, says so, and still verifies."""
    per_layer = {"direct": 3.0, "matmul": 2.0, "dft": 1.0}
    monkeypatch.setattr(policy, "measure_tactics", lambda static, batches, *args: [[
        {t: {"median_ms": ms, "min_ms": ms} for t, ms in per_layer.items()}
        for _ in static.blocks] for _ in batches])
    monkeypatch.setattr(tune, "measure", injected()[0])  # the networks: the last one fastest
    model = random_model(1)
    options = ExportOptions(bench=False, torchscript=False, batch_size=16, repeats=2)
    report = export_model(model, fake_task(model), tmp_path, options)
    arch = json.loads((tmp_path / "architecture.json").read_text())
    saved = json.loads((tmp_path / "report.json").read_text())
    assert [min(b["chosen_by"]["ms"], key=b["chosen_by"]["ms"].get) for b in arch["blocks"]] == [
        "dft"]
    network = saved["whole_network"]
    assert arch["whole_network"] == network == report.whole_network
    assert [c["name"] for c in network["candidates"]] == ["per-layer", "direct", "matmul"]
    assert network["kept"] == "matmul"
    kept, runner_up = network["why"].split(": ", 1)[1].split("; next: ")
    assert kept.startswith("matmul (B=1 1.000 ms, B=32 ") and kept.endswith(" ms)")
    assert runner_up.split(" (B=1 ")[0] in ("per-layer", "direct")
    assert network["batches"] == saved["tuning"]["batches"] == [1, 32]  # the default
    assert saved["tactics"] == [b["tactic"] for b in arch["blocks"]] == ["matmul"]
    assert "DFT" not in saved["ops"]
    assert all(err["max_rel"] <= 1e-4 for err in saved["equivalence"].values())


def test_each_whole_network_is_exported_once_per_export_job(monkeypatch, one_block):
    """The whole-network check, the stream check and the shipped model share one NetworkExports:
    a network they all ask for (the same tactics and resampling, by value) is exported once."""
    static, resample = one_block
    exported = []
    monkeypatch.setattr(tune, "measure", injected()[0])  # the last candidate fastest
    monkeypatch.setattr(tune, "to_onnx", stand_in_exporter(exported))
    exports = tune.NetworkExports(static)
    tactics, _ = policy.fastest_network(static, ["matmul"], resample, exports=exports)
    assert tactics == ["dft"] and len(exported) == 5
    policy.time_networks(static, [tactics, ["matmul"]], resample, exports=exports)
    assert len(exported) == 5  # both exported before
    shipped = exports.get(tactics, json.loads(json.dumps(resample)))  # an equal copy
    assert len(exported) == 5 and shipped is exports.get(["dft"], resample)
    assert exports.get(["dense"], resample) is not shipped  # timed, not this network
    tune.NetworkExports(static).get(tactics, resample)  # another export job: exported anew
    assert len(exported) == 6 and exported[-1] == ["dft"]


def test_least_regret_serves_every_batch():
    """Two batches: the candidate whose worst slowdown against the fastest at any batch is
    smallest, not the fastest at either batch alone."""
    table = {"1": {"a": 1.0, "b": 1.5, "c": 1.2}, "32": {"a": 40.0, "b": 20.0, "c": 22.0}}
    assert policy.least_regret(table) == "c"  # 1.2x at B=1, 1.1x at B=32
    assert policy.least_regret({"1": table["1"]}) == "a"
    assert policy.regret(table, "c") == pytest.approx({"1": 1.2, "32": 1.1})


def test_whole_network_check_at_two_batches(monkeypatch, one_block):
    """Each candidate timed at every batch; the kept one by least_regret over the batches."""
    static, resample = one_block
    ms = iter([[1.0, 1.5, 1.6, 1.2, 9.0], [40.0, 20.0, 30.0, 22.0, 90.0]])  # B=1, then B=32
    monkeypatch.setattr(tune, "measure", lambda fns, repeats=20, **kw: [
        {"median_ms": m, "min_ms": m} for m, _ in zip(next(ms), fns)])
    monkeypatch.setattr(tune, "to_onnx", stand_in_exporter([]))
    tactics, evidence = policy.fastest_network(static, ["matmul"], resample, batch=[1, 32])
    assert evidence["batches"] == [1, 32]
    assert {c["name"]: c["ms_by_batch"] for c in evidence["candidates"]}["multistep"] == {
        "1": 1.2, "32": 22.0}
    assert evidence["kept"] == "multistep" and tactics == ["multistep"]
    assert evidence["regret"] == pytest.approx({"1": 1.2, "32": 1.1})


def test_batch_option_defaults_to_a_small_and_a_large_batch():
    assert ExportOptions().batch == [1, 32]
    assert ExportOptions(batch=[32, 32, 1]).batch == [32, 1]  # each once, in the order given
    with pytest.raises(ValueError, match=r"every --batch must be >= 1, got \[0\]"):
        ExportOptions(batch=[0])
