"""The factored (four-step MatMul FFT) spectral resampling against dnarch_deploy.spectral.resample:
exact in float64, and in onnxruntime float32; the per-axis choice and its cost accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dnarch_deploy.operators import (
    cheapest_resample,
    factored_split,
    resample_candidates,
    resample_macs,
    split_pair,
)
from dnarch_deploy.spectral import next_fast_len, resample, resample_matrix
from export.bench import axis_matmul_macs
from export.emit import to_onnx
from export.resampling import (
    TRANSPOSE_ROWS_BELOW,
    AxisMatMul,
    FactoredResample,
    lower_resample,
    resample_bin_weights,
)
from export.static import Resample
from export.timing import session

# (n, size, masked): down and up, odd and even on either side (the Nyquist bin folded / split),
# same size with a mask (a spectral filter), short and long axes, the fast lengths the model uses
# on long axes (1024 -> 512, 1024 -> 72 = next_fast_len(65)), common factors small and large
CASES = [
    (16, 8, True), (16, 10, True), (15, 9, True), (15, 10, False), (8, 16, False),
    (9, 15, False), (10, 16, True), (12, 12, True), (9, 9, True), (30, 45, True), (45, 30, True),
    (1024, 512, True), (512, 1024, False), (1024, 72, True), (72, 1024, False),
    (1024, 1024, True), (256, 128, True), (150, 75, True), (150, 150, True), (240, 100, False),
]


def _mask(n: int, size: int, masked: bool, seed: int) -> torch.Tensor | None:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(min(n, size) // 2 + 1, generator=g, dtype=torch.float64) + 0.1 if masked \
        else None


@pytest.mark.parametrize(("n", "size", "masked"), CASES)
@pytest.mark.parametrize("dim", [-1, -2])
def test_factored_resample_is_exact_in_float64(n, size, masked, dim):
    mask = _mask(n, size, masked, n * 1000 + size)
    shape = (2, 3, n, 4) if dim == -2 else (2, 3, 4, n)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(n + size), dtype=torch.float64)
    ref = resample(x, size, dim=dim, mask=mask)
    out = FactoredResample(n, size, dim, mask, dtype=torch.float64)(x)
    assert out.shape == ref.shape
    assert float((out - ref).abs().max() / ref.abs().max()) < 1e-10


@pytest.mark.parametrize(("n", "size"), [(1024, 512), (60, 90), (24, 24)])
def test_every_split_is_exact(n, size):
    """Any common factor N2 of n and size gives the same map (N2 = 1: no four-step at all)."""
    mask = _mask(n, size, True, 7)
    ref = resample_matrix(n, size, mask, dtype=torch.float64)
    eye = torch.eye(n, dtype=torch.float64)
    g = math.gcd(n, size)
    for n2 in [d for d in range(1, g + 1) if g % d == 0]:
        out = FactoredResample(n, size, -1, mask, n2=n2, dtype=torch.float64)(eye)
        assert float((out - ref).abs().max() / ref.abs().max()) < 1e-10, n2


def test_split_must_divide_both_lengths():
    with pytest.raises(ValueError, match="divide"):
        FactoredResample(16, 12, -1, n2=8)


@pytest.mark.parametrize(("n", "size"), [(16, 8), (8, 16), (1024, 512), (512, 1024)])
def test_nyquist_cosine_keeps_its_amplitude(n, size):
    """A cosine at the lower length's Nyquist frequency: folded (down) / split (up) exactly."""
    low = min(n, size)
    t = torch.arange(n, dtype=torch.float64)
    x = torch.cos(math.pi * t * low / n)[None]  # low / 2 periods: the Nyquist bin of ``low``
    out = FactoredResample(n, size, -1, dtype=torch.float64)(x)
    s = torch.arange(size, dtype=torch.float64)
    assert torch.allclose(out[0], torch.cos(math.pi * s * low / size), atol=1e-10)


