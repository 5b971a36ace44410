"""export.emit: the ONNX writer. Reading onnxscript's op list once per process must not change what
is written."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn
from torch.onnx._internal._lazy_import import onnxscript_apis

from export import emit


@pytest.mark.slow
def test_the_op_list_is_built_once_and_writes_the_same_model_byte_for_byte(monkeypatch):
    if not hasattr(onnxscript_apis, "_name"):
        pytest.skip("torch's exporter no longer reaches onnxscript this way: nothing is cached")
    apis = importlib.import_module(onnxscript_apis._name)
    module = nn.Sequential(nn.Conv1d(3, 8, 5, padding=2), nn.GELU(), nn.Conv1d(8, 2, 1)).eval()
    example = (torch.randn(1, 3, 40),)

    emit.to_onnx(module, example)  # installs the cache, if no export did before
    cached = apis.get_torchlib_ops
    first, second = cached(), cached()
    assert first == second and first is not second  # one list's entries, a list per call
    read_once = emit.to_onnx(module, example).SerializeToString()

    # torch's exporter asks through the cache: two exports build one list
    built = []
    original = cached.__wrapped__
    with monkeypatch.context() as patch:
        patch.setattr(apis, "get_torchlib_ops", lambda: built.append(1) or original())
        emit.cache_onnxscript_op_list.cache_clear()  # installs the cache over the counter
        emit.to_onnx(module, example)
        emit.to_onnx(module, example)
    assert len(built) == 1  # and the cached list is back in place, installed

    # the same export with onnxscript building its list afresh
    monkeypatch.setattr(apis, "get_torchlib_ops", original)
    fresh = original()
    assert [(m.qualified_name, m.function, m.is_complex) for m in fresh] == [
        (m.qualified_name, m.function, m.is_complex) for m in first]
    assert emit.to_onnx(module, example).SerializeToString() == read_once
