"""The cost model (paper §2.5 and appendix C), in multiply-accumulates.

Layer costs are pure functions of sizes; a size may be an int (a frozen architecture: the
"theoretical" figure export compares latency with) or a differentiable tensor from the masks'
``size()`` (the search's complexity loss). Terms follow appendix C, with two choices made explicit:

- the Fourier convolution costs ``C N log2 N`` for C depthwise channels (the paper writes
  ``L log L`` per channel and leaves the channel count implicit), where N is the length the
  block's FFTs need: a 'same' convolution at resolution R with t taps needs N = prod over axes of
  (R + t // 2) (:func:`dnarch_deploy.spectral.conv_fft_length`, the rule training and export
  use; they round N up to a fast FFT length, which the cost leaves out). This is where the
  kernel size enters the cost (through t, the kernel's extent K scaled to the block's
  resolution: t = K R / S), so L_comp pushes on the kernel mask too; with ``L log L`` it would be
  the only mask the budget cannot see;
- pointwise terms are BatchNorm, GELU and the residual add; dropout is free at inference.

One function sums them for a whole network, :func:`network_cost`; the search's loss
(:func:`model_cost`), the default budget (:func:`base_cost`), a found architecture's figure
(:func:`architecture_cost`, per layer :func:`layer_costs`) and export's report all go through it.

Left out, as in the paper: the kernel network (its cost does not scale with the input), the
spectral down/up-sampling transforms (fused with the convolution's transforms in the paper), the
mask values (folded into weights), the input normalisation and the global pooling's divisions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from . import masks as M
from .model import DNArch, Plan
from .spectral import conv_fft_length

Size = Tensor | float


def linear_cost(length: Size, n_in: Size, n_out: Size) -> Size:
    """Pointwise linear layer: L * N_in * N_out."""
    return length * n_in * n_out


def fourier_conv_cost(length: Size, channels: Size) -> Size:
    """Depthwise Fourier convolution: C * L * log2(L), for L >= 1 (a relaxed size below 1 sample
    counts as 1, so a block shrunk to nothing costs nothing rather than NaN)."""
    if isinstance(length, Tensor):
        length = length.clamp_min(1.0)
        return channels * length * torch.log2(length)
    length = max(length, 1.0)
    return channels * length * math.log2(length)


def pointwise_cost(length: Size, channels: Size) -> Size:
    """Elementwise operation (norm, activation, residual add): L * C."""
    return length * channels


def fft_length(resolution: Sequence[Size], taps: Sequence[Size]) -> Size:
    """N = prod_a conv_fft_length(R_a, t_a) = prod_a (R_a + t_a // 2): the FFT size of a 'same'
    convolution at resolution R with t_a taps per axis (relaxed sizes: R_a + (t_a - 1) / 2)."""
    return math.prod(conv_fft_length(r, t) for r, t in zip(resolution, taps))


def block_cost(
    length: Size,
    resolution: Size,
    n_in: Size,
    n_mid: Size,
    n_out: Size,
    fft_size: Size | None = None,
) -> dict:
    """Cost terms of one residual block: ``length`` is the input's size, ``resolution`` the size
    at which the block computes (both products over the spatial axes), ``fft_size`` the length of
    the convolution's FFTs (:func:`fft_length`; default ``resolution``, the paper's form)."""
    return {
        "norm": pointwise_cost(length, n_in),
        "conv": fourier_conv_cost(resolution if fft_size is None else fft_size, n_in),
        "linear1": linear_cost(resolution, n_in, n_mid),
        "gelu": pointwise_cost(resolution, n_mid),
        "linear2": linear_cost(resolution, n_mid, n_out),
        "residual": pointwise_cost(length, n_out),
    }


def encoder_cost(length: Size, in_channels: int, stream: Size) -> dict:
    return {
        "linear": linear_cost(length, in_channels, stream),
        "norm": pointwise_cost(length, stream),
        "gelu": pointwise_cost(length, stream),
    }


def decoder_cost(length: Size, stream: Size, out_channels: int, dense: bool) -> dict:
    if dense:
        return {"linear": linear_cost(length, stream, out_channels)}
    return {"pool": pointwise_cost(length, stream), "linear": linear_cost(1, stream, out_channels)}


def _straight_through(soft: Tensor, hard: Tensor) -> Tensor:
    """``hard`` in value, ``soft``'s gradient (one autograd node)."""
    return soft + (hard - soft.detach())


