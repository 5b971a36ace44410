"""`python -m search.tasks [NAME ...]`: list the data tasks with shapes, sizes and cache state.

The loaders themselves live in :mod:`dnarch_deploy.tasks` (the library loads a run's data with
them); this module keeps the CLI and the names the search imports.
"""

from dnarch_deploy.tasks import Task, TaskError, describe, list_tasks, load_task

__all__ = ["Task", "TaskError", "describe", "list_tasks", "load_task"]

if __name__ == "__main__":
    import sys

    from dnarch_deploy.tasks.__main__ import main

    sys.exit(main())
