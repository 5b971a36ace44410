"""Data for DNArch searches, all offline: real sets bundled in wheels and faithful generators.

    task = load_task("ucr:GunPoint", seed=0)
    task = load_task("darcy", n_train=200)          # or load_task("darcy:n_train=200")

Tasks: ucr:NAME (UCR/UEA sets in the sktime or aeon wheel), mnist5k, smnist5k, digits, mnist1d,
listops, pathfinder, pathfinder1d, darcy, npz:PATH. `python -m search.tasks` lists them.
Generated data are cached under cache_dir, $DNARCH_CACHE or ~/.cache/dnarch-deploy.
"""

from .base import Task, TaskError
from .registry import describe, list_tasks, load_task

__all__ = ["Task", "TaskError", "describe", "list_tasks", "load_task"]
