"""The cost model (paper §2.5 and appendix C), in multiply-accumulates.

Layer costs are pure functions of sizes; a size may be an int (a frozen architecture: the
"theoretical" figure export compares latency with) or a differentiable tensor from the masks'
``size()`` (the search's complexity loss). Terms follow appendix C, with two choices made explicit:

- the Fourier convolution costs ``C L log2 L`` for C depthwise channels (the paper writes
  ``L log L`` per channel and leaves the channel count implicit);
- pointwise terms are BatchNorm, GELU and the residual add; dropout is free at inference.

Left out, as in the paper: the kernel network (its cost does not scale with the input), the
spectral down/up-sampling transforms (fused with the convolution's transforms in the paper), the
mask values (folded into weights), the input normalisation and the global pooling's divisions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import masks as M
from .model import DNArch

Size = Tensor | float


def linear_cost(length: Size, n_in: Size, n_out: Size) -> Size:
    """Pointwise linear layer: L * N_in * N_out."""
    return length * n_in * n_out


def fourier_conv_cost(length: Size, channels: Size) -> Size:
    """Depthwise Fourier convolution: C * L * log2(L)."""
    log = torch.log2(length) if isinstance(length, Tensor) else math.log2(max(length, 1.0))
    return channels * length * log


def pointwise_cost(length: Size, channels: Size) -> Size:
    """Elementwise operation (norm, activation, residual add): L * C."""
    return length * channels


def block_cost(length: Size, resolution: Size, n_in: Size, n_mid: Size, n_out: Size) -> dict:
    """Cost terms of one residual block: ``length`` is the input's size, ``resolution`` the size
    at which the block computes (both products over the spatial axes)."""
    return {
        "norm": pointwise_cost(length, n_in),
        "conv": fourier_conv_cost(resolution, n_in),
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


def model_cost(model: DNArch) -> dict:
    """Differentiable cost of the architecture the masks describe.

    Returns ``{"total": Tensor, "encoder": dict, "blocks": [dict], "block_weights": Tensor,
    "decoder": dict}``. Block b counts with weight clamp(size(m_depth) - b, 0, 1): the continuous
    depth of §2.5 ("C_net,size(m_depth)").
    """
    c = model.config
    ref = model.enc_b
    length = float(math.prod(c.input_size))
    H, D = c.max_width, c.max_depth
    if c.learns("D"):
        depth = M.sigmoid_size(model.mask_depth, c.tau_depth, D, c.threshold)
        weights = (depth - torch.arange(D, dtype=ref.dtype, device=ref.device)).clamp(0, 1)
    else:
        weights = torch.ones(D, dtype=ref.dtype, device=ref.device)
    if c.learns("W"):
        widths = M.sigmoid_size(model.mask_width, c.tau_width, H, c.threshold)  # (D, 3)
    else:
        widths = torch.full((D, 3), float(H), dtype=ref.dtype, device=ref.device)
    if c.learns("R"):
        per_axis = M.sigmoid_size(model.mask_res, c.tau_resolution, 1, c.threshold)  # fraction
        resolution = (
            per_axis * torch.tensor(c.input_size, dtype=ref.dtype, device=ref.device)
        ).prod(-1)
    else:
        resolution = torch.full((D,), length, dtype=ref.dtype, device=ref.device)
    blocks = [block_cost(length, resolution[b], *widths[b]) for b in range(D)]
    # the stream is as wide as the widest channel a block in use reads or writes
    used = (weights > 0).nonzero().flatten()
    stream = widths[used][:, [0, 2]].max() if c.learns("W") and used.numel() else float(H)
    enc = encoder_cost(length, c.in_channels, stream)
    dec = decoder_cost(length, stream, c.out_channels, c.dense)
    total = sum(enc.values()) + sum(dec.values())
    total = total + sum(w * sum(terms.values()) for w, terms in zip(weights, blocks))
    return {
        "total": total,
        "encoder": enc,
        "blocks": blocks,
        "block_weights": weights,
        "decoder": dec,
    }


def base_cost(config) -> float:
    """The cost of the base network CCNN_{D,H} a config describes: the default C_target."""
    length = float(math.prod(config.input_size))
    H = float(config.width)
    total = sum(encoder_cost(length, config.in_channels, H).values())
    total += config.depth * sum(block_cost(length, length, H, H, H).values())
    total += sum(decoder_cost(length, H, config.out_channels, config.dense).values())
    return float(total)


def complexity_loss(cost: Tensor, target: float) -> Tensor:
    """L_comp = (C / C_target - 1)^2 (§2.5)."""
    return (cost / target - 1.0) ** 2
