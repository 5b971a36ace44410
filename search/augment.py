"""Training-time augmentation of classification inputs.

A random shift: each sample moves by a whole number of positions along every spatial axis, at most
``share`` of the axis length either way, and the positions it leaves are zero. The label does not
move, so the network is taught what global pooling already assumes: where a pattern sits matters
less than what it is. Small training sets (tens of series) overfit without it.

Jitter: Gaussian noise added to every position, its std a share of each sample's own std per
channel (so it means the same on z-normalised series and on raw ones of any scale). The exact
values of a few dozen training series change on every pass; their shapes do not.

Mixup (Zhang et al., 2018): each sample is blended with another of the batch, and its target with
that sample's, by a weight drawn from Beta(alpha, alpha). The training loss then never reaches
zero on a few dozen series, which a network otherwise memorises in a quarter of its steps.
"""

from __future__ import annotations

import torch
from torch import Tensor


def random_shift(x: Tensor, share: float) -> Tensor:
    """(B, C, *S) -> (B, C, *S), each sample shifted independently (torch's global RNG)."""
    batch = x.shape[0]
    for axis in range(2, x.dim()):
        n = x.shape[axis]
        most = round(share * n)
        if most == 0:
            continue
        shifts = torch.randint(-most, most + 1, (batch, 1), device=x.device)
        source = torch.arange(n, device=x.device) - shifts  # (B, n): where each position reads
        inside = (source >= 0) & (source < n)
        shape = [batch] + [1] * (x.dim() - 1)
        shape[axis] = n
        index = source.clamp(0, n - 1).view(shape).expand_as(x)
        x = torch.gather(x, axis, index) * inside.view(shape)
    return x


def jitter(x: Tensor, share: float) -> Tensor:
    """(B, C, *S) -> (B, C, *S) plus N(0, (share * std)^2) noise at every position, std each
    sample's own per channel over its positions (torch's global RNG)."""
    spatial = tuple(range(2, x.dim()))
    scale = x.std(dim=spatial, keepdim=True, correction=0)
    return x + share * scale * torch.randn_like(x)


def mixup(x: Tensor, y: Tensor, classes: int, alpha: float) -> tuple[Tensor, Tensor]:
    """(B, C, *S), (B,) labels -> blended inputs and (B, classes) target probabilities. Sample i
    is mixed with sample perm[i] by its own weight w_i ~ Beta(alpha, alpha) (torch's global RNG),
    x_i' = w_i x_i + (1 - w_i) x_perm[i], and likewise its one-hot target."""
    batch = x.shape[0]
    weight = torch.distributions.Beta(alpha, alpha).sample((batch,)).to(x.device)
    perm = torch.randperm(batch, device=x.device)
    w = weight.view(batch, *([1] * (x.dim() - 1)))
    target = torch.nn.functional.one_hot(y, classes).to(x.dtype)
    return (w * x + (1 - w) * x[perm],
            weight[:, None] * target + (1 - weight[:, None]) * target[perm])
