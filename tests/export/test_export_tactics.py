"""Lowering: each convolution tactic and each resampling MatMul against the reference ops."""

from __future__ import annotations

import math

import pytest
import torch

from dnarch_deploy.operators import (
    conv_by_cost,
    conv_period,
    conv_tactics,
    depthwise_channels,
    fft_reference_macs,
    four_step_factors,
    multistep_macs,
)
from dnarch_deploy.spectral import (
    _resample_fft,
    conv_fft_length,
    conv_fft_sizes,
    direct_conv,
    fft_conv,
    masked_kernel,
    resample,
)
from export.emit import to_onnx
from export.resampling import lower_resample
from export.static import Resample
from export.tactics import (
    PORTABLE,
    REGISTRY,
    TACTICS,
    conv_macs,
    distinct_tactics,
    make_conv,
)
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


@pytest.mark.slow
@pytest.mark.parametrize("channels", [1, 3, 4, 5, 23, 24])
@pytest.mark.parametrize(("size", "taps"), [((150,), (9,)), ((8, 7), (3, 5))])
def test_direct_conv_runs_on_channels_padded_to_a_multiple_of_4(channels, size, taps):
    """onnxruntime's fast depthwise kernel needs a multiple of 4 channels: the direct tactic pads
    with zero filters (Pad, Conv, Slice) and still computes the same correlation."""
    g = torch.Generator().manual_seed(channels)
    x = torch.randn(2, channels, *size, generator=g)
    kernel = torch.randn(channels, *taps, generator=g)
    conv = make_conv("direct", kernel, size)
    model = to_onnx(conv, (x,))
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    group = next(a.i for a in convs[0].attribute if a.name == "group")
    assert len(convs) == 1 and group == depthwise_channels(channels) == -(-channels // 4) * 4
    assert ("Pad" in {n.op_type for n in model.graph.node}) == (channels % 4 != 0)
    out = session(model).run(None, {model.graph.input[0].name: x.numpy()})[0]
    assert out.shape == x.shape
    assert rel_error(torch.from_numpy(out), direct_conv(x.double(), kernel.double())) < 2e-6
    assert conv_macs("direct", channels, size, taps) == group * math.prod(size) * math.prod(taps)


@pytest.mark.slow
def test_matmul_fft_uses_only_portable_ops_and_matches_in_onnxruntime():
    """The MatMul FFT in ORT: MatMul, elementwise arithmetic and moves of data (Reshape,
    Transpose, Slice, Concat, Pad around a ragged grid), no DFT op."""
    cases = [((150,), (149,)), ((64,), (9,)), ((12, 7), (11, 7))]
    kernels = [torch.randn(3, *taps) for _, taps in cases]
    convs = torch.nn.ModuleList(make_conv("matmul", k, s) for k, (s, _) in zip(kernels, cases))

    class All(torch.nn.Module):
        def forward(self, *xs):
            return tuple(conv(x) for conv, x in zip(convs, xs))

    xs = tuple(torch.randn(2, 3, *size) for size, _ in cases)
    model = to_onnx(All(), xs, dynamic_batch=False)
    ops = {n.op_type for n in model.graph.node}
    assert ops <= {"MatMul", "Mul", "Add", "Sub", "Reshape", "Transpose", "Pad", "Slice", "Concat"}
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
    assert conv_macs("direct", 7, (64,), (5,)) == 8 * 64 * 5  # padded to a multiple of 4


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
    assert TACTICS == ("direct", "dense", "matmul", "multistep", "dft")
    assert PORTABLE == ("direct", "dense", "matmul", "multistep")
    kernel = torch.randn(3, 9)
    for name in TACTICS:
        module = make_conv(name, kernel, (40,))
        assert type(module) is REGISTRY[name] and module.name == name
    matmul = make_conv("matmul", kernel, (40,))
    assert conv_macs("matmul", 3, (40,), (9,)) == matmul.macs()  # counted from its operators
    n = 64  # the DFT op's radix-2 length from 40 + 9 // 2 = 44 on
    assert conv_macs("dft", 3, (40,), (9,)) == 3 * n * math.log2(n)


@pytest.mark.slow
@pytest.mark.parametrize(("size", "taps"), [((150,), (149,)), ((8, 8), (15, 15)), ((5, 8), (3, 5))])
def test_dense_tactic_is_one_matmul_of_c_p_squared_in_onnxruntime(size, taps):
    """The dense tactic is the convolution's (P x P) matrix per channel: C P^2 MACs, the matrix's
    own size; in onnxruntime one MatMul between moves of data, exact at another batch size than
    exported (the batch is dynamic)."""
    kernel = torch.randn(5, *taps)
    module = make_conv("dense", kernel, size)
    p = math.prod(size)
    assert module.matrix.shape == (5, p, p)
    assert conv_macs("dense", 5, size, taps) == 5 * p * p == module.matrix.numel()
    model = to_onnx(module, (torch.randn(2, 5, *size),))
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("MatMul") == 1 and set(ops) <= {"MatMul", "Transpose", "Reshape", "Flatten"}
    x = torch.randn(7, 5, *size)
    out = session(model).run(None, {model.graph.input[0].name: x.numpy()})[0]
    assert rel_error(torch.from_numpy(out), direct_conv(x.double(), kernel.double())) < 2e-6


def test_dense_tactic_is_offered_up_to_its_size_and_never_chosen_by_cost():
    """Up to 256 positions; by cost never (a whole network runs slower with it at batch 1,
    benchmarks/dense_conv.py), even where it has the fewest MACs."""
    assert "dense" in conv_tactics((256,)) and "dense" in conv_tactics((16, 16))
    assert "dense" not in conv_tactics((257,)) and "dense" not in conv_tactics((17, 16))
    with pytest.raises(ValueError, match=r"at most 256 positions, not 300 \(20x15\)"):
        make_conv("dense", torch.randn(3, 9, 9), (20, 15))
    size, taps = (8, 8), (15, 15)  # a global kernel on digits: dense has the fewest MACs
    assert conv_macs("dense", 24, size, taps) < min(
        conv_macs(t, 24, size, taps) for t in PORTABLE if t != "dense")
    assert conv_by_cost(24, size, taps) == "matmul"
    assert conv_by_cost(32, (150,), (9,)) == "direct"


def test_unknown_tactic_is_an_error_not_a_dft():
    for call in (lambda: conv_macs("fft", 3, (40,), (9,)),
                 lambda: make_conv("fft", torch.randn(3, 9), (40,))):
        with pytest.raises(ValueError,
                           match=r"unknown tactic 'fft'; choose from direct, dense, matmul"):
            call()


# long axes: the multi-step MatMul FFT against direct_conv, and its cost against an FFT's
LONG_CASES = [((1024,), (1023,)), ((1460,), (2919,)), ((4096,), (4095,)), ((2000,), (101,))]


@pytest.mark.parametrize(("size", "taps"), LONG_CASES)
def test_multistep_fft_matches_direct_conv_on_long_axes(size, taps):
    g = torch.Generator().manual_seed(size[0] + taps[0])
    x, kernel = torch.randn(2, 3, *size, generator=g), torch.randn(3, *taps, generator=g)
    ref = direct_conv(x.double(), kernel.double())
    module = make_conv("multistep", kernel, size)
    assert len(module.n) == 3  # more than the four-step's two factors
    assert rel_error(module(x), ref) < 2e-6  # float32
    exact = make_conv("multistep", kernel.double(), size)
    assert rel_error(exact(x.double()), ref) < 1e-12  # float64: the same map


@pytest.mark.parametrize("tactic", ["matmul", "multistep"])
@pytest.mark.parametrize(("size", "taps"), CONV_CASES[:10] + LONG_CASES)
def test_matmul_fft_macs_closed_form(tactic, size, taps):
    """conv_macs (the closed form) == the MACs counted from the built module's shapes."""
    module = make_conv(tactic, torch.zeros(5, *taps), size)
    assert conv_macs(tactic, 5, size, taps) == module.macs()
    assert module.macs() == 5 * multistep_macs(size[0], module.n)


@pytest.mark.parametrize("tactic", ["matmul", "multistep"])
@pytest.mark.parametrize(("size", "taps"), [c for c in CONV_CASES if len(c[0]) == 2]
                         + [((28, 28), (27, 27)), ((14, 28), (13, 55))])
def test_matmul_fft_macs_closed_form_2d(tactic, size, taps):
    """2-D: one dense DFT matrix per axis; the closed form == the operators' count."""
    module = make_conv(tactic, torch.zeros(3, *taps), size)
    assert conv_macs(tactic, 3, size, taps) == module.macs()


@pytest.mark.parametrize("length", [512, 1024, 2048, 4096, 8192])
def test_multistep_fft_costs_grow_like_an_fft(length):
    """Global kernel: the multi-step form (three factors) stays within 6x of a textbook radix-2
    FFT convolution's multiply-adds (fft_reference_macs) up to L = 8192; the four-step's ratio
    grows like sqrt(N) / log N (6.7x at 1024, 11x at 4096, 14x at 8192)."""
    n = conv_fft_length(length, length - 1)
    reference = fft_reference_macs(n)
    multi = conv_macs("multistep", 1, (length,), (length - 1,)) / reference
    four = conv_macs("matmul", 1, (length,), (length - 1,)) / reference
    assert multi <= 6.0
    assert four > 1.4 * multi
    if length >= 4096:
        assert four >= 2.1 * multi


def test_fft_reference_macs_closed_form():
    assert fft_reference_macs(1024) == 2.5 * 1024 * 10 + 4 * 513


def test_multistep_fft_in_onnxruntime():
    """The multi-step form exports to MatMul / Mul / Add / Reshape / Transpose (+ Pad / Slice)
    and matches."""
    size, taps = (1100,), (1001,)
    kernel, x = torch.randn(3, *taps), torch.randn(2, 3, *size)
    module = make_conv("multistep", kernel, size)
    model = to_onnx(module, (x,), dynamic_batch=False)
    assert {n.op_type for n in model.graph.node} <= {"MatMul", "Mul", "Add", "Reshape", "Pad",
                                                      "Slice", "Transpose"}
    out = session(model).run(None, {model.graph.input[0].name: x.numpy()})[0]
    assert rel_error(torch.from_numpy(out), direct_conv(x.double(), kernel.double())) < 2e-6


def test_distinct_tactics_leave_out_a_repeated_lowering():
    """Where the best multi-step factorisation is the matmul tactic's (one dense DFT on a short
    axis) it is not timed twice."""
    short = distinct_tactics(torch.randn(3, 15), (16,))
    assert "multistep" not in short and set(short) == {"direct", "dense", "matmul", "dft"}
    assert "multistep" in distinct_tactics(torch.randn(3, 1023), (1024,))
    assert "dense" not in distinct_tactics(torch.randn(3, 1023), (1024,))  # not offered there


def test_tuning_skips_tactics_far_above_the_fewest_macs():
    """A global kernel on a long axis: direct conv (L K MACs) is not timed; short kernels
    keep it."""
    import types

    from export.tune import MAX_MAC_RATIO, worth_timing

    def block(length, taps):
        return types.SimpleNamespace(conv=types.SimpleNamespace(kernel=torch.randn(4, taps),
                                                                period=None),
                                     bias1=torch.zeros(8, length), n_in=4)

    long = block(2048, 2047)
    kept = worth_timing(distinct_tactics(long.conv.kernel, (2048,)), long)
    assert "direct" not in kept and {"matmul", "multistep", "dft"} <= set(kept)
    assert conv_macs("direct", 4, (2048,), (2047,)) > MAX_MAC_RATIO * conv_macs(
        "multistep", 4, (2048,), (2047,))
    short = block(2048, 9)
    assert "direct" in worth_timing(distinct_tactics(short.conv.kernel, (2048,)), short)


# (size, widest kernel): the training's N is 96, 384, 225 (a four-step grid of 25 x 9), 18 x 15
CIRCULAR_CASES = [((61,), (61,)), ((256,), (255,)), ((150,), (149,)), ((12, 9), (11, 9))]


@pytest.mark.parametrize(("size", "widest"), CIRCULAR_CASES)
def test_a_folded_resolution_mask_runs_circularly_at_the_training_fft_length(size, widest):
    """A kernel with the resolution mask folded in (spectral.masked_kernel: 2 S - 1 taps on the
    masked axis, periodic in the training's FFT length N) is the trained convolution whichever
    tactic runs it. The MatMul FFT forms may run it circularly at exactly N
    (operators.conv_period), shorter than the 2 S - 1 + S - 1 a linear convolution of that
    kernel needs, where that costs fewer MACs; their MACs are the closed form's."""
    g = torch.Generator().manual_seed(sum(size))
    x = torch.randn(2, 3, *size, generator=g, dtype=torch.float64)
    kernel = torch.randn(3, *widest, generator=g, dtype=torch.float64)
    fft = conv_fft_sizes(size, widest)
    bins = fft[-1] // 2 + 1  # a mask on the last axis's one-sided spectrum, like the model's
    mask = torch.sigmoid(torch.linspace(4.0, -2.0, bins, dtype=torch.float64))
    mask = mask.view(*[1] * (len(size) - 1), bins)
    trained = fft_conv(x, kernel, mask, fft)
    folded = masked_kernel(kernel, size, mask, fft)
    assert folded.shape[-1] == 2 * size[-1] - 1
    period = conv_period(size, tuple(folded.shape[1:]), tuple(fft))
    assert period[-1] == fft[-1] < conv_fft_length(size[-1], 2 * size[-1] - 1)
    for tactic in TACTICS:
        module = make_conv(tactic, folded.float(), size, period)
        assert rel_error(module(x.float()), trained) < 2e-6, tactic
        if tactic in ("matmul", "multistep"):
            assert conv_macs(tactic, 3, size, tuple(folded.shape[1:]), period) == module.macs()
        if tactic == "matmul":
            assert math.prod(module.n) == math.prod(period)
