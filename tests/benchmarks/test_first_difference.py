"""benchmarks.first_difference: the two tasks it screens, and a wrong set refused."""

from __future__ import annotations

import numpy as np

from benchmarks.first_difference import with_first_difference, write_pair
from dnarch_deploy.tasks import load_task
from tests.benchmarks.scripts import run


def test_first_difference_follows_the_channels():
    x = np.array([[[1.0, 4.0, 2.0], [0.0, 0.5, 0.5]]])  # (1, 2, 3)
    y = with_first_difference(x)
    assert y.shape == (1, 4, 3)
    np.testing.assert_array_equal(y[:, :2], x)
    np.testing.assert_array_equal(y[0, 2:], [[0.0, 3.0, -2.0], [0.0, 0.5, 0.0]])


def test_the_pair_is_one_split_raw_and_with_differences(tmp_path):
    raw, diff = write_pair("GunPoint", tmp_path)
    task = load_task("ucr:GunPoint", seed=0)
    a, b = np.load(raw), np.load(diff)
    for split in ("train", "val", "test"):
        x = np.asarray(getattr(task, f"x_{split}"))
        np.testing.assert_array_equal(a[f"x_{split}"], x)
        np.testing.assert_array_equal(a[f"y_{split}"], getattr(task, f"y_{split}"))
        np.testing.assert_array_equal(b[f"y_{split}"], a[f"y_{split}"])
        np.testing.assert_allclose(b[f"x_{split}"][:, 1], np.diff(x[:, 0], prepend=x[:, 0, :1]),
                                   atol=1e-6)
    # both load as npz: tasks, the second with twice the channels
    assert load_task(f"npz:{diff}", seed=0).in_channels == 2 * task.in_channels


def test_a_set_that_is_not_bundled_is_one_error(tmp_path):
    result = run("first_difference", "--sets", "Nope", "--out", tmp_path / "o")
    assert result.returncode == 2
    assert "no bundled set named 'Nope'" in result.stderr
    assert not (tmp_path / "o" / "data" / "Nope-raw.npz").exists()


def test_results_that_is_a_directory_is_refused_before_any_file(tmp_path):
    result = run("first_difference", "--sets", "GunPoint", "--out", tmp_path / "o", "--results",
                 tmp_path)
    assert result.returncode == 2 and "is a directory" in result.stderr
    assert not (tmp_path / "o").exists()
