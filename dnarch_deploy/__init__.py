"""dnarch-deploy: learn a CNN's whole architecture by backpropagation (DNArch), then ship it.

Names are imported on first use, so that torch-free modules (the run directory's schema in
:mod:`dnarch_deploy.rundir`, the task loaders) can be read without importing torch: inference
with onnxruntime alone (``python -m export.infer``) reads the export's file names from here.
"""

import importlib

_EXPORTS = {
    "Architecture": "architecture",
    "BlockArchitecture": "architecture",
    "DNArch": "model",
    "ModelConfig": "model",
    "Run": "rundir",
    "RunError": "rundir",
    "SchemaError": "architecture",
    "base_cost": "cost",
    "compare_with_base": "architecture",
    "complexity_loss": "cost",
    "describe": "architecture",
    "load_run": "rundir",
    "model_cost": "cost",
    "set_masks": "architecture",
}
__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