def _soft_sizes(model: DNArch) -> tuple[Tensor, Tensor]:
    """The masks' continuous sizes (eqs. 6-7), what the cost's gradient follows: per block, the
    columns n_in, n_mid, n_out, resolution per axis and kernel extent per axis (in input samples),
    (D, 3 + 2 axes); and the depth as block weights clamp(size(m_depth) - b, 0, 1), (D,) (§2.5
    "C_net,size(m_depth)"). A size that is not learned is its fixed value."""
    c = model.config
    ref = model.enc_w
    H, D, T = c.max_width, c.max_depth, c.threshold
    if c.learns("W"):
        widths = M.sigmoid_size(model.mask_width, c.tau_width, H, T)
    else:
        widths = torch.full((D, 3), float(H), dtype=ref.dtype, device=ref.device)
    size = torch.tensor(c.input_size, dtype=ref.dtype, device=ref.device)
    if c.learns("R"):
        resolution = M.sigmoid_size(model.mask_res, c.tau_resolution, 1, T) * size
    else:
        resolution = size.expand(D, -1)
    if c.learns("K"):
        kernel = torch.stack([M.gaussian_size(model.mask_sigma[:, a], k, T)
                              for a, k in enumerate(c.max_kernel)], dim=-1)
    else:
        kernel = torch.tensor(c.max_kernel, dtype=ref.dtype, device=ref.device).expand(D, -1)
    blocks = torch.arange(D, dtype=ref.dtype, device=ref.device)
    if c.learns("D"):
        weights = (M.sigmoid_size(model.mask_depth, c.tau_depth, D, T) - blocks).clamp(0, 1)
    else:
        weights = torch.ones_like(blocks)
    return torch.cat([widths, resolution, kernel], dim=-1), weights


def network_cost(
    *,
    length: Size,
    in_channels: int,
    out_channels: int,
    dense: bool,
    stream: Size,
    resolution: Tensor,
    n_in: Tensor,
    n_mid: Tensor,
    n_out: Tensor,
    fft_size: Tensor,
    block_weights: Tensor | None = None,
) -> dict:
    """The cost of a network from its sizes: the one sum every figure of it goes through (the
    search's loss, :func:`base_cost`, :func:`architecture_cost` and export's report).

    ``length`` is the input's size (product over the spatial axes); each block argument holds one
    entry per block, a (D,) tensor: ``resolution`` and ``fft_size`` as products over the axes
    (:func:`fft_length`), the widths. ``block_weights`` (default 1) multiply each block's terms:
    the depth. Returns ``{"total", "encoder": dict, "blocks": dict of (D,) tensors,
    "block_weights", "decoder"}``.
    """
    blocks = block_cost(length, resolution, n_in, n_mid, n_out, fft_size=fft_size)
    if block_weights is None:
        block_weights = torch.ones_like(n_in)
    enc = encoder_cost(length, in_channels, stream)
    dec = decoder_cost(length, stream, out_channels, dense)
    total = sum(enc.values()) + sum(dec.values()) + (block_weights * sum(blocks.values())).sum()
    return {
        "total": total,
        "encoder": enc,
        "blocks": blocks,
        "block_weights": block_weights,
        "decoder": dec,
    }


