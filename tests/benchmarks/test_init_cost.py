"""benchmarks.init_cost: without R learned the initial network is the base (ratio exactly 1);
with R its full-resolution blocks' folded kernels change the cost; bad shapes are one argparse
error."""

from __future__ import annotations

import pytest

from benchmarks import init_cost


def rows(text: str) -> dict[str, float]:
    """The first table's rows (input -> initial cost / base); the crop table follows it."""
    first = next(part for part in text.split("\n\n") if part.startswith("| input |"))
    return {r.split(" | ")[0].strip("| "): float(r.split(" | ")[1].strip(" |"))
            for r in first.splitlines() if r.startswith("| ") and "input" not in r}


def test_the_initial_network_costs_the_base_unless_r_is_learned(capsys):
    assert init_cost.main(["--shapes", "64,8x8", "--learn", "KWD"]) == 0
    assert rows(capsys.readouterr().out) == {"64": 1.0, "8x8": 1.0}
    assert init_cost.main(["--shapes", "150", "--learn", "KR"]) == 0
    out = capsys.readouterr().out
    assert "Command: `python -m benchmarks.init_cost --shapes 150 --learn KR`" in out
    assert rows(out)["150"] == pytest.approx(init_cost.init_ratio((150,), 4, 32, "KR"), abs=5e-4)
    assert rows(out)["150"] != 1.0


def test_a_small_crop_costs_more_than_it_saves_in_1d_and_less_in_2d():
    """The crop table's claim (README, "Search quality"): a cropped 1-D block pays a down- and
    an up-sampling, so cropping by one step costs more than not cropping and only a deep crop
    pays; in 2-D the resampling runs per axis and the first crop already pays."""
    line = init_cost.crop_costs((150,), 4, 32, "KR")
    first = next(r for r in line if r != (150,))
    assert line[first] > 1.5 and min(line.values()) < 1.0
    assert all(c > 1.0 for r, c in line.items() if r[0] > 0.5 * 150 and r != (150,))
    image = init_cost.crop_costs((14, 14), 4, 32, "KR")
    assert image[next(r for r in image if r != (14, 14))] < 1.0
    row = init_cost.crop_row((150,), line)
    assert row.startswith(f"| 150 | {first[0]}: ") and "of the input)" in row


@pytest.mark.parametrize("bad", ["abc", "1x5", "2x3x4", "3", ""])
def test_a_bad_shape_is_one_argparse_error(capsys, bad):
    with pytest.raises(SystemExit) as e:
        init_cost.main(["--shapes", bad])
    assert e.value.code == 2 and "--shapes" in capsys.readouterr().err
