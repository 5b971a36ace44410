"""benchmarks.ts_to_npz: a .ts pair becomes the npz task's arrays, and the search loads it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.benchmarks import scripts

HEADER = "@problemName toy\n@timeStamps false\n@univariate true\n@equalLength true\n" \
         "@classLabel true 2 10 7\n@data\n"


def write_ts(path: Path, rows: list[tuple[list[float], str]]) -> Path:
    path.write_text(HEADER + "".join(",".join(map(str, x)) + f":{y}\n" for x, y in rows))
    return path


def run(*args) -> subprocess.CompletedProcess:
    return scripts.run("ts_to_npz", *args, timeout=120)


@pytest.mark.slow
def test_a_ts_pair_becomes_the_npz_tasks_arrays_with_labels_in_numeric_order(tmp_path):
    train = write_ts(tmp_path / "t_TRAIN.ts", [([1, 2, 3, 4], "10"), ([0, 1, 0, 1], "2"),
                                                ([5, 5, 5, 5], "7"), ([4, 3, 2, 1], "10")])
    test = write_ts(tmp_path / "t_TEST.ts", [([1, 1, 1, 1], "7"), ([2, 2, 2, 2], "2")])
    proc = run(train, test, tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    assert "train [4, 1, 4], test [2, 1, 4], 3 classes" in proc.stdout
    data = np.load(tmp_path / "t.npz")
    assert data["x_train"].dtype == np.float32 and data["x_train"].shape == (4, 1, 4)
    np.testing.assert_array_equal(data["x_train"][0, 0], [1, 2, 3, 4])
    np.testing.assert_array_equal(data["y_train"], [2, 0, 1, 2])  # "2" < "7" < "10"
    np.testing.assert_array_equal(data["y_test"], [1, 0])

    from search.tasks import load_task

    task = load_task(f"npz:{tmp_path / 't.npz'}", val_fraction=0.25)
    assert task.spatial == (4,) and task.out_channels == 3


@pytest.mark.slow
def test_bad_input_is_one_error_line_and_nothing_is_overwritten(tmp_path):
    train = write_ts(tmp_path / "a_TRAIN.ts", [([1, 2, 3], "2"), ([3, 2, 1], "7")])
    test = write_ts(tmp_path / "a_TEST.ts", [([1, 2, 3], "10")])
    out = tmp_path / "a.npz"
    proc = run(train, test, out)
    assert proc.returncode == 2 and "labels ['10'] are not in" in proc.stderr
    assert not out.exists()
    out.write_bytes(b"keep me")
    proc = run(train, train, out)
    assert proc.returncode == 2 and "exists" in proc.stderr and out.read_bytes() == b"keep me"
    proc = run(tmp_path / "missing.ts", test, tmp_path / "b.npz")
    assert proc.returncode == 2 and "missing.ts: no such file" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "c.npz").write_bytes(b"keep me too")  # np.savez would add .npz to "c"
    proc = run(train, train, tmp_path / "c")
    assert proc.returncode == 2 and "must end in .npz" in proc.stderr
    assert (tmp_path / "c.npz").read_bytes() == b"keep me too" and not (tmp_path / "c").exists()
