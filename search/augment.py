"""Training-time augmentation of classification inputs.

A random shift: each sample moves by a whole number of positions along every spatial axis, at most
``share`` of the axis length either way, and the positions it leaves are zero. The label does not
move, so the network is taught what global pooling already assumes: where a pattern sits matters
less than what it is. Small training sets (tens of series) overfit without it.

Jitter: Gaussian noise added to every position, its std a share of each sample's own std per
channel (so it means the same on z-normalised series and on raw ones of any scale). The exact
values of a few dozen training series change on every pass; their shapes do not.
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