def test_bin_weights_reproduce_the_matrix():
    """y_s = Re sum_k c_k X_k e^(2 pi i k s / size): the bin weights alone define the map."""
    for n, size in [(16, 8), (15, 10), (8, 16), (9, 15), (12, 12)]:
        mask = _mask(n, size, True, n + size)
        c = resample_bin_weights(n, size, mask.numpy())
        k = np.arange(len(c))
        fwd = np.exp(-2j * np.pi * np.outer(np.arange(n), k) / n)  # (t, k)
        inv = np.exp(2j * np.pi * np.outer(k, np.arange(size)) / size)  # (k, s)
        matrix = ((fwd * c) @ inv).real
        ref = resample_matrix(n, size, mask, dtype=torch.float64).numpy()
        assert np.abs(matrix - ref).max() < 1e-12


PORTABLE_OPS = {"MatMul", "Mul", "Add", "Sub", "Reshape", "Transpose", "Slice", "Concat"}


def _in_onnxruntime(cases, make, spread, ops):
    """Each case's lowered resampling (``make(n, size, dim, mask)``) in one ONNX graph, run in
    an onnxruntime session on float32 inputs: (session, feeds, float64 references); only
    ``ops`` in the graph."""
    mods, xs, refs = [], [], []
    for n, size, masked, dim in cases:
        mask = _mask(n, size, masked, n + spread * size)
        mods.append(make(n, size, dim, mask))
        x = torch.randn((2, 3, n, 5) if dim == -2 else (2, 3, n), dtype=torch.float64)
        xs.append(x.float())
        refs.append(resample(x, size, dim=dim, mask=mask))

    class All(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mods = torch.nn.ModuleList(mods)

        def forward(self, *inputs):
            return tuple(m(x) for m, x in zip(self.mods, inputs))

    model = to_onnx(All().eval(), tuple(xs), dynamic_batch=True)
    assert {n.op_type for n in model.graph.node} <= ops
    feeds = {i.name: x.numpy() for i, x in zip(model.graph.input, xs)}
    return session(model), feeds, refs


@pytest.mark.slow
def test_factored_resample_in_onnxruntime():
    """float32 in onnxruntime to 1e-5 relative, portable ops only (no DFT: TensorRT runs it)."""
    cases = [(1024, 512, True, -1), (72, 1024, False, -1), (1024, 1024, True, -1),
             (15, 10, True, -1), (10, 16, False, -1), (12, 12, True, -2), (30, 45, True, -2)]
    sess, feeds, refs = _in_onnxruntime(
        cases, lambda n, size, dim, mask: FactoredResample(n, size, dim, mask), 3, PORTABLE_OPS)
    for out, ref in zip(sess.run(None, feeds), refs):
        assert float(np.abs(out - ref.numpy()).max() / ref.abs().max()) < 1e-5
    # the batch is dynamic: another batch size runs through the same graph
    feeds = {k: np.concatenate([v, v, v]) for k, v in feeds.items()}
    for out, ref in zip(sess.run(None, feeds), refs):
        assert float(np.abs(out[2:4] - ref.numpy()).max() / ref.abs().max()) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 8, TRANSPOSE_ROWS_BELOW - 1, TRANSPOSE_ROWS_BELOW, 28])
def test_second_axis_matmul_transposes_short_rows_and_stays_exact(rows):
    """Along dim -2 a dense resampling multiplies from the left on long rows, and moves the axis
    last (Transpose, MatMul, Transpose) on rows shorter than TRANSPOSE_ROWS_BELOW; both are the
    resampling (to float32 rounding: the matrix is stored in float32), in torch and in
    onnxruntime, and the weight's transpose is folded into the initializer at export."""
    n, size = 12, 7
    mask = _mask(n, size, True, rows)
    module = lower_resample(Resample(size, -2, mask), n, "dense")
    x = torch.randn(2, 3, n, rows, dtype=torch.float64)
    ref = resample(x, size, dim=-2, mask=mask)
    out = module(x.float()).double()
    assert float((out - ref).abs().max() / ref.abs().max()) < 1e-6
    model = to_onnx(module.eval(), (x.float(),))
    ops = [node.op_type for node in model.graph.node]
    short = rows < TRANSPOSE_ROWS_BELOW
    assert ops == (["Transpose", "MatMul", "Transpose"] if short else ["MatMul"])
    assert [tuple(i.dims) for i in model.graph.initializer] == [(n, size) if short else (size, n)]
    sess = session(model)
    out = sess.run(None, {model.graph.input[0].name: x.float().numpy()})[0]
    assert float(np.abs(out - ref.numpy()).max() / ref.abs().max()) < 1e-5


