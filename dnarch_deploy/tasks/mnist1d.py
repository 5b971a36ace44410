"""MNIST-1D (Greydanus 2020), generated here with the reference algorithm (mnist1d data.py and
transform.py): ten hand-made 12-point templates, padded, stretched, scaled, shifted, given
correlated background noise, iid noise and a shear, then resampled to length 40.

Random draws come from one numpy RandomState in the reference's order, so data_seed=42 (the
reference's seed) reproduces the mnist1d package's make_dataset() output. The data are a
fixed set like a bundled one: the run's seed only picks the validation carve.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .base import CLASSIFICATION, Task, make_task
from .cache import cached
from .options import build_options
from .splits import carve_validation

GENERATOR_VERSION = 1
ANCHORS = {
    "logistic_regression": 0.32, "mlp": 0.68, "cnn": 0.94, "gru": 0.91, "human": 0.96,
    "1nn_ed_regenerated": 0.567,
    "note": "mnist1d README numbers are for the frozen pickle; a regenerated set may differ",
}

# The ten digit templates: 12 points each (mnist1d data.py get_templates).
TEMPLATES = np.array([
    [5, 6, 6.5, 6.75, 7, 7, 7, 7, 6.75, 6.5, 6, 5],
    [5, 3, 3, 3.4, 3.8, 4.2, 4.6, 5, 5.4, 5.8, 5, 5],
    [5, 6, 6.5, 6.5, 6, 5.25, 4.75, 4, 3.5, 3.5, 4, 5],
    [5, 6, 6.5, 6.5, 6, 5, 5, 6, 6.5, 6.5, 6, 5],
    [5, 4.4, 3.8, 3.2, 2.6, 2.6, 5, 5, 5, 5, 5, 5],
    [5, 3, 3, 3, 3, 5, 6, 6.5, 6.5, 6, 4.5, 5],
    [5, 4, 3.5, 3.25, 3, 3, 3, 3, 3.25, 3.5, 4, 5],
    [5, 7, 7, 6.6, 6.2, 5.8, 5.4, 5, 4.6, 4.2, 5, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 4, 3.5, 3.5, 4, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 5, 5, 4.7, 4.3, 5],
])


@dataclass
class MNIST1DOptions:
    num_samples: int = 5000  # 500 per class
    train_split: float = 0.8  # the first 4000 (after shuffling) train, the last 1000 test
    n_val: int = 400  # carved from the training part with the run's seed
    final_seq_length: int = 40
    padding_low: int = 36
    padding_high: int = 60
    scale_coeff: float = 0.4
    max_translation: int = 48
    corr_noise_scale: float = 0.25
    iid_noise_scale: float = 0.02
    shear_scale: float = 0.75
    shuffle_seq: bool = False  # the "shuffled positions" variant
    data_seed: int = 42  # the reference's seed

    def __post_init__(self) -> None:
        n_train = int(self.num_samples * self.train_split)
        if self.num_samples < 20 or not 0 < n_train < self.num_samples:
            raise ValueError("num_samples must be >= 20 and train_split in (0, 1)")
        if not 0 <= self.n_val < n_train:
            raise ValueError(f"n_val={self.n_val} must be below the {n_train} training samples")


def templates() -> np.ndarray:
    """Whitened templates that start and end at 0, scaled by 1/6 (as the reference)."""
    x = TEMPLATES - TEMPLATES.mean(1, keepdims=True)
    x = x / x.std(1, keepdims=True)
    x = x - x[:, :1]
    return x / 6.0


def _resample(x: np.ndarray, n: int) -> np.ndarray:
    """Linear interpolation of x (taken on [0, 1]) onto n evenly spaced points."""
    return np.interp(np.linspace(0, 1, n), np.linspace(0, 1, len(x)), x)


def transform(x: np.ndarray, rs: np.random.RandomState, o: MNIST1DOptions) -> np.ndarray:
    """One random sample from template x; the draws happen in the reference's order."""
    from scipy.ndimage import gaussian_filter1d

    pad = o.padding_low + int(rs.rand() * (o.padding_high - o.padding_low + 1))
    x = np.concatenate([x + 1e-8, np.zeros(pad)])  # +1e-8 keeps the signal apart from padding
    x = _resample(x, len(TEMPLATES[0]) + o.padding_high)
    x = x * (1 + o.scale_coeff * (rs.rand() - 0.5))
    k = rs.choice(o.max_translation)
    x = np.concatenate([x[-k:], x[:-k]]) if k else x
    background = x == 0
    noise = gaussian_filter1d(o.corr_noise_scale * rs.randn(len(x)), 2)
    x = np.where(background, noise, x)
    x = x + o.iid_noise_scale * rs.randn(len(x))
    x = x - o.shear_scale * (rs.rand() - 0.5) * np.linspace(-0.5, 0.5, len(x))
    return _resample(x, o.final_seq_length)


def generate(o: MNIST1DOptions) -> dict[str, np.ndarray]:
    """The whole set, shuffled, globally standardised (as the reference), split train/test."""
    rs = np.random.RandomState(o.data_seed)
    base = templates()
    per_class = o.num_samples // len(base)
    xs = [transform(base[label], rs, o) for label in range(len(base)) for _ in range(per_class)]
    ys = np.repeat(np.arange(len(base)), per_class)
    order = rs.permutation(len(ys))
    x, y = np.stack(xs)[order], ys[order]
    if o.shuffle_seq:
        x = x[:, rs.permutation(o.final_seq_length)]
    x = (x - x.mean()) / x.std()
    split = int(len(y) * o.train_split)
    return {"x_train": x[:split], "y_train": y[:split], "x_test": x[split:], "y_test": y[split:]}


def cache_params(o: MNIST1DOptions) -> dict:
    params = {**asdict(o), "version": GENERATOR_VERSION}
    params.pop("n_val")  # the carve does not change the generated data
    return params


def load(seed: int, cache_dir, options: dict) -> Task:
    o = build_options(MNIST1DOptions, options, "mnist1d")
    arrays, path, hit = cached("mnist1d", cache_params(o), lambda: generate(o), cache_dir)
    x_train, y_train, x_val, y_val = carve_validation(
        arrays["x_train"], arrays["y_train"], o.n_val, seed, stratify=True
    )
    splits = dict(
        x_train=x_train[:, None], y_train=y_train, x_val=x_val[:, None], y_val=y_val,
        x_test=arrays["x_test"][:, None], y_test=arrays["y_test"],
    )
    info = {
        "source": "MNIST-1D, regenerated with the reference algorithm (mnist1d data.py)",
        "anchors": ANCHORS,
        "options": asdict(o),
        "cache": {"path": str(path), "hit": hit},
    }
    return make_task("mnist1d", CLASSIFICATION, splits, num_classes=10, info=info)


def describe(seed: int, cache_dir, options: dict) -> dict:
    """Shapes, sizes and cache state without generating anything."""
    from .cache import cache_path

    o = build_options(MNIST1DOptions, options, "mnist1d")
    path = cache_path("mnist1d", cache_params(o), cache_dir)
    n_train = int(o.num_samples * o.train_split)
    return {"kind": CLASSIFICATION, "input": str((1, o.final_seq_length)), "out": 10,
            "sizes": (n_train - o.n_val, o.n_val, o.num_samples - n_train),
            "metric": "accuracy", "cache": "cached" if path.exists() else "not generated"}
