"""Inference with an exported model: `python -m export.infer RUN_DIR/export --input x.npy`.

The model takes the user's raw arrays (normalisation is inside it): ``(B, C, *S)`` float32, or
``(B, *S)`` integer token ids for token tasks. The input's shape and dtype are checked against
the model first, with a message saying what was expected. ``--tensorrt`` builds a TensorRT engine
from model.onnx when the ``tensorrt`` package is importable (and runs it when CUDA is available);
otherwise it says so and runs onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from .artifacts import ARCHITECTURE_FILE, ONNX_FILE, REPORT_FILE
from .timing import session


class InputError(ValueError):
    """The input does not fit the model: wrong shape, dtype or token range."""


def load_spec(export_dir: str | Path) -> dict:
    """The input/output specification recorded in architecture.json."""
    path = Path(export_dir) / ARCHITECTURE_FILE
    try:
        spec = json.loads(path.read_text())["input"]
        _ = spec["input_shape"], spec["input_dtype"], spec["vocab_size"]
    except FileNotFoundError:
        raise InputError(f"{path}: not found (is {export_dir} an export directory written by "
                         f"python -m export.onnx?)") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise InputError(f"{path}: damaged or from another version ({e!r})") from None
    return spec


def describe_shape(shape: list) -> str:
    return "(" + ", ".join("batch" if d is None else str(d) for d in shape) + ")"


def check_input(x: np.ndarray, spec: dict) -> np.ndarray:
    """``x`` converted to the model's dtype, or an InputError saying what the model expects."""
    expected = spec["input_shape"]
    want = f"{describe_shape(expected)} {spec['input_dtype']}"
    fixed = expected[1:]
    if x.ndim != len(expected) or list(x.shape[1:]) != fixed or x.shape[0] < 1:
        hint = ""
        if x.ndim == len(fixed) and list(x.shape) == fixed:
            hint = " (one sample without a batch axis? add one: x[None])"
        raise InputError(f"input has shape {tuple(x.shape)}; the model expects {want}{hint}")
    if spec["input_dtype"] == "int64":
        if not np.issubdtype(x.dtype, np.integer):
            raise InputError(f"input has dtype {x.dtype}; the model expects integer token ids "
                             f"{want}")
        if x.size and (x.min() < 0 or x.max() >= spec["vocab_size"]):
            raise InputError(f"token ids must lie in [0, {spec['vocab_size']}), got "
                             f"[{x.min()}, {x.max()}]")
        return x.astype(np.int64, copy=False)
    if not np.issubdtype(x.dtype, np.floating):
        raise InputError(f"input has dtype {x.dtype}; the model expects raw real values {want}")
    return x.astype(np.float32, copy=False)


class Predictor:
    """model.onnx in onnxruntime behind the input checks."""

    def __init__(self, export_dir: str | Path, threads: int = 0):
        self.dir = Path(export_dir)
        self.spec = load_spec(self.dir)
        self.session = session(str(self.dir / ONNX_FILE), threads)

    def __call__(self, x: np.ndarray, batch_size: int = 256) -> np.ndarray:
        x = check_input(np.asarray(x), self.spec)
        parts = [self.session.run(None, {"x": x[i : i + batch_size]})[0]
                 for i in range(0, len(x), batch_size)]
        return np.concatenate(parts)


def predict(export_dir: str | Path, x: np.ndarray, threads: int = 0) -> np.ndarray:
    """Run the exported model on raw inputs ``x``; see :func:`check_input` for what it accepts."""
    return Predictor(export_dir, threads)(x)


# --- TensorRT (optional) ------------------------------------------------------------------------


def tensorrt_available() -> bool:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return False
    return True


def build_tensorrt_engine(export_dir: Path, max_batch: int, path: Path) -> Path:
    """Parse model.onnx with TensorRT and serialise an engine for batches 1..max_batch."""
    import tensorrt as trt

    spec = load_spec(export_dir)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse((export_dir / ONNX_FILE).read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT cannot parse {export_dir / ONNX_FILE}: {errors}")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    rest = tuple(spec["input_shape"][1:])
    profile.set_shape("x", (1, *rest), (max_batch, *rest), (max_batch, *rest))
    config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise RuntimeError("TensorRT failed to build an engine (see its log above)")
    path.write_bytes(bytes(engine))
    return path


def run_tensorrt(engine_path: Path, x: np.ndarray, out_shape: list) -> np.ndarray:
    """Run a serialised engine on CUDA through torch tensors."""
    import tensorrt as trt
    import torch

    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())
    context = engine.create_execution_context()
    xt = torch.from_numpy(x).cuda()
    context.set_input_shape("x", tuple(xt.shape))
    y = torch.empty((len(x), *out_shape[1:]), dtype=torch.float32, device="cuda")
    context.set_tensor_address("x", xt.data_ptr())
    context.set_tensor_address("y", y.data_ptr())  # the exported output name
    stream = torch.cuda.current_stream()
    context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    return y.cpu().numpy()


# --- CLI --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.infer", description=__doc__.split("\n\n")[0])
    p.add_argument("export_dir", type=Path, help="RUN_DIR/export, written by python -m export.onnx")
    p.add_argument("--input", type=Path, required=True, help=".npy file of raw inputs (B, ...)")
    p.add_argument("--output", type=Path, help="write the predictions here (.npy)")
    p.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0: default)")
    p.add_argument("--tensorrt", action="store_true",
                   help="build a TensorRT engine from model.onnx (needs the tensorrt package)")
    args = p.parse_args(argv)
    try:
        x = np.load(args.input, allow_pickle=False)
        predictor = Predictor(args.export_dir, args.threads)
        y = predictor(x)
        if args.tensorrt:
            y = _tensorrt(args.export_dir, predictor, x, y)
        if args.output:
            np.save(args.output, y)
    except (InputError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    where = f" -> {args.output}" if args.output else ""
    print(f"{args.input}: {tuple(x.shape)} -> predictions {tuple(y.shape)}{where}")
    if not args.output:
        small = y.ndim == 2 and y.shape[0] <= 20
        print(y if small else f"(use --output to save all {y.size} values)")
    return 0


def _tensorrt(export_dir: Path, predictor: Predictor, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if not tensorrt_available():
        print("tensorrt is not installed: skipped the TensorRT engine (ran onnxruntime)")
        return y
    report = json.loads((export_dir / REPORT_FILE).read_text())
    trt_backend = report["backends"]["tensorrt"]
    if not trt_backend["compatible"]:
        print(f"skipped TensorRT: the model uses {', '.join(trt_backend['unsupported_ops'])}; "
              f"export with --tactic direct or matmul (ran onnxruntime)")
        return y
    engine = build_tensorrt_engine(export_dir, max(1, len(x)), export_dir / "model.trt.engine")
    print(f"built TensorRT engine {engine}")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: did not run the engine (ran onnxruntime)")
        return y
    y_trt = run_tensorrt(engine, check_input(x, predictor.spec), predictor.spec["output_shape"])
    print(f"TensorRT vs onnxruntime: max abs difference {np.max(np.abs(y_trt - y)):.2e}")
    return y_trt


if __name__ == "__main__":
    sys.exit(main())
