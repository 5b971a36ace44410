"""Stage 6: verify the artifacts: ONNX checker (full), strict shape inference, op types against
per-backend allow-lists, and numerical equivalence of every stage with the trained model.

Error measure: per stage, ``max_abs = max |y - y_ref|`` and ``max_rel = max_abs / max |y_ref|``
(relative to the largest reference output, so outputs near zero do not blow it up), with
``y_ref`` the trained model (eval mode, calibrated BatchNorm) on the task's test inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx

TOLERANCE = 1e-4  # max_rel every stage must meet

# Op types each backend runs (ONNX opset 20). onnxruntime's CPU provider implements the whole
# default domain; the list names the ops this exporter can produce, so anything else is flagged.
ONNXRUNTIME_OPS = frozenset(
    {
        "Add", "Cast", "Concat", "Constant", "Conv", "DFT", "Div", "Erf", "Expand", "Gather",
        "Gelu", "Gemm", "Identity", "MatMul", "Mul", "Neg", "Pad", "ReduceMax", "ReduceMean",
        "ReduceSum", "Reshape", "Shape", "Slice", "Split", "Sqrt", "Squeeze", "Sub", "Tanh",
        "Transpose", "Unsqueeze", "Where",
    }
)
# TensorRT's ONNX parser: the same ops except DFT (no DFT before TensorRT 11.2, and
# onnxruntime's CUDA provider has no DFT kernel either).
TENSORRT_OPS = ONNXRUNTIME_OPS - {"DFT"}
BACKENDS = {"onnxruntime": ONNXRUNTIME_OPS, "tensorrt": TENSORRT_OPS}


class VerificationError(RuntimeError):
    """An artifact failed a check; the message says which and by how much."""


def check_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx.checker (full) and strict shape inference; returns the shape-inferred model."""
    try:
        onnx.checker.check_model(model, full_check=True)
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise VerificationError(f"model.onnx fails the ONNX checks: {e}") from None


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    return dict(sorted(Counter(node.op_type for node in model.graph.node).items()))


def backend_compatibility(ops: dict[str, int]) -> dict[str, dict]:
    """Per backend: compatible, and the op types it lacks."""
    result = {}
    for name, allowed in BACKENDS.items():
        missing = sorted(set(ops) - allowed)
        result[name] = {"compatible": not missing, "unsupported_ops": missing}
    return result


def compare(reference: np.ndarray, output: np.ndarray) -> dict[str, float]:
    reference = np.asarray(reference, dtype=np.float64)
    output = np.asarray(output, dtype=np.float64)
    if reference.shape != output.shape:
        raise VerificationError(f"output shape {output.shape} != reference {reference.shape}")
    max_abs = float(np.max(np.abs(output - reference))) if reference.size else 0.0
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    return {"max_abs": max_abs, "max_rel": max_abs / max(scale, 1e-30)}


def equivalence(
    stages: dict[str, Callable[[np.ndarray], np.ndarray]],
    batches: list[np.ndarray],
    reference: str = "trained",
) -> dict[str, dict[str, float]]:
    """Run every stage on every batch; errors of each against ``reference``."""
    outputs = {name: np.concatenate([fn(x) for x in batches]) for name, fn in stages.items()}
    ref = outputs[reference]
    return {name: compare(ref, out) for name, out in outputs.items() if name != reference}


def check_equivalence(errors: dict[str, dict[str, float]], tolerance: float = TOLERANCE) -> None:
    bad = {k: v for k, v in errors.items() if not v["max_rel"] <= tolerance}
    if bad:
        lines = ", ".join(f"{k}: max_rel {v['max_rel']:.2e}" for k, v in bad.items())
        raise VerificationError(
            f"outputs differ from the trained model beyond max_rel {tolerance}: {lines}"
        )
