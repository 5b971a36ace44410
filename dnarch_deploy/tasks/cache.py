"""On-disk cache of generated data sets: one .npz per (generator, parameters, seed)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ENV_VAR = "DNARCH_CACHE"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """cache_dir, else $DNARCH_CACHE, else ~/.cache/dnarch-deploy."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return Path.home() / ".cache" / "dnarch-deploy"


def cache_path(family: str, params: dict, cache_dir: str | Path | None = None) -> Path:
    """File name = family + hash of every parameter that changes the data (seed included)."""
    blob = json.dumps({"family": family, **params}, sort_keys=True, default=str)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return cache_root(cache_dir) / f"{family}-{key}.npz"


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write atomically: a temporary file in the same folder, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; a cache may be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_npz(path: Path) -> dict[str, np.ndarray] | None:
    """The cached arrays, or None when the file is missing or unreadable (then regenerate)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def cached(
    family: str,
    params: dict,
    build: Callable[[], dict[str, np.ndarray]],
    cache_dir: str | Path | None = None,
) -> tuple[dict[str, np.ndarray], Path, bool]:
    """Load the arrays for params from the cache, or build and store them.

    Returns (arrays, path, hit) where hit says whether the file was reused.
    """
    path = cache_path(family, params, cache_dir)
    arrays = load_npz(path) if path.exists() else None
    if arrays is not None:
        return arrays, path, True
    arrays = build()
    save_npz(path, arrays)
    return arrays, path, False
