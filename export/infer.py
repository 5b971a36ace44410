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
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from dnarch_deploy.rundir import read_export_report

from .artifacts import ARCHITECTURE_FILE, ONNX_FILE, REPORT_FILE, SCHEMA
from .timing import session

REEXPORT = "re-export the run with python -m export.onnx RUN_DIR"
MAX_SPEC_BYTES = 16 * 2**20


class InputError(ValueError):
    """The input does not fit the model (wrong shape, dtype, token range, non-finite values), or
    the export directory cannot be used: one message naming the file."""


def load_spec(export_dir: str | Path) -> dict:
    """The input/output specification recorded in architecture.json."""
    export_dir = Path(export_dir)
    path = export_dir / ARCHITECTURE_FILE
    if (export_dir / "config.json").is_file() and (export_dir / "export").is_dir():
        raise InputError(f"{export_dir} is a run directory; pass its export directory "
                         f"{export_dir / 'export'}")
    if not export_dir.is_dir():
        raise InputError(f"{export_dir}: no such export directory (give RUN_DIR/export, written "
                         f"by python -m export.onnx)")
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_SPEC_BYTES))
    except FileNotFoundError:
        raise InputError(f"{path}: not found (is {export_dir} an export directory written by "
                         f"python -m export.onnx?)") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: damaged ({e}); {REEXPORT}") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != SCHEMA + "-architecture":
        hint = (f" (this is the search's {ARCHITECTURE_FILE}: {export_dir} looks like a run "
                f"directory, pass {export_dir / 'export'})" if schema == "dnarch-architecture"
                else "")
        raise InputError(f"{path}: not an export's {ARCHITECTURE_FILE} (field 'schema' is "
                         f"{schema!r}){hint}")
    try:
        spec = data["input"]
        _ = spec["input_shape"], spec["input_dtype"], spec["vocab_size"]
    except (KeyError, TypeError) as e:
        raise InputError(f"{path}: damaged or from another version (missing {e}); "
                         f"{REEXPORT}") from None
    return spec


def open_model(export_dir: Path, spec: dict, threads: int = 0):
    """An onnxruntime session of model.onnx, checked against architecture.json's input."""
    path = export_dir / ONNX_FILE
    if not path.is_file():
        raise InputError(f"{path}: not found; {REEXPORT}")
    try:
        sess = session(str(path), threads)
    except Exception as e:  # noqa: BLE001 - onnxruntime's errors have no common base class
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: onnxruntime cannot load it (damaged or truncated?): {first}; "
                         f"{REEXPORT}") from None
    inputs = sess.get_inputs()
    dtype = {"tensor(float)": "float32", "tensor(int64)": "int64"}
    shape = [d if isinstance(d, int) else None for d in inputs[0].shape] if inputs else []
    want = [None, *spec["input_shape"][1:]]
    if (len(inputs) != 1 or inputs[0].name != "x" or shape != want
            or dtype.get(inputs[0].type) != spec["input_dtype"]):
        got = (f"{describe_shape(shape)} {dtype.get(inputs[0].type, inputs[0].type)}"
               if inputs else "no input")
        raise InputError(f"{path} takes {got}, but {export_dir / ARCHITECTURE_FILE} says "
                         f"{describe_shape(want)} {spec['input_dtype']}: the two files come from "
                         f"different exports; {REEXPORT}")
    return sess


def load_input(path: Path) -> np.ndarray:
    """The array in a .npy file, or an InputError naming the file."""
    try:
        x = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"--input {path}: no such file") from None
    except (OSError, EOFError, ValueError) as e:
        raise InputError(f"--input {path}: not a readable .npy array ({e or 'empty file'})"
                         ) from None
    if not isinstance(x, np.ndarray):
        x.close()
        raise InputError(f"--input {path}: an .npz archive; give one array saved with np.save")
    return x


def check_output(path: Path) -> None:
    """--output must name a file in an existing folder (checked before any work)."""
    if path.is_dir():
        raise InputError(f"--output {path} is a directory; give a file name, e.g. "
                         f"{path / 'predictions.npy'}")
    if not path.parent.is_dir():
        raise InputError(f"--output {path}: the folder {path.parent} does not exist")


def save_output(path: Path, y: np.ndarray) -> None:
    """np.save to exactly ``path`` (np.save itself would add .npy), written atomically."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        mask = os.umask(0o022)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as f:
            np.save(f, y)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    bad = ~np.isfinite(x)
    if bad.any():
        samples = np.flatnonzero(bad.reshape(len(x), -1).any(axis=1))
        raise InputError(f"input has {int(bad.sum())} NaN or infinite value(s), in "
                         f"{len(samples)} sample(s) (first: sample {samples[0]}); the model "
                         "needs finite values")
    return x.astype(np.float32, copy=False)


class Predictor:
    """model.onnx in onnxruntime behind the input checks."""

    def __init__(self, export_dir: str | Path, threads: int = 0):
        self.dir = Path(export_dir)
        self.spec = load_spec(self.dir)
        self.session = open_model(self.dir, self.spec, threads)

    def __call__(self, x: np.ndarray, batch_size: int = 256) -> np.ndarray:
        x = check_input(np.asarray(x), self.spec)
        try:
            parts = [self.session.run(None, {"x": x[i : i + batch_size]})[0]
                     for i in range(0, len(x), batch_size)]
        except Exception as e:  # noqa: BLE001 - onnxruntime's errors have no common base class
            raise InputError(f"{self.dir / ONNX_FILE}: onnxruntime failed: "
                             f"{str(e).strip()[:300]}") from None
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
        if args.output:
            check_output(args.output)
        x = load_input(args.input)
        predictor = Predictor(args.export_dir, args.threads)
        y = predictor(x)
        if args.tensorrt:
            y = _tensorrt(args.export_dir, predictor, x, y)
        if args.output:
            save_output(args.output, y)
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
    report = read_export_report(export_dir)  # a damaged one: a RunError naming file and field
    trt_backend = report.backends.get("tensorrt")
    if trt_backend is None:
        raise InputError(f"{export_dir / REPORT_FILE}: missing field 'backends.tensorrt'; "
                         f"{REEXPORT}")
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
