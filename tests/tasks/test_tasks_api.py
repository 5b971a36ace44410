"""The Task contract, names and options, the metric, the cache and the CLI."""

import os
import subprocess
import sys

import numpy as np
import pytest

from dnarch_deploy.tasks.__main__ import main
from dnarch_deploy.tasks.cache import cache_path, load_npz, save_npz
from search.tasks import Task, TaskError, list_tasks, load_task

TINY = {
    "ucr:GunPoint": {},
    "digits": {},
    "listops": dict(n_train=30, n_val=5, n_test=5),
    "darcy": dict(size=9, refine=1, n_train=4, n_val=2, n_test=2),
    "pathfinder": dict(n_train=4, n_val=2, n_test=2),
}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return {name: load_task(name, cache_dir=cache, **opts) for name, opts in TINY.items()}


@pytest.mark.parametrize("name", sorted(TINY))
def test_task_contract(tasks, name):
    t: Task = tasks[name]
    assert t.kind in ("classification", "dense") and len(t.spatial) in (1, 2)
    for x, y in ((t.x_train, t.y_train), (t.x_val, t.y_val), (t.x_test, t.y_test)):
        assert len(x) == len(y) > 0
        if t.tokens:
            assert x.dtype == np.int64 and x.shape[1:] == t.spatial
            assert 0 <= x.min() and x.max() < t.vocab_size
        else:
            assert x.dtype == np.float32 and x.shape[1:] == (t.in_channels, *t.spatial)
        if t.kind == "classification":
            assert y.dtype == np.int64 and y.ndim == 1
            assert 0 <= y.min() and y.max() < t.out_channels
        else:
            assert y.dtype == np.float32 and y.shape[1:] == (t.out_channels, *t.spatial)
    assert t.x_mean.shape == t.x_std.shape == (t.in_channels,) and (t.x_std > 0).all()
    assert (t.y_mean is None) == (t.kind == "classification")
    # A perfect prediction scores perfectly, in both forms for classification.
    if t.kind == "classification":
        logits = np.eye(t.out_channels)[t.y_test]
        assert t.metric(logits, t.y_test) == 1.0 == t.metric(t.y_test, t.y_test)
        assert t.higher_is_better and t.metric_name == "accuracy"
    else:
        assert t.metric(t.y_test, t.y_test) == 0.0 and not t.higher_is_better
    assert name.split(":")[0] in repr(t) and len(repr(t)) < 200


def test_metrics_by_hand(tmp_path):
    t = load_task("digits")
    assert t.metric(np.array([0, 1, 2, 2]), np.array([0, 1, 1, 1])) == 0.5
    dense = load_task("darcy", cache_dir=tmp_path, size=9, refine=1, n_train=2, n_val=1, n_test=1)
    y = np.ones((2, 1, 3, 3), np.float32)
    y[1] *= 2
    pred = y.copy()
    pred[0] *= 1.1  # 10% off
    pred[1] *= 0.7  # 30% off
    assert dense.metric(pred, y) == pytest.approx(0.2)


def test_options_from_name_and_keywords(tmp_path):
    a = load_task("listops:n_train=20,n_val=2,n_test=3,max_length=120", cache_dir=tmp_path)
    assert a.sizes() == (20, 2, 3) and a.spatial == (120,)
    assert a.name == "listops:max_length=120,n_test=3,n_train=20,n_val=2"
    b = load_task(a.name, cache_dir=tmp_path, n_test=4)  # keywords win over the name
    assert b.sizes() == (20, 2, 4) and b.info["cache"]["hit"] is False
    c = load_task(a.name, cache_dir=tmp_path)  # the canonical name reloads the same task
    assert c.info["cache"]["hit"] and np.array_equal(c.x_train, a.x_train)
    g = load_task("ucr:GunPoint,val_fraction=0.5")
    assert g.sizes() == (25, 25, 150) and g.name == "ucr:GunPoint,val_fraction=0.5"


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("nonsense", {}, "unknown task 'nonsense'"),
        ("listops", {"n_trian": 5}, "unknown option.*n_trian"),
        ("listops:n_train=many", {}, "n_train='many' is not a valid int"),
        ("listops:n_train", {}, "not key=value"),
        ("darcy", {"size": 3}, "size=3 must be >= 5"),
        ("pathfinder", {"difficulty": "extreme"}, "difficulty='extreme'"),
        ("listops", {"min_length": 300}, "empty length window"),
        ("mnist5k", {"n_val": 4000}, "n_val=4000"),
    ],
)
def test_user_errors_are_task_errors(name, options, message):
    with pytest.raises(TaskError, match=message):
        load_task(name, **options)


def test_list_tasks_names_every_family():
    names = list_tasks()
    for expected in ("ucr:GunPoint", "ucr:ArrowHead", "ucr:OSULeaf", "ucr:ACSF1", "mnist5k",
                     "smnist5k", "digits", "mnist1d", "listops", "pathfinder", "pathfinder1d",
                     "darcy", "npz:PATH"):
        assert expected in names


def test_cache_location_and_atomic_write(tmp_path, monkeypatch):
    monkeypatch.setenv("DNARCH_CACHE", str(tmp_path / "env"))
    path = cache_path("demo", {"seed": 1})
    assert path.parent == tmp_path / "env" and path != cache_path("demo", {"seed": 2})
    save_npz(path, {"a": np.arange(3)})
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    np.testing.assert_array_equal(load_npz(path)["a"], np.arange(3))
    path.write_bytes(b"damaged")
    assert load_npz(path) is None  # a damaged cache file is regenerated, not an error
    task = load_task("darcy", size=9, refine=1, n_train=2, n_val=1, n_test=1)
    assert task.info["cache"]["path"].startswith(str(tmp_path / "env"))


def test_cli_lists_tasks_with_shapes_sizes_and_cache_state(tmp_path, capsys):
    assert main(["ucr:GunPoint", "digits", "darcy:size=9,refine=1,n_train=2,n_val=1,n_test=1",
                 "npz:PATH", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "(1, 150)" in lines["ucr:GunPoint"] and "40/10/150" in lines["ucr:GunPoint"]
    assert "bundled" in lines["ucr:GunPoint"] and "(1, 8, 8)" in lines["digits"]
    darcy_line = lines["darcy:n_test=1,n_train=2,n_val=1,refine=1,size=9"]
    assert "(1, 9, 9)" in darcy_line and "2/1/1" in darcy_line and "not generated" in darcy_line
    assert main(["darcy:size=9,refine=1,n_train=2,n_val=1,n_test=1", "--generate",
                 "--cache-dir", str(tmp_path)]) == 0
    assert "cached" in capsys.readouterr().out.splitlines()[1]
    assert main(["nonsense"]) == 2
    assert "unknown task" in capsys.readouterr().err


def test_cli_runs_as_a_module(tmp_path):
    env = {**os.environ, "CI": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "search.tasks", "--cache-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for name in ("ucr:ACSF1", "mnist5k", "listops", "pathfinder1d", "darcy", "npz:PATH"):
        assert name in result.stdout
    assert "3500/500/1000" in result.stdout  # mnist5k
