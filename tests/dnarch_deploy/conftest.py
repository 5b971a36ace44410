import pytest
import torch

from dnarch_deploy import spectral


@pytest.fixture(autouse=True)
def one_thread():
    """These tests use tiny tensors: one thread is fastest, and pytest -n 2 already fills the
    cores (restored afterwards, so tests elsewhere in the same worker keep their setting)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=["matrix", "fft"])
def resample_path(request, monkeypatch) -> str:
    """Run a test once with each implementation of spectral.resample (they must agree)."""
    monkeypatch.setattr(spectral, "MATRIX_MAX", 10**9 if request.param == "matrix" else 0)
    return request.param
