"""The model's BatchNorm: over the first n channels, with an affine part the caller may scale (a
block folds its width mask in), and batch statistics summed over the ranks of a distributed
search, so that N processes with B/N samples each normalise as one process with B samples."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn


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
