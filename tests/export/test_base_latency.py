"""export.base_latency: the base network a --cost latency budget is measured against."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import torch

from dnarch_deploy import DNArch, ModelConfig, describe
from export.base_latency import base_in_table_time, calibrated, random_inputs, untrained_export
from export.timing import session

CASES = {
    "1d": dict(in_channels=2, out_channels=3, input_size=(24,)),
    "2d": dict(in_channels=1, out_channels=4, input_size=(8, 8)),
    "tokens": dict(in_channels=4, out_channels=2, input_size=(20,), vocab_size=7),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_untrained_export_computes_what_the_model_computes(case):
    """The graph timed is the calibrated network as export ships it: onnxruntime agrees with
    the model in eval mode on fresh inputs, and the architecture is the one the masks describe."""
    model = calibrated(DNArch(ModelConfig(**case, depth=2, width=8, learn="KRWD")))
    graph, architecture = untrained_export(model)
    assert architecture == describe(model)
    x = random_inputs(model.config, 5, torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x).numpy()
    got = session(graph, 1).run(None, {graph.graph.input[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_the_base_is_timed_at_each_batch_without_touching_the_seeded_generator():
    """One figure per batch, in order, the larger batch the longer, measured and in the table's
    time alike; the search's torch seed draws the same numbers after the measurement as
    without it."""
    from dnarch_deploy.latency import load_table

    config = ModelConfig(**CASES["1d"], depth=2, width=8, learn="KRWD")
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    timed = base_in_table_time(config, [1, 64], load_table(), rounds=2)
    for key in ("base_ms", "measured_ms"):
        assert len(timed[key]) == 2 and 0 < timed[key][0] < timed[key][1], key
    assert len(timed["speed"]) == 2 and min(timed["speed"]) > 0
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.slow
def test_the_command_prints_the_base_milliseconds_and_refuses_a_bad_config():
    """``python -m export.base_latency``, as search.run runs it (here against the base's own
    points, ``--probe base``): one JSON line with a time per batch, in the table's time and as
    measured, and the machine's speed; a config that is not one is one argparse error, exit 2."""
    import json
    import subprocess
    import sys

    model = ModelConfig(**CASES["1d"], depth=1, width=4, learn="KRWD").to_dict()
    cmd = [sys.executable, "-m", "export.base_latency", "--model", json.dumps(model),
           "--batch", "1", "--batch", "8", "--probe", "base"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    timed = json.loads(proc.stdout)
    times = timed["base_ms"]  # in the latency table's time: measured over the machine's speed
    assert len(times) == 2 and all(t > 0 for t in times)
    assert len(timed["measured_ms"]) == len(timed["speed"]) == 2 and min(timed["speed"]) > 0
    bad = subprocess.run([*cmd[:3], "--model", '{"width": 4}', "--batch", "1"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--model: not a model config" in bad.stderr


def slowed(table, factor: float):
    """``table`` as measured on a machine ``factor`` times slower: every point and the call's
    fixed cost ``factor`` times longer."""
    from dnarch_deploy.latency import LatencyTable

    header = {**table.header,
              "overhead_ms": {b: factor * ms for b, ms in table.header["overhead_ms"].items()}}
    points = {b: {k: [p._replace(ms=factor * p.ms) for p in ps] for k, ps in kinds.items()}
              for b, kinds in table.points.items()}
    return LatencyTable(header=header, points=points)


def test_the_machine_speed_is_the_probe_times_over_the_tables():
    """speed_against: probe calls that take exactly their tabled time (operator + a call's fixed
    cost) are speed 1; against a table measured twice as slow, 0.5; three times the tabled time,
    3. The probe cases are points the table measured (no interpolation in between)."""
    from dnarch_deploy.latency import load_table
    from export.base_latency import speed_against, speed_probe_cases
    from export.latency_table import macs, point_shape

    table = load_table()
    measured = {(k, p.shape) for b in (1, 32) for k, ps in table.points[b].items() for p in ps}
    cases = speed_probe_cases()
    assert all((c.kind, str(c)) in measured for c in cases)
    tabled = {b: [table.predict_ms(c.kind, macs(c), b, len(c.size), None, point_shape(c))
                  + table.overhead(b) for c in cases] for b in (1, 32)}
    assert speed_against(table, tabled) == pytest.approx({1: 1.0, 32: 1.0}, rel=1e-9)
    assert speed_against(slowed(table, 2.0), tabled) == pytest.approx({1: 0.5, 32: 0.5}, rel=1e-9)
    thrice = {b: [3 * t for t in ts] for b, ts in tabled.items()}
    assert speed_against(table, thrice) == pytest.approx({1: 3.0, 32: 3.0}, rel=1e-9)


@pytest.mark.slow
def test_the_base_in_table_time_divides_each_round_by_its_speed(monkeypatch):
    """base_in_table_time times the probe and the base in turns: a round that ran 2x slow
    measures the base 2x long and counts the same time in the table's; each figure is the median
    over rounds."""
    import export.base_latency as B

    config = ModelConfig(**CASES["1d"], depth=1, width=4, learn="KRWD")
    speeds = iter([1.0, 2.0, 2.0, 1.5])  # one per round
    state = {}

    def probe(sessions, batches):
        state["speed"] = next(speeds)
        return {b: [state["speed"]] for b in batches}

    monkeypatch.setattr(B, "base_probe", lambda config, table, batches: ([], None))
    monkeypatch.setattr(B, "probe_sessions", lambda threads, cases: [])
    monkeypatch.setattr(B, "probe_times", probe)
    monkeypatch.setattr(B, "speed_against",
                        lambda table, times, cases, weights: {b: t[0] for b, t in times.items()})
    monkeypatch.setattr(B, "_median_ms", lambda base, cfg, b, repeats: b * 0.1 * state["speed"])
    got = B.base_in_table_time(config, [1, 32], table=None, rounds=4)
    assert got["base_ms"] == pytest.approx([0.1, 3.2], rel=1e-12)
    assert got["speed"] == [1.75, 1.75] == [statistics.median([1.0, 2.0, 2.0, 1.5])] * 2
    assert got["measured_ms"] == pytest.approx([0.175, 5.6], rel=1e-12)


def test_weighted_probe_speed_is_the_share_weighted_mean_of_the_ratios():
    """speed_against with weights: a case at its tabled time and one at three times it, weighted
    0.75 and 0.25, are speed 0.75 * 1 + 0.25 * 3 = 1.5 (the network they stand for, slowed
    operator by operator)."""
    from dnarch_deploy.latency import load_table
    from export.base_latency import speed_against, speed_probe_cases
    from export.latency_table import macs, point_shape

    table = load_table()
    cases = speed_probe_cases()[:2]
    tabled = [table.predict_ms(c.kind, macs(c), 1, len(c.size), None, point_shape(c))
              + table.overhead(1) for c in cases]
    times = {1: [tabled[0], 3 * tabled[1]]}
    assert speed_against(table, times, cases, [0.75, 0.25]) == pytest.approx({1: 1.5}, rel=1e-9)
    assert speed_against(table, times, cases) == pytest.approx({1: 2.0}, rel=1e-9)  # median


@pytest.mark.slow
def test_nearest_cases_finds_an_operators_own_point_and_sums_shares():
    """An operator that is a measured grid point maps to that point; two operators nearest the
    same point add their shares; an operator of a kind the table lacks is left out; at most
    ``most`` cases, the largest shares first."""
    from dnarch_deploy.latency import load_table
    from export.base_latency import nearest_cases
    from export.latency_table import Case, macs, point_shape

    table = load_table()
    conv = Case("conv.direct", 32, (256,), taps=(9,))
    linear = Case("linear", 32, (256,))
    ops = [("conv.direct", macs(conv), 1, None, point_shape(conv), 0.5),
           ("conv.direct", macs(conv) * 1.01, 1, None, point_shape(conv), 0.2),
           ("linear", macs(linear), 1, None, point_shape(linear), 0.25),
           ("no.such.kind", 1e6, 1, None, (0, 0, 0), 0.05)]
    got = nearest_cases(ops, table, [1, 32])
    assert [(str(c), c.kind) for c, _ in got] == [(str(conv), "conv.direct"),
                                                  (str(linear), "linear")]
    assert [w for _, w in got] == pytest.approx([0.7, 0.25])
    assert nearest_cases(ops, table, [1, 32], most=1) == got[:1]


@pytest.mark.slow
def test_the_base_probe_stands_for_the_bases_operators():
    """base_probe: the points nearest the base's operators, of the kinds the cost model prices
    it with, weighted by their share of its predicted time (averaged over the batches): all but
    the call's fixed cost, the convolution first."""
    from dnarch_deploy.cost import Units, base_cost
    from dnarch_deploy.latency import load_table
    from export.base_latency import base_probe

    table = load_table()
    config = ModelConfig(in_channels=1, out_channels=2, input_size=(251,), depth=4, width=32)
    cases, weights = base_probe(config, table, [1, 32])
    assert cases[0].kind.startswith("conv.") and weights == sorted(weights, reverse=True)
    fixed = statistics.mean(table.overhead(b) / base_cost(config, Units(table, b))
                            for b in (1, 32))
    assert sum(weights) == pytest.approx(1 - fixed, rel=1e-9)
    assert {c.kind for c in cases} <= {"conv.direct", "conv.matmul", "conv.dft", "conv.dense",
                                       "linear", "pointwise", "add", "copy"}


def test_an_unknown_probe_is_refused():
    with pytest.raises(ValueError, match="probe must be one of"):
        base_in_table_time(ModelConfig(**CASES["1d"], depth=1, width=4), [1], table=None,
                           probe="fast")


def test_the_found_network_probe_is_its_measured_over_its_predicted_time(monkeypatch):
    """probe='found': the found network, exported as shipped, is timed in turns with the base;
    its speed is its measured time over the table's prediction for its architecture, and the
    base's time is divided by it (here the network runs 1.6x its predicted time, the base 2 ms
    per sample: the base counts 2 b / 1.6 ms in the found network's time)."""
    import export.base_latency as B
    from dnarch_deploy.cost import Units, architecture_cost
    from dnarch_deploy.latency import load_table

    table = load_table()
    model = DNArch(ModelConfig(**CASES["1d"], depth=2, width=8, learn="KRWD"))
    predicted = {b: architecture_cost(describe(model), Units(table, b)) for b in (1, 32)}
    monkeypatch.setattr(B, "base_session", lambda config, threads: ("base", None))
    monkeypatch.setattr(B, "_median_ms", lambda timed, config, b, repeats:
                        2.0 * b if timed[0] == "base" else 1.6 * predicted[b])
    got = B.base_in_table_time(model.config, [1, 32], table, probe="found", found=model)
    assert got["speed"] == pytest.approx([1.6, 1.6], rel=1e-9)
    assert got["base_ms"] == pytest.approx([2.0 / 1.6, 64.0 / 1.6], rel=1e-9)
    assert got["measured_ms"] == [2.0, 64.0]
    with pytest.raises(ValueError, match="the found network is the probe 'found' needs"):
        B.base_in_table_time(model.config, [1], table, probe="found")
    with pytest.raises(ValueError, match="the found network is the probe 'found' needs"):
        B.base_in_table_time(model.config, [1], table, found=model)


@pytest.mark.slow
def test_the_command_times_the_found_network_from_its_weights(tmp_path):
    """``--probe found --weights FILE``, as a search's latency check runs it: one JSON line; the
    weights are needed and must load (a damaged file: one error naming it, exit 2)."""
    import json
    import subprocess
    import sys

    from search.checkpoint import save_weights

    config = ModelConfig(**CASES["1d"], depth=1, width=4, learn="KRWD")
    weights = tmp_path / "found.safetensors"
    save_weights(DNArch(config), weights)
    cmd = [sys.executable, "-m", "export.base_latency", "--model", json.dumps(config.to_dict()),
           "--batch", "1", "--probe", "found"]
    proc = subprocess.run([*cmd, "--weights", str(weights)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    timed = json.loads(proc.stdout)
    assert len(timed["base_ms"]) == len(timed["speed"]) == 1 and timed["speed"][0] > 0
    missing = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2
    assert "--weights is the found network --probe found times" in missing.stderr
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(b"not a checkpoint")
    bad = subprocess.run([*cmd, "--weights", str(damaged)], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and f"{damaged}: damaged checkpoint" in bad.stderr
