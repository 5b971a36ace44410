"""MNIST-1D: the regenerated set equals the reference package's make_dataset() output."""

import numpy as np
import pytest

from dnarch_deploy.tasks import load_task, mnist1d

# Values printed by mnist1d 0.0.2.post1: make_dataset(get_dataset_args()) (seed 42).
REF_X0_HEAD = [-0.33200566736939013, -0.4719103656557236, -0.778697076293495,
               -1.0097408265367045, -0.8823525654053073, 0.10393481264623418]
REF_XTEST_LAST_TAIL = [0.4472328851428726, 0.6598756470890784, 0.8777343497528006,
                       1.1931518368352758]
REF_Y_HEAD = [2, 6, 4, 5, 6, 6, 6, 0, 3, 1, 6, 9, 4, 3, 4, 5, 1, 9, 0, 3]
REF_YTEST_TAIL = [8, 3, 3, 6, 1, 2, 5, 9, 6, 4]
REF_ABS_SUM_TRAIN = 118338.29510719894


@pytest.fixture(scope="module")
def reference_arrays():
    return mnist1d.generate(mnist1d.MNIST1DOptions())


def test_generator_reproduces_the_reference_package(reference_arrays):
    a = reference_arrays
    assert a["x_train"].shape == (4000, 40) and a["x_test"].shape == (1000, 40)
    np.testing.assert_allclose(a["x_train"][0, :6], REF_X0_HEAD, rtol=1e-12)
    np.testing.assert_allclose(a["x_test"][-1, -4:], REF_XTEST_LAST_TAIL, rtol=1e-12)
    assert a["y_train"][:20].tolist() == REF_Y_HEAD
    assert a["y_test"][-10:].tolist() == REF_YTEST_TAIL
    assert np.abs(a["x_train"]).sum() == pytest.approx(REF_ABS_SUM_TRAIN, rel=1e-12)


def test_templates_start_and_end_at_zero():
    t = mnist1d.templates()
    assert t.shape == (10, 12)
    np.testing.assert_allclose(t[:, 0], 0.0, atol=1e-15)
    assert len({tuple(np.round(r, 6)) for r in t}) == 10


def test_task_split_and_statistics(tmp_path, reference_arrays):
    task = load_task("mnist1d", cache_dir=tmp_path)
    assert task.spatial == (40,) and task.in_channels == 1 and task.sizes() == (3600, 400, 1000)
    np.testing.assert_array_equal(task.x_test[:, 0], reference_arrays["x_test"].astype(np.float32))
    # Stratified carve: each class gives its share of the 400 validation samples.
    share = np.bincount(reference_arrays["y_train"], minlength=10) / 4000
    assert np.abs(np.bincount(task.y_val, minlength=10) - 400 * share).max() <= 1
    assert task.x_mean[0] == pytest.approx(task.x_train.mean(), abs=1e-6)
    again = load_task("mnist1d", seed=1, cache_dir=tmp_path)
    assert again.info["cache"]["hit"]  # the seed only moves the validation carve
    np.testing.assert_array_equal(again.x_test, task.x_test)
    assert not np.array_equal(again.y_val, task.y_val) or not np.array_equal(
        again.x_val, task.x_val
    )


def test_one_nearest_neighbour_matches_the_research_notes(reference_arrays):
    # 1-NN Euclidean on the regenerated set = 56.7% (measured when the generator was written).
    a, b = reference_arrays["x_train"], reference_arrays["x_test"]
    d = (b**2).sum(1)[:, None] - 2 * b @ a.T + (a**2).sum(1)[None]
    accuracy = np.mean(reference_arrays["y_train"][d.argmin(1)] == reference_arrays["y_test"])
    assert accuracy == pytest.approx(0.567, abs=0.001)
