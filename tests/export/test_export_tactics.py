"""Lowering: each convolution tactic and each resampling MatMul against the reference ops."""

from __future__ import annotations

import math

import pytest
import torch

from dnarch_deploy.spectral import _resample_fft, direct_conv, resample
from export.emit import to_onnx
from export.resampling import lower_resample
from export.static import Resample
from export.tactics import PORTABLE, REGISTRY, TACTICS, conv_macs, four_step_factors, make_conv
from export.timing import session

# (spatial size, kernel taps): tiny, odd/even, prime, four-step, global kernels, 2-D
CONV_CASES = [
    ((1,), (1,)), ((2,), (3,)), ((7,), (7,)), ((16,), (1,)), ((16,), (5,)), ((33,), (33,)),
    ((64,), (63,)), ((61,), (9,)), ((150,), (149,)), ((150,), (21,)),
    ((1, 1), (1, 1)), ((5, 8), (3, 5)), ((12, 7), (11, 7)), ((9, 9), (1, 9)),
]


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).abs().max() / ref.double().abs().max())


@pytest.mark.parametrize("tactic", TACTICS)
@pytest.mark.parametrize(("size", "taps"), CONV_CASES)
def test_tactic_matches_direct_conv(tactic, size, taps):
    g = torch.Generator().manual_seed(sum(size) * 31 + sum(taps))
    x, kernel = torch.randn(3, 4, *size, generator=g), torch.randn(4, *taps, generator=g)
    ref = direct_conv(x.double(), kernel.double())
    out = make_conv(tactic, kernel, size)(x)
    assert out.shape == x.shape
    assert rel_error(out, ref) < 2e-6


def test_matmul_fft_uses_only_portable_ops_and_matches_in_onnxruntime():
    """The MatMul FFT in ORT: MatMul/Mul/Add/Reshape (plus Pad/Slice around a ragged grid)."""
    cases = [((150,), (149,)), ((64,), (9,)), ((12, 7), (11, 7))]
    kernels = [torch.randn(3, *taps) for _, taps in cases]
    convs = torch.nn.ModuleList(make_conv("matmul", k, s) for k, (s, _) in zip(kernels, cases))

    class All(torch.nn.Module):
        def forward(self, *xs):
            return tuple(conv(x) for conv, x in zip(convs, xs))

    xs = tuple(torch.randn(2, 3, *size) for size, _ in cases)
    model = to_onnx(All(), xs, dynamic_batch=False)
    ops = {n.op_type for n in model.graph.node}
    assert ops <= {"MatMul", "Mul", "Add", "Reshape", "Pad", "Slice"}
    outs = session(model).run(None, {i.name: x.numpy() for i, x in zip(model.graph.input, xs)})
    for out, x, kernel in zip(outs, xs, kernels):
        ref = direct_conv(x.double(), kernel.double())
        assert rel_error(torch.from_numpy(out), ref) < 2e-6


@pytest.mark.parametrize("length", [1, 2, 9, 64, 150, 1000])
@pytest.mark.parametrize("taps", [1, 9, 149])
def test_four_step_grid_leaves_room_for_the_kernel(length, taps):
    n1, n2 = four_step_factors(length, taps)
    assert n1 * n2 >= length + taps // 2


def test_theoretical_costs_order_tactics_like_the_textbook():
    """Direct conv costs C*L*K, so it is cheap for tiny kernels and dear for global ones."""
    assert conv_macs("direct", 8, (1024,), (3,)) < conv_macs("matmul", 8, (1024,), (3,))
    assert conv_macs("matmul", 8, (1024,), (1023,)) < conv_macs("direct", 8, (1024,), (1023,))
    assert conv_macs("direct", 8, (64,), (5,)) == 8 * 64 * 5


# (input length, target length, masked): down, up, same-size spectral filter; odd and even; axes
# short (the library resamples them by a matrix itself) and long (by FFTs)
RESAMPLE_CASES = [(16, 7, True), (16, 8, True), (15, 5, False), (9, 9, True), (8, 16, False),
                  (7, 12, False), (1, 1, True), (150, 3, True), (256, 75, True), (200, 256, False),
                  (160, 160, True)]


@pytest.mark.parametrize(("n", "size", "masked"), RESAMPLE_CASES)
@pytest.mark.parametrize("dim", [-1, -2])
def test_resample_matmul_matches_fft_crop(n, size, masked, dim):
    g = torch.Generator().manual_seed(n * 100 + size)
    mask = torch.rand(min(n, size) // 2 + 1, generator=g) + 0.1 if masked else None
    shape = (2, 3, n, 5) if dim == -2 else (2, 3, 5, n)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    lowered = lower_resample(Resample(size, dim, mask), n)
    assert lowered.sizes == (n, size)
    # the reference: the FFT crop itself (spectral.resample uses a matrix on short axes)
    mask64 = None if mask is None else mask.double()
    ref = _resample_fft(x.movedim(dim, -1), size, mask64).movedim(-1, dim)
    out = lowered(x.float())
    assert out.shape == ref.shape
    assert (out.double() - ref).abs().max() <= 2e-6 * max(1.0, float(ref.abs().max()))
    assert torch.allclose(resample(x, size, dim=dim, mask=mask64), ref, atol=1e-12)


def test_registry_one_class_per_tactic():
    """Each tactic is one module class: built from a kernel and a size, named, priced."""
    assert TACTICS == ("direct", "matmul", "dft") and PORTABLE == ("direct", "matmul")
    kernel = torch.randn(3, 9)
    for name in TACTICS:
        module = make_conv(name, kernel, (40,))
        assert type(module) is REGISTRY[name] and module.name == name
    matmul = make_conv("matmul", kernel, (40,))
    assert conv_macs("matmul", 3, (40,), (9,)) == matmul.macs()  # counted from its operators
    n = 64  # the DFT op's radix-2 length from 40 + 9 // 2 = 44 on
    assert conv_macs("dft", 3, (40,), (9,)) == 3 * n * math.log2(n)


def test_unknown_tactic_is_an_error_not_a_dft():
    for call in (lambda: conv_macs("fft", 3, (40,), (9,)),
                 lambda: make_conv("fft", torch.randn(3, 9), (40,))):
        with pytest.raises(ValueError, match=r"unknown tactic 'fft'; choose from direct, matmul"):
            call()
