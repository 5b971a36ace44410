"""Stage 5: write the artifacts: ONNX (one self-contained file), torch.export .pt2, TorchScript,
optionally an AOTInductor package. Batch dimension dynamic, spatial size fixed (an FFT-based graph
with a dynamic length breaks in onnxruntime)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import onnx
import torch
from torch import Tensor, nn

# 20: GELU is one Gelu node (at 18 it is five: Div, Erf, Add, Mul, Mul, which onnxruntime does not
# fuse, and five passes over the tensor). Gelu is an ONNX function op: a backend without a kernel
# for it runs its Erf body. DFT takes its axis as an input; onnxruntime >= 1.25 runs it.
OPSET = 20
MAX_BATCH = 1 << 16
# node metadata the exporter writes that only bloats the file (source lines, FX text)
_DROP_METADATA = ("pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the exporters' chatter (deprecations, 'torchvision is not installed', progress)."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _two_samples(example: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """torch.export specialises a dimension of size 1: trace a batch of at least 2."""
    return tuple(x if x.shape[0] > 1 else x.expand(2, *x.shape[1:]).contiguous() for x in example)


def _batch_dims(module: nn.Module, example: tuple[Tensor, ...], named: bool = True) -> tuple:
    """Axis 0 of every input is the (shared) batch dimension, named "batch" (the ONNX input's
    dim_param) or ``named=False``: Dim.AUTO, for torch.export. torch 2.11's solver cannot prove
    guards such as min(855 b, 23085 b) == 855 b (export.resampling.inverse_half's broadcast
    MatMul) over a named range and refuses to export; AUTO keeps the axis dynamic all the same
    (benchmarks/results/cuda_check.md, on an H100 machine's torch 2.11)."""
    if named:
        batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    else:
        batch = torch.export.Dim.AUTO(min=1, max=MAX_BATCH)
    dims = tuple({0: batch} for _ in example)
    kinds = [p.kind for p in inspect.signature(module.forward).parameters.values()]
    return (dims,) if inspect.Parameter.VAR_POSITIONAL in kinds else dims  # forward(*xs)


@functools.cache
def cache_onnxscript_op_list() -> None:
    """torch.onnx.export asks onnxscript for its list of ATen functions on every call, and
    onnxscript builds it by parsing the source of each of ~500 functions: about half a second of
    every export of a small network. It is built once per process (a function registered with
    onnxscript after the first export would be missed; this project registers none); each call
    still gets its own list. This reaches into torch's private exporter module; if that moves,
    exports are only slower (test_export_emit checks the models stay byte for byte the same)."""
    try:
        from torch.onnx._internal._lazy_import import onnxscript_apis

        apis = importlib.import_module(onnxscript_apis._name)
        listed = functools.cache(apis.get_torchlib_ops)
    except (ImportError, AttributeError):
        return

    @functools.wraps(listed.__wrapped__)  # __wrapped__: onnxscript's own
    def get_torchlib_ops() -> list:
        return list(listed())

    apis.get_torchlib_ops = get_torchlib_ops


def to_onnx(
    module: nn.Module, example: tuple[Tensor, ...], dynamic_batch: bool = True
) -> onnx.ModelProto:
    """torch.onnx.export(dynamo=True) in memory: one self-contained model, batch axis dynamic."""
    if dynamic_batch:
        example = _two_samples(example)
    cache_onnxscript_op_list()
    with quiet():
        program = torch.onnx.export(
            module,
            example,
            dynamo=True,
            external_data=False,
            opset_version=OPSET,
            dynamic_shapes=_batch_dims(module, example) if dynamic_batch else None,
            input_names=["x"] if len(example) == 1 else None,
            output_names=["y"] if len(example) == 1 else None,
            verbose=False,
        )
    model = program.model_proto
    for node in model.graph.node:
        keep = [p for p in node.metadata_props if p.key not in _DROP_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    return model


def write_onnx(module: nn.Module, example: Tensor, path: Path) -> onnx.ModelProto:
    model = to_onnx(module, (example,))
    onnx.save_model(model, str(path))
    return model


def write_pt2(module: nn.Module, example: Tensor, path: Path) -> torch.export.ExportedProgram:
    (example,) = _two_samples((example,))
    with quiet():
        program = torch.export.export(
            module, (example,), dynamic_shapes=_batch_dims(module, (example,), named=False)
        )
        torch.export.save(program, str(path))
    return program


def write_torchscript(module: nn.Module, example: Tensor, path: Path) -> None:
    """Legacy TorchScript (torch.jit.trace; deprecated since PyTorch 2.11, still loads)."""
    with quiet():
        traced = torch.jit.trace(module, (example,), check_trace=False)
        traced.save(str(path))


def write_aoti(program: torch.export.ExportedProgram, path: Path) -> None:
    """An AOTInductor package (compiles C++; tens of seconds)."""
    from torch._inductor import aoti_compile_and_package

    with quiet():
        aoti_compile_and_package(program, package_path=str(path))
