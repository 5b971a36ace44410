"""Run a per-chunk generator over worker processes, in order, with a progress bar."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from tqdm.auto import tqdm

R = TypeVar("R")


def default_workers() -> int:
    """Both cores of these machines; more is not useful for the data sizes used here."""
    return max(1, min(2, os.cpu_count() or 1))


def progress(total: int, desc: str) -> tqdm:
    """A progress bar that stays quiet under CI (env CI set)."""
    return tqdm(total=total, desc=desc, unit="sample", disable=bool(os.environ.get("CI")))


def map_chunks(
    fn: Callable[[Any], R],
    chunks: Sequence[Any],
    *,
    sizes: Sequence[int],
    workers: int,
    desc: str,
) -> list[R]:
    """[fn(c) for c in chunks], in processes when workers > 1; the bar counts sizes[i] per chunk.

    Results come back in chunk order, so output does not depend on the number of workers.
    fn must be a module-level function (it is pickled for the workers). Workers are spawned,
    so a calling script needs the usual `if __name__ == "__main__":` guard.
    """
    results: list[R] = []
    with progress(sum(sizes), desc) as bar:
        if workers <= 1 or len(chunks) <= 1:
            for chunk, size in zip(chunks, sizes, strict=True):
                results.append(fn(chunk))
                bar.update(size)
            return results
        # spawn: the parent may hold torch / BLAS threads, which fork does not copy safely.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            for result, size in zip(pool.map(fn, chunks), sizes, strict=True):
                results.append(result)
                bar.update(size)
    return results