def test_lower_resample_tactics_and_their_costs():
    mask = _mask(1024, 512, True, 1)
    dense = lower_resample(Resample(512, -1, mask), 1024, "dense")
    factored = lower_resample(Resample(512, -1, mask), 1024, "factored")
    assert isinstance(dense, AxisMatMul) and isinstance(factored, FactoredResample)
    x = torch.randn(1, 4, 1024)
    assert torch.allclose(dense(x), factored(x), atol=1e-5)
    # the theoretical cost is what runs: per line the dense n * size or the factored MatMuls
    assert axis_matmul_macs(dense, 4, (1024,)) == 4 * 1024 * 512 == 4 * resample_macs(
        "dense", 1024, 512)
    assert axis_matmul_macs(factored, 4, (1024,)) == 4 * factored.macs()
    assert factored.macs() == resample_macs("factored", 1024, 512) < 1024 * 512 / 3
    # counted from the MatMuls' weights: each entry is used once per row it multiplies
    lines_per_matmul = {"w1": factored.n1, "w2": 1, "w3": 1, "w4": factored.m}
    counted = sum(b.numel() * lines_per_matmul[name] for name, b in factored.named_buffers())
    assert counted == factored.macs()
    with pytest.raises(ValueError, match="unknown resampling tactic"):
        lower_resample(Resample(512, -1, mask), 1024, "fft")


def test_choice_by_cost_keeps_short_axes_dense():
    assert cheapest_resample(1024, 512) == "factored"
    assert cheapest_resample(1024, 1024) == "factored"
    assert cheapest_resample(28, 14) == "dense"
    assert cheapest_resample(256, 64) == "dense"
    assert resample_candidates(97, 50) == ("dense", "split")  # no common factor
    assert factored_split(1024, next_fast_len(65))[0] > 1


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_network_with_every_resampling_factored_computes_the_trained_model(seed):
    """Every axis factored (N2 = 1 where the lengths share no factor) in a whole lowered network,
    eager and in onnxruntime, against the trained model; theoretical costs count what runs."""
    from export.bench import theoretical_costs
    from export.lowering import lower, resample_axes
    from export.static import freeze, materialize

    from .export_cases import random_input, random_model

    model = random_model(seed)
    static = materialize(model, freeze(model))
    factored = [{k: ["factored"] * len(v) for k, v in axes.items()}
                for axes in resample_axes(static)]
    dense = [{k: ["dense"] * len(v) for k, v in axes.items()} for axes in resample_axes(static)]
    tactics = ["direct"] * len(static.blocks)
    lowered = lower(static, tactics, factored)
    x = random_input(model, 3, seed=seed)
    with torch.no_grad():
        ref = model(x).double()
        out = lowered(x).double()
    assert float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)) < 1e-5
    for block in lowered.blocks:
        assert all(isinstance(m, FactoredResample) for m in [*block.down, *block.up])
        assert block.resample_tactics == {"down": ["factored"] * len(block.down),
                                          "up": ["factored"] * len(block.up)}
    model_onnx = to_onnx(lowered, (x,))
    assert "DFT" not in {n.op_type for n in model_onnx.graph.node}
    y = torch.from_numpy(session(model_onnx).run(None, {"x": x.numpy()})[0]).double()
    assert float((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)) < 1e-4
    # theoretical: only the resampling terms differ between the two lowerings
    diff = sum(v["theoretical"] for v in theoretical_costs(lowered).values()) - sum(
        v["theoretical"] for v in theoretical_costs(lower(static, tactics, dense)).values())
    size = tuple(static.spec["spatial"])
    expected = 0.0
    for block, axes in zip(static.blocks, resample_axes(static)):
        for kind, channels, shape in (("down", block.n_in, list(size)),
                                      ("up", block.n_out, list(block.bias1.shape[1:]))):
            for n, m, dim in axes[kind]:
                lines = channels * math.prod(shape) // shape[dim]
                expected += lines * (resample_macs("factored", n, m) - resample_macs("dense", n, m))
                shape[dim] = m
    assert diff == pytest.approx(expected)


