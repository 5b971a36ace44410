"""The deployed network's parameter count, from its sizes: the paper's §5 second constraint
(``--max-params``), a limit beside the budget, differentiable in the mask parameters."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .block_ops import deployed_taps
from .cost import Size, decoder_heads, model_sizes
from .model import DNArch
from .plan import Plan


def model_params(model: DNArch, plan: Plan | None = None) -> Tensor:
    """Differentiable parameter count of the deployed network the masks describe
    (:func:`network_params` at :func:`model_sizes`): in value
    :func:`architecture_params` of :func:`~dnarch_deploy.describe`."""
    c = model.config
    z = model_sizes(model, plan)
    return network_params(in_channels=c.in_channels, out_channels=c.out_channels,
                          stream=z["stream"], n_in=z["n_in"], n_mid=z["n_mid"], n_out=z["n_out"],
                          taps=math.prod(deployed_taps(z, c.input_size)),
                          block_weights=z["weights"], heads=decoder_heads(c.pooling))


def network_params(*, in_channels: int, out_channels: int, stream: Size, n_in: Tensor,
                   n_mid: Tensor, n_out: Tensor, taps: Tensor,
                   block_weights: Tensor | None = None, heads: int = 1) -> Size:
    """Parameters of a deployed (materialised) network from its sizes: sampled kernels (``taps``:
    per block, the product over the axes), folded norms and pointwise layers, the decoder's
    ``heads`` weight matrices (:func:`decoder_heads`); the kernel network and masks are gone after
    export. Block arguments are (D,) tensors, weighted by ``block_weights`` (default 1)."""
    blocks = n_in * taps + n_in + n_in * n_mid + n_mid
    blocks = blocks + n_mid * n_out + n_out  # a sum of its own: the trained runs' rounding
    if block_weights is not None:
        blocks = blocks * block_weights
    encoder = in_channels * stream + stream  # norm folded
    return encoder + blocks.sum() + heads * stream * out_channels + out_channels


def architecture_params(arch) -> int:
    """Parameters of the deployed network of a frozen architecture (:func:`network_params`)."""

    def column(values) -> Tensor:
        return torch.tensor([float(v) for v in values], dtype=torch.float64)

    blocks = arch.blocks
    return int(round(float(network_params(
        in_channels=arch.in_channels, out_channels=arch.out_channels,
        stream=float(arch.stream_width), n_in=column(b.n_in for b in blocks),
        n_mid=column(b.n_mid for b in blocks), n_out=column(b.n_out for b in blocks),
        taps=column(math.prod(b.deployed_taps(arch.input_size, arch.learn)) for b in blocks),
        heads=decoder_heads(arch.decoder_pooling())))))


def limit_loss(value: Tensor, limit: float) -> Tensor:
    """relu(value / limit - 1)^2: a second constraint (paper §5), zero within the limit."""
    return torch.relu(value / limit - 1.0) ** 2
