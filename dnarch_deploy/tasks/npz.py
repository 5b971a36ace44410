"""A user's own arrays from one .npz file: "npz:PATH".

Keys: x_train, y_train, x_test, y_test, and optionally x_val, y_val (both or neither; without
them validation is carved from training data). x is (N, C, L) or (N, C, H, W); (N, L) means one
channel. y decides the kind: 1-D integers are class labels (classification), anything shaped
(N, C_out, *S) or (N, *S) with the inputs' spatial size is a dense target. Every problem is one
TaskError naming the file and the key.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import CLASSIFICATION, DENSE, Task, TaskError, make_task
from .options import build_options
from .splits import carve_validation

REQUIRED = ("x_train", "y_train", "x_test", "y_test")
OPTIONAL = ("x_val", "y_val")


@dataclass
class NpzOptions:
    val_fraction: float = 0.1  # share of training data carved out when the file has no x_val

    def __post_init__(self) -> None:
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} must be in [0, 1)")


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The file's arrays, refusing pickled objects (np.load with allow_pickle=False)."""
    if not path.is_file():
        raise TaskError(f"npz:{path}: no such file")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, EOFError, zipfile.BadZipFile, ValueError) as err:
        raise TaskError(f"npz:{path}: cannot read it as .npz ({err})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise TaskError(f"npz:{path}: holds a single array, not an .npz archive of named arrays")
    arrays = {}
    with data:
        for key in data.files:
            try:
                arrays[key] = data[key]
            except ValueError:
                raise TaskError(
                    f"npz:{path}: key {key!r} holds Python objects; store plain numeric arrays"
                ) from None
            except (OSError, EOFError, zipfile.BadZipFile) as err:
                raise TaskError(f"npz:{path}: key {key!r} is damaged ({err})") from None
    return arrays


def _check_x(where: str, key: str, x: np.ndarray) -> np.ndarray:
    """(N, C, *S) float32 from (N, L), (N, C, L) or (N, C, H, W)."""
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise TaskError(f"{where}: {key} has dtype {x.dtype}; inputs must be numeric")
    if x.ndim == 2:
        x = x[:, None]
    if x.ndim not in (3, 4):
        raise TaskError(
            f"{where}: {key} has shape {x.shape}; expected (N, L), (N, C, L) or (N, C, H, W)"
        )
    if len(x) == 0 or 0 in x.shape:
        raise TaskError(f"{where}: {key} is empty (shape {x.shape})")
    if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        raise TaskError(f"{where}: {key} contains NaN or inf")
    return x.astype(np.float32)


def _is_labels(y: np.ndarray) -> bool:
    return y.ndim == 1 and (np.issubdtype(y.dtype, np.integer) or y.dtype == bool)


def _check_y(where: str, key: str, y: np.ndarray, x: np.ndarray, kind: str) -> np.ndarray:
    """Labels (N,) int64, or dense targets (N, C_out, *S) float32 matching x's N and S."""
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        raise TaskError(f"{where}: {key} has dtype {y.dtype}; targets must be numeric")
    if len(y) != len(x):
        xkey = "x_" + key[2:]
        raise TaskError(f"{where}: {key} has {len(y)} entries but {xkey} has {len(x)}")
    if kind == CLASSIFICATION:
        if not _is_labels(y):
            raise TaskError(
                f"{where}: {key} has dtype {y.dtype} and shape {y.shape}, but y_train is "
                "class labels: expected 1-D integers"
            )
        if (y < 0).any():
            raise TaskError(f"{where}: {key} has negative labels (min {y.min()})")
        return y.astype(np.int64)
    if y.ndim == 1:
        raise TaskError(
            f"{where}: {key} is 1-D {y.dtype}: class labels must be integers, and dense "
            f"targets must be shaped (N, C_out, *S) with S = {x.shape[2:]}"
        )
    if y.shape[1:] == x.shape[2:]:
        y = y[:, None]
    if y.shape[2:] != x.shape[2:]:
        raise TaskError(
            f"{where}: {key} has shape {y.shape}; dense targets must be (N, C_out, *S) "
            f"with the inputs' spatial size S = {x.shape[2:]}"
        )
    if not np.isfinite(y).all():
        raise TaskError(f"{where}: {key} contains NaN or inf")
    return y.astype(np.float32)


def validate(where: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Checked, converted splits (val may be missing); raises TaskError naming the key."""
    for key in REQUIRED:
        if key not in arrays:
            raise TaskError(f"{where}: missing key {key} (the file has: {sorted(arrays)})")
    has_val = [k in arrays for k in OPTIONAL]
    if any(has_val) and not all(has_val):
        missing = OPTIONAL[has_val.index(False)]
        raise TaskError(f"{where}: missing key {missing} (x_val and y_val come together)")
    parts = ["train", "test"] + (["val"] if all(has_val) else [])
    kind = CLASSIFICATION if _is_labels(arrays["y_train"]) else DENSE
    out = {}
    for part in parts:
        x = _check_x(where, f"x_{part}", arrays[f"x_{part}"])
        if part != "train" and x.shape[1:] != out["x_train"].shape[1:]:
            raise TaskError(
                f"{where}: x_{part} has per-sample shape {x.shape[1:]} but x_train has "
                f"{out['x_train'].shape[1:]}"
            )
        out[f"x_{part}"] = x
        y = _check_y(where, f"y_{part}", arrays[f"y_{part}"], x, kind)
        if part != "train" and y.shape[1:] != out["y_train"].shape[1:]:
            raise TaskError(
                f"{where}: y_{part} has per-sample shape {y.shape[1:]} but y_train has "
                f"{out['y_train'].shape[1:]}"
            )
        out[f"y_{part}"] = y
    if kind == CLASSIFICATION:
        n_classes = int(out["y_train"].max()) + 1
        for part in parts[1:]:
            y = out[f"y_{part}"]
            if len(y) and y.max() >= n_classes:
                raise TaskError(
                    f"{where}: y_{part} has label {int(y.max())}, but y_train only has labels "
                    f"0..{n_classes - 1}"
                )
    return out


def load(arg: str | None, seed: int, options: dict) -> Task:
    if not arg:
        raise TaskError("npz: give a file, e.g. 'npz:data/my_set.npz'")
    path = Path(arg).expanduser()
    where = f"npz:{path}"
    opts = build_options(NpzOptions, options, where)
    s = validate(where, read_arrays(path))
    kind = CLASSIFICATION if s["y_train"].ndim == 1 else DENSE
    num_classes = int(s["y_train"].max()) + 1 if kind == CLASSIFICATION else 0
    carved = "x_val" not in s
    if carved:
        n_val = int(round(opts.val_fraction * len(s["y_train"])))
        counts = np.bincount(s["y_train"]) if kind == CLASSIFICATION else None
        stratify = kind == CLASSIFICATION and counts[counts > 0].min() >= 2
        s["x_train"], s["y_train"], s["x_val"], s["y_val"] = carve_validation(
            s["x_train"], s["y_train"], n_val, seed, stratify=stratify
        )
    info = {
        "source": f"user file {path.resolve()}",
        "validation": "carved from training data" if carved else "from the file",
        "options": vars(opts),
    }
    return make_task(f"npz:{arg}", kind, s, num_classes=num_classes, info=info)
