"""The DNArch Continuous CNN (paper §2.4).

    x (B, C_in, *S) --normalise--> Encoder: pointwise C_in -> stream, BatchNorm, GELU
      --> blocks b = 0 .. depth-1, each:
            stream[:, :n_in] -> BatchNorm * m_in -> downsample to R (resolution mask on the spectrum
              of each axis it crops; an axis it does not crop stays untouched at full length)
            -> depthwise conv with kernel K (from the shared KernelNet, Gaussian mask)
            -> pointwise n_in -> n_mid, * m_mid -> GELU -> dropout
            -> pointwise n_mid -> n_out, * m_out * depth weight -> upsample to S
            -> added to stream[:, :n_out]        (the identity branch is never masked)
      --> Decoder: global average (and max) pool + linear (classification), or pointwise (dense)

Maximum sizes are instantiated; the masks choose the part in use and only that part is computed
(paper §2.1.1): each forward first draws a :class:`Plan` (discrete sizes and mask values), then
slices weights, kernels and activations to it. Every mask value is folded into a neighbouring weight
(BatchNorm affine, pointwise rows), so masks cost nothing per position and fold exactly at export.
The base CCNN (``learn="none"``) is the same network with no masks: global kernels, full resolution.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import crop as C
from . import masks as M
from .fold import FoldWidthMasks
from .kernelnet import KernelNet
from .norm import Norm
from .plan import BlockPlan, Plan, make_plan
from .spectral import fft_conv, resample

LEARNABLE = "KRWD"  # K: kernel size, R: resolution, W: width, D: depth
INPUT_NORMS = ("dataset", "sample")
# The global decoder's pooling over positions: the reductions whose outputs the linear head reads,
# one weight matrix each.
POOLINGS = {"avg": ("mean",), "avgmax": ("mean", "max")}
# When a block crops an axis (ModelConfig.crop): "bin", from the first frequency bin below the
# resolution mask's threshold (the paper's rule); "pays", only at resolutions where the cropped
# block costs fewer deployed MACs than at full resolution (:func:`crop_limit`).
CROP_RULES = ("bin", "pays")
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
    kernel_hidden: int = 128
    kernel_layers: int = 4
    # sigmoid temperatures (appendix E); 50 for width, the paper's other value, keeps the initial
    # network closer to the base one (docs/model.md)
    tau_resolution: float = 50.0
    tau_width: float = 50.0
    tau_depth: float = 8.0
    threshold: float = M.THRESHOLD
    # "dataset": (x - input_mean) / input_std; "sample": each sample's channels standardised over
    # their own positions (see standardise), for data whose scale varies from sample to sample
    input_norm: str = "dataset"
    sample_floor: float = SAMPLE_NORM_FLOOR  # input_norm="sample": see SAMPLE_NORM_FLOOR
    # global decoders: "avgmax" reads the mean and the maximum of every channel (a pattern that
    # occurs anywhere, which a long mean dilutes), "avg" the mean only, the paper's (docs/model.md)
    pool: str = "avgmax"
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
        for name in ("tau_resolution", "tau_width", "tau_depth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not self.sample_floor > 0:
            raise ValueError(f"sample_floor must be > 0, got {self.sample_floor}")
        if self.input_norm not in INPUT_NORMS:
            raise ValueError(f"input_norm must be one of {', '.join(INPUT_NORMS)}, "
                             f"got {self.input_norm!r}")
        if self.pool not in POOLINGS:
            raise ValueError(f"pool must be one of {', '.join(POOLINGS)}, got {self.pool!r}")
        if self.crop not in CROP_RULES:
            raise ValueError(f"crop must be one of {', '.join(CROP_RULES)}, got {self.crop!r}")

    def learns(self, what: str) -> bool:
        return what in self.learn

    @property
    def max_depth(self) -> int:
        return 2 * self.depth if self.learns("D") else self.depth

    @property
    def max_width(self) -> int:
        return 2 * self.width if self.learns("W") else self.width

    @property
    def pooling(self) -> tuple[str, ...]:
        """The decoder's reductions over positions, in the order the head reads them (none for
        a dense decoder)."""
        return () if self.dense else POOLINGS[self.pool]

    @property
    def max_kernel(self) -> tuple[int, ...]:
        """Largest odd kernel that fits the input, per axis (centred, "up to the input size")."""
        return C.max_kernel(self.input_size)

    def kernel_sigma_range(self, axis: int) -> tuple[float, float]:
        """The kernel mask's sigma range on ``axis`` (appendix E)."""
        return M.gaussian_sigma_range(self.max_kernel[axis], self.threshold)

    def widest_half_taps(self, resolution: tuple[int, ...]) -> tuple[int, ...]:
        """Per axis, the half-width of the global kernel at ``resolution``: the widest kernel a
        block computing there can have."""
        return C.widest_half_taps(self.input_size, resolution)

    def conv_fft(self, resolution: tuple[int, ...], cropped: tuple[bool, ...]
                 ) -> tuple[int, ...] | None:
        """The FFT lengths per axis of a block's convolution whose spectrum the resolution mask
        filters (on the axes it does not crop): those of the widest kernel at ``resolution``,
        whatever the kernel mask keeps; None when R is fixed or every axis is cropped."""
        return C.filtered_fft(self.input_size, resolution, cropped) if self.learns("R") else None

    def crop_limits(self) -> tuple[int, ...]:
        """Per axis, the largest resolution a block crops it to: with crop="bin" the input's own
        (a long axis's first crops round up to a fast length, which may be the input's: there
        the block resamples to the same length, filtering by the mask); with "pays",
        :func:`crop_limit` (0: cropping never pays there)."""
        if self.crop == "bin":
            return self.input_size
        return tuple(C.crop_limit(self.input_size, a, self.width)
                     for a in range(len(self.input_size)))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_size"] = list(self.input_size)
        return d


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


