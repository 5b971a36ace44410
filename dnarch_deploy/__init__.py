"""dnarch-deploy: learn a CNN's whole architecture by backpropagation (DNArch), then ship it."""

from .architecture import Architecture, BlockArchitecture, SchemaError, describe
from .cost import base_cost, complexity_loss, model_cost
from .model import DNArch, ModelConfig

__all__ = [
    "Architecture",
    "BlockArchitecture",
    "DNArch",
    "ModelConfig",
    "SchemaError",
    "base_cost",
    "complexity_loss",
    "describe",
    "model_cost",
]
__version__ = "0.1.0"
