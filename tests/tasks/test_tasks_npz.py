"""npz:PATH — users' own arrays: layouts accepted, and one clear TaskError per bad input."""

import numpy as np
import pytest

from search.tasks import TaskError, load_task

RNG = np.random.default_rng(0)


def classification_arrays() -> dict:
    return {
        "x_train": RNG.normal(size=(40, 2, 16)).astype(np.float32),
        "y_train": np.arange(40) % 4,
        "x_test": RNG.normal(size=(12, 2, 16)).astype(np.float32),
        "y_test": np.arange(12) % 4,
    }


def save(tmp_path, arrays: dict, name: str = "data.npz") -> str:
    path = tmp_path / name
    np.savez(path, **arrays)
    return f"npz:{path}"


def test_classification_with_carved_validation(tmp_path):
    arrays = classification_arrays()
    task = load_task(save(tmp_path, arrays), seed=0)
    assert task.kind == "classification" and task.out_channels == 4
    assert task.in_channels == 2 and task.spatial == (16,)
    assert task.sizes() == (36, 4, 12)
    assert sorted(task.y_val.tolist()) == [0, 1, 2, 3]  # stratified
    # Raw values are kept; statistics come from the training part only.
    np.testing.assert_array_equal(task.x_test, arrays["x_test"])
    np.testing.assert_allclose(task.x_mean, task.x_train.mean(axis=(0, 2)), rtol=1e-5)


def test_dense_two_dimensional_with_given_validation(tmp_path):
    arrays = {
        "x_train": RNG.normal(size=(10, 1, 8, 8)),
        "y_train": RNG.normal(size=(10, 8, 8)),  # (N, *S): one target channel
        "x_val": RNG.normal(size=(3, 1, 8, 8)),
        "y_val": RNG.normal(size=(3, 8, 8)),
        "x_test": RNG.normal(size=(4, 1, 8, 8)),
        "y_test": RNG.normal(size=(4, 8, 8)),
    }
    task = load_task(save(tmp_path, arrays))
    assert task.kind == "dense" and task.metric_name == "rel_l2"
    assert task.spatial == (8, 8) and task.out_channels == 1 and task.sizes() == (10, 3, 4)
    assert task.y_train.shape == (10, 1, 8, 8) and task.x_train.dtype == np.float32
    np.testing.assert_allclose(task.x_val[:, 0], arrays["x_val"][:, 0].astype(np.float32))


def test_two_dimensional_x_means_one_channel(tmp_path):
    arrays = classification_arrays()
    arrays["x_train"], arrays["x_test"] = arrays["x_train"][:, 0], arrays["x_test"][:, 0]
    task = load_task(save(tmp_path, arrays))
    assert task.in_channels == 1 and task.x_train.shape[1:] == (1, 16)


def _without(key):
    def edit(a):
        del a[key]
    return edit


def _set(key, value_fn):
    def edit(a):
        a[key] = value_fn(a)
    return edit


BAD_CASES = {
    "missing y_test": (_without("y_test"), "y_test"),
    "x_val without y_val": (_set("x_val", lambda a: a["x_test"]), "y_val"),
    "string inputs": (_set("x_train", lambda a: np.full((40, 2, 16), "a")), "x_train"),
    "object inputs": (_set("x_test", lambda a: np.array([None] * 12, dtype=object)), "x_test"),
    "rank 1 inputs": (_set("x_test", lambda a: np.zeros(12)), "x_test"),
    "rank 5 inputs": (_set("x_train", lambda a: np.zeros((40, 1, 2, 2, 2))), "x_train"),
    "NaN input": (_set("x_test", lambda a: np.where(np.eye(12, 16)[:, None] > 0, np.nan,
                                                    a["x_test"])), "x_test"),
    "inf input": (_set("x_train", lambda a: a["x_train"] * np.inf), "x_train"),
    "negative label": (_set("y_train", lambda a: a["y_train"] - 1), "y_train"),
    "label out of range": (_set("y_test", lambda a: a["y_test"] + 4), "y_test"),
    "float labels in test": (_set("y_test", lambda a: a["y_test"].astype(float)), "y_test"),
    "1-D float targets": (_set("y_train", lambda a: a["y_train"].astype(float)), "y_train"),
    "length mismatch": (_set("y_train", lambda a: a["y_train"][:-1]), "y_train"),
    "shape mismatch between splits": (_set("x_test", lambda a: a["x_test"][..., :8]), "x_test"),
    "channel mismatch between splits": (_set("x_test", lambda a: a["x_test"][:, :1]), "x_test"),
    "dense target of wrong size": (_set("y_train", lambda a: np.zeros((40, 1, 15))), "y_train"),
    "dense NaN target": (
        lambda a: a.update(y_train=np.full((40, 1, 16), np.nan), y_test=np.zeros((12, 1, 16))),
        "y_train",
    ),
    "empty inputs": (_set("x_test", lambda a: np.zeros((0, 2, 16))), "x_test"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_names_the_key(tmp_path, case):
    edit, key = BAD_CASES[case]
    arrays = classification_arrays()
    edit(arrays)
    with pytest.raises(TaskError, match=rf"\b{key}\b") as info:
        load_task(save(tmp_path, arrays))
    assert str(tmp_path) in str(info.value)  # and the file


def test_unreadable_files(tmp_path):
    with pytest.raises(TaskError, match="no such file"):
        load_task(f"npz:{tmp_path / 'missing.npz'}")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(TaskError, match="cannot read"):
        load_task(f"npz:{garbage}")
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    with pytest.raises(TaskError, match="single array"):
        load_task(f"npz:{single}")
    with pytest.raises(TaskError, match="give a file"):
        load_task("npz:")