# lengths with no good common factor: the model's fast lengths on 1024-, 1460-, 1344- and
# 4096-sample axes (next_fast_len(2 bins - 1)), down and up
SPLIT_CASES = [(1024, 540, True), (540, 1024, False), (4096, 1080, True), (1080, 4096, False),
               (1460, 375, True), (1344, 675, True), (97, 50, True), (30, 45, False)]


@pytest.mark.parametrize(("n", "size", "masked"), SPLIT_CASES)
@pytest.mark.parametrize("dim", [-1, -2])
def test_split_resample_is_exact_in_float64(n, size, masked, dim):
    """Separate splits for the two sides (split_pair), the spectrum re-laid out between them."""
    mask = _mask(n, size, masked, n * 7 + size)
    shape = (2, 3, n, 4) if dim == -2 else (2, 3, 4, n)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    ref = resample(x, size, dim=dim, mask=mask)
    a, b, macs = split_pair(n, size)
    assert n % a == 0 and size % b == 0
    module = FactoredResample(n, size, dim, mask, n2=a, n2_out=b, dtype=torch.float64)
    out = module(x)
    assert out.shape == ref.shape
    assert float((out - ref).abs().max() / ref.abs().max()) < 1e-10
    assert module.macs() == macs == resample_macs("split", n, size)


def test_split_resample_macs_closed_form():
    """(1) 2 N2 n + (2) 4 n K1 + (3) 4 K1' size + (4) 2 N2' size, K1 = ceil(keep / N2), counted
    from the MatMuls' weights (each entry used once per row it multiplies)."""
    n, size = 1024, 540
    a, b, macs = split_pair(n, size)
    keep = 271
    assert macs == 2 * a * n + 4 * n * -(-keep // a) + 4 * size * -(-keep // b) + 2 * b * size
    module = lower_resample(Resample(size, -1, _mask(n, size, True, 3)), n, "split")
    lines = {"w1": n // a, "w2": 1, "w3": 1, "w4": size // b}
    assert sum(t.numel() * lines[name] for name, t in module.named_buffers()) == macs
    # fewer than a third of the dense MatMul's, and of the factored form's with gcd(1024, 540) = 4
    assert 3 * macs < resample_macs("dense", n, size)
    assert 2 * macs < resample_macs("factored", n, size)
    assert resample_candidates(n, size) == ("dense", "factored", "split")
    assert cheapest_resample(n, size) == "split"
    assert resample_candidates(1024, 1024) == ("dense", "factored")  # the same split: not twice


@pytest.mark.slow
def test_split_resample_in_onnxruntime():
    cases = [(1024, 540, True, -1), (540, 1024, False, -1), (97, 50, True, -2)]
    sess, feeds, refs = _in_onnxruntime(
        cases, lambda n, size, dim, mask: lower_resample(Resample(size, dim, mask), n, "split"),
        1, PORTABLE_OPS | {"Pad"})
    for out, ref in zip(sess.run(None, feeds), refs):
        assert float(np.abs(out - ref.numpy()).max() / ref.abs().max()) < 1e-5
