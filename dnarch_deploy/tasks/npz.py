"""A user's own arrays from one .npz file: "npz:PATH".

Keys: x_train, y_train, x_test, y_test, and optionally x_val, y_val (both or neither; without
them validation is carved from training data). x is (N, C, L) or (N, C, H, W); (N, L) means one
channel. y decides the kind: 1-D integers are class labels (classification), anything shaped
(N, C_out, *S) or (N, *S) with the inputs' spatial size is a dense target. Every problem is one
TaskError naming the file and the key.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dnarch_deploy.model import MAX_CLASSES

from .base import CLASSIFICATION, DENSE, Task, TaskError, make_task
from .options import build_options
from .splits import carve_validation

REQUIRED = ("x_train", "y_train", "x_test", "y_test")
OPTIONAL = ("x_val", "y_val")


@dataclass
class NpzOptions:
    val_fraction: float = 0.1  # share of training data carved out when the file has no x_val
    # 4-D x: "auto" refuses a channels-last look-alike (N, H, W, 1|3|4); "nchw" takes x as
    # (N, C, H, W) as it is; "nhwc" moves the last axis to the channels
    layout: str = "auto"

    def __post_init__(self) -> None:
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction={self.val_fraction} must be in [0, 1)")
        if self.layout not in ("auto", "nchw", "nhwc"):
            raise ValueError(f"layout={self.layout!r} must be auto, nchw or nhwc")


def read_arrays(path: Path, digest: dict | None = None) -> dict[str, np.ndarray]:
    """The file's arrays, refusing pickled objects (np.load with allow_pickle=False). The sha256
    of the bytes read goes into ``digest["sha256"]`` when given."""
    if not path.is_file():
        raise TaskError(f"npz:{path}: no such file")
    try:
        raw = path.read_bytes()
        if digest is not None:
            digest["sha256"] = hashlib.sha256(raw).hexdigest()
        data = np.load(io.BytesIO(raw), allow_pickle=False)
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


def _check_x(where: str, key: str, x: np.ndarray, layout: str = "auto") -> np.ndarray:
    """(N, C, *S) float32 from (N, L), (N, C, L) or (N, C, H, W)."""
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise TaskError(f"{where}: {key} has dtype {x.dtype}; inputs must be numeric")
    if x.ndim == 2:
        x = x[:, None]
    if x.ndim == 4 and layout == "nhwc":
        x = np.moveaxis(x, -1, 1)
    elif x.ndim == 4 and layout == "auto" and x.shape[-1] in (1, 3, 4) and x.shape[1] > 4:
        raise TaskError(
            f"{where}: {key} has shape {x.shape}, which looks channels-last (N, H, W, C) with "
            f"C={x.shape[-1]}; inputs are (N, C, H, W). Store np.moveaxis(x, -1, 1), or pass "
            "--task-option layout=nhwc (convert) or layout=nchw (the shape is right as it is)"
        )
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


def validate(where: str, arrays: dict[str, np.ndarray], layout: str = "auto"
             ) -> dict[str, np.ndarray]:
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
        x = _check_x(where, f"x_{part}", arrays[f"x_{part}"], layout)
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
        _check_classes(where, out["y_train"])
        n_classes = int(out["y_train"].max()) + 1
        for part in parts[1:]:
            y = out[f"y_{part}"]
            if len(y) and y.max() >= n_classes:
                raise TaskError(
                    f"{where}: y_{part} has label {int(y.max())}, but y_train only has labels "
                    f"0..{n_classes - 1}"
                )
    return out


def _check_classes(where: str, y: np.ndarray) -> None:
    """Labels are 0..K-1, each present in y_train, with K at most MAX_CLASSES: the head has K
    outputs, so a stray large label would silently allocate (and train) one per missing class."""
    top = int(y.max())
    if top >= MAX_CLASSES:
        raise TaskError(f"{where}: y_train has label {top}; at most {MAX_CLASSES} classes "
                        f"(labels 0..{MAX_CLASSES - 1}) are supported")
    present = np.unique(y)
    if len(present) != top + 1:
        absent = np.setdiff1d(np.arange(top + 1), present)
        shown = ", ".join(str(v) for v in absent[:5]) + (", ..." if len(absent) > 5 else "")
        raise TaskError(
            f"{where}: y_train has labels {_listing(present)}, but class labels must be "
            f"0..K-1, each present in y_train (absent: {shown}); renumber them, e.g. "
            "np.unique(y, return_inverse=True)[1]"
        )


def _listing(values: np.ndarray) -> str:
    head = ", ".join(str(v) for v in values[:5])
    return "{" + head + (", ...}" if len(values) > 5 else "}")


def load(arg: str | None, seed: int, options: dict) -> Task:
    if not arg:
        raise TaskError("npz: give a file, e.g. 'npz:data/my_set.npz'")
    path = Path(arg).expanduser()
    where = f"npz:{path}"
    opts = build_options(NpzOptions, options, where)
    digest: dict = {}
    s = validate(where, read_arrays(path, digest), opts.layout)
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
        if len(s["y_val"]) == 0 or (counts is not None and counts.max() < 2):
            why = (f"{len(counts)} classes with one sample each" if counts.max() < 2 else
                   f"val_fraction={opts.val_fraction} of {len(s['y_train'])} samples is none"
                   ) if counts is not None else f"val_fraction={opts.val_fraction} carves none"
            raise TaskError(f"{where}: no validation samples can be carved from y_train ({why});"
                            " add x_val and y_val to the file, or more training samples")
    info = {
        "source": f"user file {path.resolve()}",
        "file": str(path.resolve()),
        "file_sha256": digest["sha256"],
        "validation": "carved from training data" if carved else "from the file",
        "options": vars(opts),
    }
    return make_task(f"npz:{arg}", kind, s, num_classes=num_classes, info=info)
