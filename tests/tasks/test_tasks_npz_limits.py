"""npz:PATH against hostile files (issue #17): labels that would size the head, channels-last
images, nothing to validate on; and the file's fingerprint."""

import hashlib

import numpy as np
import pytest

from search.tasks import TaskError, load_task

RNG = np.random.default_rng(0)


def save(tmp_path, x_train, y_train, **extra) -> str:
    path = tmp_path / "data.npz"
    x_test = x_train[:4]
    np.savez(path, x_train=x_train, y_train=np.asarray(y_train), x_test=x_test,
             y_test=np.zeros(len(x_test), np.int64), **extra)
    return f"npz:{path}"


def sequences(n: int) -> np.ndarray:
    return RNG.normal(size=(n, 1, 16)).astype(np.float32)


@pytest.mark.parametrize(("labels", "match"), [
    ([0, 1] * 10 + [10**9], r"y_train has label 1000000000; at most 10000 classes"),
    ([3, 7, 9] * 8, r"y_train has labels \{3, 7, 9\}.*absent: 0, 1, 2, 4, 5, \.\.\."),
    ([0, 2] * 8, r"absent: 1\)"),
])
def test_labels_must_be_few_and_contiguous(tmp_path, labels, match):
    name = save(tmp_path, sequences(len(labels)), labels)
    with pytest.raises(TaskError, match=match) as err:
        load_task(name)
    assert str(tmp_path / "data.npz") in str(err.value)


def test_channels_last_images_are_refused_with_the_fix(tmp_path):
    x = RNG.normal(size=(20, 16, 16, 3)).astype(np.float32)
    name = save(tmp_path, x, np.arange(20) % 2)
    with pytest.raises(TaskError, match=r"x_train has shape \(20, 16, 16, 3\).*channels-last"):
        load_task(name)
    task = load_task(name, layout="nhwc")
    assert task.in_channels == 3 and task.spatial == (16, 16)
    np.testing.assert_array_equal(task.x_test, np.moveaxis(x[:4], -1, 1))
    as_is = load_task(name, layout="nchw")  # the user says the shape is right
    assert as_is.in_channels == 16 and as_is.spatial == (16, 3)
    with pytest.raises(TaskError, match="layout='hwc' must be auto, nchw or nhwc"):
        load_task(name, layout="hwc")


def test_one_sample_per_class_has_no_validation_split(tmp_path):
    name = save(tmp_path, sequences(4), [0, 1, 2, 3])
    with pytest.raises(TaskError, match="no validation samples.*4 classes with one sample each"):
        load_task(name)
    name = save(tmp_path, sequences(4), [0, 1, 0, 1])  # 10% of 4 samples: none
    with pytest.raises(TaskError, match="val_fraction=0.1 of 4 samples is none"):
        load_task(name)


def test_the_file_fingerprint_is_the_sha256_of_its_bytes(tmp_path):
    name = save(tmp_path, sequences(20), np.arange(20) % 2)
    task = load_task(name)
    path = tmp_path / "data.npz"
    assert task.info["file_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert task.info["file"] == str(path.resolve())
