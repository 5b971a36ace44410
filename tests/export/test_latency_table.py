"""python -m export.latency_table: the grid it measures, the table it writes (--quick), bad
input."""

from __future__ import annotations

import pytest
import torch

from dnarch_deploy import latency as L
from dnarch_deploy.latency import KINDS, LatencyTable, load_table
from export import latency_table as T


@pytest.fixture(autouse=True)
def _quiet(monkeypatch, tmp_path):
    """No progress bar on stderr; a private cache."""
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("DNARCH_CACHE", str(tmp_path / "cache"))


@pytest.mark.slow
def test_the_grid_covers_what_ccnns_use():
    per_kind = T.grid()
    assert list(per_kind) == list(KINDS) and all(len(cs) >= 9 for cs in per_kind.values())
    cases = [c for cs in per_kind.values() for c in cs]
    assert all(c.kind == k for k, cs in per_kind.items() for c in cs)
    for kind in ("linear", "pointwise", "add", "conv.direct", "conv.matmul", "conv.dft"):
        sizes = {c.size for c in per_kind[kind]}
        assert {(16,), (4096,), (8, 8), (64, 64)} <= sizes, kind
    for kind in ("conv.multistep", "resample.dense", "resample.factored", "resample.split"):
        assert {(4096,)} <= {c.size for c in per_kind[kind]}, kind
    assert {c.channels for c in cases} == {8, 16, 32, 64, 256}  # 32: the base CCNN_{4,32}'s
    # a resolution mask's folded kernel: 2 S - 1 taps, circular at the training's FFT length
    folded = [c for c in per_kind["conv.matmul"] if c.period]
    assert {(c.size, c.taps, c.period) for c in folded} >= {((16,), (31,), (24,)),
                                                          ((256,), (511,), (384,))}
    # an image's resampling along each of its axes (the first one is the slow one)
    images = [c for c in per_kind["resample.dense"] if len(c.size) == 2]
    assert {c.axis for c in images} == {0, 1} and (8, 8) in {c.size for c in images}


@pytest.mark.slow
def test_quick_writes_this_machines_table_to_the_cache(capsys, recwarn):
    assert T.main(["--quick", "--batch", "1", "--batch", "3"]) == 0
    path = L.cache_path(1)
    assert str(path) in capsys.readouterr().out
    table = LatencyTable.load(path)
    assert table.differences(threads=1) == []
    assert table.batches == [1, 3] and table.header["batches"] == [1, 3]
    assert table.header["context"] == 1  # each operator timed alone
    assert table.header["command"] == "python -m export.latency_table --quick --batch 1 --batch 3"
    assert all(table.points[b][k] for b in (1, 3) for k in KINDS)
    # each point says what it was measured on: --quick has sequences only; a resampling's axis
    assert all(p.dims == 1 and p.axis == (0 if k.startswith("resample.") else None)
               for b in (1, 3) for k in KINDS for p in table.points[b][k])
    # a convolution's and a linear layer's shape, by which they are priced; none for the others
    for k in KINDS:
        for p in table.points[1][k]:
            if k.startswith("conv."):
                assert p.shape.startswith(f"C={p.width} S=({p.positions},) taps=({p.taps},)"), p
            elif k == "linear":
                assert p.shape == f"C={round(p.width**0.5)} S=({p.positions},)" and p.taps == 1
            else:
                assert (p.width, p.positions, p.taps) == (0, 0, 0), p
    # the fixed cost of a call, measured per batch and taken off every point
    assert table.header["channel_block"] in T.CHANNEL_BLOCKS
    assert set(table.header["overhead_ms"]) == {"1", "3"}
    assert all(0 < v < 1 for v in table.header["overhead_ms"].values())
    assert load_table(threads=1, batches=(1, 3)).points == table.points  # found, quietly
    assert not [w for w in recwarn.list if issubclass(w.category, L.LatencyTableWarning)]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.slow
@pytest.mark.parametrize("block", T.CHANNEL_BLOCKS)
def test_the_channel_block_is_the_one_whose_padding_fits_the_timings(block, monkeypatch):
    """Timings proportional to the channels padded to ``block`` (times a constant and a little
    noise) give ``block``: the probe's real sessions run, their times are replaced."""
    calls = iter(range(len(T.BLOCK_PROBE_CHANNELS)))
    noise = (1.0, 1.03, 0.98, 1.01, 0.99, 1.02)

    def timed(fn, quick=False):
        i = next(calls)
        fn()  # the session call runs
        return 0.01 * -(-T.BLOCK_PROBE_CHANNELS[i] // block) * block * noise[i]

    monkeypatch.setattr(T, "median_ms", timed)
    assert T.channel_block(1, quick=True) == block


def test_a_point_loses_the_calls_fixed_cost_but_keeps_a_tenth_of_its_time():
    assert T.operator_ms(0.05, 0.01) == pytest.approx(0.04)
    assert T.operator_ms(0.01, 0.02) == pytest.approx(0.001)  # noise: the floor
    assert T.operator_ms(0.03, 0.0) == 0.03
    assert T.operator_ms(0.05, 0.01, share=1 / 4) == pytest.approx(0.01)  # one of a chain


@pytest.mark.parametrize("case", [
    T.Case("linear", 8, (16,)),
    T.Case("conv.matmul", 8, (64,), taps=(63,)),
    T.Case("copy", 8, (4, 4)),
])
def test_a_point_is_timed_as_a_chain_of_its_operator(case):
    assert T.context_share(case, 1) == 1.0 and not isinstance(T.in_context(case, 1),
                                                              torch.nn.Sequential)
    chain = T.in_context(case, 4)
    assert len(chain) == 4 and T.context_share(case, 4) == 1 / 4
    x = torch.randn(2, case.channels, *case.size)
    y = x
    for op in chain:  # each copy reads the one before's output
        y = op(y)
    assert chain(x).shape == x.shape and torch.equal(chain(x), y)


@pytest.mark.parametrize("case", [
    T.Case("resample.dense", 8, (64,), out=32),
    T.Case("resample.dense", 8, (16, 8), out=8, axis=0),
])
def test_a_resampling_is_timed_against_its_way_back(case):
    undo = T.back(case)
    n, m = case.size[case.axis], case.out
    assert (undo.size[undo.axis], undo.out, undo.axis) == (m, n, case.axis)
    chain = T.in_context(case, 4)
    assert len(chain) == 4  # there and back, twice
    x = torch.randn(2, case.channels, *case.size)
    assert chain(x).shape == x.shape
    # the pair's time is split by MACs; both shares make one pair
    assert (T.context_share(case, 4) + T.context_share(undo, 4)) * 2 == pytest.approx(1.0)
    assert T.context_share(case, 4) * 2 == pytest.approx(T.macs(case)
                                                         / (T.macs(case) + T.macs(undo)))


@pytest.mark.parametrize("args, says", [
    (["--threads", "0"], "--threads"),
    (["--context", "3"], "--context"),
    (["--batch", "1", "--batch", "0"], "--batch"),
    (["--out", "{tmp}/no/such/dir/t.json"], "does not exist"),
    (["--out", "{tmp}"], "is a directory"),
])
def test_bad_input_is_one_error_and_nothing_written(args, says, tmp_path, capsys):
    args = [a.format(tmp=tmp_path / "out") for a in args]
    (tmp_path / "out").mkdir()
    assert T.main(["--quick", *args]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err
    assert list((tmp_path / "out").iterdir()) == []
    assert not (tmp_path / "cache").exists()
