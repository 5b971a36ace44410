"""Fixtures shared across the test packages."""

import pytest

from .sweeps import sweep_dir  # noqa: F401  (a session fixture: one tiny real sweep)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's cache (DNARCH_CACHE: task data, this machine's
    latency table): a table measured here would otherwise replace the bundled one the tests
    price with."""
    monkeypatch.setenv("DNARCH_CACHE", str(tmp_path_factory.getbasetemp() / "dnarch-cache"))
