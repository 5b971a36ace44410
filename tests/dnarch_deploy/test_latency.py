"""The per-operator latency table: interpolation against closed forms, the file round trip, and
which table load_table uses (a warning naming the file for each fall-back)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from dnarch_deploy import latency as L
from dnarch_deploy.latency import KINDS, LatencyTable, LatencyTableWarning, Point, load_table

# a power law ms = A * macs^P: straight in log-log, so interpolation reproduces it exactly
A, P = 2e-5, 0.8
KNOTS = (1e3, 1e4, 1e5, 1e6)


def power(macs: float) -> float:
    return A * macs**P


def table(batches=(1, 32), header: dict | None = None) -> LatencyTable:
    """Every kind at every batch on the power law, times the batch (this machine's header)."""
    header = header or L.make_header(1, list(batches), "test")
    points = {b: {k: [Point(m, b * power(m)) for m in KNOTS] for k in KINDS} for b in batches}
    return LatencyTable(header=header, points=points)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty private cache ($DNARCH_CACHE)."""
    monkeypatch.setenv("DNARCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# --- prediction -----------------------------------------------------------------------------------


@pytest.mark.parametrize("macs", [*KNOTS, 3e3, 5.5e4, math.sqrt(1e5 * 1e6)])
def test_points_and_between_them_follow_the_power_law(macs):
    assert table().predict_ms("conv.matmul", macs, 1) == pytest.approx(power(macs), rel=1e-12)


def test_log_log_midpoint_is_the_geometric_mean():
    t = LatencyTable(header={}, points={1: {k: [Point(1e2, 1.0), Point(1e4, 4.0)] for k in KINDS}})
    assert t.predict_ms("linear", 1e3, 1) == pytest.approx(2.0)


@pytest.mark.parametrize("macs", [2e6, 1e9])
def test_beyond_the_last_point_ms_is_proportional_to_macs(macs):
    want = power(KNOTS[-1]) * macs / KNOTS[-1]
    assert table().predict_ms("resample.split", macs, 1) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("macs", [1.0, 10.0, 999.0])
def test_below_the_first_point_an_operator_costs_the_smallest_measured_time(macs):
    """An operator smaller than any measured is priced like the smallest: per-node work, not
    its MACs, sets its time there."""
    assert table().predict_ms("resample.split", macs, 1) == pytest.approx(power(KNOTS[0]),
                                                                          rel=1e-12)


def test_the_fixed_cost_of_a_call_is_the_nearest_measured_batchs():
    header = {**L.make_header(1, [1, 32], "test"), "overhead_ms": {"1": 0.008, "32": 0.02}}
    t = LatencyTable.from_json({**table().to_json(), "header": header})
    assert (t.overhead(1), t.overhead(4), t.overhead(16), t.overhead(64)) == (
        0.008, 0.008, 0.02, 0.02)
    assert table().overhead(1) == 0.0  # a table that did not measure it (older files)


@pytest.mark.parametrize("overhead", [{"1": -1.0}, {"7": 0.1}, {"1": "fast"}, [0.1],
                                      {"1": float("nan")}])
def test_a_bad_fixed_cost_is_refused_by_name(overhead):
    data = table().to_json()
    data["header"] = {**data["header"], "overhead_ms": overhead}
    with pytest.raises(ValueError, match="overhead_ms"):
        LatencyTable.from_json(data)


def test_no_macs_no_time():
    t = table()
    assert t.predict_ms("linear", 0, 1) == 0.0
    assert t.predict_ms("linear", -5.0, 32) == 0.0
    assert isinstance(t.predict_ms("linear", 10, 1), float)


def test_an_unmeasured_batch_scales_the_nearest_by_the_batch_ratio():
    t = table()  # batches 1 and 32: 4 is nearer 1 (x4) than 32 (/8), 8 nearer 32 (/4 vs x8)
    assert t.predict_ms("pointwise", 1e4, 4) == pytest.approx(4 * power(1e4))
    assert t.predict_ms("pointwise", 1e4, 8) == pytest.approx(8 * power(1e4))
    assert t.predict_ms("pointwise", 1e4, 128) == pytest.approx(128 * power(1e4))


def test_one_point_is_a_line_through_it_proportional_to_macs():
    t = LatencyTable(header={}, points={1: {k: [Point(100.0, 2.0)] for k in KINDS}})
    assert t.predict_ms("conv.dft", 400.0, 1) == pytest.approx(8.0)


def test_noisy_points_give_a_price_that_never_falls_as_macs_grow():
    noisy = [Point(1e3, 1.0), Point(2e3, 3.0), Point(4e3, 2.0), Point(4e3, 2.5), Point(8e3, 4.0)]
    t = LatencyTable(header={}, points={1: {k: noisy for k in KINDS}})
    grid = torch.logspace(2, 5, 200, dtype=torch.float64)
    ms = t.predict_ms("linear", grid, 1)
    assert (ms.diff() >= 0).all()


def test_tensor_in_tensor_out_elementwise():
    t = table()
    macs = torch.tensor([[0.0, 1e3], [5e4, 1e8]], dtype=torch.float64)
    ms = t.predict_ms("conv.direct", macs, 32)
    want = [[0.0, 32 * power(1e3)], [32 * power(5e4), 32 * power(1e6) * 100]]
    torch.testing.assert_close(ms, torch.tensor(want, dtype=torch.float64))


@pytest.mark.parametrize("macs", [5e2, 2e3, 3.3e4, 7e5, 4e6])
def test_gradient_matches_finite_differences(macs):
    t = LatencyTable(header={}, points={1: {k: [Point(1e3, 0.01), Point(1e4, 0.02),
                                                Point(1e5, 0.5), Point(1e6, 2.0)] for k in KINDS}})
    m = torch.tensor(macs, dtype=torch.float64, requires_grad=True)
    t.predict_ms("resample.dense", m, 1).backward()
    h = macs * 1e-6
    fd = (t.predict_ms("resample.dense", macs + h, 1)
          - t.predict_ms("resample.dense", macs - h, 1)) / (2 * h)
    assert m.grad.item() == pytest.approx(fd, rel=1e-5)


def test_gradient_is_finite_at_zero_macs():
    m = torch.tensor([0.0, 1e4], requires_grad=True)
    table().predict_ms("linear", m, 1).sum().backward()
    assert torch.isfinite(m.grad).all() and m.grad[0] == 0


def test_unknown_kind_names_it_and_the_known_ones():
    with pytest.raises(ValueError,
                       match=r"'conv\.fft'.*linear, pointwise, add, copy, conv\.direct"):
        table().predict_ms("conv.fft", 1e4, 1)


@pytest.mark.parametrize("batch", [0, -1, 1.5])
def test_bad_batch(batch):
    with pytest.raises(ValueError, match="batch"):
        table().predict_ms("linear", 1e4, batch)


def test_a_network_is_priced_by_the_points_measured_on_as_many_axes():
    """An image's operator by the 2-D points, a sequence's by the 1-D ones; a kind with points on
    one rank only prices every rank by them."""
    pts = {k: [Point(m, power(m), dims=1) for m in KNOTS] for k in KINDS}
    pts["conv.direct"] += [Point(m, 0.25 * power(m), dims=2) for m in KNOTS]
    t = LatencyTable(header={}, points={1: pts})
    assert t.predict_ms("conv.direct", 5e4, 1, dims=1) == pytest.approx(power(5e4), rel=1e-12)
    assert t.predict_ms("conv.direct", 5e4, 1, dims=2) == pytest.approx(0.25 * power(5e4),
                                                                         rel=1e-12)
    assert t.predict_ms("linear", 5e4, 1, dims=2) == pytest.approx(power(5e4), rel=1e-12)


def test_a_resampling_is_priced_by_the_points_along_its_axis():
    """An image's rows (axis 0) by the axis-0 points, its columns by the axis-1 points; an axis
    not measured on that rank by all of the rank's points."""
    pts = {k: [Point(m, power(m)) for m in KNOTS] for k in KINDS}
    pts["resample.dense"] += [Point(m, 3 * power(m), dims=2, axis=0) for m in KNOTS]
    pts["resample.dense"] += [Point(m, power(m), dims=2, axis=1) for m in KNOTS]
    t = LatencyTable(header={}, points={1: pts})
    assert t.predict_ms("resample.dense", 5e4, 1, 2, axis=0) == pytest.approx(3 * power(5e4))
    assert t.predict_ms("resample.dense", 5e4, 1, 2, axis=1) == pytest.approx(power(5e4))
    both = math.sqrt(3) * power(5e4)  # equal MACs averaged in log ms: the geometric mean
    assert t.predict_ms("resample.dense", 5e4, 1, 2) == pytest.approx(both)
    assert t.predict_ms("resample.dense", 5e4, 1, 1, axis=0) == pytest.approx(power(5e4))


# --- a convolution priced by its shape ------------------------------------------------------------


def shaped(rate) -> LatencyTable:
    """conv.direct measured at 16 and 256 positions, 9 and global taps, 8 and 32 channels,
    each point at ``rate(positions, taps, channels)`` ms per MAC; the other kinds on the power
    law, shapeless."""
    pts = {k: [Point(m, power(m)) for m in KNOTS] for k in KINDS}
    pts["conv.direct"] = [Point(c * n * t, rate(n, t, c) * c * n * t, width=c, positions=n,
                                taps=t)
                          for n in (16, 256) for t in (9, n - 1) for c in (8, 32)]
    return LatencyTable(header={}, points={1: pts})


def test_a_convolution_of_a_measured_shape_costs_its_time_per_mac_there():
    """Equal MACs, different shapes, different prices: a short kernel on a long sequence runs
    slower per MAC than a global one (the MACs-only curve averages them)."""
    t = shaped(lambda n, taps, c: 1e-6 * (3.0 if taps == 9 else 1.0))
    short, global_ = (32, 256, 9), (32, 256, 255)
    macs = 32 * 256 * 9
    assert t.predict_ms("conv.direct", macs, 1, shape=short) == pytest.approx(3e-6 * macs)
    assert t.predict_ms("conv.direct", macs, 1, shape=global_) == pytest.approx(1e-6 * macs)
    # no shape: the curve through every point, by MACs alone
    assert t.predict_ms("conv.direct", macs, 1) == pytest.approx(
        t.predict_ms("conv.direct", macs, 1, shape=(0, 0, 0)))


def test_between_measured_shapes_the_time_per_mac_is_log_linear():
    """Half-way in log positions (64 of 16..256), and at each measured length log-linear in taps
    per position between its kernels: a weighted geometric mean of the corners' times per MAC."""
    rate = {(16, 9): 1.0, (16, 15): 2.0, (256, 9): 4.0, (256, 255): 8.0}
    t = shaped(lambda n, taps, c: 1e-6 * rate[n, taps])
    # 15 taps on 64 positions, 0.23 per position: at 16 positions below the shortest kernel's
    # 9 / 16 (its corner alone), at 256 between 9 / 256 and 255 / 256
    q = 15 / 64
    w = math.log(q / (9 / 256)) / math.log((255 / 256) / (9 / 256))
    at_256 = 4.0 ** (1 - w) * 8.0 ** w
    want = math.sqrt(1.0 * at_256) * 1e-6
    macs = 32 * 64 * 15
    assert t.predict_ms("conv.direct", macs, 1, shape=(32, 64, 15)) == pytest.approx(want * macs)
    # outside the measured lengths and kernels: the nearest
    assert t.predict_ms("conv.direct", 100.0, 1, shape=(32, 4, 1)) == pytest.approx(1e-4)
    assert t.predict_ms("conv.direct", 100.0, 1, shape=(32, 4096, 8191)) == pytest.approx(8e-4)


def test_a_periodic_kernel_is_told_from_a_global_one_by_its_taps_per_position():
    """A folded 2 S - 1-tap kernel on 150 positions reads the folded kernels' corners (taps per
    position about 2), not the global ones', though 299 taps lie between 255 and 511."""
    pts = {k: [Point(m, power(m)) for m in KNOTS] for k in KINDS}
    pts["conv.matmul"] = [Point(c * n * 10.0, r * c * n * 10.0, width=c, positions=n, taps=t)
                          for n in (64, 256) for t, r in ((n - 1, 1e-6), (2 * n - 1, 2e-6))
                          for c in (8, 32)]
    t = LatencyTable(header={}, points={1: pts})
    macs = 32 * 150 * 10.0
    assert t.predict_ms("conv.matmul", macs, 1, shape=(32, 150, 299)) == pytest.approx(
        2e-6 * macs, rel=0.01)
    assert t.predict_ms("conv.matmul", macs, 1, shape=(32, 150, 149)) == pytest.approx(
        1e-6 * macs, rel=0.01)


def test_a_shapes_channel_count_reads_its_curve_at_that_many_channels():
    """At a measured shape the time per MAC is that of the operator's channel count there: 8
    channels slower per MAC than 32 (onnxruntime pads them), and below the fewest measured the
    smallest case's time, whatever the MACs (per-node work dominates)."""
    t = shaped(lambda n, taps, c: 1e-6 * (2.0 if c == 8 else 1.0))
    macs = 256 * 255
    assert t.predict_ms("conv.direct", 8 * macs, 1, shape=(8, 256, 255)) == pytest.approx(
        2e-6 * 8 * macs)
    assert t.predict_ms("conv.direct", 16 * macs, 1, shape=(16, 256, 255)) == pytest.approx(
        math.sqrt(2.0) * 1e-6 * 16 * macs)  # half-way in log MACs of the 8 and 32 points
    smallest = 2e-6 * 8 * macs
    for c in (1, 2, 4):
        assert t.predict_ms("conv.direct", c * macs, 1, shape=(c, 256, 255)) == pytest.approx(
            smallest)


def test_shaped_tensors_elementwise_and_the_gradient_is_the_time_per_mac():
    t = shaped(lambda n, taps, c: 1e-6 * (3.0 if taps == 9 else 1.0))
    macs = torch.tensor([32 * 256 * 9, 32 * 256 * 9, 0.0], dtype=torch.float64,
                        requires_grad=True)
    shape = (torch.tensor([32, 32, 32]), torch.tensor([256, 256, 256]), torch.tensor([9, 255, 9]))
    ms = t.predict_ms("conv.direct", macs, 32, shape=shape)
    torch.testing.assert_close(ms.detach(), 32 * macs.detach() * torch.tensor(
        [3e-6, 1e-6, 0.0], dtype=torch.float64))
    ms.sum().backward()
    torch.testing.assert_close(macs.grad, 32 * torch.tensor([3e-6, 1e-6, 0.0],
                                                            dtype=torch.float64))


def test_a_direct_convolution_runs_on_whole_channel_blocks():
    """With header["channel_block"] 16 a direct convolution of 17-32 channels costs what 32 do
    (onnxruntime's NCHWc layout pads them), in value and in the gradient's time per MAC; a
    multiple of the block, the other kinds and a table without the field are priced as
    before."""
    rate = lambda n, taps, c: 1e-6 * (2.0 if c == 8 else 1.0)  # noqa: E731
    plain, blocked = shaped(rate), shaped(rate)
    blocked.header["channel_block"] = 16
    assert plain.channel_block == 1 and blocked.channel_block == 16
    per_channel = 256 * 255  # positions x taps
    for c in (17, 20, 32):
        macs = torch.tensor(float(c * per_channel), dtype=torch.float64, requires_grad=True)
        ms = blocked.predict_ms("conv.direct", macs, 1, shape=(c, 256, 255))
        assert float(ms.detach()) == pytest.approx(1e-6 * 32 * per_channel)
        ms.backward()
        assert float(macs.grad) == pytest.approx(1e-6 * 32 / c)  # the padded MACs' rate
    for c in (16, 32, 48):
        assert blocked.predict_ms("conv.direct", c * per_channel, 1, shape=(c, 256, 255)) == \
            pytest.approx(plain.predict_ms("conv.direct", c * per_channel, 1,
                                           shape=(c, 256, 255)), rel=1e-12)
    # 8 channels run as 16: the 16-channel price, interpolated between the 8 and 32 points
    assert blocked.predict_ms("conv.direct", 8 * per_channel, 1, shape=(8, 256, 255)) == \
        pytest.approx(plain.predict_ms("conv.direct", 16 * per_channel, 1, shape=(16, 256, 255)))
    assert blocked.predict_ms("conv.matmul", 1e4, 1, shape=(17, 256, 255)) == \
        plain.predict_ms("conv.matmul", 1e4, 1, shape=(17, 256, 255))
    assert blocked.predict_ms("conv.direct", 1e4, 1) == plain.predict_ms("conv.direct", 1e4, 1)


@pytest.mark.parametrize("block", [0, 2.5, "16"])
def test_a_bad_channel_block_is_refused_by_name(block):
    data = table().to_json()
    data["header"]["channel_block"] = block
    with pytest.raises(ValueError, match="'channel_block'"):
        LatencyTable.from_json(data)


@pytest.mark.parametrize("key", ["width", "positions", "taps"])
@pytest.mark.parametrize("value", [-1, 2.5, "8"])
def test_a_bad_shape_in_a_point_is_refused_by_name(key, value):
    data = shaped(lambda n, taps, c: 1e-6).to_json()
    data["schema"], data["header"] = L.SCHEMA, L.make_header(1, [1], "test")
    data["points"]["1"]["conv.direct"][0][key] = value
    with pytest.raises(ValueError, match=key):
        LatencyTable.from_json(data)


# --- the file -------------------------------------------------------------------------------------


def test_round_trip(tmp_path):
    t = table()
    t.points[1]["linear"][0] = Point(1e3, 0.25, "C=8 S=(16,)")
    t.points[1]["linear"][1] = Point(1e4, 0.5, "C=8 S=(16, 16)", dims=2)
    t.points[1]["resample.dense"][1] = Point(1e4, 0.5, "C=8 S=(16, 16) ->8", dims=2, axis=0)
    t.points[1]["conv.dense"][1] = Point(1e4, 0.5, "C=8 S=(16, 16)", 2, None, 8, 256, 225)
    t.save(tmp_path / "t.json")
    back = LatencyTable.load(tmp_path / "t.json")
    assert back.header == t.header and back.points == t.points
    assert back.source == str(tmp_path / "t.json")
    assert back.predict_ms("conv.multistep", 3e4, 32) == t.predict_ms("conv.multistep", 3e4, 32)


def test_the_bundled_table_is_complete_and_small():
    t = LatencyTable.load(L.BUNDLED)
    assert {1, 32} <= set(t.batches) and t.header["threads"] == 1
    assert all(len(t.points[b][k]) >= 3 for b in t.batches for k in KINDS)
    assert L.BUNDLED.stat().st_size < 200_000


def test_cache_path_is_per_threads_and_machine(cache):
    assert L.cache_path(1).parent == cache / "latency"
    assert L.cache_path(1) != L.cache_path(4)
    assert L.cache_path(4).name.startswith("threads4-")


# --- which table: load_table ----------------------------------------------------------------------


def bundled() -> LatencyTable:
    return LatencyTable.load(L.BUNDLED)


def here_bundled(monkeypatch, tmp_path) -> None:
    """Make the bundled table one measured on this machine (so only the file at fault warns)."""
    path = tmp_path / "bundled.json"
    table().save(path)
    monkeypatch.setattr(L, "BUNDLED", path)


def test_this_machines_cached_table_is_used_quietly(cache, recwarn):
    t = table()
    L.cache_path(1).parent.mkdir(parents=True)
    t.save(L.cache_path(1))
    got = load_table(threads=1)
    assert got.points == t.points and not recwarn.list


def test_a_given_table_of_this_machine_is_used_quietly(tmp_path, recwarn):
    table().save(tmp_path / "mine.json")
    assert load_table(tmp_path / "mine.json").source == str(tmp_path / "mine.json")
    assert not recwarn.list


def test_no_cached_table_falls_back_to_the_bundled_one_with_one_warning(cache, monkeypatch,
                                                                       tmp_path):
    path = tmp_path / "bundled.json"
    other_machine(path)
    monkeypatch.setattr(L, "BUNDLED", path)
    with pytest.warns(LatencyTableWarning) as caught:
        got = load_table(threads=1)
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert str(L.cache_path(1)) in msg and "python -m export.latency_table" in msg
    assert "Other CPU 9000" in msg and got.source == str(path)


def test_no_cached_table_is_quiet_when_the_bundled_one_was_measured_here(cache, monkeypatch,
                                                                         tmp_path, recwarn):
    here_bundled(monkeypatch, tmp_path)
    assert load_table(threads=1).source == str(tmp_path / "bundled.json")
    assert not recwarn.list


def damaged(path: Path) -> None:
    path.write_text('{"schema": "dnarch-deploy/latency-table/4", "header": {')


def wrong_schema(path: Path) -> None:
    path.write_text(json.dumps({"schema": "something-else/1", "points": {}}))


def missing_kind(path: Path) -> None:
    data = table().to_json()
    del data["points"]["32"]["conv.dft"]
    path.write_text(json.dumps(data))


def point_with(kind: str, key: str, value):
    """A fault: the first point of ``kind`` at batch 1 with ``key`` set to ``value``."""
    def write(path: Path) -> None:
        data = table().to_json()
        data["points"]["1"][kind][0][key] = value
        path.write_text(json.dumps(data))
    return write


def schema_1(path: Path) -> None:
    """A table written before points recorded their rank, timed on other graphs."""
    path.write_text(json.dumps({**table().to_json(), "schema": "dnarch-deploy/latency-table/1"}))


def unreadable(path: Path) -> None:
    path.mkdir()  # a directory where the file should be


def other_machine(path: Path) -> None:
    table(header={**L.make_header(1, [1, 32], "x"), "cpu": "Other CPU 9000"}).save(path)


def other_versions(path: Path) -> None:
    header = L.make_header(1, [1, 32], "x")
    header["versions"] = {**header["versions"], "onnxruntime": "0.0.1"}
    table(header=header).save(path)


def other_threads(path: Path) -> None:
    table(header=L.make_header(4, [1, 32], "x")).save(path)


FAULTS = {
    "damaged": (damaged, "not JSON"),
    "wrong schema": (wrong_schema, "schema"),
    "missing kind": (missing_kind, "conv.dft"),
    "bad point": (point_with("linear", "ms", -1), "positive"),
    "bad dims": (point_with("linear", "dims", 4), "dims"),
    "bad axis": (point_with("resample.dense", "axis", 1), "axis"),  # a 1-D point: axis 0 only
    "float dims": (point_with("linear", "dims", 2.0), "dims"),
    "schema 1": (schema_1, "schema"),
    "unreadable": (unreadable, "cannot be used"),
    "other machine": (other_machine, "Other CPU 9000"),
    "other versions": (other_versions, "onnxruntime 0.0.1"),
    "other threads": (other_threads, "threads 4"),
}


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("given", [True, False], ids=["path", "cache"])
def test_a_table_that_cannot_be_used_warns_naming_it_and_loads_the_bundled_one(
        fault, given, cache, tmp_path, monkeypatch):
    here_bundled(monkeypatch, tmp_path)
    make, says = FAULTS[fault]
    path = tmp_path / "t.json" if given else L.cache_path(1)
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path)
    with pytest.warns(LatencyTableWarning) as caught:
        got = load_table(path if given else None, threads=1)
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert str(path) in msg and says in msg and str(L.BUNDLED) in msg
    assert got.source == str(L.BUNDLED)
    if fault == "missing kind":  # e.g. a table of an older version: how to replace it
        assert "`python -m export.latency_table --threads 1` measures one" in msg


def test_the_real_bundled_table_is_named_with_its_machine_in_the_warning(tmp_path, cache):
    other_machine(tmp_path / "t.json")
    with pytest.warns(LatencyTableWarning, match="Other CPU 9000.*bundled table") as caught:
        got = load_table(tmp_path / "t.json")
    assert len(caught) == 1 and got.points == bundled().points


def test_an_unmeasured_batch_warns(tmp_path):
    table().save(tmp_path / "t.json")
    with pytest.warns(LatencyTableWarning, match=r"batches \[1, 32\], not 8") as caught:
        load_table(tmp_path / "t.json", batches=(1, 8, 32))
    assert len(caught) == 1


def test_bad_threads():
    with pytest.raises(ValueError, match="threads"):
        load_table(threads=0)
