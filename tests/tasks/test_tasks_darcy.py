"""Darcy flow: solver accuracy, coefficient field, determinism and the cache."""

import numpy as np
import pytest

from dnarch_deploy.tasks import darcy, load_task

SMALL = dict(size=17, refine=2, n_train=6, n_val=2, n_test=2)


def manufactured_error(k: int) -> float:
    """Max nodal error for u = sin(pi x) sin(pi y) with a = 1 + x + y^2 on a k x k grid."""
    x = np.linspace(0.0, 1.0, k)
    xx, yy = np.meshgrid(x, x, indexing="ij")
    a, a_x, a_y = 1 + xx + yy**2, np.ones_like(xx), 2 * yy
    u = np.sin(np.pi * xx) * np.sin(np.pi * yy)
    u_x = np.pi * np.cos(np.pi * xx) * np.sin(np.pi * yy)
    u_y = np.pi * np.sin(np.pi * xx) * np.cos(np.pi * yy)
    f = -(a_x * u_x + a_y * u_y + a * (-2 * np.pi**2 * u))  # -div(a grad u)
    return float(np.abs(darcy.solve_nodes(a, f) - u).max())


def test_solver_converges_at_second_order():
    errors = [manufactured_error(k) for k in (17, 33, 65)]
    rates = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert errors[-1] < 2e-4
    np.testing.assert_allclose(rates, 2.0, atol=0.1)


def test_cell_centred_solve_matches_the_torsion_function():
    # -Laplace(u) = 1 on the unit square: max u = 0.0736713... ; with a = 12, a twelfth of it.
    k = 65
    u = darcy.solve_gwf(np.full((k, k), 12.0), np.ones((k, k)))
    assert u.max() == pytest.approx(0.0736713 / 12, rel=2e-3)
    np.testing.assert_allclose(u, u.T, atol=1e-12)  # symmetric problem, symmetric answer


def test_random_field_statistics():
    rng = np.random.default_rng(0)
    fields = np.stack([darcy.gaussian_random_field(rng, 33, 2.0, 3.0) for _ in range(200)])
    assert abs(fields.mean()) < 0.05 * fields.std()  # zero mean (the constant mode is removed)
    assert 0.35 < (fields >= 0).mean() < 0.65  # thresholding splits about evenly


@pytest.fixture(scope="module")
def small_task(tmp_path_factory):
    return load_task("darcy", seed=0, cache_dir=tmp_path_factory.mktemp("darcy"), **SMALL)


def test_task_shapes_and_two_valued_coefficients(small_task):
    t = small_task
    assert t.kind == "dense" and t.metric_name == "rel_l2" and not t.higher_is_better
    assert t.spatial == (17, 17) and t.in_channels == 1 and t.out_channels == 1
    assert t.sizes() == (6, 2, 2)
    x = np.concatenate([t.x_train, t.x_val, t.x_test])
    assert set(np.unique(x)) == {3.0, 12.0}
    y = np.concatenate([t.y_train, t.y_val, t.y_test])
    assert y.shape == x.shape and y.dtype == np.float32
    assert 0.003 < y.max() < 0.03 and y.min() > -1e-3  # f = 1 with a in [3, 12]
    np.testing.assert_allclose(t.y_mean, [t.y_train.mean()], rtol=1e-5)
    np.testing.assert_allclose(t.y_std, [t.y_train.std()], rtol=1e-5)
    # The training-mean predictor is far from exact, a perfect one is exact.
    mean_pred = np.broadcast_to(t.y_train.mean(0), t.y_test.shape)
    assert t.metric(mean_pred, t.y_test) > 0.05
    assert t.metric(t.y_test, t.y_test) == 0.0


def test_same_seed_same_data_other_seed_differs(small_task, tmp_path):
    again = load_task("darcy", seed=0, cache_dir=tmp_path, **SMALL)  # fresh cache: regenerated
    assert not again.info["cache"]["hit"]
    np.testing.assert_array_equal(again.x_train, small_task.x_train)
    np.testing.assert_array_equal(again.y_test, small_task.y_test)
    other = load_task("darcy", seed=1, cache_dir=tmp_path, **SMALL)
    assert not np.array_equal(other.x_train, small_task.x_train)


def test_cache_is_reused(tmp_path, monkeypatch):
    first = load_task("darcy", seed=0, cache_dir=tmp_path, **SMALL)
    path = first.info["cache"]["path"]
    files = list(tmp_path.iterdir())
    assert [str(f) for f in files] == [path]  # one file, no temporary left behind
    mtime = files[0].stat().st_mtime_ns

    def fail(*args, **kwargs):
        raise AssertionError("regenerated although cached")

    monkeypatch.setattr(darcy, "generate", fail)
    second = load_task("darcy:size=17,refine=2,n_train=6,n_val=2,n_test=2", cache_dir=tmp_path)
    assert second.info["cache"]["hit"] and files[0].stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(second.y_train, first.y_train)


def test_worker_processes_give_the_same_data(tmp_path):
    opts = darcy.resolve_options({**SMALL, "n_train": 12, "size": 9})
    serial = darcy.generate(opts, seed=5)
    opts.workers = 2
    parallel = darcy.generate(opts, seed=5)
    for key in serial:
        np.testing.assert_array_equal(serial[key], parallel[key])