def model_sizes(model: DNArch, plan: Plan | None = None) -> dict:
    """The straight-through sizes of the network the masks describe: each value is what the
    plan materialises (whole blocks, whole channels, the resolution and kernel taps actually
    used), each gradient the continuous size() of its mask (:func:`_soft_sizes`). Per block,
    (max_depth,) tensors: ``n_in``, ``n_mid``, ``n_out``, ``resolution`` and ``taps`` (lists,
    one per axis), ``weights`` (1 for a block that runs, else 0, in value); ``stream``."""
    c = model.config
    axes = len(c.input_size)
    if plan is None:
        with torch.no_grad():
            plan = model.plan()
    soft, soft_weights = _soft_sizes(model)
    ran = [p.index for p in plan.blocks]
    hard, hard_weights = soft.detach().clone(), torch.zeros_like(soft_weights)
    if ran:  # a block that does not run keeps its soft sizes: its weight is 0
        # taps at the block's resolution R span taps * S / R input samples
        hard[ran] = torch.tensor(
            [[p.n_in, p.n_mid, p.n_out, *p.resolution,
              *((2 * h + 1) * s / r for h, s, r in zip(p.half_taps, c.input_size, p.resolution))]
             for p in plan.blocks], dtype=soft.dtype, device=soft.device)
        hard_weights[ran] = 1.0
    sizes = _straight_through(soft, hard)
    columns = sizes.unbind(-1)
    res_axes, kernel = list(columns[3 : 3 + axes]), columns[3 + axes :]
    return {
        "n_in": columns[0], "n_mid": columns[1], "n_out": columns[2], "resolution": res_axes,
        # a kernel spanning K input samples has K R / S taps at resolution R
        "taps": [k * r / s for k, r, s in zip(kernel, res_axes, c.input_size)],
        "weights": _straight_through(soft_weights, hard_weights),
        # the stream is as wide as the widest channel a block in use reads or writes
        "stream": sizes[ran, 0:3:2].max() if c.learns("W") and ran else float(c.max_width),
    }


def model_cost(model: DNArch, plan: Plan | None = None) -> dict:
    """Differentiable cost of the architecture the masks describe (:func:`network_cost`) at
    :func:`model_sizes`, so the loss prices exactly the network that runs and is exported
    (``total`` == :func:`architecture_cost` of :func:`~dnarch_deploy.describe`), while the masks
    still get smooth gradients. (With the continuous sizes as values, the floor-like discrete
    counts left found networks up to 14% under the budget; a fractional last block was paid for
    but not run.)

    ``plan``: the step's plan, if already drawn (saves drawing it again). Returns ``{"total":
    Tensor, "encoder": dict, "blocks": dict, "block_weights": Tensor, "decoder": dict}``; the
    blocks' terms are (max_depth,) tensors, one entry per block (weighted by ``block_weights``).
    """
    c = model.config
    z = model_sizes(model, plan)
    # every block at once: each term is a (D,) tensor, so the step's graph does not grow with D
    return network_cost(
        length=float(math.prod(c.input_size)), in_channels=c.in_channels,
        out_channels=c.out_channels, dense=c.dense, stream=z["stream"],
        resolution=math.prod(z["resolution"]), n_in=z["n_in"], n_mid=z["n_mid"],
        n_out=z["n_out"], fft_size=fft_length(z["resolution"], z["taps"]),
        block_weights=z["weights"],
    )


def model_params(model: DNArch, plan: Plan | None = None) -> Tensor:
    """Differentiable parameter count of the deployed network the masks describe
    (:func:`network_params` at :func:`model_sizes`): in value
    :func:`architecture_params` of :func:`~dnarch_deploy.describe`."""
    c = model.config
    z = model_sizes(model, plan)
    return network_params(in_channels=c.in_channels, out_channels=c.out_channels,
                          stream=z["stream"], n_in=z["n_in"], n_mid=z["n_mid"], n_out=z["n_out"],
                          taps=math.prod(z["taps"]), block_weights=z["weights"])


def base_cost(config) -> float:
    """The cost of the base network CCNN_{D,H} a config describes: the default C_target."""
    length = float(math.prod(config.input_size))
    full = torch.full((config.depth,), float(config.width), dtype=torch.float64)
    n = fft_length(config.input_size, config.max_kernel)
    cost = network_cost(
        length=length, in_channels=config.in_channels, out_channels=config.out_channels,
        dense=config.dense, stream=float(config.width), resolution=torch.full_like(full, length),
        n_in=full, n_mid=full, n_out=full, fft_size=torch.full_like(full, float(n)),
    )
    return float(cost["total"])


