"""Fixtures shared across the test packages."""

import pytest

from .sweeps import sweep_dir  # noqa: F401  (a session fixture: one tiny real sweep)


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Tests never read or write the user's cache (DNARCH_CACHE: task data, this machine's
    latency table): a table measured here would otherwise replace the bundled one the tests
    price with. Session-wide, so the session's sweep (tests/sweeps.py) runs inside it too."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DNARCH_CACHE", str(tmp_path_factory.getbasetemp() / "dnarch-cache"))
        yield
