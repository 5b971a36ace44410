"""onnxruntime sessions, latency measurement, and per-layer sub-models.

Per-layer latency is measured on sub-models cut out of the exported graph (onnx.utils.Extractor)
at layer boundaries: the exporter tags every node with the module it came from
(``pkg.torch.onnx.name_scopes`` metadata: ``encoder``, ``blocks.3``, ``decoder``), so a layer is
the set of nodes tagged with it, its inputs the tensors it reads from other layers. Each sub-model
is timed by wall clock like the whole model, so per-layer figures include onnxruntime's per-node
dispatch cost and add up to about the total (ORT profiling, in contrast, reports kernel time only).

Candidates of a comparison take turns (:func:`measure`), so a burst of load from other processes
hits them alike.
"""

from __future__ import annotations

import argparse
import ast
import time
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx.utils import Extractor

from dnarch_deploy.progress import bar

_NP = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT32: np.int32,
}


def batch_sizes(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated batch sizes, each >= 1 ("1,32" -> (1, 32))."""
    try:
        batches = tuple(int(b) for b in text.split(","))
    except ValueError:
        batches = ()
    if not batches or min(batches) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return batches


def session(model: onnx.ModelProto | bytes | str, threads: int = 0,
            profile_prefix: str | None = None) -> ort.InferenceSession:
    """A CPU session; ``threads`` intra-op threads (0: onnxruntime's default); with
    ``profile_prefix``, onnxruntime's profiler on, its file written there by ``end_profiling``."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if profile_prefix is not None:
        options.enable_profiling, options.profile_file_prefix = True, profile_prefix
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def measure(
    candidates: Sequence[Callable[[], object]], repeats: int = 20, warmup: int = 3, rounds: int = 4
) -> list[dict[str, float]]:
    """Median and minimum wall-clock milliseconds of each callable.

    Candidates take turns in ``rounds`` rounds; in each round a candidate runs ``warmup`` untimed
    and then ``repeats / rounds`` timed calls back to back, so its thread pool is hot and its own
    (onnxruntime and OpenMP threads spin for a while after a call and would slow whichever
    candidate ran next), while a burst of load from other processes hits all candidates alike.
    """
    rounds = max(1, min(rounds, repeats))
    times: list[list[float]] = [[] for _ in candidates]
    for r in range(rounds):
        for i, fn in enumerate(candidates):
            for _ in range(warmup):
                fn()
            for _ in range(repeats // rounds + (r < repeats % rounds)):
                start = time.perf_counter()
                fn()
                times[i].append((time.perf_counter() - start) * 1e3)
    return [{"median_ms": float(np.median(t)), "min_ms": float(np.min(t))} for t in times]


def runner(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> Callable[[], object]:
    return lambda: sess.run(None, feeds)


# --- layers of an exported graph ------------------------------------------------------------------


def node_layer(node: onnx.NodeProto, depth: int = 1) -> str | None:
    """The module path (``depth`` levels deep) the exporter recorded for a node, if any."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes = ast.literal_eval(prop.value)
            return scopes[depth] if len(scopes) > depth else None
    return None


def layers(model: onnx.ModelProto, depth: int = 1) -> dict[str, list[onnx.NodeProto]]:
    """Nodes grouped by module, in graph order; untagged nodes join the next tagged one."""
    groups: dict[str, list[onnx.NodeProto]] = {}
    pending: list[onnx.NodeProto] = []
    for node in model.graph.node:
        name = node_layer(node, depth)
        if name is None:
            pending.append(node)
            continue
        groups.setdefault(name, []).extend(pending + [node])
        pending = []
    if pending:
        groups.setdefault("other", []).extend(pending)
    return groups


def layer_boundaries(
    model: onnx.ModelProto, nodes: list[onnx.NodeProto]
) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of a group of nodes: tensors read from / needed outside the group."""
    initializers = {t.name for t in model.graph.initializer}
    produced = {o for n in nodes for o in n.output}
    inside = {id(n) for n in nodes}
    inputs = []
    for n in nodes:
        for i in n.input:
            if i and i not in produced and i not in initializers and i not in inputs:
                inputs.append(i)
    needed = {i for n in model.graph.node if id(n) not in inside for i in n.input}
    needed |= {o.name for o in model.graph.output}
    outputs = [o for n in nodes for o in n.output if o in needed]
    return inputs, outputs


def sub_model(model: onnx.ModelProto, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    return Extractor(model).extract_model(inputs, outputs)


def random_feeds(
    model: onnx.ModelProto, batch: int, vocab: int = 0, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random inputs for every graph input; symbolic dimensions are the batch."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in tensor.shape.dim]
        dtype = _NP[tensor.elem_type]
        if np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, max(vocab, 1), size=shape).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def layer_models(model: onnx.ModelProto) -> dict[str, onnx.ModelProto]:
    """One sub-model per layer (``encoder``, ``blocks.i``, ``decoder``) of an exported graph."""
    subs = {}
    for name, nodes in bar(layers(model).items(), desc="layer sub-models"):
        inputs, outputs = layer_boundaries(model, nodes)
        if inputs and outputs:
            subs[name] = sub_model(model, inputs, outputs)
    return subs


def layer_latency(
    subs: dict[str, onnx.ModelProto], batch: int, threads: int, repeats: int = 20, vocab: int = 0
) -> dict[str, dict[str, float]]:
    """Milliseconds per layer sub-model (:func:`layer_models`) at one batch size."""
    fns = [runner(session(sub, threads), random_feeds(sub, batch, vocab)) for sub in subs.values()]
    return dict(zip(subs, measure(fns, repeats)))


# --- the MatMul ceiling ---------------------------------------------------------------------------

CEILING_SHAPE = (512, 512, 512)  # (M, K, N): one float32 GEMM, large enough for MLAS's best


def matmul_model(m: int, k: int, n: int) -> onnx.ModelProto:
    """A one-node ONNX graph: y = a @ w, a (M, K) input, w a (K, N) initializer."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32),
                                "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"])], "ceiling",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def matmul_ceiling(threads: int, repeats: int = 20, shape: tuple[int, int, int] = CEILING_SHAPE
                   ) -> dict:
    """GFLOP/s (2 flops per multiply-add) of one large float32 MatMul in onnxruntime with these
    threads: what the exported model's MatMuls could reach at best on this machine, measured in
    the same run as the model."""
    m, k, n = shape
    model = matmul_model(m, k, n)
    t = measure([runner(session(model, threads), random_feeds(model, 1))], repeats)[0]
    return {"gflops": 2 * m * k * n / (t["median_ms"] * 1e-3) / 1e9, "shape": [m, k, n],
            "threads": threads, "median_ms": t["median_ms"]}


def achieved_gflops(macs_per_sample: float, batch: int, ms: float) -> float:
    """GFLOP/s of a model doing ``macs_per_sample`` multiply-adds per sample (2 flops each) on
    ``batch`` samples in ``ms`` milliseconds."""
    return 2 * macs_per_sample * batch / (ms * 1e-3) / 1e9
