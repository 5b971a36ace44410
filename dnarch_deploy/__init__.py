"""dnarch-deploy: learn a CNN's whole architecture by backpropagation (DNArch), then ship it."""

from .architecture import Architecture, BlockArchitecture, SchemaError, describe, set_masks
from .cost import base_cost, complexity_loss, model_cost
from .model import DNArch, ModelConfig
from .rundir import Run, RunError, load_run

__all__ = [
    "Architecture",
    "BlockArchitecture",
    "DNArch",
    "ModelConfig",
    "Run",
    "RunError",
    "SchemaError",
    "base_cost",
    "complexity_loss",
    "describe",
    "load_run",
    "model_cost",
    "set_masks",
]
__version__ = "0.1.0"
