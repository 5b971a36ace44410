"""Task tests never write to the user's cache: DNARCH_CACHE points into a temporary folder."""

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("DNARCH_CACHE", str(tmp_path_factory.getbasetemp() / "dnarch-cache"))
