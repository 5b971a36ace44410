"""Seeded, stratified index splits (validation carved from training data)."""

from __future__ import annotations

import numpy as np


def stratified_split(
    y: np.ndarray, n_take: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Split indices of labels y into (keep, take) with len(take) == n_take, class-balanced.

    Each class gives about its share of n_take (largest remainders break ties, at random), and
    never its last example, so every class stays in the kept part. Both index arrays are sorted.
    """
    classes, counts = np.unique(y, return_counts=True)
    n_take = min(n_take, int(np.sum(counts - 1)))
    share = counts * n_take / len(y)
    quota = np.minimum(np.floor(share).astype(int), counts - 1)
    # Hand out what rounding left over, to the classes with the largest remainders first.
    order = np.lexsort((rng.random(len(classes)), -(share - quota)))
    while quota.sum() < n_take:
        for c in order:
            if quota.sum() < n_take and quota[c] < counts[c] - 1:
                quota[c] += 1
    take = []
    for c, q in zip(classes, quota, strict=True):
        members = np.flatnonzero(y == c)
        take.append(rng.choice(members, size=q, replace=False))
    take_idx = np.sort(np.concatenate(take)) if take else np.zeros(0, int)
    keep_idx = np.setdiff1d(np.arange(len(y)), take_idx)
    return keep_idx, take_idx


def random_split(n: int, n_take: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split range(n) into (keep, take) at random; both sorted."""
    take_idx = np.sort(rng.choice(n, size=min(n_take, n - 1), replace=False))
    return np.setdiff1d(np.arange(n), take_idx), take_idx


def carve_validation(
    x: np.ndarray, y: np.ndarray, n_val: int, seed: int, *, stratify: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return x_train, y_train, x_val, y_val with n_val examples moved to validation."""
    # A fixed offset keeps this stream apart from the generators', which also use `seed`.
    rng = np.random.default_rng([seed, 0x5E1])
    if stratify:
        keep, take = stratified_split(y, n_val, rng)
    else:
        keep, take = random_split(len(y), n_val, rng)
    return x[keep], y[keep], x[take], y[take]