class Block(nn.Module):
    """A residual block; masks act on the residual branch only."""

    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.norm = Norm(width)
        self.w1 = nn.Parameter(torch.empty(width, width))  # n_in -> n_mid
        self.b1 = nn.Parameter(torch.zeros(width))
        self.w2 = nn.Parameter(torch.empty(width, width))  # n_mid -> n_out
        self.b2 = nn.Parameter(torch.zeros(width))
        self.dropout = dropout
        for w in (self.w1, self.w2):
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))

    def forward(self, x: Tensor, p: BlockPlan, kernel: Tensor) -> Tensor:
        size = x.shape[2:]
        norm_w, norm_b, w1, b1, w2, b2 = self.folded(p)
        z = x[:, : p.n_in]
        if p.n_in < x.shape[1]:  # BatchNorm's backward is several times slower on a strided view
            z = z.contiguous()
        z = self.norm(z, weight=norm_w, bias=norm_b)  # (B, n_in, *S)
        if p.m_res is not None:
            for axis, (r, m) in enumerate(zip(p.resolution, p.m_res)):
                if m is not None:
                    z = resample(z, r, dim=2 + axis, mask=m)  # (B, n_in, *R)
        z = fft_conv(z, kernel, p.conv_mask, p.conv_fft)  # (B, n_in, *R)
        z = F.dropout(F.gelu(_pointwise(z, w1, b1)), self.dropout, self.training)  # (B, n_mid, *R)
        z = _pointwise(z, w2, b2)  # (B, n_out, *R)
        for axis, s in enumerate(size):
            z = resample(z, s, dim=2 + axis)  # (B, n_out, *S)
        if p.n_out < x.shape[1]:  # the branch writes the first n_out channels of the stream
            z = F.pad(z, (0, 0) * len(size) + (0, x.shape[1] - p.n_out))
        return x + z

    def folded(self, p: BlockPlan) -> tuple[Tensor, ...]:
        """(norm weight, norm bias, w1, b1, w2, b2) sliced to the plan's sizes, with the width
        masks and the depth weight multiplied in: m_in into the norm's affine part, m_mid into
        the rows of w1, m_out * depth weight into the rows of w2."""
        if p.width_masks is not None:
            return FoldWidthMasks.apply(self.norm.weight, self.norm.bias, self.w1, self.b1,
                                         self.w2, self.b2, p.width_masks, p.depth_weight,
                                         (p.n_in, p.n_mid, p.n_out))
        w2, b2 = self.w2[: p.n_out, : p.n_mid], self.b2[: p.n_out]
        if p.depth_weight is not None:
            w2, b2 = w2 * p.depth_weight, b2 * p.depth_weight
        return (self.norm.weight[: p.n_in], self.norm.bias[: p.n_in],
                self.w1[: p.n_mid, : p.n_in], self.b1[: p.n_mid], w2, b2)


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
        self.blocks = nn.ModuleList(Block(H, c.dropout) for _ in range(D))
        self.kernel_net = KernelNet(dim, D, H, c.omega_0, c.kernel_hidden, c.kernel_layers)
        # fixed gain so that the initial kernel starts with unit-order output variance
        self.kernel_gain = 1.0 / math.sqrt(math.prod(c.max_kernel))
        self.dec_w = nn.Parameter(torch.empty(c.out_channels, H))
        self.dec_b = nn.Parameter(torch.zeros(c.out_channels))
        nn.init.kaiming_uniform_(self.dec_w, a=math.sqrt(5))
        if "max" in c.pooling:  # the head's weights on the channels' maxima
            self.dec_w_max = nn.Parameter(torch.empty(c.out_channels, H))
            nn.init.kaiming_uniform_(self.dec_w_max, a=math.sqrt(5))
        # --- mask parameters (all named mask_*: their own optimiser group, clamped after each step)
        if c.learns("K"):
            sigma = [M.sigma_for_full_kernel(c.threshold)] * dim  # kernels start global
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

    def plan(self, full: bool = False) -> Plan:
        """Discrete sizes and mask values for this step (:func:`dnarch_deploy.plan.make_plan`;
        ``full``: the reference computation, every channel, block and tap with the masks
        multiplied in)."""
        return make_plan(self, full)

    # --- masks -> plan -----------------------------------------------------------------------

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