def cost_range(config) -> tuple[float, float]:
    """(cheapest, dearest): the cost of the smallest and the largest network the search space of
    ``config`` (its ``learn``) can materialise, every learned mask at the end of its clamping
    range (appendix E); the cost is monotone in every mask, so no network lies outside. A budget
    outside this range cannot be met."""
    from .architecture import describe  # architecture imports this module's neighbours

    model = DNArch(config)
    costs = []
    with torch.no_grad():
        for end in (0, 1):
            for name, p in model.named_parameters():
                if name == "mask_sigma":
                    for axis, k in enumerate(config.max_kernel):
                        p[:, axis] = M.gaussian_sigma_range(k, config.threshold)[end]
                elif name.startswith("mask_"):
                    tau = {"mask_res": config.tau_resolution, "mask_width": config.tau_width,
                           "mask_depth": config.tau_depth}[name]
                    p.fill_(M.sigmoid_mu_range(tau)[end])
            costs.append(architecture_cost(describe(model)))
    return costs[0], costs[1]


def complexity_loss(cost: Tensor, target: float) -> Tensor:
    """L_comp = (C / C_target - 1)^2 (§2.5)."""
    return (cost / target - 1.0) ** 2


def architecture_terms(arch) -> dict:
    """:func:`network_cost` of a frozen :class:`~dnarch_deploy.architecture.Architecture`
    (discrete sizes, float64): per term and per block, what :func:`architecture_cost` sums."""
    size = tuple(arch.input_size)

    def column(values) -> Tensor:
        return torch.tensor([float(v) for v in values], dtype=torch.float64)

    blocks = arch.blocks
    return network_cost(
        length=float(math.prod(size)), in_channels=arch.in_channels,
        out_channels=arch.out_channels, dense=arch.dense, stream=float(arch.stream_width),
        resolution=column(math.prod(b.resolution) for b in blocks),
        n_in=column(b.n_in for b in blocks), n_mid=column(b.n_mid for b in blocks),
        n_out=column(b.n_out for b in blocks),
        fft_size=column(fft_length(b.resolution, b.kernel_taps) for b in blocks),
    )


def architecture_cost(arch) -> float:
    """The cost of a frozen :class:`~dnarch_deploy.architecture.Architecture` (discrete sizes):
    the theoretical figure of a found network, in MACs."""
    return float(architecture_terms(arch)["total"])


def layer_costs(arch) -> dict[str, float]:
    """:func:`architecture_cost` per layer, named as export names them: ``encoder``,
    ``blocks.0`` ... (the blocks in use, in order), ``decoder``; the values sum to the total."""
    terms = architecture_terms(arch)
    per_block = sum(terms["blocks"].values()) * terms["block_weights"]
    return {
        "encoder": float(sum(terms["encoder"].values())),
        **{f"blocks.{i}": float(v) for i, v in enumerate(per_block.tolist())},
        "decoder": float(sum(terms["decoder"].values())),
    }


def network_params(*, in_channels: int, out_channels: int, stream: Size, n_in: Tensor,
                   n_mid: Tensor, n_out: Tensor, taps: Tensor,
                   block_weights: Tensor | None = None) -> Size:
    """Parameters of a deployed (materialised) network from its sizes: sampled kernels (``taps``:
    per block, the product over the axes), folded norms and pointwise layers; the kernel network
    and masks are gone after export. Block arguments are (D,) tensors, weighted by
    ``block_weights`` (default 1)."""
    blocks = n_in * taps + n_in + n_in * n_mid + n_mid + n_mid * n_out + n_out
    if block_weights is not None:
        blocks = blocks * block_weights
    encoder = in_channels * stream + stream  # norm folded
    return encoder + blocks.sum() + stream * out_channels + out_channels


def architecture_params(arch) -> int:
    """Parameters of the deployed network of a frozen architecture (:func:`network_params`)."""

    def column(values) -> Tensor:
        return torch.tensor([float(v) for v in values], dtype=torch.float64)

    blocks = arch.blocks
    return int(round(float(network_params(
        in_channels=arch.in_channels, out_channels=arch.out_channels,
        stream=float(arch.stream_width), n_in=column(b.n_in for b in blocks),
        n_mid=column(b.n_mid for b in blocks), n_out=column(b.n_out for b in blocks),
        taps=column(math.prod(b.kernel_taps) for b in blocks)))))


def limit_loss(value: Tensor, limit: float) -> Tensor:
    """relu(value / limit - 1)^2: a second constraint (paper §5), zero within the limit."""
    return torch.relu(value / limit - 1.0) ** 2
