"""Export a found DNArch network for deployment.

Stages, each a function (``python -m export.onnx RUN_DIR`` runs them all):

1. :func:`calibrate` - BatchNorm population statistics for the final architecture
2. :func:`freeze` - the masks evaluated once: a fixed plan and its architecture
3. :func:`materialize` - a plain static PyTorch module (masks, BatchNorm, normalisation folded)
4. :func:`lower` - resampling per axis as a dense or a factored (four-step) MatMul, each
   convolution as a tactic
   (:func:`choose_tactics`: measured onnxruntime latency or the cost model)
5. emit - :func:`write_onnx`, :func:`write_pt2`, :func:`write_torchscript`, :func:`write_aoti`
6. verify - :func:`check_onnx`, :func:`backend_compatibility`, :func:`equivalence`
7. :func:`benchmark` - latency per layer and in total beside the theoretical cost

:func:`export_model` chains them for a model and its task; :func:`export_run` for a run
directory, writing RUN_DIR/export/ atomically. ``export.infer.predict`` runs an export.
"""

import importlib

# stage functions, imported on first use: `python -m export.infer` then needs no torch
_EXPORTS = {
    "ExportOptions": "pipeline",
    "backend_compatibility": "verify",
    "benchmark": "bench",
    "calibrate": "dnarch_deploy.calibration",
    "check_onnx": "verify",
    "choose_lowering": "policy",
    "choose_tactics": "policy",
    "equivalence": "verify",
    "export_model": "pipeline",
    "export_run": "pipeline",
    "freeze": "static",
    "lower": "lowering",
    "materialize": "static",
    "write_aoti": "emit",
    "write_onnx": "emit",
    "write_pt2": "emit",
    "write_torchscript": "emit",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = _EXPORTS[name]  # a stage of this package, or one it shares with the search
        return getattr(importlib.import_module(module if "." in module else f".{module}",
                                               __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
