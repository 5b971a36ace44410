"""benchmarks.channel_block runs and prints one row per layer, size and batch, each count's
measured time and the cost model's price over the 32-channel layer's."""

from __future__ import annotations

import pytest

from benchmarks import channel_block


@pytest.mark.slow
def test_quick_table(capsys):
    assert channel_block.main(["--quick", "--batches", "1", "--repeats", "4"]) == 0
    out = capsys.readouterr().out
    rows = [r for r in out.splitlines() if r.startswith("| depthwise") or r.startswith("| pointw")]
    assert [r.split(" | ")[:3] for r in rows] == [["| depthwise 7x7", "8x8", "1"],
                                                   ["| pointwise 1x1", "8x8", "1"]]
    ref = channel_block.CHANNELS.index(32)
    for r in rows:
        cells = r.strip("| ").split(" | ")[4:]
        assert len(cells) == len(channel_block.CHANNELS)
        assert cells[ref] == "1.00 / 1.00" and float(r.split(" | ")[3]) > 0  # ms at 32
    # priced at the true channels: 20 of 32 as (20 / 32)^2 pointwise, 20 / 32 depthwise
    assert rows[0].strip("| ").split(" | ")[4 + channel_block.CHANNELS.index(20)].endswith(
        "/ 0.62")
    assert rows[1].strip("| ").split(" | ")[4 + channel_block.CHANNELS.index(20)].endswith(
        "/ 0.39")


def test_prices_are_the_cost_models():
    assert channel_block.priced("pointwise", 20, (8, 8), (7, 7)) == 400.0
    # the direct tactic pads to a multiple of 4: 21 channels are priced as 24
    assert channel_block.priced("depthwise", 21, (8, 8), (7, 7)) == 24 * 64 * 49


@pytest.mark.parametrize("flags", [["--repeats", "0"], ["--threads", "-1"], ["--batches", "0"]])
def test_bad_flags_are_refused_before_any_timing(flags, capsys):
    with pytest.raises(SystemExit) as e:
        channel_block.main(flags)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and flags[0] in err
