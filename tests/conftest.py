"""Fixtures shared across the test packages."""

from .sweeps import sweep_dir  # noqa: F401  (a session fixture: one tiny real sweep)
