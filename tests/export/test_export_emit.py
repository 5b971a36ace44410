"""export.emit: the ONNX writer. Reading onnxscript's op list once per process must not change what
is written."""

from __future__ import annotations

import importlib

import torch
from torch import nn
from torch.onnx._internal._lazy_import import onnxscript_apis

from export import emit


def test_the_op_list_read_once_writes_the_same_model_byte_for_byte(monkeypatch):
    apis = importlib.import_module(onnxscript_apis._name)
    module = nn.Sequential(nn.Conv1d(3, 8, 5, padding=2), nn.GELU(), nn.Conv1d(8, 2, 1)).eval()
    example = (torch.randn(1, 3, 40),)

    emit.to_onnx(module, example)  # reads the list once, if it has not been read yet
    cached = apis.get_torchlib_ops
    first, second = cached(), cached()
    assert first == second and first is not second  # one list's entries, a list per call
    read_once = emit.to_onnx(module, example).SerializeToString()

    # the same export with onnxscript building its list afresh
    original = cached.__wrapped__
    monkeypatch.setattr(apis, "get_torchlib_ops", original)
    fresh = original()
    assert [(m.qualified_name, m.function, m.is_complex) for m in fresh] == [
        (m.qualified_name, m.function, m.is_complex) for m in first]
    assert emit.to_onnx(module, example).SerializeToString() == read_once
