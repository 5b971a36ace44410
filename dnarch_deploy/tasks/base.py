"""The Task record every data family returns, and the one error type users see."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CLASSIFICATION = "classification"
DENSE = "dense"


class TaskError(ValueError):
    """A problem the user can fix: unknown task, bad option, damaged or malformed file."""


@dataclass(repr=False, eq=False)  # arrays inside: no field-wise repr or ==
class Task:
    """One data set, split three ways, with raw inputs and training-set statistics.

    x arrays hold RAW values: the model applies (x - x_mean) / x_std itself, so that an exported
    model takes users' raw arrays. Dense targets are raw too; y_mean / y_std are for the trainer.
    """

    name: str  # e.g. "ucr:GunPoint"
    kind: str  # "classification" or "dense"
    tokens: bool  # True: x are int64 token ids (N, *S); False: float32 (N, C, *S)
    in_channels: int  # C (1 for token tasks: the model embeds tokens itself)
    spatial: tuple[int, ...]  # S, one or two spatial dims
    out_channels: int  # classes (classification) or target channels (dense)
    vocab_size: int  # 0 unless tokens
    metric_name: str  # "accuracy" (higher is better) or "rel_l2" (lower is better)
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_mean: np.ndarray  # (C,), from x_train only (zeros for tokens)
    x_std: np.ndarray  # (C,), from x_train only, never 0 (ones for tokens)
    y_mean: np.ndarray | None = None  # dense only: (C_out,), from y_train only
    y_std: np.ndarray | None = None
    info: dict = field(default_factory=dict)  # source, anchors, generator parameters, cache

    @property
    def higher_is_better(self) -> bool:
        return self.metric_name == "accuracy"

    def metric(self, pred: np.ndarray, target: np.ndarray) -> float:
        """Accuracy (pred: logits (N, classes) or labels (N,)) or mean per-sample relative L2."""
        pred, target = np.asarray(pred), np.asarray(target)
        if self.kind == CLASSIFICATION:
            return accuracy(pred, target)
        return relative_l2(pred, target)

    def standard_error(self, value: float, n: int) -> float:
        """The standard error of a metric ``value`` measured on ``n`` samples: for accuracy the
        binomial one at Agresti and Coull's "plus four" estimate, sqrt(p (1 - p) / n) with p =
        (a n + 2) / (n + 4), so a perfect score on 10 samples is not taken as certain (the plain
        estimate gives 0 there); 0 for rel_l2 (its per-sample spread is not kept)."""
        if self.metric_name != "accuracy" or n < 1:
            return 0.0
        p = (value * n + 2.0) / (n + 4.0)
        return float(np.sqrt(p * (1.0 - p) / n))

    def sizes(self) -> tuple[int, int, int]:
        return len(self.y_train), len(self.y_val), len(self.y_test)

    def __repr__(self) -> str:
        shape = (self.in_channels, *self.spatial) if not self.tokens else self.spatial
        return (
            f"Task({self.name!r}, {self.kind}, x{shape}, out={self.out_channels}, "
            f"sizes={self.sizes()}, metric={self.metric_name})"
        )


def accuracy(pred: np.ndarray, target: np.ndarray) -> float:
    labels = pred.argmax(axis=1) if pred.ndim == 2 else pred
    if labels.shape != target.shape:
        raise ValueError(f"accuracy: predictions {pred.shape} do not match targets {target.shape}")
    return float(np.mean(labels == target))


def relative_l2(pred: np.ndarray, target: np.ndarray) -> float:
    """||pred - y|| / ||y|| per sample, averaged over samples (the FNO metric)."""
    if pred.shape != target.shape:
        raise ValueError(f"rel_l2: predictions {pred.shape} do not match targets {target.shape}")
    n = len(target)
    diff = np.linalg.norm((pred - target).reshape(n, -1).astype(np.float64), axis=1)
    norm = np.linalg.norm(target.reshape(n, -1).astype(np.float64), axis=1)
    return float(np.mean(diff / np.maximum(norm, 1e-12)))


def channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std over samples and positions of (N, C, *S); std 0 becomes 1."""
    axes = (0, *range(2, x.ndim))
    mean = x.mean(axis=axes, dtype=np.float64)
    std = x.std(axis=axes, dtype=np.float64)
    std = np.where(std > 1e-8 * np.maximum(1.0, np.abs(mean)), std, 1.0)
    return mean.astype(np.float32), std.astype(np.float32)


def make_task(
    name: str,
    kind: str,
    splits: dict[str, np.ndarray],
    *,
    num_classes: int = 0,
    vocab_size: int = 0,
    info: dict | None = None,
) -> Task:
    """Build a Task from raw splits: fix dtypes, check shapes, compute train-only statistics.

    splits holds x_train, y_train, x_val, y_val, x_test, y_test. Token tasks pass vocab_size > 0
    and x shaped (N, *S); other tasks pass x shaped (N, C, *S).
    """
    tokens = vocab_size > 0
    s = dict(splits)
    for part in ("train", "val", "test"):
        x, y = s[f"x_{part}"], s[f"y_{part}"]
        s[f"x_{part}"] = np.ascontiguousarray(x, dtype=np.int64 if tokens else np.float32)
        y_dtype = np.int64 if kind == CLASSIFICATION else np.float32
        s[f"y_{part}"] = np.ascontiguousarray(y, dtype=y_dtype)
        assert len(x) == len(y), f"{name}: {part} has {len(x)} inputs and {len(y)} targets"
    x_train, y_train = s["x_train"], s["y_train"]
    spatial = tuple(x_train.shape[1:] if tokens else x_train.shape[2:])
    in_channels = 1 if tokens else x_train.shape[1]
    assert len(spatial) in (1, 2), f"{name}: spatial shape {spatial} must be 1-D or 2-D"
    if tokens:
        x_mean, x_std = np.zeros(1, np.float32), np.ones(1, np.float32)
    else:
        x_mean, x_std = channel_stats(x_train)
    y_mean = y_std = None
    if kind == CLASSIFICATION:
        out_channels = num_classes
        metric_name = "accuracy"
    else:
        out_channels = y_train.shape[1]
        metric_name = "rel_l2"
        y_mean, y_std = channel_stats(y_train)
        assert y_train.shape[2:] == spatial, f"{name}: targets must share the input's spatial size"
    return Task(
        name=name,
        kind=kind,
        tokens=tokens,
        in_channels=in_channels,
        spatial=spatial,
        out_channels=out_channels,
        vocab_size=vocab_size,
        metric_name=metric_name,
        **s,
        x_mean=x_mean,
        x_std=x_std,
        y_mean=y_mean,
        y_std=y_std,
        info=dict(info or {}),
    )
