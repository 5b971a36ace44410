"""Stages 2-3: freeze the masks into a plan, then materialise a plain static PyTorch module.

The static module has no masks and no kernel network: weights are sliced to the support, every mask
value, depth weight, BatchNorm and the input/output (de)normalisation are folded into weights, the
blocks under the depth threshold are absent (the plan excludes them), the stream is cut to
``plan.stream`` and the kernels are sampled once. Spectral resampling and convolution are still the
FFT forms of :mod:`dnarch_deploy.spectral` here; :func:`export.lowering.lower` replaces them.

Folding a block's BatchNorm. Before the convolution, per channel the normalised branch input is
``a * x + c``.
Resampling and the depthwise convolution are linear and act per channel, so
``conv(down(a x + c)) = a conv(down(x)) + c conv(down(1))``: ``a`` folds into the columns of the
first pointwise weight, and ``c conv(down(1))`` is a constant map of shape ``(n_in, *R)`` (not a
constant per channel: the zero padding and the resolution mask's DC value shape it) that the first
pointwise weight turns into a bias map ``(n_mid, *R)``. Exact; computed in float64.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dnarch_deploy import Architecture, DNArch, describe
from dnarch_deploy.model import linear_head, pool, standardise
from dnarch_deploy.norm import Norm
from dnarch_deploy.operators import conv_period
from dnarch_deploy.plan import Plan
from dnarch_deploy.spectral import direct_conv, fft_conv, masked_kernel, resample


@dataclass
class Frozen:
    """The found architecture, fixed: the plan (sizes and mask values) and its JSON form."""

    plan: Plan
    architecture: Architecture


def freeze(model: DNArch) -> Frozen:
    """Stage 2: evaluate the masks once; from here on the architecture is data."""
    with torch.no_grad():
        plan = model.plan()
    return Frozen(plan=plan, architecture=describe(model))


# --- modules of the static network ----------------------------------------------------------------


class Resample(nn.Module):
    """Spectral resampling of one spatial axis to ``size`` samples, frozen mask values."""

    def __init__(self, size: int, dim: int, mask: Tensor | None = None):
        super().__init__()
        self.size, self.dim = size, dim  # dim counted from the end: -1 or -2
        self.register_buffer("mask", None if mask is None else mask.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        return resample(x, self.size, dim=self.dim, mask=self.mask)

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, masked={self.mask is not None}"


class SpectralConv(nn.Module):
    """Depthwise 'same' cross-correlation via torch.fft, as the trained model computes it.
    ``period``: the kernel holds a folded resolution mask and is periodic in these lengths
    (:func:`dnarch_deploy.operators.conv_period`), at which the lowered MatMul FFT runs it."""

    def __init__(self, kernel: Tensor, period: tuple[int, ...] | None = None):
        super().__init__()
        self.register_buffer("kernel", kernel.detach().clone())  # (C, *taps)
        self.period = period

    def forward(self, x: Tensor) -> Tensor:
        return fft_conv(x, self.kernel)

    def extra_repr(self) -> str:
        return f"kernel={tuple(self.kernel.shape)}"


def pointwise(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """A 1x1 convolution, (B, n, *S) -> (B, m, *S), as one ONNX Conv node with its per-channel
    bias: a MatMul on the flattened positions costs a Reshape before and after and an Add, four
    nodes, and on small images onnxruntime's per-node cost is most of a network's time."""
    conv = (F.conv1d, F.conv2d, F.conv3d)[x.dim() - 3]
    return conv(x, weight.view(*weight.shape, *[1] * (x.dim() - 2)), bias)


class Encoder(nn.Module):
    """Input normalisation (or the token embedding), pointwise linear, BatchNorm, GELU: all folded
    into one linear map (or one embedding table) and a GELU."""

    def __init__(self, weight: Tensor, bias: Tensor, tokens: bool,
                 sample_eps: Tensor | None = None):
        super().__init__()
        self.tokens = tokens
        self.register_buffer("weight", weight)  # tokens: (vocab, s) table; else (s, C_in)
        self.register_buffer("bias", bias)  # (s,); unused for tokens (folded into the table)
        # input_norm="sample": each sample standardised first (not a fixed affine map)
        self.register_buffer("sample_eps", sample_eps)
        # the stream carried as its spectrum: export.spectrum.carry_spectrum sets the transform;
        # the encoder then returns the spectrum and its positions (the decoder may need both)
        self.spectrum: nn.Module | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.sample_eps is not None:
            x = standardise(x, self.sample_eps)
        if self.tokens:
            h = self.weight[x]  # (B, *S) ids -> (B, *S, s)
            h = h.permute(0, h.dim() - 1, *range(1, h.dim() - 1))  # (B, s, *S)
        else:
            h = pointwise(x, self.weight, self.bias)
        h = F.gelu(h)
        return h if self.spectrum is None else (self.spectrum(h), h)


class StaticBlock(nn.Module):
    """One residual block with fixed sizes: read n_in channels -> down -> conv -> pointwise ->
    GELU -> pointwise -> up -> add to the first n_out channels."""

    def __init__(
        self,
        index: int,
        stream: int,
        down: list[nn.Module],
        conv: nn.Module,
        w1: Tensor,  # (n_mid, n_in), BatchNorm scale folded into the columns
        bias1: Tensor,  # (n_mid, *R): b1 plus the BatchNorm shift carried through down and conv
        w2: Tensor,  # (n_out, n_mid), mask and depth weight folded into the rows
        b2: Tensor,  # (n_out,)
        up: list[nn.Module],
    ):
        super().__init__()
        self.index, self.stream = index, stream
        self.n_in, self.n_out = w1.shape[1], w2.shape[0]
        self.read = self.n_in  # the stream's channels the block reads (read_wider: a few more)
        self.down, self.conv, self.up = nn.Sequential(*down), conv, nn.Sequential(*up)
        self.register_buffer("w1", w1)
        self.register_buffer("bias1", bias1)
        self.register_buffer("w2", w2)
        self.register_buffer("b2", b2)

    def read_wider(self, channels: int) -> None:
        """Read ``channels`` > n_in of the stream's channels, or all it has, and give w1 zero
        columns up to ``channels``: for a convolution with zero filters beyond n_in
        (:class:`export.tactics.DirectConv`, ``trim`` off) that returns ``channels``. Its extra
        inputs then come from the stream and its extra outputs meet zero weights, where a Pad
        before it and a Slice after it were two more nodes (~1 us each at batch 1)."""
        self.read = min(channels, self.stream)
        self.w1 = F.pad(self.w1, (0, channels - self.w1.shape[1]))

    def forward(self, h: Tensor) -> Tensor:
        z = h[:, : self.read] if self.read < self.stream else h  # (B, read, *S)
        z = self.conv(self.down(z))  # (B, n_in, *R), or w1's columns after read_wider
        z = F.gelu(pointwise(z, self.w1) + self.bias1)  # (B, n_mid, *R)
        z = pointwise(z, self.w2, self.b2)  # (B, n_out, *R)
        z = self.up(z)  # (B, n_out, *S)
        if self.n_out == self.stream:
            return h + z
        return torch.cat([h[:, : self.n_out] + z, h[:, self.n_out :]], dim=1)

    def extra_repr(self) -> str:
        return f"index={self.index}, n_in={self.n_in}, n_mid={self.w1.shape[0]}, n_out={self.n_out}"


class Decoder(nn.Module):
    """Dense: pointwise linear with the output de-normalisation folded in. Global: mean over
    positions, then linear; with ``weight_max``, plus a linear map of the maximum over positions
    (ModelConfig.pool "avgmax")."""

    def __init__(self, weight: Tensor, bias: Tensor, dense: bool, weight_max: Tensor | None = None):
        super().__init__()
        self.dense = dense
        self.register_buffer("weight", weight)  # (C_out, s)
        self.register_buffer("bias", bias)  # (C_out,)
        self.register_buffer("weight_max", weight_max)  # (C_out, s) or None
        # the stream as its spectrum: what to pool, from the stream's bins at the end and at the
        # start and the encoder's positions (set by export.spectrum.carry_spectrum)
        self.spectrum: nn.Module | None = None

    @property
    def pooling(self) -> list[str]:
        """The reductions over positions the head reads (Architecture.pooling)."""
        return [] if self.dense else ["mean"] + (["max"] if self.weight_max is not None else [])

    def forward(self, h: Tensor, start: Tensor | None = None,
                positions: Tensor | None = None) -> Tensor:
        if self.spectrum is not None:
            h = self.spectrum(h, start, positions)
        if self.dense:
            return pointwise(h, self.weight, self.bias)
        return linear_head(pool(h, self.pooling), self.weight, self.bias, self.weight_max)


class StaticNet(nn.Module):
    """The found network as a plain module: raw user input -> prediction."""

    def __init__(self, encoder: Encoder, blocks: list[StaticBlock], decoder: Decoder, spec: dict):
        super().__init__()
        self.encoder, self.blocks, self.decoder = encoder, nn.ModuleList(blocks), decoder
        self.spec = spec  # input shape/dtype, output shape: what infer checks against

    def forward(self, x: Tensor) -> Tensor:
        h = self.encoder(x)  # (B, stream, *S)
        if self.encoder.spectrum is None:
            for block in self.blocks:
                h = block(h)
            return self.decoder(h)
        s, positions = h  # the stream as its spectrum (B, stream, 2, K), and as positions
        start = s
        for block in self.blocks:
            s = block(s)
        return self.decoder(s, start, positions)


# --- materialise ----------------------------------------------------------------------------------


def norm_affine(norm: Norm, weight: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
    """(a, c) in float64 with ``norm(x, weight=weight, bias=bias) == a * x + c`` per channel, for
    the first ``len(weight)`` channels (population statistics)."""
    if not bool(norm.calibrated):
        raise ValueError("BatchNorm is not calibrated: run dnarch_deploy.calibration.calibrate "
                         "first")
    n = weight.numel()
    a = weight.double() / torch.sqrt(norm.running_var[:n].double() + norm.eps)
    return a, bias.double() - norm.running_mean[:n].double() * a


def input_spec(model: DNArch) -> dict:
    c = model.config
    tokens = model.embed is not None
    return {
        "spatial": list(c.input_size),
        "input_shape": [None, *c.input_size] if tokens else [None, c.in_channels, *c.input_size],
        "input_dtype": "int64" if tokens else "float32",
        "vocab_size": c.vocab_size,
        "output_shape": [None, c.out_channels, *(c.input_size if c.dense else ())],
        "output_dtype": "float32",
    }


@torch.no_grad()
def materialize(model: DNArch, frozen: Frozen) -> StaticNet:
    """Stage 3: the static module computing exactly what ``model.eval()`` computes for the plan."""
    c, plan, f32 = model.config, frozen.plan, torch.float32
    s = plan.stream
    # encoder: (normalise | embed) -> linear -> BatchNorm, as one affine map
    a, sh = norm_affine(model.enc_norm, model.enc_norm.weight[:s], model.enc_norm.bias[:s])
    w = model.enc_w[:s].double()
    b = torch.zeros(s, dtype=torch.float64)  # the encoder's linear map has no bias
    if model.embed is not None:
        table = (model.embed.weight.double() @ w.T + b) * a + sh  # (vocab, s)
        encoder = Encoder(table.to(f32), torch.zeros(0), tokens=True)
    elif c.input_norm == "sample":
        encoder = Encoder((a[:, None] * w).to(f32), (a * b + sh).to(f32), tokens=False,
                          sample_eps=model.sample_eps().to(f32))
    else:
        mean, std = model.input_mean.double(), model.input_std.double()
        w_in = w / std  # (s, C_in)
        encoder = Encoder(
            (a[:, None] * w_in).to(f32), (a * (b - w_in @ mean) + sh).to(f32), tokens=False
        )
    blocks = [
        _block(model, p, kernel, s) for p, kernel in zip(plan.blocks, model.kernels(plan))
    ]
    w, b = model.dec_w[:, :s].double(), model.dec_b.double()
    if c.dense:  # y * std + mean folded into the last linear map
        std, mean = model.output_std.double(), model.output_mean.double()
        w, b = w * std[:, None], b * std + mean
    # a copy, as every buffer here: a slice of the parameter would share its storage
    w_max = model.dec_w_max[:, :s].clone().to(f32) if "max" in c.pooling else None
    decoder = Decoder(w.to(f32), b.to(f32), dense=c.dense, weight_max=w_max)
    return StaticNet(encoder, blocks, decoder, input_spec(model)).eval()


def _block(model: DNArch, p, kernel: Tensor, stream: int) -> StaticBlock:
    c, blk, f32 = model.config, model.blocks[p.index], torch.float32
    size, dims = c.input_size, range(-len(c.input_size), 0)
    # the block's parameters with its width masks and depth weight folded in, as in training
    norm_w, norm_b, w1, b1, w2, b2 = (t.double() for t in blk.folded(p))
    a, sh = norm_affine(blk.norm, norm_w, norm_b)
    down = []
    if p.m_res is not None:  # on each axis the mask crops (on a fast length, even at r == S)
        down = [Resample(r, d, m) for r, d, m in zip(p.resolution, dims, p.m_res) if m is not None]
    up = [Resample(n, d) for n, r, d in zip(size, p.resolution, dims) if r != n]
    period = None
    if p.conv_mask is not None:  # the mask on the convolution's spectrum, folded into its kernel
        kernel = masked_kernel(kernel.double(), p.resolution, p.conv_mask.double(),
                               list(p.conv_fft))
        period = conv_period(p.resolution, tuple(kernel.shape[1:]), p.conv_fft)
    # the input BatchNorm's shift carried through down and conv: c * conv(down(1)), (n_in, *R)
    ones = torch.ones(1, p.n_in, *size, dtype=torch.float64)
    shift = direct_conv(copy.deepcopy(nn.Sequential(*down)).double()(ones), kernel.double())[0]
    shift = sh.view(-1, *[1] * len(size)) * shift
    bias1 = (w1 @ shift.flatten(1)).unflatten(1, shift.shape[1:]) + b1.view(-1, *[1] * len(size))
    return StaticBlock(
        index=p.index,
        stream=stream,
        down=down,
        conv=SpectralConv(kernel.to(f32), period),
        w1=(w1 * a[None, :]).to(f32),
        bias1=bias1.to(f32),
        w2=w2.to(f32),
        b2=b2.to(f32),
        up=up,
    )
