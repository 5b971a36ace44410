"""Shared helpers for the dnarch_deploy tests: tiny configurations, mask states, tolerances."""

from __future__ import annotations

import torch

from dnarch_deploy import DNArch, ModelConfig
from dnarch_deploy import masks as M


def tiny_config(**overrides) -> ModelConfig:
    """A network small enough to run in milliseconds: D=2 (D_max=4), H=4 (H_max=8)."""
    kwargs = dict(in_channels=2, out_channels=3, input_size=(17,), depth=2, width=4)
    kwargs.update(overrides)
    return ModelConfig(**kwargs)


def tiny_model(seed: int = 0, dtype=torch.float64, **overrides) -> DNArch:
    torch.manual_seed(seed)
    return DNArch(tiny_config(**overrides)).to(dtype)


def mask_ranges(model: DNArch) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Lower and upper bound (appendix E) of every mask parameter, shaped like the parameter."""
    c = model.config
    out = {}
    if c.learns("K"):
        bounds = [c.kernel_sigma_range(axis) for axis in range(len(c.max_kernel))]
        lo = torch.tensor([b[0] for b in bounds]).expand_as(model.mask_sigma)
        hi = torch.tensor([b[1] for b in bounds]).expand_as(model.mask_sigma)
        out["mask_sigma"] = (lo, hi)
    for name, tau in (
        ("mask_res", c.tau_resolution),
        ("mask_width", c.tau_width),
        ("mask_depth", c.tau_depth),
    ):
        if hasattr(model, name):
            p = getattr(model, name)
            lo, hi = M.sigmoid_mu_range(tau)
            out[name] = (torch.full_like(p, lo), torch.full_like(p, hi))
    return out


@torch.no_grad()
def set_mask_state(model: DNArch, state: str, seed: int = 0) -> None:
    """Put every mask parameter in a state: "init" (untouched), "min"/"max" (the bounds of
    appendix E), "extremes" (each entry at one bound, at random), "random" (uniform in range)."""
    if state == "init":
        return
    g = torch.Generator().manual_seed(seed)
    for name, (lo, hi) in mask_ranges(model).items():
        p = getattr(model, name)
        lo, hi = lo.to(p), hi.to(p)
        if state == "min":
            value = lo
        elif state == "max":
            value = hi
        elif state == "extremes":
            value = torch.where(torch.rand(p.shape, generator=g) < 0.5, lo, hi)
        elif state == "random":
            value = lo + (hi - lo) * torch.rand(p.shape, generator=g, dtype=p.dtype)
        else:
            raise ValueError(f"unknown mask state {state!r}")
        p.copy_(value)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (0 when both are exactly zero)."""
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))
