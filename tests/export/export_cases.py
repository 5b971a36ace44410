"""Random DNArch models in random mask states, for the export tests."""

from __future__ import annotations

import random

import torch

from dnarch_deploy import DNArch, ModelConfig
from dnarch_deploy import masks as M


def random_config(rng: random.Random, sample_norm: bool = False, long: bool = False
                  ) -> ModelConfig:
    """Tiny sizes: L <= 64 (1-D), S <= 12 x 12 (2-D), H <= 8; every kind of input and output;
    ``sample_norm``: inputs standardised per sample (not for tokens); ``long``: 1-D, L in
    1024..2100 (the lowerings of long axes)."""
    two_d = not long and rng.random() < 0.35
    length = rng.randint(1024, 2100) if long else rng.randint(8, 64)
    size = (rng.randint(5, 12), rng.randint(5, 12)) if two_d else (length,)
    tokens = not two_d and rng.random() < 0.2
    dense = rng.random() < 0.35
    out = rng.randint(1, 3) if dense else rng.randint(2, 5)
    learn = rng.choice(["KRWD", "KRWD", "KRWD", "KR", "RW", "WD", "K", "R", "none"])
    cin = rng.randint(1, 3)
    mean = [rng.uniform(-2, 2) for _ in range(cin)] if not tokens else []
    std = [rng.uniform(0.5, 3) for _ in range(cin)] if not tokens else []
    norm = "sample" if sample_norm and not tokens else "dataset"
    # both decoders; derived from the size, not drawn, so that the random stream (and the
    # cases) stay as they were
    pool = "avg" if sum(size) % 2 else "avgmax"
    return ModelConfig(
        in_channels=cin,
        out_channels=out,
        input_size=size,
        dense=dense,
        vocab_size=rng.randint(3, 12) if tokens else 0,
        depth=rng.randint(1, 3),
        width=rng.randint(2, 4),
        learn=learn,
        kernel_hidden=16,
        kernel_layers=2,
        pool=pool,
        input_norm=norm,
        input_mean=mean,
        input_std=std,
        output_mean=[rng.uniform(-1, 1) for _ in range(out)] if dense else [],
        output_std=[rng.uniform(0.5, 2) for _ in range(out)] if dense else [],
    )


def randomize_masks(model: DNArch, rng: random.Random) -> None:
    """Random mask states within appendix E's ranges: removed blocks, narrow and full widths,
    heavy downsampling, tiny and global kernels."""
    c = model.config
    with torch.no_grad():
        if c.learns("K"):
            for b in range(c.max_depth):
                for axis in range(len(c.max_kernel)):
                    lo, hi = c.kernel_sigma_range(axis)
                    model.mask_sigma[b, axis] = rng.choice([lo, hi, rng.uniform(lo, hi)])
        for name, tau in (
            ("mask_res", c.tau_resolution),
            ("mask_width", c.tau_width),
            ("mask_depth", c.tau_depth),
        ):
            if hasattr(model, name):
                lo, hi = M.sigmoid_mu_range(tau)
                p = getattr(model, name)
                p.copy_(torch.tensor([rng.choice([lo, hi, rng.uniform(lo, hi)])
                                      for _ in range(p.numel())]).view_as(p))
    model.clamp_masks_()


def randomize_weights(model: DNArch, rng: random.Random) -> None:
    """Non-trivial norm affine parameters, biases and population statistics (calibrated)."""
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("mask_") or name.startswith("kernel_net"):
                continue
            if p.dim() == 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if "weight" in name else 0))
        for m in model.modules():
            if hasattr(m, "calibrated"):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) * 2 + 0.1)
                m.calibrated.fill_(True)


def random_model(seed: int, long: bool = False) -> DNArch:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = DNArch(random_config(rng, sample_norm=seed % 3 == 2, long=long))  # every third seed
    randomize_masks(model, rng)
    randomize_weights(model, rng)
    return model.eval()


def random_input(model: DNArch, batch: int, seed: int = 0) -> torch.Tensor:
    c = model.config
    g = torch.Generator().manual_seed(seed)
    if c.vocab_size:
        return torch.randint(0, c.vocab_size, (batch, *c.input_size), generator=g)
    mean = torch.tensor(c.input_mean or [0.0] * c.in_channels).view(1, -1, *[1] * len(c.input_size))
    std = torch.tensor(c.input_std or [1.0] * c.in_channels).view(1, -1, *[1] * len(c.input_size))
    return torch.randn(batch, c.in_channels, *c.input_size, generator=g) * std + mean
