"""The DNArch Continuous CNN (paper §2.4).

    x (B, C_in, *S) --normalise--> Encoder: pointwise C_in -> stream, BatchNorm, GELU
      --> blocks b = 0 .. depth-1, each:
            stream[:, :n_in] -> BatchNorm * m_in -> downsample to R (resolution mask on the spectrum
              of each axis it crops; an axis it does not crop stays untouched at full length)
            -> depthwise conv with kernel K (from the shared KernelNet, Gaussian mask)
            -> pointwise n_in -> n_mid, * m_mid -> GELU -> dropout
            -> pointwise n_mid -> n_out, * m_out * depth weight -> upsample to S
               (block_output="gelu": no second pointwise; n_out = n_mid, and m_mid * depth
               weight scale the GELU's input)
            -> added to stream[:, :n_out]        (the identity branch is never masked)
      --> Decoder: global average (and max) pool + linear (classification), or pointwise (dense)

Maximum sizes are instantiated; the masks choose the part in use and only that part is computed
(paper §2.1.1): each forward first draws a :class:`Plan` (discrete sizes and mask values), then
slices weights, kernels and activations to it. Every mask value is folded into a neighbouring weight
(BatchNorm affine, pointwise rows), so masks cost nothing per position and fold exactly at export.
The base CCNN (``learn="none"``) is the same network with no masks: global kernels, full resolution.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from . import masks as M
from .architecture import BLOCK_OUTPUTS
from .kernelnet import KernelNet
from .operators import block_operators
from .spectral import (
    conv_fft_sizes,
    fft_conv,
    folded_taps,
    frequency_positions,
    masked_taps,
    resample,
    resolution_for_bins,
    spectrum_positions,
)

LEARNABLE = "KRWD"  # K: kernel size, R: resolution, W: width, D: depth
INPUT_NORMS = ("dataset", "sample")
# The global decoder's pooling over positions: the reductions whose outputs the linear head reads,
# one weight matrix each.
POOLINGS = {"avg": ("mean",), "avgmax": ("mean", "max")}
# When a block crops an axis (ModelConfig.crop): "bin", from the first frequency bin below the
# resolution mask's threshold (the paper's rule); "pays", only at resolutions where the cropped
# block costs fewer deployed MACs than at full resolution (:func:`crop_limit`).
CROP_RULES = ("bin", "pays")
# The kernel floor (ModelConfig.kernel_floor) stays below the longest kernel, so that the kernel
# size is still searched and every kernel between floor and global can be loaded back.
MAX_KERNEL_FLOOR = 0.5
# Where a block's BatchNorm sits (ModelConfig.block_norm): on the branch's input (pre-norm, the
# paper's CCNN) or on the output of the first pointwise mixing (after the convolution).
BLOCK_NORMS = ("input", "mix")
# A sample channel whose std is below this share of the training set's is treated as constant
# (ModelConfig.sample_floor). Low enough to keep quiet samples: PLAID's per-sample stds span
# 1.3e-6 to 5 times the set's, and at 1e-3 its 43% quietest training series reached the network
# nearly flat.
SAMPLE_NORM_FLOOR = 1e-6


def canonical_learn(learn: str) -> str:
    """``learn`` as the model keeps it: the components in KRWD order, or "none". A ValueError
    names the problem, beginning with "learn" (the search prefixes "--" to name its flag)."""
    if learn.lower() == "none":
        return "none"
    if len(set(learn.upper())) != len(learn):
        raise ValueError(f"learn names a component twice: {learn!r}")
    if not learn or any(c not in LEARNABLE for c in learn.upper()):
        raise ValueError(f"learn must be a subset of K,R,W,D or 'none', got {learn!r}")
    return "".join(c for c in LEARNABLE if c in learn.upper())


def standardise(x: Tensor, eps: Tensor) -> Tensor:
    """(B, C, *S) -> each sample's channels at mean 0 and variance 1 over their positions;
    ``eps`` (C,) is added to the variance (input_norm="sample")."""
    dims = tuple(range(2, x.dim()))
    centred = x - x.mean(dims, keepdim=True)
    var = (centred * centred).mean(dims, keepdim=True)
    return centred / torch.sqrt(var + eps.view(1, -1, *([1] * len(dims))))


def pool(h: Tensor, reductions: list[str]) -> list[Tensor]:
    """(B, s, *S) -> one (B, s) tensor per reduction over the positions: "mean" or "max"."""
    h = h.flatten(2)
    return [h.mean(-1) if r == "mean" else h.amax(-1) for r in reductions]


def linear_head(pooled: list[Tensor], weight: Tensor, bias: Tensor,
                weight_max: Tensor | None = None) -> Tensor:
    """The global decoder's linear head on :func:`pool`'s (mean[, max]): (B, classes). The
    maximum has weights of its own, ``weight_max``."""
    y = F.linear(pooled[0], weight, bias)
    if len(pooled) > 1:
        y = y + F.linear(pooled[1], weight_max)
    return y


# Sane limits, checked before anything is allocated (the paper's largest base network is
# CCNN_{6,380}; the search instantiates up to 2D blocks of 2H channels). A 10^9-class head or a
# width of 5000 would otherwise fail deep inside the allocator.
MAX_WIDTH = 1024  # H
MAX_DEPTH = 32  # D
MAX_CLASSES = 10_000  # classification outputs


@dataclass
class ModelConfig:
    in_channels: int  # input channels (token tasks: the embedding size)
    out_channels: int  # classes, or target channels for dense tasks
    input_size: tuple[int, ...]  # spatial size S (1 or 2 axes), fixed per run
    dense: bool = False  # per-position output (dense) instead of one per input (global)
    vocab_size: int = 0  # > 0: inputs are token ids (B, *S) embedded to in_channels
    depth: int = 4  # D of the base network CCNN_{D,H}
    width: int = 32  # H of the base network
    learn: str = "KRWD"  # any subset of "KRWD", or "none" for the fixed base CCNN
    dropout: float = 0.0
    omega_0: float = 5.0  # frequency prior of the kernel network's Fourier features
    # Learned kernel sizes start global on axes up to this many taps and at this size, centred,
    # on longer ones (0: global everywhere, the default). The paper initialises kernel masks
    # "small or global" (sigma in [0.0325, 0.5]). In tuning runs (3 seeds) local starts of 149
    # taps tied global ones within the seed spread on ACSF1 and ArrowHead and lost on OSULeaf
    # and PLAID (one seed), so the default stays global.
    initial_kernel: int = 0
    # The shortest learned kernel, as a share of the longest (masks.floor_half_taps; at least 3
    # taps, the only floor at 0, the default). Budgeted searches cut some blocks to 3 of 251
    # taps (ArrowHead); floors of 1/16 and 1/8 stopped that and the stalled restarts there, but
    # the accuracies tied (OSULeaf at 0.25 with 1/16 just behind), and unbudgeted, 1/8 cost ACSF1
    # a seed (0.82 -> 0.74), so the default stays 0 (docs/benchmark_record.md "A kernel floor").
    kernel_floor: float = 0.0
    kernel_hidden: int = 128
    kernel_layers: int = 4
    tau_resolution: float = 50.0  # sigmoid temperatures (appendix E)
    # 50, the paper's other tuning value (appendix E: {25, 50}; 50 for CIFAR10 on CCNN_{6,380}):
    # a sharper edge keeps the initial network closer to the base one (at 25 the last ~5 channels
    # of each layer start at mask values 0.64-0.14); minimum width 5% of 2H instead of 10%.
    tau_width: float = 50.0
    tau_depth: float = 8.0
    threshold: float = M.THRESHOLD
    # "dataset": (x - input_mean) / input_std; "sample": each sample's channels standardised over
    # their own positions (see standardise), for data whose scale varies from sample to sample
    input_norm: str = "dataset"
    sample_floor: float = SAMPLE_NORM_FLOOR  # input_norm="sample": see SAMPLE_NORM_FLOOR
    # Global decoders: "avgmax" reads the mean and the maximum of every stream channel over the
    # positions, "avg" the mean only (the paper's CCNN). The maximum says whether a pattern occurs
    # anywhere, which a mean of a long sequence dilutes. On the 8 bundled UCR/UEA sets (3 seeds,
    # benchmarks/ucr_quality.py) the default search's mean went 0.802 -> 0.858 (PLAID 0.58 ->
    # 0.81); ItalyPowerDemand (24 samples a series) lost 0.953 -> 0.935.
    pool: str = "avgmax"
    # Where each block's BatchNorm sits (BLOCK_NORMS): "input" normalises the branch's input (the
    # paper's pre-norm); "mix" the first pointwise mixing's output, as a plain CNN normalises each
    # convolution's. Free-weight residual CNNs gained 0.07 on OSULeaf and ArrowHead from "mix"
    # (benchmarks/cnn_ablation.py); the default search (3 seeds) gained 0.03 on OSULeaf and lost
    # 0.05 on ArrowHead and 0.01 on GunPoint, so the default stays the paper's.
    block_norm: str = "input"
    # What each block adds to the stream (BLOCK_OUTPUTS). "gelu" drops the second pointwise
    # mixing: half a block's pointwise MACs. Against block_norm "mix" with the second mixing (3
    # seeds, 7 bundled sets) the default search with it tied on six sets and lost OSULeaf 0.04;
    # its networks had 0.65-0.94 of the MACs but not less time on the whole (other architectures
    # and tactics; benchmarks/results/ucr_quality_block_output_gelu.md), so the default stays.
    block_output: str = "pointwise"
    crop: str = "bin"  # CROP_RULES
    input_mean: list[float] = field(default_factory=list)  # per input channel; empty = 0
    input_std: list[float] = field(default_factory=list)  # per input channel; empty = 1
    output_mean: list[float] = field(default_factory=list)  # dense targets; empty = 0
    output_std: list[float] = field(default_factory=list)  # dense targets; empty = 1

    def __post_init__(self):
        self.input_size = tuple(int(s) for s in self.input_size)
        self.learn = canonical_learn(self.learn)
        if len(self.input_size) not in (1, 2) or min(self.input_size) < 1:
            raise ValueError(f"input_size must have 1 or 2 positive axes, got {self.input_size}")
        for name in ("in_channels", "out_channels", "depth", "width"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        limits = {"width": MAX_WIDTH, "depth": MAX_DEPTH, "out_channels": MAX_CLASSES}
        for name, limit in limits.items():
            if getattr(self, name) > limit:
                raise ValueError(f"{name} must be <= {limit}, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.initial_kernel != 0 and (self.initial_kernel < 3 or self.initial_kernel % 2 == 0):
            raise ValueError(f"initial_kernel must be 0 (global) or an odd number >= 3, "
                             f"got {self.initial_kernel}")
        if not 0.0 <= self.kernel_floor <= MAX_KERNEL_FLOOR:
            raise ValueError(f"kernel_floor must be in [0, {MAX_KERNEL_FLOOR}] (a share of the "
                             f"longest kernel), got {self.kernel_floor}")
        if not self.sample_floor > 0:
            raise ValueError(f"sample_floor must be > 0, got {self.sample_floor}")
        if self.input_norm not in INPUT_NORMS:
            raise ValueError(f"input_norm must be one of {INPUT_NORMS}, got {self.input_norm!r}")
        if self.pool not in POOLINGS:
            raise ValueError(f"pool must be one of {tuple(POOLINGS)}, got {self.pool!r}")
        if self.block_norm not in BLOCK_NORMS:
            raise ValueError(f"block_norm must be one of {BLOCK_NORMS}, got {self.block_norm!r}")
        if self.block_output not in BLOCK_OUTPUTS:
            raise ValueError(f"block_output must be one of {BLOCK_OUTPUTS}, "
                             f"got {self.block_output!r}")
        if self.block_output == "gelu" and self.block_norm != "mix":
            raise ValueError("block_output 'gelu' needs block_norm 'mix' (the GELU's input is "
                             f"the normalised first mixing), got block_norm {self.block_norm!r}")
        if self.crop not in CROP_RULES:
            raise ValueError(f"crop must be one of {CROP_RULES}, got {self.crop!r}")

    def learns(self, what: str) -> bool:
        return what in self.learn

    @property
    def max_depth(self) -> int:
        return 2 * self.depth if self.learns("D") else self.depth

    @property
    def max_width(self) -> int:
        return 2 * self.width if self.learns("W") else self.width

    @property
    def second_mixing(self) -> bool:
        """Whether each block ends on a second pointwise mixing (block_output "pointwise")."""
        return self.block_output == "pointwise"

    @property
    def pooling(self) -> tuple[str, ...]:
        """The decoder's reductions over positions, in the order the head reads them (none for
        a dense decoder)."""
        return () if self.dense else POOLINGS[self.pool]

    @property
    def max_kernel(self) -> tuple[int, ...]:
        """Largest odd kernel that fits the input, per axis (centred, "up to the input size")."""
        return tuple(s if s % 2 else s - 1 for s in self.input_size)

    @property
    def initial_kernel_size(self) -> tuple[int, ...]:
        """The kernel size per axis at initialisation: max_kernel, capped at initial_kernel
        (never under the kernel floor) where the kernel size is learned."""
        if not (self.learns("K") and self.initial_kernel):
            return self.max_kernel
        floors = (2 * M.floor_half_taps(k, self.kernel_floor) + 1 for k in self.max_kernel)
        return tuple(min(k, max(self.initial_kernel, f)) for k, f in zip(self.max_kernel, floors))

    def kernel_sigma_range(self, axis: int) -> tuple[float, float]:
        """The kernel mask's sigma range on ``axis`` (appendix E, with kernel_floor)."""
        return M.gaussian_sigma_range(self.max_kernel[axis], self.threshold, self.kernel_floor)

    def widest_half_taps(self, resolution: tuple[int, ...]) -> tuple[int, ...]:
        """Per axis, the half-width of the global kernel at ``resolution``: the widest kernel a
        block computing there can have."""
        return tuple(min(M.gaussian_half_taps(1.0, k, r / s), (r - 1) // 2)
                     for k, r, s in zip(self.max_kernel, resolution, self.input_size))

    def conv_fft(self, resolution: tuple[int, ...], cropped: tuple[bool, ...]
                 ) -> tuple[int, ...] | None:
        """The FFT lengths per axis of a block's convolution whose spectrum the resolution mask
        filters (on the axes it does not crop): those of the widest kernel at ``resolution``,
        whatever the kernel mask keeps; None when R is fixed or every axis is cropped."""
        if not self.learns("R") or all(cropped):
            return None
        return tuple(conv_fft_sizes(resolution, [2 * h + 1 for h in self.widest_half_taps(
            resolution)]))

    def crop_limits(self) -> tuple[int, ...]:
        """Per axis, the largest resolution a block crops it to: with crop="bin" the input's own
        (a long axis's first crops round up to a fast length, which may be the input's: there
        the block resamples to the same length, filtering by the mask); with "pays",
        :func:`crop_limit` (0: cropping never pays there)."""
        if self.crop == "bin":
            return self.input_size
        return tuple(crop_limit(self.input_size, a, self.width, self.second_mixing)
                     for a in range(len(self.input_size)))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_size"] = list(self.input_size)
        return d


def kernel_energy(kernels: list[Tensor]) -> Tensor:
    """The squared norm of each channel's sampled, masked kernel, averaged over a block's
    channels and summed over the blocks, in float32 (under autocast the kernel network's output
    is bfloat16): ``kernels`` as :meth:`DNArch.kernels` gives them, (n_in, *taps) per block.
    A penalty modelled on the reference CCNN's, which adds the plain L2 norm of each whole
    kernel tensor (and of every other weight)."""
    if not kernels:
        return torch.zeros(())
    # summed in block order, one block after the other (a stack's sum differs in the last bit,
    # and the benchmark runs were trained with this order)
    return sum(k.float().flatten(1).square().sum(1).mean() for k in kernels)


def block_macs(input_size: tuple[int, ...], resolution: tuple[int, ...], width: int,
               second_mixing: bool = True) -> float:
    """The deployed MACs per sample (:func:`~dnarch_deploy.operators.block_operators`) of a block
    of ``width`` channels with R learned and a global kernel, at ``resolution``: cropped on the
    axes where it is below ``input_size``, elsewhere running the resolution mask folded into its
    kernel."""
    config = ModelConfig(1, 1, input_size, width=width, learn="R")
    cropped = tuple(r < s for r, s in zip(resolution, input_size))
    taps = folded_taps(resolution, [2 * h + 1 for h in config.widest_half_taps(resolution)],
                       cropped, learned=True)
    ops = block_operators(input_size, resolution, width, width, width, taps, cropped,
                          stream=width, conv_fft=config.conv_fft(resolution, cropped),
                          second_mixing=second_mixing)
    return sum(op.macs for op in ops.values())


@functools.cache
def crop_limit(input_size: tuple[int, ...], axis: int, width: int,
               second_mixing: bool = True) -> int:
    """The largest resolution of ``axis`` at which a block cropped there (the other axes at full
    size) costs fewer deployed MACs than at full resolution (:func:`block_macs`); 0 where no crop
    pays. Only the resolutions a mask can give are tried
    (:func:`~dnarch_deploy.spectral.resolution_for_bins`). In 1-D a crop adds two dense (n x R)
    resamplings per channel, and pays only from about a quarter to two fifths of the input down
    (``benchmarks/init_cost.py``)."""
    full, n = block_macs(input_size, input_size, width, second_mixing), input_size[axis]
    for bins in range(n // 2, 0, -1):  # resolutions from the largest crop down
        r = resolution_for_bins(bins, n)
        if r < n and block_macs(input_size, input_size[:axis] + (r,) + input_size[axis + 1:],
                                width, second_mixing) < full:
            return r
    return 0


@dataclass
class BlockPlan:
    """What one block materialises this step: discrete sizes and the mask values on the support."""

    index: int
    n_in: int
    n_mid: int
    n_out: int
    resolution: tuple[int, ...]  # samples per axis at which the block computes
    half_taps: tuple[int, ...]  # kernel half-width per axis, at that resolution
    kernel_size: tuple[int, ...]  # kernel extent per axis in input samples (full resolution)
    depth_weight: Tensor | None  # scalar, None when depth is fixed
    # (3, max width): the n_in, n_mid and n_out width masks' values on every channel (zero past
    # each support; the block uses the first n_in, n_mid, n_out); None when width is fixed
    width_masks: Tensor | None = None
    # per axis, the resolution mask on the kept frequency bins; None on an axis it does not crop,
    # and None for the block when it crops no axis
    m_res: tuple[Tensor | None, ...] | None = None
    # the resolution mask on the axes it does not crop, evaluated on the convolution's own
    # spectrum (a product over those axes, broadcastable to the kernel's rfftn spectrum); None
    # when R is fixed or every axis is cropped (paper eq. 9: the mask is always in the loss)
    conv_mask: Tensor | None = None
    # with conv_mask: the convolution's FFT length per axis, that of the largest kernel the block
    # can have at its resolution, so the masked function does not change with the kernel's taps
    conv_fft: tuple[int, ...] | None = None
    sigma: Tensor | None = None  # (axes,) Gaussian kernel-mask widths, None when K is fixed

    @property
    def cropped(self) -> tuple[bool, ...]:
        """Per axis, whether the resolution mask crops it (the block downsamples there)."""
        if self.m_res is None:
            return (False,) * len(self.resolution)
        return tuple(m is not None for m in self.m_res)

    @property
    def conv_taps(self) -> tuple[int, ...]:
        """Per axis, the taps of the convolution export deploys: the kernel's, or with the
        resolution mask folded in (``conv_mask``), 2 R - 1 on the axes it filters."""
        taps = tuple(2 * h + 1 for h in self.half_taps)
        if self.conv_mask is None:
            return taps
        return masked_taps(self.resolution, taps, self.conv_mask)


@dataclass
class Plan:
    stream: int  # channels of the stream in use (widest channel any block reads or writes)
    blocks: list[BlockPlan]
    stream_mask: Tensor | None = None  # only in the full (reference) computation


def _pointwise(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """A 1x1 convolution on (B, C, *S) as one batched matmul: (B, out, *S). The weight is
    expanded over the batch, not copied: with a weight that takes a gradient, torch.matmul's
    (out, C) @ (B, C, P) copies x transposed to fold the batch into one product; on CPU it took
    1.4-1.9x as long forward + backward, and the default search's whole training step 1.08-1.11x
    on GunPoint (150 samples), 1.19x on ACSF1 (1460), with the same values
    (``benchmarks/pointwise_forms.py``)."""
    y = torch.bmm(weight.expand(x.shape[0], -1, -1), x.flatten(2))
    if bias is not None:
        y = y + bias[:, None]
    return y.view(x.shape[0], weight.shape[0], *x.shape[2:])


class Norm(nn.Module):
    """BatchNorm over the first n channels with externally scaled affine parameters.

    The search uses batch statistics (paper appendix E); export calibrates population statistics
    for the final architecture (``calibrated`` buffer) and then uses them in eval mode.
    """

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.register_buffer("calibrated", torch.tensor(False))
        self.sync = False  # all-reduce batch statistics across ranks (distributed search)

    def forward(self, x: Tensor, *, weight: Tensor | None = None,
                bias: Tensor | None = None) -> Tensor:
        """``weight``, ``bias``: the affine part to use instead of the module's first n (a block
        passes its own with the width mask folded in; keyword-only, so that forward hooks see
        the input alone)."""
        n = x.shape[1]
        if weight is None:
            weight, bias = self.weight[:n], self.bias[:n]
        population = bool(self.calibrated) and not self.training
        if self.training and self.sync and dist.is_available() and dist.is_initialized():
            return _synced_batch_norm(x, weight, bias, self.eps)
        mean = self.running_mean[:n] if population else None
        var = self.running_var[:n] if population else None
        return F.batch_norm(x, mean, var, weight, bias, not population, 0.0, self.eps)


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks; the gradient of a sum over ranks is the sum of the ranks' gradients."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def _synced_batch_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """Batch statistics over the global batch of all ranks (differentiable all-reduce), so that
    N processes with B/N samples each normalise exactly as one process with B samples."""
    dims = [0, *range(2, x.dim())]
    count = x.new_tensor([x.numel() / x.shape[1]])
    stats = _AllReduceSum.apply(torch.cat([x.sum(dims), (x * x).sum(dims), count]))
    c = x.shape[1]
    mean = stats[:c] / stats[-1]
    var = stats[c : 2 * c] / stats[-1] - mean * mean
    shape = (1, -1) + (1,) * (x.dim() - 2)
    scale = weight * torch.rsqrt(var + eps)
    return x * scale.view(shape) + (bias - mean * scale).view(shape)


class Block(nn.Module):
    """A residual block; masks act on the residual branch only. Its BatchNorm normalises the
    branch's input or the output of its first mixing (``norm_at``)."""

    def __init__(self, width: int, dropout: float, norm_at: str = "input",
                 second_mixing: bool = True):
        super().__init__()
        self.norm = Norm(width)
        self.norm_at = norm_at  # ModelConfig.block_norm
        self.second_mixing = second_mixing  # ModelConfig.block_output "pointwise"
        self.w1 = nn.Parameter(torch.empty(width, width))  # n_in -> n_mid
        self.b1 = nn.Parameter(torch.zeros(width))
        self.b1.requires_grad_(norm_at != "mix")  # unused there: no gradient, no decay
        self.w2 = nn.Parameter(torch.empty(width, width))  # n_mid -> n_out
        self.b2 = nn.Parameter(torch.zeros(width))
        for w in (self.w2, self.b2):  # without the second mixing: unused, neither moved nor decayed
            w.requires_grad_(second_mixing)
        self.dropout = dropout
        for w in (self.w1, self.w2):
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))

    def forward(self, x: Tensor, p: BlockPlan, kernel: Tensor) -> Tensor:
        size = x.shape[2:]
        norm_w, norm_b, w1, b1, w2, b2 = self.folded(p)
        z = x[:, : p.n_in]
        if p.n_in < x.shape[1]:  # BatchNorm's backward is several times slower on a strided view
            z = z.contiguous()
        if self.norm_at == "input":
            z = self.norm(z, weight=norm_w, bias=norm_b)  # (B, n_in, *S)
        if p.m_res is not None:
            for axis, (r, m) in enumerate(zip(p.resolution, p.m_res)):
                if m is not None:
                    z = resample(z, r, dim=2 + axis, mask=m)  # (B, n_in, *R)
        z = fft_conv(z, kernel, p.conv_mask, p.conv_fft)  # (B, n_in, *R)
        if self.norm_at == "mix":  # b1 would only shift what the norm centres
            z = self.norm(_pointwise(z, w1), weight=norm_w, bias=norm_b)  # (B, n_mid, *R)
        else:
            z = _pointwise(z, w1, b1)
        z = F.dropout(F.gelu(z), self.dropout, self.training)
        if self.second_mixing:
            z = _pointwise(z, w2, b2)  # (B, n_out, *R)
        for axis, s in enumerate(size):
            z = resample(z, s, dim=2 + axis)  # (B, n_out, *S)
        if p.n_out < x.shape[1]:  # the branch writes the first n_out channels of the stream
            z = F.pad(z, (0, 0) * len(size) + (0, x.shape[1] - p.n_out))
        return x + z

    def folded(self, p: BlockPlan) -> tuple[Tensor, ...]:
        """(norm weight, norm bias, w1, b1, w2, b2) sliced to the plan's sizes, with the width
        masks and the depth weight multiplied in: m_in into the norm's affine part, m_mid into
        the rows of w1, m_out * depth weight into the rows of w2. A norm after the mixing
        (``norm_at`` "mix") has n_mid channels: m_mid goes into its affine part, m_in into the
        columns of w1. Without the second mixing (``second_mixing`` False, norm after the
        mixing) the depth weight goes into the norm's affine part too, and w2, b2 are unused."""
        mix = self.norm_at == "mix"
        if p.width_masks is not None:
            folded = _FoldWidthMasks.apply(self.norm.weight, self.norm.bias, self.w1, self.b1,
                                           self.w2, self.b2, p.width_masks, p.depth_weight,
                                           (p.n_in, p.n_mid, p.n_out), mix)
        else:
            w2, b2 = self.w2[: p.n_out, : p.n_mid], self.b2[: p.n_out]
            if p.depth_weight is not None:
                w2, b2 = w2 * p.depth_weight, b2 * p.depth_weight
            n = p.n_mid if mix else p.n_in
            folded = (self.norm.weight[:n], self.norm.bias[:n],
                      self.w1[: p.n_mid, : p.n_in], self.b1[: p.n_mid], w2, b2)
        if self.second_mixing or p.depth_weight is None:
            return folded
        norm_w, norm_b, *rest = folded  # GELU(d y) is 0 at d = 0, as d W2 GELU(y) is
        return (norm_w * p.depth_weight, norm_b * p.depth_weight, *rest)


class _FoldWidthMasks(torch.autograd.Function):
    """:meth:`Block.folded` with width masks, as one autograd node.

    Slicing six parameters and three masks and multiplying them in costs ~25 tiny autograd nodes
    per block; on CPU their fixed per-node cost was ~5% of a small network's training step. The
    gradients are those of the slices and products written out: zero past each slice.
    """

    @staticmethod
    def forward(ctx, norm_w, norm_b, w1, b1, w2, b2, masks, depth_weight, sizes, mix):
        n_in, n_mid, n_out = sizes
        m_in, m_mid, m_out = masks[0, :n_in], masks[1, :n_mid], masks[2, :n_out]
        scale = m_out if depth_weight is None else m_out * depth_weight
        ctx.mix = mix
        ctx.save_for_backward(norm_w, norm_b, w1, b1, w2, b2, masks, depth_weight)
        w2, b2 = w2[:n_out, :n_mid] * scale[:, None], b2[:n_out] * scale
        if mix:  # the norm after w1: m_mid on its affine part, m_in on w1's columns
            return (norm_w[:n_mid] * m_mid, norm_b[:n_mid] * m_mid,
                    w1[:n_mid, :n_in] * m_in, b1[:n_mid].clone(), w2, b2)
        return (norm_w[:n_in] * m_in, norm_b[:n_in] * m_in,
                w1[:n_mid, :n_in] * m_mid[:, None], b1[:n_mid] * m_mid, w2, b2)

    @staticmethod
    def backward(ctx, g_norm_w, g_norm_b, g_w1, g_b1, g_w2, g_b2):
        # on the parameters' whole (H,) and (H, H) shapes: each incoming gradient padded with
        # zeros past its slice (nothing to pad at full width), so no saved tensor is sliced and
        # each mask's gradient is one whole row (at these sizes the count of operators is the
        # backward's cost)
        norm_w, norm_b, w1, b1, w2, b2, masks, depth_weight = ctx.saved_tensors
        H = masks.shape[1]

        def pad(grad: Tensor) -> Tensor:
            pads = [p for n in reversed(grad.shape) for p in (0, H - n)]
            return F.pad(grad, pads) if any(pads) else grad

        g_norm_w, g_norm_b, g_w1, g_b1, g_w2, g_b2 = map(
            pad, (g_norm_w, g_norm_b, g_w1, g_b1, g_w2, g_b2))
        m_in, m_mid, m_out = masks.unbind(0)
        scale = m_out if depth_weight is None else m_out * depth_weight
        g_scale = (g_w2 * w2).sum(1) + g_b2 * b2
        g_m_out = g_scale if depth_weight is None else g_scale * depth_weight
        g_depth = None if depth_weight is None else (g_scale * m_out).sum()
        g_w2, g_b2 = g_w2 * scale[:, None], g_b2 * scale
        if ctx.mix:
            g_masks = torch.stack([(g_w1 * w1).sum(0), g_norm_w * norm_w + g_norm_b * norm_b,
                                   g_m_out])
            return (g_norm_w * m_mid, g_norm_b * m_mid, g_w1 * m_in, g_b1,
                    g_w2, g_b2, g_masks, g_depth, None, None)
        g_masks = torch.stack([g_norm_w * norm_w + g_norm_b * norm_b,
                               (g_w1 * w1).sum(1) + g_b1 * b1, g_m_out])
        return (g_norm_w * m_in, g_norm_b * m_in, g_w1 * m_mid[:, None], g_b1 * m_mid,
                g_w2, g_b2, g_masks, g_depth, None, None)


class DNArch(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = self.config = config
        dim, H, D = len(c.input_size), c.max_width, c.max_depth
        self.embed = nn.Embedding(c.vocab_size, c.in_channels) if c.vocab_size else None
        self._norm_buffer("input", c.input_mean, c.input_std, c.in_channels)
        self._norm_buffer("output", c.output_mean, c.output_std, c.out_channels)
        self.enc_w = nn.Parameter(torch.empty(H, c.in_channels))  # no bias: BatchNorm follows
        nn.init.kaiming_uniform_(self.enc_w, a=math.sqrt(5))
        self.enc_norm = Norm(H)
        self.blocks = nn.ModuleList(Block(H, c.dropout, c.block_norm, c.second_mixing)
                                    for _ in range(D))
        self.kernel_net = KernelNet(dim, D, H, c.omega_0, c.kernel_hidden, c.kernel_layers)
        # fixed gain so that the initial kernel starts with unit-order output variance
        self.kernel_gain = 1.0 / math.sqrt(math.prod(c.initial_kernel_size))
        self.dec_w = nn.Parameter(torch.empty(c.out_channels, H))
        self.dec_b = nn.Parameter(torch.zeros(c.out_channels))
        nn.init.kaiming_uniform_(self.dec_w, a=math.sqrt(5))
        if "max" in c.pooling:  # the head's weights on the channels' maxima
            self.dec_w_max = nn.Parameter(torch.empty(c.out_channels, H))
            nn.init.kaiming_uniform_(self.dec_w_max, a=math.sqrt(5))
        # --- mask parameters (all named mask_*: their own optimiser group, clamped after each step)
        if c.learns("K"):
            sigma = [M.sigma_for_kernel(t, k, c.threshold, c.kernel_floor)
                     for t, k in zip(c.initial_kernel_size, c.max_kernel)]
            self.mask_sigma = nn.Parameter(torch.tensor([sigma] * D))
        if c.learns("R"):  # start at full resolution: the offset at its maximum
            self.mask_res = nn.Parameter(
                torch.full((D, dim), M.sigmoid_mu_range(c.tau_resolution)[1])
            )
        if c.learns("W"):  # start at the base width H (of H_max = 2H)
            mu = M.sigmoid_mu_for_size(c.width, c.tau_width, H, c.threshold)
            self.mask_width = nn.Parameter(torch.full((D, 3), mu))  # columns: in, mid, out
        if c.learns("D"):  # start at the base depth D (of D_max = 2D)
            self.mask_depth = nn.Parameter(
                torch.tensor(M.sigmoid_mu_for_size(c.depth, c.tau_depth, D, c.threshold))
            )

    def _norm_buffer(self, name: str, mean: list[float], std: list[float], channels: int):
        m = torch.tensor(mean, dtype=torch.float32) if mean else torch.zeros(channels)
        s = torch.tensor(std, dtype=torch.float32) if std else torch.ones(channels)
        if m.numel() != channels or s.numel() != channels:
            raise ValueError(f"{name} mean/std need {channels} values, got {m.numel()}/{s.numel()}")
        if (s <= 0).any():
            raise ValueError(f"{name}_std must be positive, got {s.tolist()}")
        self.register_buffer(f"{name}_mean", m)
        self.register_buffer(f"{name}_std", s)

    # --- masks -> plan -----------------------------------------------------------------------

    def width_offsets(self) -> Tensor:
        """The width masks' offsets per block, (max_depth, 3), columns n_in, n_mid, n_out:
        ``mask_width``, or without the second mixing its n_mid column for n_out too (the block
        adds its first mixing's channels; mask_width's own n_out column is then unused)."""
        mu = self.mask_width
        return mu if self.config.second_mixing else mu[:, [0, 1, 1]]

    def mask_parameters(self) -> list[nn.Parameter]:
        return [p for n, p in self.named_parameters() if n.startswith("mask_")]

    @torch.no_grad()
    def clamp_masks_(self) -> None:
        """Keep mask parameters in the ranges of appendix E (call after every optimiser step)."""
        c = self.config
        if c.learns("K"):
            for axis in range(len(c.max_kernel)):
                self.mask_sigma[:, axis].clamp_(*c.kernel_sigma_range(axis))
        for name, tau in (
            ("mask_res", c.tau_resolution),
            ("mask_width", c.tau_width),
            ("mask_depth", c.tau_depth),
        ):
            if hasattr(self, name):
                getattr(self, name).clamp_(*M.sigmoid_mu_range(tau))

    def plan(self, full: bool = False) -> Plan:
        """Discrete sizes and mask values for this step.

        ``full=True`` is the reference computation: every channel, block and kernel tap at its
        maximum, with the mask values (zero outside the support) multiplied in. The resolution is
        the same as in the sliced computation: there, cropping *is* the model.

        Each kind of mask is evaluated for all blocks at once (one tensor op, one host sync for
        its supports), so the training step's graph does not grow with the number of masks.
        """
        c = self.config
        H, D, T = c.max_width, c.max_depth, c.threshold
        depth, depth_weights = D, [None] * D
        if c.learns("D"):
            mu = self.mask_depth
            x_t = M.sigmoid_inverse(mu, c.tau_depth, T).item()
            depth = M.sigmoid_count(x_t, D)
            positions = M.grid(D, mu.device, mu.dtype)
            depth_weights = M.sigmoid_mask(positions, mu, c.tau_depth, T).unbind(0)
        widths, width_masks = [(H, H, H)] * D, [None] * D
        if c.learns("W"):  # columns: n_in, n_mid, n_out
            mu = self.width_offsets()
            x_t = M.sigmoid_inverse(mu, c.tau_width, T).detach().tolist()
            widths = [tuple(M.sigmoid_count(x, H) for x in row) for row in x_t]
            positions = M.grid(H, mu.device, mu.dtype)
            width_masks = M.sigmoid_mask(positions, mu[..., None], c.tau_width, T).unbind(0)
        resolutions, res_masks = self._resolutions()
        spectra = {}  # _conv_mask's (axis, FFT length): every block's mask on that spectrum
        x_k, sigmas = [[1.0] * len(c.input_size)] * D, [None] * D
        if c.learns("K"):
            x_k = M.gaussian_inverse(self.mask_sigma, T).detach().tolist()
            sigmas = self.mask_sigma.unbind(0)
        # the stream is as wide as the widest channel read or written by a block in use
        stream = max(max(w[0], w[2]) for w in widths[:depth]) if c.learns("W") else H
        blocks = []
        for b in range(D if full else depth):
            sizes = (H, H, H) if full else widths[b]
            resolution = resolutions[b]
            scales = [r / s for r, s in zip(resolution, c.input_size)]
            widest = c.widest_half_taps(resolution)
            half = widest if full else tuple(
                min(M.gaussian_half_taps(x, k, sc), h)
                for x, k, sc, h in zip(x_k[b], c.max_kernel, scales, widest)
            )
            conv_mask, conv_fft = self._conv_mask(b, resolution, res_masks[b], spectra)
            kernel_size = tuple(
                2 * M.gaussian_half_taps(x, k) + 1 for x, k in zip(x_k[b], c.max_kernel)
            )
            blocks.append(
                BlockPlan(
                    index=b,
                    n_in=sizes[0],
                    n_mid=sizes[1],
                    n_out=sizes[2],
                    resolution=resolution,
                    half_taps=half,
                    kernel_size=kernel_size,
                    depth_weight=depth_weights[b],
                    width_masks=width_masks[b],
                    m_res=res_masks[b],
                    conv_mask=conv_mask,
                    conv_fft=conv_fft,
                    sigma=sigmas[b],
                )
            )
        if full and c.learns("W"):
            stream_mask = (torch.arange(H, device=self.enc_w.device) < stream).to(self.enc_w)
            return Plan(stream=H, blocks=blocks, stream_mask=stream_mask)
        return Plan(stream=stream, blocks=blocks)

    def _resolutions(self) -> tuple[list[tuple[int, ...]], list[tuple[Tensor | None, ...] | None]]:
        """Per block: the resolution R (per axis) and the resolution mask's values on the
        R // 2 + 1 bins of each axis it crops (zero past its support).

        An axis whose mask support holds every bin is neither filtered nor resampled: the block
        computes there at full resolution, exactly like the base network (a block at full
        resolution costs no extra FFTs, and exports without a spectral filter). The resolution
        mask acts, and the task loss sees it, from the first cropped bin on.
        """
        c = self.config
        D, axes = c.max_depth, len(c.input_size)
        if not c.learns("R"):
            return [c.input_size] * D, [None] * D
        mu = self.mask_res  # (D, axes)
        x_t = M.sigmoid_inverse(mu, c.tau_resolution, c.threshold).detach().tolist()
        sizes = [list(c.input_size) for _ in range(D)]
        masks = [[None] * axes for _ in range(D)]
        limits = c.crop_limits()
        for axis, n in enumerate(c.input_size):
            positions = frequency_positions(n, device=mu.device, dtype=mu.dtype)
            values = None
            for b in range(D):
                bins = M.sigmoid_count(x_t[b][axis], positions.numel())
                r = resolution_for_bins(bins, n)
                if bins == positions.numel() or r > limits[axis]:
                    continue
                if values is None:  # (D, n // 2 + 1), once per axis
                    values = M.sigmoid_mask(positions, mu[:, axis, None], c.tau_resolution,
                                            c.threshold)
                sizes[b][axis] = r
                masks[b][axis] = values[b, : r // 2 + 1]  # bins past the support (to r // 2): 0
        return (
            [tuple(r) for r in sizes],
            [None if all(m is None for m in row) else tuple(row) for row in masks],
        )

    def _conv_mask(self, b: int, resolution: tuple[int, ...],
                   m_res: tuple[Tensor | None, ...] | None, spectra: dict
                   ) -> tuple[Tensor | None, tuple[int, ...] | None]:
        """Block b's resolution mask on the spectrum of its FFT convolution over the axes where
        it crops nothing, and that FFT's lengths (:meth:`ModelConfig.conv_fft`): what puts the
        mask in the task loss before its first bin is cropped (an element-wise product on the
        kernel's spectrum, no extra FFT). Cropped axes get 1: their mask acts in the
        downsampling. ``spectra`` caches, per (axis, FFT length), every block's mask values on
        that spectrum, (max_depth, bins), evaluated once for all blocks that share it."""
        c = self.config
        axes = len(c.input_size)
        cropped = (False,) * axes if m_res is None else tuple(m is not None for m in m_res)
        fft_sizes = c.conv_fft(resolution, cropped)
        if fft_sizes is None:
            return None, None
        mask = None
        for axis, (n, n_fft) in enumerate(zip(c.input_size, fft_sizes)):
            if m_res is not None and m_res[axis] is not None:
                continue
            if (axis, n_fft) not in spectra:
                mu = self.mask_res[:, axis, None]
                positions = spectrum_positions(n_fft, n, onesided=axis == axes - 1,
                                               device=mu.device, dtype=mu.dtype)
                spectra[axis, n_fft] = M.sigmoid_mask(positions, mu, c.tau_resolution,
                                                      c.threshold)
            values = spectra[axis, n_fft][b].view(*[-1 if a == axis else 1 for a in range(axes)])
            mask = values if mask is None else mask * values
        return mask, fft_sizes

    # --- kernels -------------------------------------------------------------------------------

    def kernels(self, plan: Plan) -> list[Tensor]:
        """Sample every block's kernel (n_in, *taps) in one pass of the shared kernel network,
        and (when K is learned) evaluate every block's Gaussian mask in one pass too."""
        c = self.config
        if not plan.blocks:
            return []
        grids, coords = [], []
        ref = self.enc_w
        for p in plan.blocks:
            axes = []
            for h, k, r, s in zip(p.half_taps, c.max_kernel, p.resolution, c.input_size):
                step = 2.0 / max(k - 1, 1) * (s / r)  # tap spacing in kernel coordinates
                axes.append(torch.arange(-h, h + 1, device=ref.device, dtype=ref.dtype) * step)
            mesh = torch.meshgrid(*axes, indexing="ij")
            grids.append([a.numel() for a in axes])
            coords.append(torch.stack([m.reshape(-1) for m in mesh], dim=-1))
        points = torch.cat(coords)  # (P, axes): every block's taps, one after the other
        hidden = self.kernel_net.features(points)
        masks = None
        if plan.blocks[0].sigma is not None:  # the Gaussian mask, a product over axes, per tap
            counts = torch.tensor([xy.shape[0] for xy in coords], device=ref.device)
            sigma = torch.stack([p.sigma for p in plan.blocks]).repeat_interleave(counts, dim=0)
            masks = M.gaussian_mask(points, sigma, c.threshold).prod(-1)  # (P,)
        out, start = [], 0
        for p, taps, xy in zip(plan.blocks, grids, coords):
            end = start + xy.shape[0]
            k = self.kernel_net.head(hidden[start:end], p.index, p.n_in) * self.kernel_gain
            if masks is not None:
                k = k * masks[start:end]
            out.append(k.view(p.n_in, *taps))  # (n_in, *taps)
            start = end
        return out

    # --- forward -------------------------------------------------------------------------------

    def forward(self, x: Tensor, full: bool = False) -> Tensor:
        plan = self.plan(full=full)
        return self.run(x, plan)

    def run(self, x: Tensor, plan: Plan, kernels: list[Tensor] | None = None) -> Tensor:
        """Forward pass for a given plan: (B, C_in, *S) -> (B, classes) or (B, C_out, *S).
        ``kernels``: the plan's kernels when the caller has them (:meth:`kernels`)."""
        h = self.trunk(x, plan, kernels)
        s = plan.stream
        if self.config.dense:
            y = _pointwise(h, self.dec_w[:, :s], self.dec_b)  # (B, C_out, *S)
            shape = (1, -1) + (1,) * (y.dim() - 2)
            return y * self.output_std.view(shape) + self.output_mean.view(shape)
        return self.head(self.pooled(h))

    def pooled(self, h: Tensor) -> list[Tensor]:
        """The global decoder's inputs: the trunk's output reduced over positions, one (B, s)
        tensor per reduction of ``config.pooling`` (the mean, then the maximum)."""
        return pool(h, self.config.pooling)

    def head(self, pooled: list[Tensor]) -> Tensor:
        """The global decoder's linear head on :meth:`pooled`'s reductions: (B, classes)."""
        s = pooled[0].shape[1]
        w_max = self.dec_w_max[:, :s] if len(pooled) > 1 else None
        return linear_head(pooled, self.dec_w[:, :s], self.dec_b, w_max)

    def trunk(self, x: Tensor, plan: Plan, kernels: list[Tensor] | None = None) -> Tensor:
        """Everything before the decoder: (B, C_in, *S) -> the stream after the last block,
        (B, plan.stream, *S)."""
        if self.embed is not None:
            x = self.embed(x).movedim(-1, 1)  # (B, *S) ids -> (B, C_in, *S)
        elif self.config.input_norm == "sample":
            x = standardise(x, self.sample_eps())
        else:
            shape = (1, -1) + (1,) * (x.dim() - 2)
            x = (x - self.input_mean.view(shape)) / self.input_std.view(shape)
        s = plan.stream
        h = F.gelu(self.enc_norm(_pointwise(x, self.enc_w[:s])))  # (B, s, *S)
        if plan.stream_mask is not None:
            h = h * plan.stream_mask.view(1, -1, *([1] * (h.dim() - 2)))
        if kernels is None:
            kernels = self.kernels(plan)
        for p, kernel in zip(plan.blocks, kernels, strict=True):
            h = self.blocks[p.index](h, p, kernel)
        return h

    def sample_eps(self) -> Tensor:
        """The variance floor of input_norm="sample": (sample_floor x the training set's
        channel std) squared."""
        return (self.config.sample_floor * self.input_std) ** 2

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"learn={c.learn}, input_size={c.input_size}, depth={c.depth}->{c.max_depth}, "
            f"width={c.width}->{c.max_width}"
        )
