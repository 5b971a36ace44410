"""A block's lowered operators, declared once: what the search's cost model prices
(:mod:`dnarch_deploy.cost`), what a found architecture's figure sums and what export's report
counts as a lowered network's ``theoretical`` MACs (:func:`export.bench.theoretical_costs`) all
derive from :func:`block_operators`.

Each operator is one subclass of :class:`BlockOp`, declared in the order a block runs them; it
registers itself in :data:`BLOCK_OPS`. Its ``lower`` gives the operators it lowers to in a
block (none, one, or one per resampled axis) with their multiply-accumulates
(:class:`Operator`) at the choices export made (:class:`Block`: the convolution's tactic, each
axis's resampling form, the stream carried as its spectrum; by cost where not given, the
forms' formulas and the by-cost choice among them in :mod:`dnarch_deploy.operators`); its
``proxy`` the smooth formula of its shape in the search's straight-through sizes whose gradient
the search's cost follows (:func:`dnarch_deploy.cost.model_cost` rescales it to the lowered
MACs). A new operator is one new subclass here.

The stream carried as its spectrum (1-D networks whose every block crops,
:mod:`export.spectrum`, ``spectrum=K``): a block's read, residual and write act on the 2 K values
of its first K bins instead of the L samples, and its resampling is two spectral halves of its
own R samples (``from_spectrum``: R samples from its R // 2 + 1 bins; ``to_spectrum``: back),
:func:`~dnarch_deploy.operators.spectrum_macs` each per channel; outside the blocks the stream
pays one transform of L samples after the encoder and, for a decoder pooling by the maximum, one
back (:func:`spectrum_stream`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import Tensor

from .operators import (
    cheapest_resample,
    conv_by_cost,
    conv_macs,
    conv_period,
    depthwise_channels,
    resample_macs,
    spectrum_form,
    spectrum_macs,
)


class Operator(NamedTuple):
    kind: str  # what a latency table is keyed by: linear, pointwise, add, copy, conv.<tactic>,
    # resample.<form>
    macs: float  # multiply-accumulates per sample
    # a convolution's or linear layer's shape, by which a latency table prices it (0: none):
    # its width (channels; C_in * C_out of a linear layer), the product of its spatial size and
    # of its deployed kernel's taps (1 for a linear layer)
    width: int = 0
    positions: int = 0
    taps: int = 0


@dataclass
class Block:
    """One block being lowered (:func:`block_operators`): its sizes and export's choices, and
    the state the operators pass on as they run (``shape``: the current size per axis)."""

    input_size: tuple[int, ...]
    resolution: tuple[int, ...]
    n_in: int
    n_mid: int
    n_out: int
    taps: tuple[int, ...]  # the deployed kernel's
    cropped: tuple[bool, ...]
    stream: int
    period: tuple[int, ...] | None  # a circular convolution's lengths (conv_period)
    tactic: str
    forms: dict[str, dict[int, str]]  # "down" / "up": axis -> resampling form
    spectrum: int | None  # K: the stream carried as its first K bins
    read_wider: bool
    shape: list[int] = field(init=False)

    def __post_init__(self):
        self.shape = list(self.input_size)

    @property
    def columns(self) -> int:
        """linear1's columns: n_in, or a direct convolution's padded count, whose zero filters
        read stream channels and meet zero columns (export's StaticBlock.read_wider): no Pad or
        Slice around it where the stream has them."""
        wider = self.tactic == "direct" and self.read_wider
        return depthwise_channels(self.n_in) if wider else self.n_in

    @property
    def read(self) -> int:
        return min(self.columns, self.stream)

    @property
    def values(self) -> int:
        """Values per channel of the stream: its L samples, or 2 K as its spectrum."""
        return math.prod(self.input_size) if self.spectrum is None else 2 * self.spectrum

    @property
    def positions(self) -> int:
        return math.prod(self.resolution)


BLOCK_OPS: dict[str, type[BlockOp]] = {}  # name (per axis: its stem) -> declaration, run order


class BlockOp:
    """One operator of a block: ``lower`` yields (name, :class:`Operator`) for the block (none
    where it has no such operator; per axis ``<name><axis>``), ``proxy`` the (D,) smooth formula
    of operator ``name`` in the straight-through sizes ``z``
    (:func:`dnarch_deploy.cost.model_sizes`), ``kinds`` its kind per block ("" where none)."""

    name: str
    per_axis = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        BLOCK_OPS[cls.name] = cls

    @staticmethod
    def lower(b: Block) -> Iterator[tuple[str, Operator]]:
        raise NotImplementedError

    @staticmethod
    def proxy(name: str, kinds: list[str], z: dict, input_size) -> Tensor:
        raise NotImplementedError


def _floats(input_size) -> list[float]:
    return [float(s) for s in input_size]


def _is(kinds: list[str], kind: str, device) -> Tensor:
    return torch.tensor([k == kind for k in kinds], device=device)


class Read(BlockOp):
    """A Slice of the first ``read`` of the stream's channels, where that is fewer."""

    name = "read"

    @staticmethod
    def lower(b):
        if b.read < b.stream:
            yield "read", Operator("copy", float(b.values * b.read))

    @staticmethod
    def proxy(name, kinds, z, input_size):
        return math.prod(_floats(input_size)) * z["n_in"]


def _resample_proxy(name: str, kinds: list[str], z: dict, input_size) -> Tensor:
    """Resampling of axis a, one axis after another: down from the input, up from the
    resolution; exact for the dense form, (n + m) log2(n + m) per line for the factored ones."""
    res, size = z["resolution"], _floats(input_size)
    down, a = name.startswith("down"), int(name[-1])
    channels = z["n_in"] if down else z["n_out"]
    done, todo = (res, size) if down else (size, res)
    lines = channels * math.prod(done[b] if b < a else todo[b] for b in range(len(res)) if b != a)
    n, m = size[a] + res[a], size[a] * res[a]
    dense_kind = _is(kinds, "resample.dense", channels.device)
    return lines * torch.where(dense_kind, m, n * torch.log2(n))


class Down(BlockOp):
    """Per cropped axis, the channels read resampled from the input's size to the resolution
    (each axis's lines: the channels times the other axes' current sizes)."""

    name, per_axis = "down", True
    proxy = staticmethod(_resample_proxy)

    @staticmethod
    def lower(b):
        if b.spectrum is not None:
            return
        for a, crop in enumerate(b.cropped):
            if crop:
                form = b.forms["down"][a]
                lines = b.read * math.prod(b.shape) // b.shape[a]
                macs = resample_macs(form, b.shape[a], b.resolution[a])
                yield f"down{a}", Operator(f"resample.{form}", float(lines * macs))
                b.shape[a] = b.resolution[a]


def _spectrum_half(b: Block, channels: int) -> Operator:
    """One of a spectrum-carried block's halves: R samples from or to its R // 2 + 1 bins."""
    r = b.resolution[0]
    form = spectrum_form(r, r // 2 + 1)[0]
    return Operator(f"resample.{form}", float(channels * spectrum_macs(r, r // 2 + 1)))


def _spectrum_proxy(channels: Tensor, kinds: list[str], z: dict) -> Tensor:
    """A half: exact for the dense form, 2 R (R // 2 + 1); (n + m) log2(n + m) for the four-step."""
    r = z["resolution"][0]
    n = r + (r / 2 + 1)
    dense_kind = _is(kinds, "resample.dense", channels.device)
    return channels * torch.where(dense_kind, r * (r + 2), n * torch.log2(n))


class FromSpectrum(BlockOp):
    """The stream as its spectrum: the channels read, R samples from the block's bins."""

    name = "from_spectrum"

    @staticmethod
    def lower(b):
        if b.spectrum is not None:
            yield "from_spectrum", _spectrum_half(b, b.read)

    @staticmethod
    def proxy(name, kinds, z, input_size):
        return _spectrum_proxy(z["n_in"], kinds, z)


def deployed_taps(z: dict, input_size) -> list[Tensor]:
    """Per axis, (D,): the deployed convolution's taps, the kernel's (straight-through) where
    they are the kernel's, else the fixed 2 R - 1 of a folded resolution mask."""
    out = []
    for a, taps in enumerate(z["taps"]):
        kernel = [2 * max(0, round((float(t) - 1) / 2)) + 1 for t in taps.detach().tolist()]
        folded = torch.tensor([d[a] != k for d, k in zip(z["conv_taps"], kernel)],
                              device=taps.device)
        fixed = torch.tensor([float(d[a]) for d in z["conv_taps"]], dtype=taps.dtype,
                             device=taps.device)
        out.append(torch.where(folded, fixed, taps))
    return out


class Conv(BlockOp):
    """The depthwise 'same' convolution of n_in channels at the resolution with the deployed
    kernel's taps, as its tactic (:func:`~dnarch_deploy.operators.conv_macs`)."""

    name = "conv"

    @staticmethod
    def lower(b):
        macs = conv_macs(b.tactic, b.n_in, b.resolution, b.taps, b.period)
        yield "conv", Operator(f"conv.{b.tactic}", macs, b.n_in, b.positions, math.prod(b.taps))

    @staticmethod
    def proxy(name, kinds, z, input_size):
        """C R prod(taps) for a direct convolution, C N log2 N for the FFT forms."""
        res, r = z["resolution"], math.prod(z["resolution"])
        taps = deployed_taps(z, input_size)
        n = math.prod(rr + (t - 1) / 2 for rr, t in zip(res, taps)).clamp_min(2.0)
        direct = z["n_in"] * r * math.prod(taps)
        direct_kind = _is(kinds, "conv.direct", r.device)
        return torch.where(direct_kind, direct, z["n_in"] * n * torch.log2(n))


class Linear1(BlockOp):
    """The first pointwise linear map (the norm folded in), ``columns`` x n_mid."""

    name = "linear1"

    @staticmethod
    def lower(b):
        r, width = b.positions, b.columns * b.n_mid
        yield "linear1", Operator("linear", float(r * b.columns * b.n_mid), width, r, 1)

    @staticmethod
    def proxy(name, kinds, z, input_size):
        return math.prod(z["resolution"]) * z["n_in"] * z["n_mid"]


class Bias1(BlockOp):
    """linear1's per-position bias, an Add: the folded norm's shift carried through the
    convolution."""

    name = "bias1"

    @staticmethod
    def lower(b):
        yield "bias1", Operator("add", float(b.positions * b.n_mid))

    @staticmethod
    def proxy(name, kinds, z, input_size):
        return math.prod(z["resolution"]) * z["n_mid"]


class Gelu(BlockOp):
    name = "gelu"

    @staticmethod
    def lower(b):
        yield "gelu", Operator("pointwise", float(b.positions * b.n_mid))

    proxy = staticmethod(Bias1.proxy)  # one op per position and channel, as the bias's


class Linear2(BlockOp):
    name = "linear2"

    @staticmethod
    def lower(b):
        r = b.positions
        yield "linear2", Operator("linear", float(r * b.n_mid * b.n_out), b.n_mid * b.n_out, r, 1)

    @staticmethod
    def proxy(name, kinds, z, input_size):
        return math.prod(z["resolution"]) * z["n_mid"] * z["n_out"]


class Up(BlockOp):
    """Per axis whose resolution is not the input's, the n_out channels resampled back."""

    name, per_axis = "up", True
    proxy = staticmethod(_resample_proxy)

    @staticmethod
    def lower(b):
        if b.spectrum is not None:
            return
        for a, (n, size) in enumerate(zip(b.resolution, b.input_size)):
            if n != size:
                form = b.forms["up"][a]
                lines = b.n_out * math.prod(b.shape) // b.shape[a]
                yield f"up{a}", Operator(f"resample.{form}",
                                         float(lines * resample_macs(form, n, size)))
                b.shape[a] = size


class ToSpectrum(BlockOp):
    """The stream as its spectrum: the n_out channels' R samples to the block's bins."""

    name = "to_spectrum"

    @staticmethod
    def lower(b):
        if b.spectrum is not None:
            yield "to_spectrum", _spectrum_half(b, b.n_out)

    @staticmethod
    def proxy(name, kinds, z, input_size):
        return _spectrum_proxy(z["n_out"], kinds, z)


class Residual(BlockOp):
    """The residual Add, over the stream's values (the L samples, or 2 K as its spectrum)."""

    name = "residual"

    @staticmethod
    def lower(b):
        yield "residual", Operator("add", float(b.values * b.n_out))

    @staticmethod
    def proxy(name, kinds, z, input_size):
        return math.prod(_floats(input_size)) * z["n_out"]


class Write(BlockOp):
    """Where n_out is fewer than the stream's channels, two Slices and a Concat: the whole
    stream copied."""

    name = "write"

    @staticmethod
    def lower(b):
        if b.n_out < b.stream:
            yield "write", Operator("copy", float(b.values * b.stream))

    @staticmethod
    def proxy(name, kinds, z, input_size):
        return math.prod(_floats(input_size)) * z["stream"] * torch.ones_like(z["n_out"])


def declaration(name: str) -> type[BlockOp]:
    """The declaration of a block's operator ``name`` (``down0``: :class:`Down`'s)."""
    op = BLOCK_OPS.get(name)
    if op is None:
        op = BLOCK_OPS.get(name.rstrip("0123456789"))
        if op is None or not op.per_axis:
            raise KeyError(f"no block operator {name!r} is declared")
    return op


def proxy(name: str, kinds: list[str], z: dict, input_size) -> Tensor:
    """(D,): operator ``name``'s smooth formula (:class:`BlockOp`)."""
    return declaration(name).proxy(name, kinds, z, input_size)


def operator_axis(name: str) -> int | None:
    """The axis a block's operator resamples (``down<a>``, ``up<a>``; a spectral half: the one
    axis), else None."""
    op = declaration(name)
    if op.per_axis:
        return int(name[len(op.name):])
    return 0 if op in (FromSpectrum, ToSpectrum) else None


def block_operators(input_size: tuple[int, ...], resolution: tuple[int, ...], n_in: int,
                    n_mid: int, n_out: int, conv_taps: tuple[int, ...],
                    cropped: tuple[bool, ...], *, stream: int,
                    conv_fft: tuple[int, ...] | None = None, tactic: str | None = None,
                    resample: dict[str, Sequence[str]] | None = None,
                    spectrum: int | None = None, read_wider: bool = True,
                    ) -> dict[str, Operator]:
    """The operators one block lowers to, by name in the order they run (:data:`BLOCK_OPS`):
    ``read``, ``down<a>`` per cropped axis a, ``conv``, ``linear1``, ``bias1``, ``gelu``,
    ``linear2``, ``up<a>`` per axis whose resolution is not the input's, ``residual``,
    ``write`` (each class's docstring says when it is there and what it counts).

    ``conv_taps``: the deployed kernel's; ``conv_fft``: the training's FFT lengths of a block
    whose resolution mask filters its spectrum, run circularly at :func:`conv_period` by the
    MatMul FFT forms (a period itself may be given: it is its own :func:`conv_period`).
    Export's choices, by cost where not given: ``tactic`` the convolution's
    (:func:`~dnarch_deploy.operators.conv_by_cost`); ``resample`` per direction (``down``,
    ``up``) the form of each resampled axis in axis order
    (:func:`~dnarch_deploy.operators.cheapest_resample`); ``spectrum`` K, the stream carried as
    its first K bins (module docstring: ``from_spectrum`` and ``to_spectrum`` instead of the
    per-axis resampling); ``read_wider`` off: a direct convolution's padding not read from the
    stream (n_in channels read, n_in columns). Element-wise and copying operators count one MAC
    per element of their result: on small inputs onnxruntime's per-node cost, not their
    arithmetic, is what they add (``benchmarks/latency_prediction.py``)."""
    period = conv_period(resolution, conv_taps, conv_fft) if conv_fft else None
    if tactic is None:
        tactic = conv_by_cost(n_in, resolution, conv_taps, period)
    if spectrum is not None and (len(input_size) != 1 or not all(cropped)):
        raise ValueError("the stream is carried as its spectrum only where every block of a "
                         "1-D network crops")
    axes = {"down": [a for a, crop in enumerate(cropped) if crop],
            "up": [a for a, (r, s) in enumerate(zip(resolution, input_size)) if r != s]}
    pairs = {"down": lambda a: (input_size[a], resolution[a]),
             "up": lambda a: (resolution[a], input_size[a])}
    if spectrum is not None:  # no per-axis resampling
        forms = {k: {} for k in axes}
    elif resample is None:
        forms = {k: {a: cheapest_resample(*pairs[k](a)) for a in axes[k]} for k in axes}
    else:
        forms = {k: dict(zip(axes[k], resample[k], strict=True)) for k in axes}
    block = Block(tuple(input_size), tuple(resolution), n_in, n_mid, n_out, tuple(conv_taps),
                  tuple(cropped), stream, period, tactic, forms, spectrum, read_wider)
    return {name: op for declared in BLOCK_OPS.values() for name, op in declared.lower(block)}


class SpectrumStream(NamedTuple):
    """The stream carried as its spectrum, outside the blocks (:func:`spectrum_stream`)."""

    encoder: dict[str, Operator]  # after the encoder's GELU
    decoder: dict[str, Operator]  # before the pooling
    pooled: int  # the positions the decoder's pooling reads per channel


def spectrum_stream(length: int, stream: int, bins: int, positions: bool) -> SpectrumStream:
    """The stream's first ``bins`` DFT bins carried instead of its ``length`` samples: the
    encoder's output transformed once (``to_spectrum``); the decoder's mean read from DC (one
    value per channel pooled), or, where it pools by the maximum too (``positions``), the
    positions back: the bins' change (``change``, 2 K values), transformed back
    (``from_spectrum``) and added to the encoder's output (``restore``; L pooled)."""
    half = Operator(f"resample.{spectrum_form(length, bins)[0]}",
                    float(stream * spectrum_macs(length, bins)))
    decoder = {}
    if positions:
        decoder = {"change": Operator("add", float(2 * bins * stream)), "from_spectrum": half,
                   "restore": Operator("add", float(length * stream))}
    return SpectrumStream({"to_spectrum": half}, decoder, length if positions else 1)
