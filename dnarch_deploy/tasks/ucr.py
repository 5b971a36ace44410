"""UCR/UEA time-series sets bundled in the sktime (or aeon) wheel, read from their .ts files.

The packages are located with importlib.util.find_spec and never imported: parsing the text
files ourselves is faster and avoids pulling pandas and numba in.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import CLASSIFICATION, Task, TaskError, make_task
from .splits import carve_validation

# Where each package keeps its copies; the first package that has a set wins.
_DATA_DIRS = {"sktime": "datasets/data", "aeon": "datasets/data"}
# sktime's own test fixture (a slice of Chinatown), not an archive set.
_SKIP = {"UnitTest"}

# Published numbers (checked against the published tables when this loader was written):
# 1-NN Euclidean accuracy, InceptionTime on the official split (resample 0), and its mean over 30.
ANCHORS = {
    "GunPoint": {"1nn_ed": 0.913, "inceptiontime_split0": 1.000, "inceptiontime_mean30": 0.995},
    "ItalyPowerDemand": {
        "1nn_ed": 0.955, "inceptiontime_split0": 0.966, "inceptiontime_mean30": 0.960,
    },
    "ArrowHead": {"1nn_ed": 0.800, "inceptiontime_split0": 0.863, "inceptiontime_mean30": 0.880},
    "OSULeaf": {"1nn_ed": 0.521, "inceptiontime_split0": 0.921, "inceptiontime_mean30": 0.952},
    "ACSF1": {"1nn_ed": 0.540, "inceptiontime_split0": 0.910, "inceptiontime_mean30": 0.827},
    "BasicMotions": {"1nn_ed": 0.600},
    "PickupGestureWiimoteZ": {"1nn_ed": 0.660},
}


@dataclass
class UCROptions:
    val_fraction: float = 0.2  # share of the official training set carved out for validation

    def __post_init__(self) -> None:
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} must be in [0, 1)")


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def find_set(name: str) -> tuple[Path, Path] | None:
    """(train .ts, test .ts) for a set name, from the first installed package that has it."""
    for package, sub in _DATA_DIRS.items():
        root = _package_dir(package)
        if root is None:
            continue
        folder = root / sub / name
        train, test = folder / f"{name}_TRAIN.ts", folder / f"{name}_TEST.ts"
        if train.is_file() and test.is_file():
            return train, test
    return None


def _header(path: Path) -> dict[str, str]:
    """The @key value lines of a .ts file (keys lower-cased)."""
    header = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("@"):
                key, _, value = line[1:].partition(" ")
                if key.lower() == "data":
                    break
                header[key.lower()] = value.strip()
    return header


def available_sets() -> list[str]:
    """Names of the bundled classification sets (regression sets are left out)."""
    names = set()
    for package, sub in _DATA_DIRS.items():
        root = _package_dir(package)
        if root is None or not (root / sub).is_dir():
            continue
        for folder in (root / sub).iterdir():
            train = folder / f"{folder.name}_TRAIN.ts"
            if folder.name in _SKIP or not train.is_file():
                continue
            if _header(train).get("classlabel", "").lower().startswith("true"):
                names.add(folder.name)
    return sorted(names)


def read_ts(path: Path) -> tuple[list[np.ndarray], list[str], list[str]]:
    """Parse a .ts file: series as (channels, length) arrays, their labels, the class names."""
    header, series, labels = {}, [], []
    in_data = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                if line.startswith("@"):
                    key, _, value = line[1:].partition(" ")
                    header[key.lower()] = value.strip()
                    in_data = key.lower() == "data"
                continue
            *dims, label = line.split(":")
            try:
                rows = [np.array(d.replace("?", "nan").split(","), dtype=np.float64) for d in dims]
            except ValueError:
                raise TaskError(f"{path}:{lineno}: cannot parse this series' values") from None
            if len({len(r) for r in rows}) != 1:
                raise TaskError(f"{path}:{lineno}: channels of one series differ in length")
            series.append(np.stack(rows))
            labels.append(label.strip())
    class_field = header.get("classlabel", "").split()
    if not class_field or class_field[0].lower() != "true":
        raise TaskError(f"{path}: not a classification set (no '@classLabel true' line)")
    return series, labels, class_field[1:]


def _stack(series: list[np.ndarray], length: int) -> np.ndarray:
    """(N, C, length): shorter series are right-padded with zeros (PLAID, JapaneseVowels)."""
    out = np.zeros((len(series), series[0].shape[0], length), np.float32)
    for i, s in enumerate(series):
        out[i, :, : s.shape[1]] = s
    return out


def load(arg: str | None, seed: int, cache_dir, options: dict) -> Task:
    opts = _options(arg, options)
    where = f"ucr:{arg}"
    paths = find_set(arg)
    if paths is None:
        raise TaskError(
            f"{where}: no bundled set named {arg!r}; available: {', '.join(available_sets())} "
            "(install the data extra: pip install 'dnarch-deploy[data]')"
        )
    train_series, train_labels, classes = read_ts(paths[0])
    test_series, test_labels, _ = read_ts(paths[1])
    all_series = train_series + test_series
    if any(np.isnan(s).any() for s in all_series):
        raise TaskError(f"{where}: the set has missing values ('?'), which are not supported")
    lengths = [s.shape[1] for s in all_series]
    length = max(lengths)
    index = {c: i for i, c in enumerate(classes)}
    try:
        y_train = np.array([index[c] for c in train_labels], np.int64)
        y_test = np.array([index[c] for c in test_labels], np.int64)
    except KeyError as err:
        raise TaskError(f"{where}: label {err} is not in the file's @classLabel list") from None
    x_train, x_test = _stack(train_series, length), _stack(test_series, length)
    n_val = int(round(opts.val_fraction * len(y_train)))
    x_tr, y_tr, x_val, y_val = carve_validation(x_train, y_train, n_val, seed, stratify=True)
    info = {
        "source": f"UCR/UEA archive, official split, file {paths[0].parent}",
        "class_names": classes,
        "official_sizes": (len(y_train), len(y_test)),
        "variable_length": min(lengths) != length,
        "padding": "right, zeros, to the longest series" if min(lengths) != length else None,
        "anchors": ANCHORS.get(arg, {}),
        "options": vars(opts),
    }
    splits = dict(
        x_train=x_tr, y_train=y_tr, x_val=x_val, y_val=y_val, x_test=x_test, y_test=y_test
    )
    return make_task(f"ucr:{arg}", CLASSIFICATION, splits, num_classes=len(classes), info=info)


def _options(arg: str | None, options: dict) -> UCROptions:
    from .options import build_options

    if not arg:
        raise TaskError("ucr: name the set, e.g. 'ucr:GunPoint'")
    return build_options(UCROptions, options, f"ucr:{arg}")
