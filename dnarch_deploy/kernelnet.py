"""The one kernel network shared by every block (paper appendix E).

An MLP on Fourier features of coordinates in [-1, 1]^D:
gamma(x) = [cos(2 pi w0 W x), sin(2 pi w0 W x)].
Its last layer has one output channel per (block, channel) pair, so a block only evaluates the rows
of the output layer it uses: layer identity lives in the output channels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class KernelNet(nn.Module):
    def __init__(
        self,
        dim: int,  # number of kernel axes (1 or 2)
        blocks: int,  # maximum number of blocks the network serves
        channels: int,  # maximum channels per block
        omega_0: float,  # frequency prior of the Fourier encoding
        hidden: int = 128,
        layers: int = 4,  # linear layers in total, encoding excluded
        features: int = 128,  # Fourier frequencies (2x as many features: cos and sin)
    ):
        super().__init__()
        if layers < 2:
            raise ValueError(f"KernelNet needs at least 2 layers, got layers={layers}")
        if omega_0 <= 0:
            raise ValueError(f"omega_0 must be positive, got {omega_0}")
        self.blocks, self.channels, self.omega_0 = blocks, channels, omega_0
        # a fixed random projection, as in Fourier-feature encodings (Tancik et al. 2020)
        self.register_buffer("freqs", torch.randn(dim, features), persistent=True)
        sizes = [2 * features] + [hidden] * (layers - 1)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.out = nn.Linear(hidden, blocks * channels)
        nn.init.normal_(self.out.weight, std=1.0 / math.sqrt(hidden))
        nn.init.zeros_(self.out.bias)

    def features(self, coords: Tensor) -> Tensor:
        """(P, D) coordinates -> (P, hidden) last hidden activation."""
        proj = 2 * math.pi * self.omega_0 * coords @ self.freqs  # (P, F)
        h = torch.cat([proj.cos(), proj.sin()], dim=-1)  # (P, 2F)
        for layer in self.hidden:
            h = F.gelu(layer(h))
        return h

    def head(self, h: Tensor, block: int, n: int) -> Tensor:
        """Kernel values of the first n channels of ``block`` at hidden activations h: (n, P)."""
        rows = slice(block * self.channels, block * self.channels + n)
        return F.linear(h, self.out.weight[rows], self.out.bias[rows]).T

    def extra_repr(self) -> str:
        return f"blocks={self.blocks}, channels={self.channels}, omega_0={self.omega_0}"
